#include "context/context.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/cpu.h"
#include "base/log.h"
#include "base/timer.h"
#include "ops/matmul.h"
#include "ops/ops.h"

namespace loom {

std::optional<Pooling> parse_pooling(std::string_view name) {
  static constexpr std::pair<std::string_view, Pooling> kNames[] = {
      {"none", Pooling::kNone}, {"mean", Pooling::kMean}, {"cls", Pooling::kCls}, {"last", Pooling::kLast}, {"rank", Pooling::kRank}};
  for (const auto& [n, p] : kNames) {
    if (n == name) return p;
  }
  return std::nullopt;
}

int decode_result_code(const Status& st) {
  switch (st.code()) {
    case StatusCode::kOk: return 0;
    case StatusCode::kResourceExhausted: return 1;
    case StatusCode::kAborted: return 2;
    case StatusCode::kInternal: return -3;
    default: return -1;
  }
}

Context::~Context() = default;

Expected<std::unique_ptr<Context>> Context::create(std::shared_ptr<const Model> model, const ContextParams& p) {
  return out_of_memory_as_status("creating the context", [&] { return create_unguarded(std::move(model), p); });
}

Expected<std::unique_ptr<Context>> Context::create_unguarded(std::shared_ptr<const Model> model, const ContextParams& p) {
  if (!model) return invalid_argument("model cannot be null");
  const ModelHparams& hp = model->hparams();
  if (p.n_ctx < 0 || p.n_batch < 0 || p.n_ubatch < 0 || p.n_threads < 0 || p.n_threads_batch < 0 || p.n_seq_max < 0) {
    return invalid_argument("context sizes and thread counts must not be negative");
  }
  if (p.n_batch == 0 && p.n_ubatch == 0) return invalid_argument("n_batch and n_ubatch cannot both be zero");
  if (p.n_ctx == 0 && hp.n_ctx_train == 0) return invalid_argument("n_ctx and the model's training context cannot both be zero");
  if (p.n_seq_max > kMaxSeqs) return invalid_argument("n_seq_max must be at most " + std::to_string(kMaxSeqs));
  if (p.n_swa < -1) return invalid_argument("n_swa must be -1 (the model's), 0 (off) or a window of at least one token");
  if (p.n_swa > 0 && hp.is_encoder()) return unsupported("a sliding window is not supported for encoder models");
  if (p.n_swa > 0 && hp.is_recurrent()) return unsupported("a sliding window is not supported for recurrent models (no attention)");
  std::unique_ptr<Context> ctx(new Context());
  ctx->model_ = std::move(model);
  ContextParams& cp = ctx->params_;
  cp = p;
  cp.n_seq_max = std::max(1, p.n_seq_max);
  const int64_t n_ctx = p.n_ctx > 0 ? p.n_ctx : hp.n_ctx_train;
  if (n_ctx > (1 << 24)) return invalid_argument("n_ctx " + std::to_string(n_ctx) + " is too large");
  cp.n_ctx = int(n_ctx);

  // RoPE: context overrides, scaling type, YaRN (the reference's derivation). LongRoPE factors
  // follow n_ctx per sequence.
  ops::RopeParams rope = model_rope(*ctx->model_, cp.kv_unified ? cp.n_ctx : cp.n_ctx / cp.n_seq_max);
  if (p.rope_freq_base > 0) rope.freq_base = p.rope_freq_base;
  if (p.rope_freq_scale > 0) rope.freq_scale = p.rope_freq_scale;
  if (cp.rope_scaling == RopeScaling::kUnspecified) {
    cp.rope_scaling = hp.rope_freq_scale != 1.0f ? RopeScaling::kLinear : RopeScaling::kNone;
  }
  if (cp.rope_scaling == RopeScaling::kNone) rope.freq_scale = 1.0f;
  rope.ext_factor = p.yarn_ext_factor < 0 ? (cp.rope_scaling == RopeScaling::kYarn ? 1.0f : 0.0f) : p.yarn_ext_factor;
  rope.attn_factor = p.yarn_attn_factor * rope.attn_factor;  // times the model's rope.scaling.attn_factor
  rope.beta_fast = p.yarn_beta_fast;
  rope.beta_slow = p.yarn_beta_slow;
  if (p.yarn_orig_ctx > 0) rope.n_ctx_orig = p.yarn_orig_ctx;
  cp.rope_freq_base = rope.freq_base;
  cp.rope_freq_scale = rope.freq_scale;
  cp.yarn_ext_factor = rope.ext_factor;
  ctx->fwd_.rope = rope;

  // Pooling and attention.
  if (cp.pooling == Pooling::kUnspecified) {
    static constexpr Pooling kFromModel[] = {Pooling::kNone, Pooling::kMean, Pooling::kCls, Pooling::kLast, Pooling::kRank};
    cp.pooling = hp.pooling_type >= 0 ? kFromModel[hp.pooling_type] : Pooling::kNone;
  }
  if (cp.pooling == Pooling::kRank && !ctx->model_->weights().has_cls_head()) {
    return unsupported("rank pooling needs a classification head (cls.weight and/or cls.output.weight), which this "
                       "model does not have: it is not a reranker");
  }
  ctx->causal_ = cp.attention == AttentionType::kUnspecified ? hp.causal : cp.attention == AttentionType::kCausal;
  if (hp.is_encoder()) cp.embeddings = true;  // an encoder has no LM head: embeddings only

  // Sliding window: the model's SWA layers (gemma2/gemma3) keep theirs unless overridden; other
  // families (llama/Mistral included, whatever their file says) attend fully unless asked.
  cp.n_swa = p.n_swa < 0 ? hp.swa_window : p.n_swa;
  ctx->swa_all_layers_ = hp.swa_window <= 0 && cp.n_swa > 0;

  // Batch sizes.
  const int n_batch_param = p.n_batch;
  cp.n_batch = ctx->causal_ ? std::min(cp.n_ctx, p.n_batch > 0 ? p.n_batch : p.n_ubatch) : (p.n_batch > 0 ? p.n_batch : p.n_ubatch);
  cp.n_ubatch = std::min(cp.n_batch, p.n_ubatch > 0 ? p.n_ubatch : n_batch_param);
  if (cp.n_ubatch <= 0) cp.n_ubatch = cp.n_batch;
  cp.n_outputs_max = p.n_outputs_max > 0 ? std::min(p.n_outputs_max, cp.n_batch) : cp.n_batch;

  // Threads.
  cp.n_threads = p.n_threads > 0 ? p.n_threads : cpu_count();
  cp.n_threads_batch = p.n_threads_batch > 0 ? p.n_threads_batch : cp.n_threads;
  ctx->pool_ = std::make_unique<ThreadPool>(std::max(cp.n_threads, cp.n_threads_batch));

  if (hp.is_recurrent()) {
    // One state cell per sequence (the reference: max(1, n_seq_max) cells), states in F32.
    RecurrentCacheParams rp;
    rp.n_layer = int(hp.n_layer);
    rp.n_cells = cp.n_seq_max;
    rp.conv_row = hp.n_embd_conv_state();
    rp.ssm_row = hp.n_embd_ssm_state();
    LOOM_ASSIGN_OR_RETURN(ctx->rs_, RecurrentCache::create(rp));
    cp.type_k = cp.type_v = TensorType::F32;
    ctx->create_recurrent();
  } else {
    KvCacheParams kp;
    kp.n_layer = int(hp.n_layer);
    kp.n_cells = cp.n_ctx;
    kp.n_embd_k = hp.n_embd_kv();
    kp.n_embd_v = hp.n_embd_kv();
    kp.head_dim = hp.head_dim;
    kp.type_k = p.type_k;
    kp.type_v = p.type_v;
    LOOM_ASSIGN_OR_RETURN(ctx->kv_, KvCache::create(kp));
  }

  ctx->scratch_ = ForwardScratch(*ctx->model_, cp.n_ubatch, ctx->rs_ ? 0 : cp.n_ctx, cp.type_k, ctx->pool_->size());
  ctx->fwd_.abort_cb = p.abort_callback;
  ctx->fwd_.abort_data = p.abort_data;
  ctx->fwd_.eval_cb = p.eval_callback;
  ctx->fwd_.eval_data = p.eval_data;
  ctx->set_embeddings(cp.embeddings);
  const size_t nb = size_t(cp.n_batch);
  ctx->embd_.assign(nb * size_t(hp.n_embd), 0.0f);
  ctx->pooled_.assign(size_t(cp.n_seq_max) * size_t(hp.n_embd), 0.0f);
  ctx->pooled_valid_.assign(size_t(cp.n_seq_max), 0);
  ctx->pool_count_.assign(size_t(cp.n_seq_max), 0);
  ctx->pool_pos_.assign(size_t(cp.n_seq_max), -1);
  if (cp.pooling == Pooling::kRank) {
    const ModelWeights& w = ctx->model_->weights();
    const size_t S = size_t(cp.n_seq_max), E = size_t(hp.n_embd), C = size_t(hp.n_cls_out);
    ctx->rank_x_.assign(S * E, 0.0f);
    ctx->rank_h_.assign(S * E, 0.0f);
    ctx->rank_y_.assign(S * C, 0.0f);
    ctx->scores_.assign(S * C, 0.0f);
    ctx->rank_seqs_.assign(S, 0);
    size_t mm = 0;
    for (const TensorView* t : {&w.cls, &w.cls_out}) {
      if (!t->empty()) mm = std::max(mm, ops::matmul_scratch_bytes(t->type, t->cols, int64_t(S)));
    }
    ctx->rank_mm_.assign(mm, 0);
  }
  ctx->output_of_row_.assign(nb, -1);
  ctx->pos_.assign(nb, 0);
  ctx->seq_.assign(nb, 0);
  ctx->cells_.assign(nb, 0);
  ctx->out_rows_.assign(size_t(cp.n_ubatch), 0);
  if (!ctx->rs_) ctx->mask_.assign(size_t(cp.n_ubatch) * size_t(cp.n_ctx), 0.0f);
  if (hp.swa_window > 0 && cp.n_swa > 0) ctx->mask_swa_.assign(ctx->mask_.size(), 0.0f);
  ctx->deltas_.assign(size_t(cp.n_ctx), 0);
  ctx->col_cells_.assign(size_t(cp.n_ctx), 0);
  ctx->group_.assign(size_t(cp.n_ubatch), -1);
  ctx->group_swa_.assign(size_t(cp.n_ubatch), -1);
  ctx->ubatch_seqs_.assign(size_t(cp.n_ubatch), 0);
  ctx->ubatch_seq_min_.assign(size_t(cp.n_ubatch), 0);
  if (hp.is_t5()) {
    const size_t U = size_t(cp.n_ubatch);
    ctx->col_pos_.assign(size_t(cp.n_ctx), 0);
    if (hp.arch == Arch::kT5) {
      ctx->enc_out_.assign(U * size_t(hp.n_embd), 0.0f);
      ctx->enc_seqs_.assign(U, {});
      // Cross K/V in the cache's types (as the self-attention's), rows of n_embd_kv.
      CrossAttentionView& cv = ctx->cross_;
      cv.type_k = cp.type_k;
      cv.type_v = cp.type_v;
      cv.k_row_bytes = size_t(row_bytes(cp.type_k, hp.n_embd_kv()));
      cv.v_row_bytes = size_t(row_bytes(cp.type_v, hp.n_embd_kv()));
      cv.k_layer_bytes = U * cv.k_row_bytes;
      cv.v_layer_bytes = U * cv.v_row_bytes;
      ctx->cross_k_.assign(size_t(hp.n_dec_layer) * cv.k_layer_bytes, 0);
      ctx->cross_v_.assign(size_t(hp.n_dec_layer) * cv.v_layer_bytes, 0);
      cv.k = ctx->cross_k_.data();
      cv.v = ctx->cross_v_.data();
      ctx->cross_mask_.assign(U * U, 0.0f);
    }
  }
  ctx->perf_.t_load_us = ctx->model_->load_time_us();
  return ctx;
}

void Context::set_embeddings(bool on) {
  params_.embeddings = on;
  // The logits buffer is reserved once, on first need: embedding-only contexts never pay for it,
  // and its pages become resident only as decodes write rows (a prompt asking for its last
  // token's logits touches one row of n_outputs_max).
  if (!on && logits_.empty()) logits_.allocate(size_t(params_.n_outputs_max) * size_t(model_->hparams().n_vocab));
}

void Context::set_n_threads(int n_threads, int n_threads_batch) {
  params_.n_threads = std::clamp(n_threads > 0 ? n_threads : params_.n_threads, 1, pool_->size());
  params_.n_threads_batch = std::clamp(n_threads_batch > 0 ? n_threads_batch : params_.n_threads_batch, 1, pool_->size());
}

void Context::set_abort_callback(bool (*cb)(void*), void* data) {
  params_.abort_callback = cb;
  params_.abort_data = data;
  fwd_.abort_cb = cb;
  fwd_.abort_data = data;
}

// ---------------------------------------------------------------------------------------------
// decode / encode

Status Context::validate(const Batch& batch, bool encoding, Checked* c) {
  const int n = batch.size();
  c->n = n;
  c->use_embd = batch.tokens.empty() && !batch.embd.empty();
  if (n == 0) return invalid_argument("empty batch (n_tokens == 0)");
  if (!batch.tokens.empty() && !batch.embd.empty()) return invalid_argument("a batch holds tokens or embeddings, not both");
  if (c->use_embd) {
    if (batch.embd_dim != n_embd() || batch.embd.size() % size_t(n_embd()) != 0) {
      return invalid_argument("input embeddings must have n_embd = " + std::to_string(n_embd()) + " floats per token");
    }
  }
  if (n > params_.n_batch) {
    return invalid_argument("batch of " + std::to_string(n) + " tokens exceeds n_batch " + std::to_string(params_.n_batch));
  }
  if ((encoding || !causal_) && n > params_.n_ubatch) {
    return invalid_argument("a non-causal batch of " + std::to_string(n) + " tokens exceeds n_ubatch " +
                            std::to_string(params_.n_ubatch) + " (it must fit one forward pass)");
  }
  auto size_ok = [n](size_t s) { return s == 0 || s == size_t(n); };
  if (!size_ok(batch.pos.size()) || !size_ok(batch.seq_ids.size()) || !size_ok(batch.output.size())) {
    return invalid_argument("pos, seq_ids and output must be empty or have one entry per token");
  }
  if (!encoding && !params_.embeddings && !batch.output.empty()) {
    int n_out = 0;
    for (uint8_t o : batch.output) n_out += o != 0;
    if (n_out > params_.n_outputs_max) {
      return invalid_argument("batch asks for " + std::to_string(n_out) + " outputs, more than n_outputs_max " +
                              std::to_string(params_.n_outputs_max));
    }
  }
  const int64_t n_vocab = model_->hparams().n_vocab;
  for (int i = 0; i < n && !c->use_embd; ++i) {
    const int32_t tok = batch.tokens[size_t(i)];
    if (tok < 0 || tok >= n_vocab) {
      return invalid_argument("invalid token id " + std::to_string(tok) + " at batch index " + std::to_string(i) +
                              " (the vocabulary has " + std::to_string(n_vocab) + " tokens)");
    }
  }
  for (int i = 0; i < n; ++i) {
    if (batch.seq_ids.empty()) {
      seq_[size_t(i)] = 0;
      continue;
    }
    const auto& s = batch.seq_ids[size_t(i)];
    if (s.empty()) return invalid_argument("token at batch index " + std::to_string(i) + " belongs to no sequence");
    for (int32_t id : s) {
      if (id < 0 || id >= params_.n_seq_max) {
        return invalid_argument("sequence id " + std::to_string(id) + " at batch index " + std::to_string(i) +
                                " is out of range [0, " + std::to_string(params_.n_seq_max) + ")");
      }
    }
    seq_[size_t(i)] = s[0];
  }
  // Positions: given, or each sequence continues after its own last position.
  if (!batch.pos.empty()) {
    for (int i = 0; i < n; ++i) {
      const int32_t p = batch.pos[size_t(i)];
      if (p < 0 || p > (1 << 30)) return invalid_argument("invalid position " + std::to_string(p) + " at batch index " + std::to_string(i));
      pos_[size_t(i)] = p;
    }
  } else {
    for (int i = 0; i < n; ++i) {
      int32_t last = rs_ ? rs_->seq_pos_max(seq_[size_t(i)]) : kv_->seq_pos_max(seq_[size_t(i)]);
      for (int j = 0; j < i; ++j) {
        if (seq_[size_t(j)] == seq_[size_t(i)]) last = std::max(last, pos_[size_t(j)]);
      }
      pos_[size_t(i)] = last + 1;
    }
  }
  return rs_ ? validate_recurrent(batch, n) : Status::ok();
}

Status Context::prepare_kv() {
  if (kv_->has_shift()) LOOM_RETURN_IF_ERROR(kv_update());
  if (params_.defrag_thold > 0 && kv_->fragmentation() > params_.defrag_thold) kv_->defrag();
  return Status::ok();
}

Status Context::decode(const Batch& batch) {
  Checked c;
  LOOM_RETURN_IF_ERROR(validate(batch, /*encoding=*/false, &c));
  if (model_->hparams().arch == Arch::kT5 && n_enc_ == 0) {
    // Checked before anything changes (pending shifts included).
    return invalid_argument("t5: decode needs the encoder's output; encode() the input first");
  }
  if (!rs_) {
    // Before prepare_kv: a batch without room changes nothing, not even pending shifts.
    if (c.n > kv_->size() - kv_->used()) {
      return Status(StatusCode::kResourceExhausted, "no KV slot: the cache has " + std::to_string(kv_->size() - kv_->used()) +
                                                        " free cells, the batch needs " + std::to_string(c.n));
    }
    LOOM_RETURN_IF_ERROR(prepare_kv());
  }
  const int64_t t0 = params_.no_perf ? 0 : now_us();
  LOOM_RETURN_IF_ERROR(rs_ ? run_recurrent(batch, c) : run_ubatches(batch, c, /*encoding=*/false));
  if (!params_.no_perf) {
    const int64_t dt = now_us() - t0;
    if (c.n > 1) {
      perf_.n_prompt_tokens += c.n;
      perf_.t_prompt_us += dt;
    } else {
      perf_.n_gen_tokens += 1;
      perf_.t_gen_us += dt;
    }
  }
  return Status::ok();
}

Status Context::encode(const Batch& batch) {
  if (rs_) return unsupported("encode: " + model_->hparams().arch_name + " is a recurrent decoder without an encoder (use decode)");
  Checked c;
  LOOM_RETURN_IF_ERROR(validate(batch, /*encoding=*/true, &c));
  if (c.n > kv_->size() - kv_->used()) {
    return Status(StatusCode::kResourceExhausted, "no KV slot for the encoder batch");
  }
  LOOM_RETURN_IF_ERROR(prepare_kv());
  const int64_t t0 = params_.no_perf ? 0 : now_us();
  Status st = run_ubatches(batch, c, /*encoding=*/true);
  // The encoder's cells are scratch: the cache is left as it was.
  kv_->release_cells(std::span<const int32_t>(cells_.data(), size_t(c.n)));
  LOOM_RETURN_IF_ERROR(st);
  if (model_->hparams().arch == Arch::kT5) {
    // Keep the output (every token is an output here) and its sequences for the decoder, and the
    // cross K/V of every decoder layer, computed once instead of at every decode step.
    const ModelHparams& hp = model_->hparams();
    const size_t E = size_t(hp.n_embd);
    n_enc_ = 0;
    std::copy(embd_.begin(), embd_.begin() + long(size_t(c.n) * E), enc_out_.begin());
    for (int i = 0; i < c.n; ++i) {
      std::bitset<kMaxSeqs>& set = enc_seqs_[size_t(i)];
      set.reset();
      if (batch.seq_ids.empty()) set.set(0);
      else for (int32_t sid : batch.seq_ids[size_t(i)]) set.set(size_t(sid));
    }
    pool_->set_active(c.n > 1 ? params_.n_threads_batch : params_.n_threads);
    LOOM_RETURN_IF_ERROR(t5_cross_kv(*model_, enc_out_.data(), c.n, cross_, params_.type_k, scratch_, *pool_));
    n_enc_ = c.n;
  }
  if (!params_.no_perf) {
    perf_.n_prompt_tokens += c.n;
    perf_.t_prompt_us += now_us() - t0;
  }
  return Status::ok();
}

Status Context::run_ubatches(const Batch& batch, const Checked& c, bool encoding) {
  const int n = c.n;
  const bool embd_out = params_.embeddings || encoding;
  const bool pooled = embd_out && params_.pooling != Pooling::kNone;
  const ModelHparams& hp = model_->hparams();
  const bool t5_decoder = hp.arch == Arch::kT5 && !encoding;
  // A T5 encode keeps every token's output (the decoder attends to all of them).
  const int n_out = assign_outputs(batch, n, pooled || (encoding && hp.arch == Arch::kT5));
  n_outputs_ = 0;  // outputs of a failed call are not readable
  std::fill(pooled_valid_.begin(), pooled_valid_.end(), 0);

  // All cells are chosen up front (so the call fails before computing anything when the cache
  // is full) but each micro-batch occupies its own only when it runs, as a sequential decode
  // would. Every cell taken is recorded so a failure can give them back.
  if (!kv_->find_slot(n, cells_.data())) return Status(StatusCode::kResourceExhausted, "no KV slot for the batch");
  MaskParams mp;
  mp.causal = causal_ && !encoding;
  if (swa_all_layers_) mp.swa_window = params_.n_swa;  // every layer slides: one mask
  const int ubatch = (encoding || !causal_) ? n : params_.n_ubatch;
  ForwardConfig cfg = fwd_;
  for (int first = 0; first < n; first += ubatch) {
    const int m = std::min(ubatch, n - first);
    for (int i = first; i < first + m; ++i) {
      if (batch.seq_ids.empty()) {
        const int32_t zero = 0;
        kv_->occupy(cells_[size_t(i)], pos_[size_t(i)], std::span<const int32_t>(&zero, 1));
      } else {
        kv_->occupy(cells_[size_t(i)], pos_[size_t(i)], batch.seq_ids[size_t(i)]);
      }
    }
    const int n_kv = kv_->n_kv();
    // Batch invariance (docs/design.md): the mask columns list each token's visible cells in
    // position order, wherever the cache put them (usually the cell order already), and tokens
    // of one sequence may share attention tiles where their visible columns nest.
    int n_seqs = 0;
    for (int t = first; t < first + m; ++t) {
      const int32_t s = seq_[size_t(t)];
      if (std::find(ubatch_seqs_.begin(), ubatch_seqs_.begin() + n_seqs, s) == ubatch_seqs_.begin() + n_seqs) {
        ubatch_seqs_[size_t(n_seqs++)] = s;
      }
    }
    const int32_t* cols =
        kv_->position_order(n_kv, std::span<const int32_t>(ubatch_seqs_.data(), size_t(n_seqs)), col_cells_.data())
            ? col_cells_.data()
            : nullptr;
    kv_->build_mask(m, pos_.data() + first, seq_.data() + first, n_kv, mp, mask_.data(), cols);
    if (!mask_swa_.empty()) {
      MaskParams swa = mp;
      swa.swa_window = params_.n_swa;
      kv_->build_mask(m, pos_.data() + first, seq_.data() + first, n_kv, swa, mask_swa_.data(), cols);
    }
    // A sliding window keeps the nesting only where it hides nothing yet (the sequence's first
    // cell is inside every such token's window).
    if (mp.swa_window > 0 || !mask_swa_.empty()) {
      for (int i = 0; i < n_seqs; ++i) ubatch_seq_min_[size_t(i)] = kv_->seq_pos_min(ubatch_seqs_[size_t(i)]);
    }
    auto groups = [&](int window, int32_t* g) {
      for (int t = 0; t < m; ++t) {
        const int32_t s = seq_[size_t(first + t)];
        g[t] = s;
        if (window <= 0) continue;
        const int i = int(std::find(ubatch_seqs_.begin(), ubatch_seqs_.begin() + n_seqs, s) - ubatch_seqs_.begin());
        if (ubatch_seq_min_[size_t(i)] <= pos_[size_t(first + t)] - window) g[t] = -1;
      }
    };
    groups(mp.swa_window, group_.data());
    if (!mask_swa_.empty()) groups(params_.n_swa, group_swa_.data());
    int m_out = 0;
    for (int t = 0; t < m; ++t) {
      if (output_of_row_[size_t(first + t)] >= 0) out_rows_[size_t(m_out++)] = t;
    }
    ForwardBatch fb;
    fb.n_tokens = m;
    if (c.use_embd) fb.embd = batch.embd.data() + size_t(first) * size_t(n_embd());
    else fb.tokens = batch.tokens.data() + first;
    fb.pos = pos_.data() + first;
    fb.cells = cells_.data() + first;
    fb.n_kv = n_kv;
    fb.mask = mask_.data();
    fb.mask_swa = mask_swa_.empty() ? nullptr : mask_swa_.data();
    fb.kv_cells = cols;
    fb.prefix_group = group_.data();
    fb.prefix_group_swa = mask_swa_.empty() ? nullptr : group_swa_.data();
    CrossAttentionView cross = cross_;
    if (hp.is_t5() && encoding) {
      // The T5 encoder attends within its batch only, as the reference's (which has no cache
      // there): the columns are the batch's own cells, a token seeing those that hold its first
      // sequence; a decoder's cells of the same sequence stay out of view.
      for (int col = 0; col < m; ++col) {
        col_cells_[size_t(col)] = cells_[size_t(first + col)];
        col_pos_[size_t(col)] = pos_[size_t(first + col)];
      }
      for (int t = 0; t < m; ++t) {
        const int32_t s = seq_[size_t(first + t)];
        for (int col = 0; col < m; ++col) {
          bool in = batch.seq_ids.empty() ? s == 0 : false;
          if (!batch.seq_ids.empty()) {
            for (int32_t sid : batch.seq_ids[size_t(first + col)]) in = in || sid == s;
          }
          mask_[size_t(t) * size_t(m) + size_t(col)] = in ? 0.0f : -INFINITY;
        }
      }
      fb.n_kv = m;
      fb.kv_cells = col_cells_.data();
      fb.kv_pos = col_pos_.data();
      fb.encoder = true;
    } else if (hp.is_t5()) {
      for (int col = 0; col < n_kv; ++col) col_pos_[size_t(col)] = kv_->cell(cols ? cols[col] : col).pos;
      fb.kv_pos = col_pos_.data();
      fb.encoder = !t5_decoder;
    }
    if (t5_decoder) {
      // Token t sees encoder token i when they share a sequence (llama.cpp's cross mask).
      for (int t = 0; t < m; ++t) {
        float* row = cross_mask_.data() + size_t(t) * size_t(n_enc_);
        for (int i = 0; i < n_enc_; ++i) {
          bool shared = false;
          if (batch.seq_ids.empty()) {
            shared = enc_seqs_[size_t(i)].test(0);
          } else {
            for (int32_t sid : batch.seq_ids[size_t(first + t)]) shared = shared || enc_seqs_[size_t(i)].test(size_t(sid));
          }
          row[i] = shared ? 0.0f : -INFINITY;
        }
      }
      cross.n_enc = n_enc_;
      cross.mask = cross_mask_.data();
      fb.cross = &cross;
    }
    fb.n_outputs = m_out;
    fb.output_rows = out_rows_.data();
    const size_t first_out = m_out ? size_t(output_of_row_[size_t(first + out_rows_[0])]) : 0;
    fb.logits = embd_out ? nullptr : logits_.data() + first_out * size_t(n_vocab());
    fb.hidden = embd_out ? embd_.data() + first_out * size_t(n_embd()) : nullptr;
    cfg.n_threads = m > 1 ? params_.n_threads_batch : params_.n_threads;
    Status st = forward(*model_, fb, kv_->view(), scratch_, *pool_, cfg);
    if (!st) {
      kv_->release_cells(std::span<const int32_t>(cells_.data(), size_t(n)));
      return st;
    }
  }
  n_outputs_ = n_out;
  last_batch_size_ = n;
  last_was_embd_ = embd_out;
  if (pooled) pool_outputs(c);
  return Status::ok();
}

int Context::assign_outputs(const Batch& batch, int n, bool all) {
  // Output rows: every token when pooling, else flagged tokens or the last one.
  std::fill(output_of_row_.begin(), output_of_row_.begin() + n, -1);
  int n_out = 0;
  for (int i = 0; i < n; ++i) {
    const bool want = all || (batch.output.empty() ? i == n - 1 : batch.output[size_t(i)] != 0);
    if (want) output_of_row_[size_t(i)] = n_out++;
  }
  return n_out;
}

void Context::pool_outputs(const Checked& c) {
  const size_t E = size_t(n_embd());
  std::fill(pooled_.begin(), pooled_.end(), 0.0f);
  std::fill(pool_count_.begin(), pool_count_.end(), 0);
  std::fill(pool_pos_.begin(), pool_pos_.end(), -1);
  for (int i = 0; i < c.n; ++i) {
    const size_t s = size_t(seq_[size_t(i)]);
    const int32_t p = pos_[size_t(i)];
    const float* h = embd_.data() + size_t(output_of_row_[size_t(i)]) * E;
    float* dst = pooled_.data() + s * E;
    // mean: average over the sequence's tokens; cls (and rank): its first position; last: its last position.
    if (params_.pooling == Pooling::kMean) {
      for (size_t d = 0; d < E; ++d) dst[d] += h[d];
    } else if (((params_.pooling == Pooling::kCls || params_.pooling == Pooling::kRank) && (pool_pos_[s] < 0 || p < pool_pos_[s])) ||
               (params_.pooling == Pooling::kLast && p >= pool_pos_[s])) {
      std::copy(h, h + E, dst);
      pool_pos_[s] = p;
    }
    ++pool_count_[s];
    pooled_valid_[s] = 1;
  }
  if (params_.pooling == Pooling::kMean) {
    for (size_t s = 0; s < pool_count_.size(); ++s) {
      if (pool_count_[s] == 0) continue;
      const float inv = 1.0f / float(pool_count_[s]);
      for (size_t d = 0; d < E; ++d) pooled_[s * E + d] *= inv;
    }
  }
  if (params_.pooling == Pooling::kRank) rank_head();
}

// The classification head on each sequence's CLS hidden state, all sequences of the batch in one
// product per layer (llama.cpp's build_pooling, LLAMA_POOLING_TYPE_RANK, for BERT):
//   y = tanh(cls·x + cls_b)      when cls.weight exists (else y = x)
//   z = cls_out·y + cls_out_b    when cls.output.weight exists (else z = y)
// and the sequence's scores are z's first n_cls_out values (all of them whenever cls_out exists).
void Context::rank_head() {
  const ModelWeights& w = model_->weights();
  const int64_t E = n_embd(), C = model_->hparams().n_cls_out;
  int64_t k = 0;
  for (size_t s = 0; s < pooled_valid_.size(); ++s) {
    if (!pooled_valid_[s]) continue;
    std::copy(pooled_.begin() + long(s * size_t(E)), pooled_.begin() + long((s + 1) * size_t(E)),
              rank_x_.begin() + long(size_t(k) * size_t(E)));
    rank_seqs_[size_t(k++)] = int32_t(s);
  }
  if (k == 0) return;
  pool_->set_active(params_.n_threads_batch);
  const float* cur = rank_x_.data();
  int64_t dim = E;
  if (!w.cls.empty()) {
    ops::matmul(*pool_, w.cls, cur, k, rank_h_.data(), rank_mm_.data());
    if (w.cls_b) ops::add_bias(rank_h_.data(), w.cls_b, int(k), E);
    for (int64_t i = 0; i < k * E; ++i) rank_h_[size_t(i)] = std::tanh(rank_h_[size_t(i)]);
    cur = rank_h_.data();
  }
  if (!w.cls_out.empty()) {
    ops::matmul(*pool_, w.cls_out, cur, k, rank_y_.data(), rank_mm_.data());
    if (w.cls_out_b) ops::add_bias(rank_y_.data(), w.cls_out_b, int(k), C);
    cur = rank_y_.data();
    dim = C;
  }
  for (int64_t i = 0; i < k; ++i) {
    float* dst = scores_.data() + size_t(rank_seqs_[size_t(i)]) * size_t(C);
    std::fill(dst, dst + C, 0.0f);
    std::copy(cur + i * dim, cur + i * dim + std::min(dim, C), dst);
  }
}

int32_t Context::decoder_start_token() const { return model_->decoder_start_token(); }

Status Context::warmup() {
  const int32_t tok = model_->vocab().bos() >= 0 ? model_->vocab().bos() : 0;
  Batch b = Batch::from_tokens(std::span<const int32_t>(&tok, 1), 0);
  const bool no_perf = params_.no_perf;
  params_.no_perf = true;
  Status st = model_->hparams().arch == Arch::kT5 ? encode(b) : Status::ok();
  if (st.is_ok()) st = decode(b);
  if (model_->hparams().arch == Arch::kT5) n_enc_ = 0;  // warm-up output is not an input of later decodes
  params_.no_perf = no_perf;
  kv_clear();
  n_outputs_ = 0;
  return st;
}

// ---------------------------------------------------------------------------------------------
// outputs

Expected<std::span<const float>> Context::logits(int i) const {
  if (last_was_embd_ || logits_.empty()) return invalid_argument("no logits: the last decode produced embeddings");
  if (n_outputs_ == 0) return invalid_argument("no logits: the last decode produced no outputs");
  int out = -1;
  if (i < 0) {
    out = n_outputs_ + i;
    if (out < 0) return out_of_range("negative index " + std::to_string(i) + " out of range [0, " + std::to_string(n_outputs_) + ")");
  } else {
    if (i >= last_batch_size_) return out_of_range("index " + std::to_string(i) + " out of range [0, " + std::to_string(last_batch_size_) + ")");
    out = output_of_row_[size_t(i)];
    if (out < 0) return invalid_argument("batch index " + std::to_string(i) + " was not flagged for output");
  }
  const size_t nv = size_t(n_vocab());
  return std::span<const float>(logits_.data() + size_t(out) * nv, nv);
}

std::span<const float> Context::all_logits() const {
  if (last_was_embd_ || logits_.empty()) return {};
  return std::span<const float>(logits_.data(), size_t(n_outputs_) * size_t(n_vocab()));
}

Expected<std::span<const float>> Context::embeddings(int i) const {
  if (!last_was_embd_) return invalid_argument("no embeddings: the last decode produced logits (enable embeddings)");
  if (n_outputs_ == 0) return invalid_argument("no embeddings: the last decode produced no outputs");
  int out = -1;
  if (i < 0) {
    out = n_outputs_ + i;
    if (out < 0) return out_of_range("negative index " + std::to_string(i) + " out of range");
  } else {
    if (i >= last_batch_size_) return out_of_range("index " + std::to_string(i) + " out of range");
    out = output_of_row_[size_t(i)];
    if (out < 0) return invalid_argument("batch index " + std::to_string(i) + " was not flagged for output");
  }
  const size_t E = size_t(n_embd());
  return std::span<const float>(embd_.data() + size_t(out) * E, E);
}

std::span<const float> Context::all_embeddings() const {
  if (!last_was_embd_) return {};
  return std::span<const float>(embd_.data(), size_t(n_outputs_) * size_t(n_embd()));
}

Expected<std::span<const float>> Context::embeddings_seq(int seq) const {
  if (params_.pooling == Pooling::kNone) return invalid_argument("no pooled embeddings: pooling is none");
  if (seq < 0 || seq >= params_.n_seq_max) return out_of_range("sequence id " + std::to_string(seq) + " out of range");
  if (!pooled_valid_[size_t(seq)]) return not_found("sequence " + std::to_string(seq) + " was not in the last batch");
  if (params_.pooling == Pooling::kRank) {
    const size_t C = size_t(model_->hparams().n_cls_out);
    return std::span<const float>(scores_.data() + size_t(seq) * C, C);
  }
  const size_t E = size_t(n_embd());
  return std::span<const float>(pooled_.data() + size_t(seq) * E, E);
}

// ---------------------------------------------------------------------------------------------
// KV cache

Status Context::check_seq(int seq, bool allow_negative) const {
  if ((seq < 0 && !allow_negative) || seq >= params_.n_seq_max) {
    return invalid_argument("sequence id " + std::to_string(seq) + " out of range [0, " + std::to_string(params_.n_seq_max) + ")");
  }
  return Status::ok();
}

void Context::kv_clear() {
  if (rs_) rs_->clear();
  else kv_->clear();
}

Status Context::seq_rm(int seq, int p0, int p1) {
  LOOM_RETURN_IF_ERROR(check_seq(seq, true));
  if (!rs_) {
    kv_->seq_rm(seq, p0, p1);
    return Status::ok();
  }
  if (!rs_->seq_rm(seq, p0, p1)) {
    // The reference returns false here: the state cannot forget its last tokens alone.
    if (seq < 0) {
      return unsupported("seq_rm(" + std::to_string(seq) + ", ...): a recurrent model's states are removed one sequence at a "
                         "time (or all with kv_clear); the reference refuses a negative sequence id here");
    }
    return unsupported("seq_rm(" + std::to_string(seq) + ", " + std::to_string(p0) + ", " + std::to_string(p1) +
                       "): a recurrent model's state cannot lose part of its tokens (remove the whole sequence "
                       "instead: p0 = 0 or -1, p1 = -1)");
  }
  return Status::ok();
}

Status Context::seq_cp(int src, int dst, int p0, int p1) {
  LOOM_RETURN_IF_ERROR(check_seq(src, false));
  LOOM_RETURN_IF_ERROR(check_seq(dst, false));
  if (rs_) rs_->seq_cp(src, dst, p0, p1);
  else kv_->seq_cp(src, dst, p0, p1);
  return Status::ok();
}

Status Context::seq_keep(int seq) {
  LOOM_RETURN_IF_ERROR(check_seq(seq, false));
  if (rs_) rs_->seq_keep(seq);
  else kv_->seq_keep(seq);
  return Status::ok();
}

Status Context::seq_add(int seq, int p0, int p1, int delta) {
  LOOM_RETURN_IF_ERROR(check_seq(seq, true));
  if (rs_) rs_->seq_add(seq, p0, p1, delta);
  else kv_->seq_add(seq, p0, p1, delta);
  return Status::ok();
}

Status Context::seq_div(int seq, int p0, int p1, int d) {
  LOOM_RETURN_IF_ERROR(check_seq(seq, true));
  if (d < 1) return invalid_argument("seq_div: divisor must be at least 1");
  if (rs_) rs_->seq_div(seq, p0, p1, d);
  else kv_->seq_div(seq, p0, p1, d);
  return Status::ok();
}

Expected<int> Context::seq_pos_min(int seq) const {
  LOOM_RETURN_IF_ERROR(check_seq(seq, true));
  return rs_ ? rs_->seq_pos_min(seq) : kv_->seq_pos_min(seq);
}

Expected<int> Context::seq_pos_max(int seq) const {
  LOOM_RETURN_IF_ERROR(check_seq(seq, true));
  return rs_ ? rs_->seq_pos_max(seq) : kv_->seq_pos_max(seq);
}

Status Context::kv_update() {
  if (rs_ || !kv_->has_shift()) return Status::ok();  // recurrent: a shift only moves positions
  kv_->pending_deltas(deltas_.data());
  ForwardConfig cfg = fwd_;
  LOOM_RETURN_IF_ERROR(shift_k(*model_, kv_->view(), deltas_.data(), scratch_, *pool_, cfg));
  kv_->clear_shift();
  return Status::ok();
}

void Context::kv_defrag() {
  if (rs_) return;  // one cell per sequence: nothing to compact
  if (kv_->has_shift()) (void)kv_update();
  kv_->defrag();
}

// ---------------------------------------------------------------------------------------------
// adapters

Status Context::set_lora(std::shared_ptr<const LoraAdapter> adapter, float scale) {
  if (!adapter) return invalid_argument("no adapter");
  if (model_->hparams().is_t5()) return unsupported("LoRA adapters are not supported for T5 models yet");
  for (auto& [a, s] : loras_) {
    if (a == adapter) {
      s = scale;
      rebuild_adapters();
      return Status::ok();
    }
  }
  loras_.emplace_back(std::move(adapter), scale);
  rebuild_adapters();
  return Status::ok();
}

Status Context::remove_lora(const LoraAdapter* adapter) {
  auto it = std::find_if(loras_.begin(), loras_.end(), [&](const auto& p) { return p.first.get() == adapter; });
  if (it == loras_.end()) return not_found("the adapter is not attached to this context");
  loras_.erase(it);
  rebuild_adapters();
  return Status::ok();
}

void Context::clear_lora() {
  loras_.clear();
  rebuild_adapters();
}

Status Context::set_control_vector(std::span<const float> data, int n_embd_data, int il_start, int il_end) {
  if (data.empty()) {
    adapters_.cvec.clear();
    return Status::ok();
  }
  if (model_->hparams().is_t5()) return unsupported("control vectors are not supported for T5 models yet");
  if (n_embd_data != n_embd()) {
    return invalid_argument("control vector n_embd " + std::to_string(n_embd_data) + " does not match the model's " +
                            std::to_string(n_embd()));
  }
  if (data.size() % size_t(n_embd_data) != 0) return invalid_argument("control vector length is not a multiple of n_embd");
  const size_t E = size_t(n_embd_data);
  const size_t n_layer = size_t(model_->hparams().n_layer);
  // Internally indexed by block: row L holds the vector added to block L's output.
  adapters_.cvec.assign(n_layer * E, 0.0f);
  for (size_t L = 1; L < n_layer && (L - 1) * E < data.size(); ++L) {
    std::copy(data.begin() + long((L - 1) * E), data.begin() + long(L * E), adapters_.cvec.begin() + long(L * E));
  }
  adapters_.cvec_il_start = il_start;
  adapters_.cvec_il_end = il_end;
  fwd_.adapters = &adapters_;
  return Status::ok();
}

void Context::rebuild_adapters() {
  adapters_.layers.assign(size_t(model_->hparams().n_layer), {});
  adapters_.tok_embd.clear();
  adapters_.output.clear();
  adapters_.max_rank = 0;
  for (const auto& [a, scale] : loras_) {
    for (const LoraTarget& t : a->targets()) {
      LoraPair p{t.a, t.b, a->effective_scale(scale, t.rank)};
      if (t.weight == "token_embd.weight") adapters_.tok_embd.push_back(p);
      else if (t.weight == "output.weight") adapters_.output.push_back(p);
      else adapters_.layers[size_t(t.layer)][t.kind].push_back(p);
      adapters_.max_rank = std::max(adapters_.max_rank, t.rank);
    }
  }
  if (adapters_.max_rank > scratch_.max_lora_rank()) {
    scratch_ = ForwardScratch(*model_, params_.n_ubatch, rs_ ? 0 : params_.n_ctx, params_.type_k, pool_->size(),
                              adapters_.max_rank);
  }
  fwd_.adapters = &adapters_;
}

// ---------------------------------------------------------------------------------------------
// perf

void Context::reset_perf() {
  const int64_t load = perf_.t_load_us;
  perf_ = {};
  perf_.t_load_us = load;
}

std::string Context::perf_report() const {
  char buf[512];
  const double pp_ms = perf_.t_prompt_us / 1e3, tg_ms = perf_.t_gen_us / 1e3;
  std::snprintf(buf, sizeof buf,
                "load time   = %10.2f ms\n"
                "prompt eval = %10.2f ms / %5lld tokens (%8.2f ms per token, %8.2f tokens per second)\n"
                "eval time   = %10.2f ms / %5lld runs   (%8.2f ms per token, %8.2f tokens per second)\n",
                perf_.t_load_us / 1e3, pp_ms, static_cast<long long>(perf_.n_prompt_tokens),
                perf_.n_prompt_tokens ? pp_ms / double(perf_.n_prompt_tokens) : 0.0,
                pp_ms > 0 ? 1e3 * double(perf_.n_prompt_tokens) / pp_ms : 0.0, tg_ms,
                static_cast<long long>(perf_.n_gen_tokens), perf_.n_gen_tokens ? tg_ms / double(perf_.n_gen_tokens) : 0.0,
                tg_ms > 0 ? 1e3 * double(perf_.n_gen_tokens) / tg_ms : 0.0);
  return buf;
}

}  // namespace loom

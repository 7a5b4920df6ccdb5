#include "context/context.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "base/cpu.h"
#include "base/log.h"
#include "base/timer.h"
#include "ops/matmul.h"
#include "ops/ops.h"

namespace loom::context {

std::optional<Pooling> parse_pooling(std::string_view name) {
  static constexpr std::pair<std::string_view, Pooling> kNames[] = {{"none", Pooling::kNone},
                                                                    {"mean", Pooling::kMean},
                                                                    {"cls", Pooling::kCls},
                                                                    {"last", Pooling::kLast},
                                                                    {"rank", Pooling::kRank}};
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

namespace {

// The parameters no context can be made with for this model.
Status check_context_params(const ContextParams& p, const ModelHparams& hp) {
  if (p.n_ctx < 0 || p.n_batch < 0 || p.n_ubatch < 0 || p.n_threads < 0 || p.n_threads_batch < 0 || p.n_seq_max < 0) {
    return invalid_argument("context sizes and thread counts must not be negative");
  }
  if (p.n_batch == 0 && p.n_ubatch == 0) return invalid_argument("n_batch and n_ubatch cannot both be zero");
  if (p.n_ctx == 0 && hp.n_ctx_train == 0)
    return invalid_argument("n_ctx and the model's training context cannot both be zero");
  if (p.n_seq_max > kv::kMaxSeqs) return invalid_argument("n_seq_max must be at most " + std::to_string(kv::kMaxSeqs));
  if (p.n_swa < -1) return invalid_argument("n_swa must be -1 (the model's), 0 (off) or a window of at least one token");
  if (p.n_swa > 0 && hp.is_encoder()) return unsupported("a sliding window is not supported for encoder models");
  if (p.n_swa > 0 && hp.is_recurrent())
    return unsupported("a sliding window is not supported for recurrent models (no attention)");
  return Status::ok();
}

// YaRN's attention factor when the caller gives none. The reference's derivation: YaRN's
// magnitude scale mscale(f) = 1 + 0.1·ln f (f = 1 / freq_scale), over mscale with the file's
// yarn_log_multiplier when it has one, and divided by the factor the rope kernel applies itself
// (ops::rope multiplies by 1 + 0.1·ln f whenever ext_factor != 0).
float yarn_attn_factor(const ops::RopeParams& rope, const ModelHparams& hp) {
  if (rope.ext_factor == 0.0f) return 1.0f;
  const float f = 1.0f / rope.freq_scale;
  auto mscale = [](float scale, float m) { return scale <= 1.0f ? 1.0f : 0.1f * m * std::log(scale) + 1.0f; };
  float yarn_attn = hp.yarn_log_mul != 0.0f ? mscale(f, 1.0f) / mscale(f, hp.yarn_log_mul) : mscale(f, 1.0f);
  yarn_attn *= 1.0f / (1.0f + 0.1f * std::log(f));
  return yarn_attn;
}

// RoPE: context overrides, scaling type, YaRN (the reference's derivation). LongRoPE factors
// follow n_ctx per sequence. Writes what was chosen back into cp.
ops::RopeParams context_rope(const Model& model, const ContextParams& p, ContextParams& cp) {
  const ModelHparams& hp = model.hparams();
  ops::RopeParams rope = model_rope(model, cp.kv_unified ? cp.n_ctx : cp.n_ctx / cp.n_seq_max);
  if (p.rope_freq_base > 0) rope.freq_base = p.rope_freq_base;
  if (p.rope_freq_scale > 0) rope.freq_scale = p.rope_freq_scale;
  if (cp.rope_scaling == RopeScaling::kUnspecified) {
    cp.rope_scaling = hp.rope_scaling == model::RopeScalingKind::kYarn ? RopeScaling::kYarn
                      : hp.rope_freq_scale != 1.0f                     ? RopeScaling::kLinear
                                                                       : RopeScaling::kNone;
  }
  if (cp.rope_scaling == RopeScaling::kNone) rope.freq_scale = 1.0f;
  rope.ext_factor = p.yarn_ext_factor < 0 ? (cp.rope_scaling == RopeScaling::kYarn ? 1.0f : 0.0f) : p.yarn_ext_factor;
  const float yarn_attn = p.yarn_attn_factor < 0 ? yarn_attn_factor(rope, hp) : p.yarn_attn_factor;
  rope.attn_factor = yarn_attn * rope.attn_factor;  // times the model's rope.scaling.attn_factor
  rope.beta_fast = p.yarn_beta_fast < 0 ? hp.yarn_beta_fast : p.yarn_beta_fast;
  rope.beta_slow = p.yarn_beta_slow < 0 ? hp.yarn_beta_slow : p.yarn_beta_slow;
  if (p.yarn_orig_ctx > 0) rope.n_ctx_orig = p.yarn_orig_ctx;
  cp.rope_freq_base = rope.freq_base;
  cp.rope_freq_scale = rope.freq_scale;
  cp.yarn_ext_factor = rope.ext_factor;
  return rope;
}

// The pooling the model asks for unless the caller chose; rank pooling needs a classifier head.
Status resolve_pooling(const Model& model, ContextParams& cp) {
  const ModelHparams& hp = model.hparams();
  if (cp.pooling == Pooling::kUnspecified) {
    static constexpr Pooling kFromModel[] = {Pooling::kNone, Pooling::kMean, Pooling::kCls, Pooling::kLast, Pooling::kRank};
    cp.pooling = hp.pooling_type >= 0 ? kFromModel[hp.pooling_type] : Pooling::kNone;
  }
  if (cp.pooling == Pooling::kRank && !model.weights().has_cls_head()) {
    return unsupported(
        "rank pooling needs a classification head (cls.weight and/or cls.output.weight), which this "
        "model does not have: it is not a reranker");
  }
  return Status::ok();
}

// Batch sizes: a causal model's batch never exceeds the context.
void size_batches(const ContextParams& p, bool causal, ContextParams& cp) {
  const int n_batch_param = p.n_batch;
  cp.n_batch =
      causal ? std::min(cp.n_ctx, p.n_batch > 0 ? p.n_batch : p.n_ubatch) : (p.n_batch > 0 ? p.n_batch : p.n_ubatch);
  cp.n_ubatch = std::min(cp.n_batch, p.n_ubatch > 0 ? p.n_ubatch : n_batch_param);
  if (cp.n_ubatch <= 0) cp.n_ubatch = cp.n_batch;
  cp.n_outputs_max = p.n_outputs_max > 0 ? std::min(p.n_outputs_max, cp.n_batch) : cp.n_batch;
}

// The memory: KV parts for the attention layers, a window-sized cache for an iSWA model's
// sliding layers, recurrent states for the others (kv/memory.h).
kv::MemoryParams memory_params(const ContextParams& p, const ContextParams& cp, const ModelHparams& hp, bool swa_all_layers,
                               bool causal) {
  kv::MemoryParams mp;
  mp.n_ctx = cp.n_ctx;
  mp.n_seq_max = cp.n_seq_max;
  mp.n_seq_swa = p.n_seq_swa;
  mp.n_seq_states = p.n_seq_states;
  mp.n_ubatch = cp.n_ubatch;
  mp.type_k = p.type_k;
  mp.type_v = p.type_v;
  mp.swa_window = swa_all_layers ? 0 : cp.n_swa;
  // Encoders borrow cells for a whole batch; causal decoders with a window cache need n_ubatch.
  mp.swa_full = p.swa_full || hp.is_encoder() || !causal;
  return mp;
}

}  // namespace

Expected<std::unique_ptr<Context>> Context::create(std::shared_ptr<const Model> model, const ContextParams& p) {
  return out_of_memory_as_status("creating the context", [&] { return create_unguarded(std::move(model), p); });
}

Expected<std::unique_ptr<Context>> Context::create_unguarded(std::shared_ptr<const Model> model, const ContextParams& p) {
  if (!model) return invalid_argument("model cannot be null");
  const ModelHparams& hp = model->hparams();
  LOOM_RETURN_IF_ERROR(check_context_params(p, hp));
  std::unique_ptr<Context> ctx(new Context());
  ctx->model_ = std::move(model);
  ContextParams& cp = ctx->params_;
  cp = p;
  cp.n_seq_max = std::max(1, p.n_seq_max);
  const int64_t n_ctx = p.n_ctx > 0 ? p.n_ctx : hp.n_ctx_train;
  if (n_ctx > (1 << 24)) return invalid_argument("n_ctx " + std::to_string(n_ctx) + " is too large");
  cp.n_ctx = int(n_ctx);
  ctx->fwd_.rope = context_rope(*ctx->model_, p, cp);
  LOOM_RETURN_IF_ERROR(resolve_pooling(*ctx->model_, cp));
  ctx->causal_ = cp.attention == AttentionType::kUnspecified ? hp.causal : cp.attention == AttentionType::kCausal;
  if (hp.is_encoder()) cp.embeddings = true;  // an encoder has no LM head: embeddings only

  // Sliding window: the model's SWA layers (gemma2/gemma3) keep theirs unless overridden; other
  // families (llama/Mistral included, whatever their file says) attend fully unless asked.
  cp.n_swa = p.n_swa < 0 ? hp.swa_window : p.n_swa;
  ctx->swa_all_layers_ = hp.swa_window <= 0 && cp.n_swa > 0;
  size_batches(p, ctx->causal_, cp);
  cp.n_threads = p.n_threads > 0 ? p.n_threads : cpu_count();
  cp.n_threads_batch = p.n_threads_batch > 0 ? p.n_threads_batch : cp.n_threads;
  ctx->pool_ = std::make_unique<ThreadPool>(std::max(cp.n_threads, cp.n_threads_batch));

  LOOM_ASSIGN_OR_RETURN(ctx->mem_, Memory::create(hp, memory_params(p, cp, hp, ctx->swa_all_layers_, ctx->causal_)));
  if (hp.has_encoder() || hp.is_encoder()) {
    LOOM_ASSIGN_OR_RETURN(ctx->enc_kv_, KvCache::create(kv::KvCacheParams::uniform(
                                            int(hp.n_layer), cp.n_ubatch, hp.n_embd_kv(), hp.n_embd_kv(), hp.head_dim,
                                            TensorType::F32, TensorType::F32)));
  }
  if (hp.is_recurrent()) cp.type_k = cp.type_v = TensorType::F32;  // states are F32; no K/V
  const int max_kv = ctx->mem_->kv() ? ctx->mem_->kv()->size() : 0;
  ctx->scratch_ = model::ForwardScratch(*ctx->model_, cp.n_ubatch, max_kv, cp.type_k, ctx->pool_->size());
  ctx->fwd_.abort_cb = p.abort_callback;
  ctx->fwd_.abort_data = p.abort_data;
  ctx->fwd_.eval_cb = p.eval_callback;
  ctx->fwd_.eval_data = p.eval_data;
  if (hp.n_expert > 0) {
    ctx->expert_counts_.assign(size_t(hp.n_layer) * size_t(hp.n_expert), 0);
    ctx->fwd_.expert_counts = ctx->expert_counts_.data();
  }
  ctx->set_embeddings(cp.embeddings);
  const size_t nb = size_t(cp.n_batch);
  ctx->embd_.assign(nb * size_t(hp.n_embd), 0.0f);
  ctx->pooled_.assign(size_t(cp.n_seq_max) * size_t(hp.n_embd), 0.0f);
  ctx->pooled_valid_.assign(size_t(cp.n_seq_max), 0);
  ctx->pool_count_.assign(size_t(cp.n_seq_max), 0);
  ctx->pool_pos_.assign(size_t(cp.n_seq_max), -1);
  if (cp.pooling == Pooling::kRank) ctx->rank_.reserve(*ctx->model_, cp.n_seq_max);
  ctx->output_of_row_.assign(nb, -1);
  ctx->pos_.assign(nb, 0);
  ctx->seq_.assign(nb, 0);
  ctx->reserve_ubatch_buffers();
  if (hp.arch == Arch::kT5) {
    ctx->enc_.reset(*ctx->model_);
    ctx->cross_seqs_.assign(size_t(cp.n_ubatch), {});
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
      if (p < 0 || p > (1 << 30))
        return invalid_argument("invalid position " + std::to_string(p) + " at batch index " + std::to_string(i));
      pos_[size_t(i)] = p;
    }
  } else {
    for (int i = 0; i < n; ++i) {
      int32_t last = mem_->seq_pos_max(seq_[size_t(i)]);
      for (int j = 0; j < i; ++j) {
        if (seq_[size_t(j)] == seq_[size_t(i)]) last = std::max(last, pos_[size_t(j)]);
      }
      pos_[size_t(i)] = last + 1;
    }
  }
  return mem_->rs() ? validate_recurrent(batch, n) : Status::ok();
}

Status Context::prepare_kv() {
  if (mem_->has_shift()) LOOM_RETURN_IF_ERROR(kv_update());
  if (params_.defrag_thold > 0) {
    for (KvCache* part : {mem_->kv(), mem_->kv_swa()}) {
      if (part && part->fragmentation() > params_.defrag_thold) part->defrag();
    }
  }
  return Status::ok();
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
    } else if (((params_.pooling == Pooling::kCls || params_.pooling == Pooling::kRank) &&
                (pool_pos_[s] < 0 || p < pool_pos_[s])) ||
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
  if (params_.pooling == Pooling::kRank) rank_.run(*model_, pooled_, pooled_valid_, *pool_, params_.n_threads_batch);
}

int32_t Context::decoder_start_token() const { return model_->decoder_start_token(); }

Status Context::warmup() {
  const int32_t tok = model_->vocab().bos() >= 0 ? model_->vocab().bos() : 0;
  Batch b = Batch::from_tokens(std::span<const int32_t>(&tok, 1), 0);
  const bool no_perf = params_.no_perf;
  params_.no_perf = true;
  Status st = model_->hparams().arch == Arch::kT5 ? encode(b) : Status::ok();
  if (st.is_ok()) st = decode(b);
  enc_.remove(-1);  // the warm-up's encoder output is not an input of later decodes
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
    if (out < 0)
      return out_of_range("negative index " + std::to_string(i) + " out of range [0, " + std::to_string(n_outputs_) + ")");
  } else {
    if (i >= last_batch_size_)
      return out_of_range("index " + std::to_string(i) + " out of range [0, " + std::to_string(last_batch_size_) + ")");
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
  if (params_.pooling == Pooling::kRank) return rank_.scores(seq);
  const size_t E = size_t(n_embd());
  return std::span<const float>(pooled_.data() + size_t(seq) * E, E);
}

// ---------------------------------------------------------------------------------------------
// KV cache

Status Context::check_seq(int seq, bool allow_negative) const {
  if ((seq < 0 && !allow_negative) || seq >= params_.n_seq_max) {
    return invalid_argument("sequence id " + std::to_string(seq) + " out of range [0, " + std::to_string(params_.n_seq_max) +
                            ")");
  }
  return Status::ok();
}

void Context::kv_clear() { mem_->clear(); }  // (the encoder output stays, as llama.cpp's)

void Context::encoder_forget(int seq) { enc_.remove(seq); }

Status Context::seq_rm(int seq, int p0, int p1, uint8_t parts) {
  LOOM_RETURN_IF_ERROR(check_seq(seq, true));
  if (!mem_->seq_rm(seq, p0, p1, parts)) {
    // The reference returns false here: a recurrent state cannot forget its last tokens alone.
    if (seq < 0) {
      return unsupported("seq_rm(" + std::to_string(seq) +
                         ", ...): a recurrent model's states are removed one sequence at a "
                         "time (or all with kv_clear); the reference refuses a negative sequence id here");
    }
    return unsupported("seq_rm(" + std::to_string(seq) + ", " + std::to_string(p0) + ", " + std::to_string(p1) +
                       "): a recurrent model's state cannot lose part of its tokens (remove the whole sequence "
                       "instead: p0 = 0 or -1, p1 = -1)");
  }
  return Status::ok();
}

Status Context::seq_cp(int src, int dst, int p0, int p1, uint8_t parts) {
  LOOM_RETURN_IF_ERROR(check_seq(src, false));
  LOOM_RETURN_IF_ERROR(check_seq(dst, false));
  mem_->seq_cp(src, dst, p0, p1, parts);
  return Status::ok();
}

Status Context::seq_keep(int seq) {
  LOOM_RETURN_IF_ERROR(check_seq(seq, false));
  mem_->seq_keep(seq);
  return Status::ok();
}

Status Context::seq_add(int seq, int p0, int p1, int delta) {
  LOOM_RETURN_IF_ERROR(check_seq(seq, true));
  mem_->seq_add(seq, p0, p1, delta);
  return Status::ok();
}

Status Context::seq_div(int seq, int p0, int p1, int d) {
  LOOM_RETURN_IF_ERROR(check_seq(seq, true));
  if (d < 1) return invalid_argument("seq_div: divisor must be at least 1");
  mem_->seq_div(seq, p0, p1, d);
  return Status::ok();
}

Expected<int> Context::seq_pos_min(int seq) const {
  LOOM_RETURN_IF_ERROR(check_seq(seq, true));
  return mem_->seq_pos_min(seq);
}

Expected<int> Context::seq_pos_max(int seq) const {
  LOOM_RETURN_IF_ERROR(check_seq(seq, true));
  return mem_->seq_pos_max(seq);
}

Status Context::kv_update() {
  // A recurrent state's shift only moves its position; K rows of both KV parts re-rotate.
  for (KvCache* part : {mem_->kv(), mem_->kv_swa()}) {
    if (!part || !part->has_shift()) continue;
    part->pending_deltas(deltas_.data());
    model::ForwardConfig cfg = fwd_;
    LOOM_RETURN_IF_ERROR(shift_k(*model_, part->view(), deltas_.data(), scratch_, *pool_, cfg));
    part->clear_shift();
  }
  return Status::ok();
}

void Context::kv_defrag() {
  if (mem_->has_shift()) (void)kv_update();
  for (KvCache* part : {mem_->kv(), mem_->kv_swa()}) {
    if (part) part->defrag();
  }
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
    for (const model::LoraTarget& t : a->targets()) {
      model::LoraPair p{t.a, t.b, a->effective_scale(scale, t.rank)};
      if (t.weight == "token_embd.weight") adapters_.tok_embd.push_back(p);
      else if (t.weight == "output.weight") adapters_.output.push_back(p);
      else adapters_.layers[size_t(t.layer)][t.kind].push_back(p);
      adapters_.max_rank = std::max(adapters_.max_rank, t.rank);
    }
  }
  if (adapters_.max_rank > scratch_.max_lora_rank()) {
    scratch_ = model::ForwardScratch(*model_, params_.n_ubatch, mem_->kv() ? mem_->kv()->size() : 0, params_.type_k,
                                     pool_->size(), adapters_.max_rank);
  }
  fwd_.adapters = &adapters_;
}

// ---------------------------------------------------------------------------------------------
// perf

void Context::reset_perf() {
  const int64_t load = perf_.t_load_us;
  perf_ = {};
  perf_.t_load_us = load;
  std::fill(expert_counts_.begin(), expert_counts_.end(), 0);
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
  std::string out = buf;
  const ModelHparams& hp = model_->hparams();
  if (!expert_counts_.empty()) {
    const ExpertUsage u = expert_usage();
    std::snprintf(buf, sizeof buf,
                  "experts     = %lld of %lld per token, %llu choices; busiest expert %.1f %% of its layer's "
                  "(even: %.1f %%), %llu of %llu never chosen\n",
                  static_cast<long long>(hp.n_expert_used), static_cast<long long>(hp.n_expert),
                  static_cast<unsigned long long>(u.choices), 100.0 * u.busiest_share, 100.0 / double(hp.n_expert),
                  static_cast<unsigned long long>(u.never), static_cast<unsigned long long>(u.slots));
    out += buf;
  }
  return out;
}

Context::ExpertUsage Context::expert_usage() const {
  ExpertUsage u;
  if (expert_counts_.empty()) return u;
  const ModelHparams& hp = model_->hparams();
  const int64_t X = hp.n_expert;
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    if (!hp.layer_is_moe(il)) continue;
    const uint64_t* c = expert_counts_.data() + il * X;
    uint64_t sum = 0, top = 0;
    for (int64_t e = 0; e < X; ++e) {
      sum += c[e];
      top = std::max(top, c[e]);
      u.never += c[e] == 0;
    }
    u.slots += uint64_t(X);
    u.choices += sum;
    if (sum > 0) u.busiest_share = std::max(u.busiest_share, double(top) / double(sum));
  }
  return u;
}

}  // namespace loom::context

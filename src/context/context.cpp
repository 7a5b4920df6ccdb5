#include "context/context.h"

#include <algorithm>

#include "base/cpu.h"
#include "base/timer.h"

namespace loom {

Expected<std::unique_ptr<Context>> Context::create(std::shared_ptr<const Model> model, const ContextParams& p) {
  if (!model) return invalid_argument("no model");
  const ModelHparams& hp = model->hparams();
  std::unique_ptr<Context> ctx(new Context());
  ctx->model_ = std::move(model);
  ctx->params_ = p;
  if (p.n_ctx < 0 || p.n_batch < 0 || p.n_ubatch < 0 || p.n_threads < 0) {
    return invalid_argument("context sizes and thread counts must not be negative");
  }
  if (p.n_seq_max < 1 || p.n_seq_max > kMaxSeqs) {
    return invalid_argument("n_seq_max must be in [1, " + std::to_string(kMaxSeqs) + "]");
  }
  ctx->n_ctx_ = p.n_ctx > 0 ? p.n_ctx : int(std::min<int64_t>(hp.n_ctx_train, 1 << 20));
  ContextParams& cp = ctx->params_;
  cp.n_batch = std::min(cp.n_batch > 0 ? cp.n_batch : 2048, ctx->n_ctx_);
  cp.n_ubatch = std::min(cp.n_ubatch > 0 ? cp.n_ubatch : 512, cp.n_batch);
  const int n_threads = p.n_threads > 0 ? p.n_threads : cpu_count();

  KvCacheParams kp;
  kp.n_layer = int(hp.n_layer);
  kp.n_cells = ctx->n_ctx_;
  kp.n_embd_k = hp.n_embd_kv();
  kp.n_embd_v = hp.n_embd_kv();
  kp.head_dim = hp.head_dim;
  kp.type_k = p.type_k;
  kp.type_v = p.type_v;
  LOOM_ASSIGN_OR_RETURN(ctx->kv_, KvCache::create(kp));

  ctx->pool_ = std::make_unique<ThreadPool>(n_threads);
  ctx->scratch_ = ForwardScratch(*ctx->model_, cp.n_ubatch, ctx->n_ctx_, p.type_k, n_threads);
  ctx->logits_.assign(size_t(cp.n_batch) * size_t(hp.n_vocab), 0.0f);
  ctx->output_of_row_.assign(size_t(cp.n_batch), -1);
  ctx->pos_.assign(size_t(cp.n_batch), 0);
  ctx->cells_.assign(size_t(cp.n_ubatch), 0);
  ctx->seq_.assign(size_t(cp.n_ubatch), 0);
  ctx->out_rows_.assign(size_t(cp.n_ubatch), 0);
  ctx->mask_.assign(size_t(cp.n_ubatch) * size_t(ctx->n_ctx_), 0.0f);
  return ctx;
}

Status Context::decode(const Batch& batch) {
  const int n = batch.size();
  if (n == 0) return invalid_argument("decode: empty batch");
  if (n > params_.n_batch) {
    return invalid_argument("decode: batch of " + std::to_string(n) + " tokens exceeds n_batch " +
                            std::to_string(params_.n_batch));
  }
  auto size_ok = [n](size_t s) { return s == 0 || s == size_t(n); };
  if (!size_ok(batch.pos.size()) || !size_ok(batch.seq_id.size()) || !size_ok(batch.output.size())) {
    return invalid_argument("decode: pos, seq_id and output must be empty or have one entry per token");
  }
  const int64_t n_vocab = model_->hparams().n_vocab;
  for (int i = 0; i < n; ++i) {
    const int32_t tok = batch.tokens[size_t(i)];
    if (tok < 0 || tok >= n_vocab) {
      return invalid_argument("decode: token id " + std::to_string(tok) + " at batch index " + std::to_string(i) +
                              " is out of range [0, " + std::to_string(n_vocab) + ")");
    }
    const int32_t seq = batch.seq_id.empty() ? 0 : batch.seq_id[size_t(i)];
    if (seq < 0 || seq >= params_.n_seq_max) {
      return invalid_argument("decode: sequence id " + std::to_string(seq) + " at batch index " + std::to_string(i) +
                              " is out of range [0, " + std::to_string(params_.n_seq_max) + ")");
    }
  }
  // Resolve positions: omitted positions continue each sequence.
  std::vector<int32_t>& pos = pos_;
  if (!batch.pos.empty()) {
    for (int i = 0; i < n; ++i) {
      if (batch.pos[size_t(i)] < 0) return invalid_argument("decode: negative position at batch index " + std::to_string(i));
      pos[size_t(i)] = batch.pos[size_t(i)];
    }
  } else {
    for (int i = 0; i < n; ++i) {
      const int32_t seq = batch.seq_id.empty() ? 0 : batch.seq_id[size_t(i)];
      int32_t last = kv_->seq_pos_max(seq);
      for (int j = 0; j < i; ++j) {
        const int32_t sj = batch.seq_id.empty() ? 0 : batch.seq_id[size_t(j)];
        if (sj == seq) last = std::max(last, pos[size_t(j)]);
      }
      pos[size_t(i)] = last + 1;
    }
  }
  if (n > kv_->size() - kv_->used()) {
    return Status(StatusCode::kResourceExhausted, "decode: the KV cache has " + std::to_string(kv_->size() - kv_->used()) +
                                                      " free cells, the batch needs " + std::to_string(n));
  }

  // Output rows: flagged tokens, or the last one.
  std::fill(output_of_row_.begin(), output_of_row_.end(), -1);
  n_outputs_ = 0;
  for (int i = 0; i < n; ++i) {
    const bool want = batch.output.empty() ? i == n - 1 : batch.output[size_t(i)] != 0;
    if (want) output_of_row_[size_t(i)] = n_outputs_++;
  }
  last_batch_size_ = n;

  const int64_t t0 = now_us();
  for (int first = 0; first < n; first += params_.n_ubatch) {
    const int m = std::min(params_.n_ubatch, n - first);
    LOOM_RETURN_IF_ERROR(decode_ubatch(first, m, batch, pos));
  }
  const int64_t dt = now_us() - t0;
  if (n > 1) {
    perf_.n_prompt_tokens += n;
    perf_.t_prompt_us += dt;
  } else {
    perf_.n_gen_tokens += 1;
    perf_.t_gen_us += dt;
  }
  return Status::ok();
}

Status Context::decode_ubatch(int first, int n, const Batch& batch, const std::vector<int32_t>& pos) {
  if (!kv_->find_slot(n, cells_.data())) {
    return Status(StatusCode::kResourceExhausted, "decode: no free KV cells");
  }
  for (int t = 0; t < n; ++t) {
    seq_[size_t(t)] = batch.seq_id.empty() ? 0 : batch.seq_id[size_t(first + t)];
    kv_->occupy(cells_[size_t(t)], pos[size_t(first + t)], seq_[size_t(t)]);
  }
  const int n_kv = kv_->n_kv();
  kv_->build_mask(n, pos.data() + first, seq_.data(), n_kv, mask_.data());

  int n_out = 0;
  for (int t = 0; t < n; ++t) {
    if (output_of_row_[size_t(first + t)] >= 0) out_rows_[size_t(n_out++)] = t;
  }
  ForwardBatch fb;
  fb.n_tokens = n;
  fb.tokens = batch.tokens.data() + first;
  fb.pos = pos.data() + first;
  fb.cells = cells_.data();
  fb.n_kv = n_kv;
  fb.mask = mask_.data();
  fb.n_outputs = n_out;
  fb.output_rows = out_rows_.data();
  const int first_out = n_out ? output_of_row_[size_t(first + out_rows_[0])] : 0;
  fb.logits = logits_.data() + size_t(first_out) * size_t(model_->hparams().n_vocab);
  return forward(*model_, fb, kv_->view(), scratch_, *pool_);
}

Expected<std::span<const float>> Context::logits(int i) const {
  if (n_outputs_ == 0) return invalid_argument("logits: the last decode produced no outputs");
  int out = -1;
  if (i < 0) {
    out = n_outputs_ + i;
    if (out < 0) return out_of_range("logits: index " + std::to_string(i) + " is before the first output");
  } else {
    if (i >= last_batch_size_) return out_of_range("logits: batch index " + std::to_string(i) + " is out of range");
    out = output_of_row_[size_t(i)];
    if (out < 0) return invalid_argument("logits: batch index " + std::to_string(i) + " was not flagged for output");
  }
  const size_t nv = size_t(model_->hparams().n_vocab);
  return std::span<const float>(logits_.data() + size_t(out) * nv, nv);
}

}  // namespace loom

// The inference context: owns a KV cache and turns batches of tokens into logits.
// Used by one thread at a time; the Model it holds may be shared.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/threadpool.h"
#include "context/batch.h"
#include "kv/kv_cache.h"
#include "model/forward.h"
#include "model/model.h"

namespace loom {

struct ContextParams {
  int n_ctx = 0;            // 0: the model's training context
  int n_batch = 2048;       // most tokens one decode() call accepts
  int n_ubatch = 512;       // most tokens one forward pass computes
  int n_seq_max = 1;
  int n_threads = 0;        // 0: all cores
  TensorType type_k = TensorType::F16;
  TensorType type_v = TensorType::F16;
};

struct PerfCounters {
  int64_t n_prompt_tokens = 0;  // tokens decoded in batches of more than one token
  int64_t t_prompt_us = 0;
  int64_t n_gen_tokens = 0;     // single-token decodes
  int64_t t_gen_us = 0;
};

class Context {
 public:
  static Expected<std::unique_ptr<Context>> create(std::shared_ptr<const Model> model, const ContextParams& params);

  const Model& model() const { return *model_; }
  int n_ctx() const { return n_ctx_; }
  int n_batch() const { return params_.n_batch; }
  int n_ubatch() const { return params_.n_ubatch; }
  int n_vocab() const { return int(model_->hparams().n_vocab); }

  // Evaluates the batch. Errors: kInvalidArgument (bad token id, position, sequence, size),
  // kResourceExhausted (no room in the KV cache), kAborted.
  Status decode(const Batch& batch);

  // Logits of batch row i of the last decode (negative i counts from the last output row).
  Expected<std::span<const float>> logits(int i) const;
  int n_outputs() const { return n_outputs_; }

  KvCache& kv() { return *kv_; }
  const KvCache& kv() const { return *kv_; }

  const PerfCounters& perf() const { return perf_; }
  void reset_perf() { perf_ = {}; }

 private:
  Context() = default;
  Status decode_ubatch(int first, int n, const Batch& batch, const std::vector<int32_t>& pos);

  std::shared_ptr<const Model> model_;
  ContextParams params_;
  int n_ctx_ = 0;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<ThreadPool> pool_;
  ForwardScratch scratch_;

  // Reserved at creation, reused by every decode.
  std::vector<float> logits_;          // [n_batch][n_vocab]
  std::vector<int32_t> output_of_row_; // batch row -> output index, -1 when none
  std::vector<int32_t> pos_;           // [n_batch] resolved positions
  std::vector<int32_t> cells_;         // [n_ubatch]
  std::vector<int32_t> seq_;           // [n_ubatch]
  std::vector<int32_t> out_rows_;      // [n_ubatch]
  std::vector<float> mask_;            // [n_ubatch][n_ctx]
  int n_outputs_ = 0;
  int last_batch_size_ = 0;
  PerfCounters perf_;
};

}  // namespace loom

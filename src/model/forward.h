// The forward pass of one micro-batch. The caller (the context) decides which cache cells the
// tokens write and which cells each token may see (the mask); the forward only computes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/arena.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "gguf/tensor_type.h"

namespace loom {

class Model;

// K/V storage of one layer: [cell][n_head_kv][head_dim] in the cache's types.
struct KvLayerView {
  void* k = nullptr;
  void* v = nullptr;
};

struct KvView {
  TensorType type_k = TensorType::F16;
  TensorType type_v = TensorType::F16;
  size_t k_row_bytes = 0;  // bytes of one cell's K (all kv heads)
  size_t v_row_bytes = 0;
  int n_cells = 0;
  std::vector<KvLayerView> layers;
};

struct ForwardBatch {
  int n_tokens = 0;
  const int32_t* tokens = nullptr;   // [n_tokens] (ids validated by the caller)
  const int32_t* pos = nullptr;      // [n_tokens]
  const int32_t* cells = nullptr;    // [n_tokens] cache cell each token's K/V is written to
  int n_kv = 0;                      // attention considers cells [0, n_kv)
  const float* mask = nullptr;       // [n_tokens][n_kv] additive mask (0 / -inf)
  int n_outputs = 0;
  const int32_t* output_rows = nullptr;  // [n_outputs] batch rows whose logits are wanted
  float* logits = nullptr;           // [n_outputs][n_vocab]
};

// Scratch buffers for micro-batches of up to max_tokens over up to max_kv cells, reserved once.
class ForwardScratch {
 public:
  ForwardScratch() = default;
  ForwardScratch(const Model& model, int max_tokens, int max_kv, TensorType type_k, int n_threads);
  Arena& arena() { return arena_; }
  int max_tokens() const { return max_tokens_; }
  int max_kv() const { return max_kv_; }

 private:
  Arena arena_;
  int max_tokens_ = 0;
  int max_kv_ = 0;
};

// Runs the model's forward for one micro-batch: stores K/V into the given cells, writes logits
// of the output rows. Aborts between layers when `abort_cb` returns true (kAborted).
struct ForwardHooks {
  bool (*abort_cb)(void* data) = nullptr;
  void* abort_data = nullptr;
};

Status forward(const Model& model, const ForwardBatch& batch, const KvView& kv, ForwardScratch& scratch,
               ThreadPool& pool, const ForwardHooks& hooks = {});

}  // namespace loom

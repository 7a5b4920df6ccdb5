// Scaled dot-product attention of a micro-batch of queries over K/V rows held in cache cells.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/threadpool.h"
#include "gguf/tensor_type.h"

namespace loom::ops {

struct AttentionParams {
  int n_tokens = 0;
  int n_head = 0;
  int n_head_kv = 0;        // grouped-query: query head h reads kv head h / (n_head / n_head_kv)
  int head_dim = 0;
  int n_kv = 0;             // cells [0, n_kv) are candidates; the mask hides the rest
  TensorType k_type = TensorType::F16;
  TensorType v_type = TensorType::F16;
  const void* k = nullptr;  // [cell][n_head_kv][head_dim] in k_type
  const void* v = nullptr;  // [cell][n_head_kv][head_dim] in v_type
  size_t k_row_bytes = 0;   // bytes per cell (all kv heads)
  size_t v_row_bytes = 0;
  const float* mask = nullptr;  // [n_tokens][n_kv], additive: 0 visible, -inf hidden
  float scale = 1.0f;
  float softcap = 0.0f;     // > 0: scores = softcap * tanh(scores / softcap)
  // ALiBi hook: when set, head h adds alibi_slopes[h] * (kv_pos[c] - q_pos[t]) to its scores
  // (a linear penalty on distance instead of rotary positions).
  const float* alibi_slopes = nullptr;  // [n_head]
  const int32_t* q_pos = nullptr;       // [n_tokens]
  const int32_t* kv_pos = nullptr;      // [n_kv] position held by each cell
};

// The standard ALiBi slopes for n_head heads with the given maximum bias (8 in the papers):
// geometric in 2^(-max_bias/n) over the nearest power of two, interleaved beyond it.
void alibi_slopes(int n_head, float max_bias, float* out);

size_t attention_scratch_bytes(int n_kv, int head_dim, TensorType k_type, int n_threads);

// q [n_tokens][n_head][head_dim] -> out [n_tokens][n_head][head_dim]. Work is split over
// (token, head) pairs. scratch: attention_scratch_bytes(...).
void attention(ThreadPool& pool, const AttentionParams& p, const float* q, float* out, void* scratch);

}  // namespace loom::ops

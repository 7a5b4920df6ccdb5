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
  int n_head_kv = 0;  // grouped-query: query head h reads kv head h / (n_head / n_head_kv)
  int head_dim = 0;
  int n_kv = 0;  // mask columns [0, n_kv) are candidates; the mask hides the rest
  TensorType k_type = TensorType::F16;
  TensorType v_type = TensorType::F16;
  const void* k = nullptr;  // [cell][n_head_kv][head_dim] in k_type
  const void* v = nullptr;  // [cell][n_head_kv][head_dim] in v_type
  size_t k_row_bytes = 0;   // bytes per cell (all kv heads)
  size_t v_row_bytes = 0;
  const float* mask = nullptr;  // [n_tokens][n_kv] by column, additive: 0 visible, -inf hidden
  // Column c of the mask is cell kv_cells[c] of K/V (null: cell c). The columns are the order in
  // which a token's visible cells are summed: a token's result depends on its visible cells and
  // their column order only (batch invariance), so callers list cells in position order.
  const int32_t* kv_cells = nullptr;  // [n_kv]
  // Tokens may share a tile (each K/V row then read once for several tokens) when they are
  // adjacent in the batch with the same prefix_group[t] >= 0; the caller promises that the
  // visible columns of every such token are a prefix of their union (one sequence under a causal
  // mask, columns in position order). Null: every token alone (always correct, slower prefill).
  const int32_t* prefix_group = nullptr;  // [n_tokens]
  float scale = 1.0f;
  float softcap = 0.0f;  // > 0: scores = softcap * tanh(scores / softcap)
  // ALiBi hook: when set, head h adds alibi_slopes[h] * (kv_pos[c] - q_pos[t]) to its scores
  // (a linear penalty on distance instead of rotary positions).
  const float* alibi_slopes = nullptr;  // [n_head]
  const int32_t* q_pos = nullptr;       // [n_tokens]
  const int32_t* kv_pos = nullptr;      // [n_kv] position held by each column's cell
  // Relative-position bias (T5): head h adds pos_bias[pos_bucket[t][c] * n_head + h] to its score
  // of column c (after the scale, before the mask; T5 uses scale 1).
  const int32_t* pos_bucket = nullptr;  // [n_tokens][n_kv]
  const float* pos_bias = nullptr;      // [n_buckets][n_head]
  // Attention sinks (gpt-oss): head h's softmax denominator also counts exp(sinks[h]), a learned
  // logit with no value row, so the weights of the visible cells sum to less than 1. -inf: none.
  // A row that sees no cell stays all zeros.
  const float* sinks = nullptr;  // [n_head]
};

// The standard ALiBi slopes for n_head heads with the given maximum bias (8 in the papers):
// geometric in 2^(-max_bias/n) over the nearest power of two, interleaved beyond it.
void alibi_slopes(int n_head, float max_bias, float* out);

// Scratch for attention() (and ref::attention) with a pool of n_threads threads, for at most
// n_tokens tokens over at most n_kv columns.
size_t attention_scratch_bytes(int n_tokens, int n_kv, int head_dim, TensorType k_type, int n_threads);

// q [n_tokens][n_head][head_dim] -> out [n_tokens][n_head][head_dim]: for each token t and head h,
// out = softmax_c(score(t, h, c)) . V[cell(c)][h / group] over the columns c with
// mask[t][c] != -inf (with sinks: exp(sinks[h]) joins the softmax's sum), score = dot(q, K[cell(c)][h / group]) * scale (softcap, ALiBi, position bias, + mask),
// where q is first rounded to quant::vec_dot_type(k_type) as quant::vec_dot expects. A row that
// sees no cell is all zeros. Hidden cells' K/V are never read. scratch:
// attention_scratch_bytes(..., pool.size()).
//
// With SIMD enabled (not LOOM_FORCE_SCALAR; the kernel is written with Highway and runs on the
// CPU's best target) and K, V in F32/F16/Q8_0 (any mix, head_dim % 8 == 0, and % 32 == 0 with
// Q8_0), a fused online-softmax kernel runs: the query heads sharing a kv head (and up to 4
// tokens of one prefix group in prefill) are processed together so each K/V row is read once per
// group, over chunks of visible columns; when there are few (token, kv head) tiles, ranges of
// their columns run in parallel and are merged at the end. Results match ref::attention to float
// rounding and are bit-identical whatever the thread count, the other tokens of the batch, their
// masks, prefix groups and cells (batch invariance: see attention_internal.h). Other cases run
// ref::attention (sequential over columns, also batch-invariant).
void attention(ThreadPool& pool, const AttentionParams& p, const float* q, float* out, void* scratch);

namespace ref {
// The scalar reference: per (token, head) one quant::vec_dot per visible column, a full softmax
// over the row, then the weighted sum of dequantized V rows, in column order. Split over
// (token, head) pairs.
void attention(ThreadPool& pool, const AttentionParams& p, const float* q, float* out, void* scratch);
}  // namespace ref

}  // namespace loom::ops

// Internal to src/ops: the contract between the attention driver (attention.cpp: plan, threads,
// scratch, merge of split partials) and the fused SIMD tile kernels (attention_kernels_hwy.cpp,
// written once with Google Highway and dispatched at run time to the best target of the CPU).
//
// A *tile* is a set of query rows attending over the same cells: tokens [t0, t0 + n_tok) x kv
// heads [kvh0, kvh0 + n_kvh) x query heads [h0, h0 + n_h) of each kv head's group, over the cells
// [c_begin, c_end). Row rr = (kl * n_tok + tt) * n_h + g is token t0 + tt, query head
// (kvh0 + kl) * group + h0 + g. The kernel walks the cells in chunks of kAttnChunk, gathers those
// visible to at least one of the tile's tokens (mask != -inf; K/V of the other cells are never
// read), then for each kv head in turn computes the chunk's scores and folds them into each row's
// online-softmax state: running max m, running sum l of exp(score - m), and acc = sum of
// exp(score - m) * V (rescaled by exp(m_old - m_new) when the max grows). Each K row and V row
// of the chunk is loaded and converted once per few query rows, not once per query head, and the
// cells' rows are read for all the tile's kv heads together (contiguous memory).
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/attention.h"

namespace loom::ops::detail {

constexpr int kAttnMaxRows = 8;        // query rows per kv head of a tile (n_tok * n_h)
constexpr int kAttnMaxTileTokens = 4;  // tokens per tile in prefill (K/V chunk reuse)
constexpr int kAttnMaxKvHeads = 8;     // kv heads per tile
constexpr int kAttnChunk = 128;        // cells per online-softmax step (at most)
// Streaming tiles: cells per step such that one step's K + V rows of the tile's kv heads take
// about this many bytes (16..kAttnChunk cells); the next step's rows are prefetched meanwhile.
constexpr size_t kAttnStreamChunkBytes = 64 << 10;

struct AttnTile {
  int t0 = 0, n_tok = 1;        // tokens
  int kvh0 = 0, n_kvh = 1;      // kv heads
  int h0 = 0, n_h = 1;          // query heads within each kv head's group
  int c_begin = 0, c_end = 0;   // candidate cells
  bool stream = false;          // K/V rows come from memory once (decode), not from cache
  int rows() const { return n_kvh * n_tok * n_h; }
};

// Floats per row of a split partial: [m, l, acc[head_dim]] padded to a multiple of 8.
inline size_t attn_partial_row_floats(int head_dim) { return (size_t(head_dim) + 2 + 7) / 8 * 8; }

// Bytes of per-thread scratch a tile kernel needs (independent of n_kv).
size_t attn_tile_scratch_bytes(int head_dim);

// True when the SIMD tile kernels handle this K/V type pair and head size (the same on every
// target: F32/F16/Q8_0 K and V in any mix, head_dim % 8 == 0, and % 32 == 0 with Q8_0).
bool supports(TensorType k_type, TensorType v_type, int head_dim);
// Computes one tile with the best Highway target of the CPU (call only when simd_enabled() and
// supports()). part == nullptr: the rows' outputs are written normalised into out
// ([n_tokens][n_head][head_dim]; all-hidden rows become 0, as in the reference). Otherwise the
// unnormalised state goes to part (row rr at part + rr * attn_partial_row_floats(head_dim)) for
// a later merge. q rows are read before any output is written. scratch: attn_tile_scratch_bytes.
void attention_tile(const AttentionParams& p, const float* q, float* out, const AttnTile& tile,
                    float* part, void* scratch);

}  // namespace loom::ops::detail

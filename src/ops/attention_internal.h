// Internal to src/ops: the contract between the attention driver (attention.cpp: plan, threads,
// scratch, merge of split partials) and the fused SIMD tile kernels (attention_kernels_hwy.cpp,
// written once with Google Highway and dispatched at run time to the best target of the CPU).
//
// A *tile* is a set of query rows attending over the same cells: tokens [t0, t0 + n_tok) x kv
// heads [kvh0, kvh0 + n_kvh) x query heads [h0, h0 + n_h) of each kv head's group. Row
// rr = (kl * R + tt) * n_h + g (R = n_tok * n_h) is token t0 + tt, query head
// (kvh0 + kl) * group + h0 + g. The kernel walks the mask columns (cells, or p.kv_cells[column])
// in chunks of kAttnChunk columns visible to at least one of the tile's tokens (mask != -inf;
// K/V of the other cells are never read), then for each kv head in turn computes the chunk's
// scores and folds them into each row's online-softmax state: running max m, running sum l of
// exp(score - m), and acc = sum of exp(score - m) * V (rescaled by exp(m_old - m_new) when the
// max grows). Each K row and V row of the chunk is loaded and converted once per few query rows,
// not once per query head, and the cells' rows are read for all the tile's kv heads together.
//
// Batch invariance (docs/design.md): a row's result depends only on its own visible columns, in
// column order. Chunks are runs of kAttnChunk *visible* columns, kAttnRangeChunks chunks make a
// *range* whose softmax state starts afresh, and a row's ranges are combined by attn_fold, left
// to right: the same operations whether one tile computes them in turn or several threads
// compute them in parallel (split ranges, merged by attention.cpp). A tile of several tokens
// gathers the columns visible to any of them, which is the same as each row's own list only when
// every row's visible columns are a prefix of the union (AttentionParams::prefix_group): then the
// row's chunk and range boundaries fall where its own list puts them, and the columns it does not
// see (after its own) add exact zeros.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/attention.h"

namespace loom::ops::detail {

constexpr int kAttnMaxRows = 8;        // query rows per kv head of a tile (n_tok * n_h)
constexpr int kAttnMaxTileTokens = 4;  // tokens per tile in prefill (K/V chunk reuse)
constexpr int kAttnMaxKvHeads = 8;     // kv heads per tile
constexpr int kAttnChunk = 128;        // visible columns per online-softmax step
constexpr int kAttnRangeChunks = 2;    // chunks per range (the unit of split parallelism)
constexpr int kAttnRangeCells = kAttnChunk * kAttnRangeChunks;
// Streaming tiles (decode) read a chunk's K rows, then its V rows, in steps of cells whose rows of
// the tile's kv heads take at most about this many bytes (16..kAttnChunk cells, a power of two),
// prefetching the next step: an order of memory reads only, it does not change the arithmetic.
// (32 KiB: 16 cells of 8 kv heads at head size 64 in F16 or Q8_0, within a Zen 3's 32 KiB L1;
// the step sizes measured are in bench/README, "Decode attention at depth on AVX2".)
constexpr size_t kAttnStreamStepBytes = 32 << 10;

struct AttnTile {
  int t0 = 0, n_tok = 1;    // tokens
  int kvh0 = 0, n_kvh = 1;  // kv heads
  int h0 = 0, n_h = 1;      // query heads within each kv head's group
  int c_begin = 0;          // first column to scan: the first visible column of the first range
  int n_ranges = 1 << 30;   // ranges to compute (from c_begin), at most
  bool stream = false;      // K/V rows come from memory once (decode), not from cache
  int rows() const { return n_kvh * n_tok * n_h; }
};

// Floats per row of a range's softmax state: [acc[head_dim], m, l] padded to a multiple of 16
// (a whole number of cache lines: the accumulators stay aligned).
inline size_t attn_partial_row_floats(int head_dim) { return (size_t(head_dim) + 2 + 15) / 16 * 16; }

// The canonical combination of a row's ranges (attention.cpp, compiled once, so that the tile
// kernels of every target and the merge of split ranges run the same operations): folds the
// range state r ([acc, m, l], l == 0: the row saw none of the range's columns) into the running
// state (acc g, max *gm, sum *gl; *gl == 0: empty, g then need not be initialised). head_dim is
// a multiple of 8 (supports()).
void attn_fold(float* g, float* gm, double* gl, const float* r, int head_dim);
// acc *= 1 / l in place (all zeros when l == 0: the row saw no cell).
void attn_finish(float* acc, double l, int head_dim);
// The same with an attention sink: the softmax's sum also counts exp(sink - m) (m the row's running
// max, the frame of acc and l); a sink of -inf gives attn_finish's result bit for bit.
void attn_finish_sink(float* acc, float m, double l, float sink, int head_dim);

// Bytes of per-thread scratch a tile kernel needs (independent of n_kv).
size_t attn_tile_scratch_bytes(int head_dim);

// True when the SIMD tile kernels handle this K/V type pair and head size (the same on every
// target: F32/F16/Q8_0 K and V in any mix, head_dim % 8 == 0, and % 32 == 0 with Q8_0).
bool supports(TensorType k_type, TensorType v_type, int head_dim);
// Computes one tile with the best Highway target of the CPU (call only when simd_enabled() and
// supports()): up to tile.n_ranges ranges of the tile's visible columns from column tile.c_begin.
// part == nullptr: the ranges are folded in order and the rows' outputs written normalised into
// out ([n_tokens][n_head][head_dim]; all-hidden rows become 0, as in the reference). Otherwise
// range k's state of row rr goes to part + (k * tile.rows() + rr) * attn_partial_row_floats
// (ranges past the last visible column: l = 0) for attention.cpp to fold. q rows are read before
// any output is written. scratch: attn_tile_scratch_bytes.
void attention_tile(const AttentionParams& p, const float* q, float* out, const AttnTile& tile, float* part, void* scratch);

}  // namespace loom::ops::detail

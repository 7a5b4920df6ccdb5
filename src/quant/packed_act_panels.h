// Internal to src/quant: the batch layout of packed activations for the 32-column block types on
// AArch64 ("panels"), which quantize_packed_act_rows writes and packed_gemm reads (packed.h).
//
// The NEON prompt kernels multiply a register of weights by activations of 2 rows at once (SMMLA:
// 2 rows x 8 columns per operand) or of 4 and 8 rows (SDOT by element). Read from rows stored one
// after another, each such operand takes two loads and an address each (or a ZIP); stored
// interleaved, it is one load, and the scales and sums of 4 rows are one vector. So on AArch64 a
// batch of n rows of these types (activation formats kQ8_0Blocks, kQ8_1Blocks) is stored in
// panels, exactly along the runs the kernels take (packed_gemm_loop: runs of 4 rows, then one of 2,
// then one of 1):
//   rows [4k, 4k + 4) for k < n / 4: a panel of 4 rows at act + 4k · stride;
//   if n % 4 >= 2, rows n4, n4 + 1 (n4 = 4 · (n / 4)): a panel of 2 rows at act + n4 · stride;
//   if n is odd, the last row alone at act + (n - 1) · stride in the per-row format (PackedActBlock
//   after PackedActBlock, what quantize_packed_act writes).
// A panel of K (4 or 2) rows holds, per 32-column block b, at panel + 40 K b:
//   f32 d[K]      row j's d (PackedActBlock::d)
//   i32 sum[K]    row j's Σ q (or Q8_1's s as a float)
//   K / 2 pairs (rows 2p, 2p + 1) of 4 registers of 16 bytes: register m of pair p, at
//   8 K + 64 p + 16 m, holds row 2p's quants 8m..8m+7, then row 2p + 1's (SMMLA's 2 x 8 operand).
// Every row keeps exactly its own quantization (d, sums and quants as quantize_packed_act gives
// them), so a row's results still do not depend on the other rows (batch invariance); the layout
// only places them. A panel takes K · packed_act_row_bytes bytes, the batch n of them, as before.
// Elsewhere (x86-64, and every other activation format) a batch is its rows one after another.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "quant/packed_layout.h"
#include "quant/type_traits.h"

namespace loom::quant::detail {

#if defined(__aarch64__)
inline constexpr bool kActPanelsHere = true;
#else
inline constexpr bool kActPanelsHere = false;
#endif

// True where a batch of activations for weights t is stored in panels (above).
inline bool act_panels(TensorType t) {
  const PackedAct a = type_traits(t).packed.act;
  return kActPanelsHere && (a == PackedAct::kQ8_0Blocks || a == PackedAct::kQ8_1Blocks);
}

// Row i of a batch of n rows: the first row of its panel (i0) and the panel's rows (4, 2, or 1:
// the per-row format).
struct ActPanelOf {
  int i0, rows;
};
inline ActPanelOf act_panel_of(int n, int i) {
  const int n4 = n / 4 * 4;
  if (i < n4) return {i / 4 * 4, 4};
  if (n - n4 >= 2 && i < n4 + 2) return {n4, 2};
  return {i, 1};
}

// Byte offsets within block b's part of a panel of K rows (K = 1: the per-row PackedActBlock).
struct ActPanel {
  static constexpr size_t block(int K, int64_t b) { return 40 * size_t(K) * size_t(b); }
  static constexpr size_t d(int j) { return 4 * size_t(j); }
  static constexpr size_t sum(int K, int j) { return 4 * size_t(K) + 4 * size_t(j); }
  // The 8 quants 8m..8m+7 of row j.
  static constexpr size_t q8(int K, int j, int m) {
    return K == 1 ? 8 + 8 * size_t(m) : 8 * size_t(K) + 64 * size_t(j / 2) + 16 * size_t(m) + 8 * size_t(j % 2);
  }
};

// Block b of row j of a panel of K rows, to and from the per-row form.
inline void act_panel_put(uint8_t* panel, int K, int j, int64_t b, const PackedActBlock& blk) {
  uint8_t* p = panel + ActPanel::block(K, b);
  std::memcpy(p + ActPanel::d(j), &blk.d, 4);
  std::memcpy(p + ActPanel::sum(K, j), &blk.sum, 4);
  for (int m = 0; m < 4; ++m) std::memcpy(p + ActPanel::q8(K, j, m), blk.q + 8 * m, 8);
}
inline PackedActBlock act_panel_get(const uint8_t* panel, int K, int j, int64_t b) {
  const uint8_t* p = panel + ActPanel::block(K, b);
  PackedActBlock blk;
  std::memcpy(&blk.d, p + ActPanel::d(j), 4);
  std::memcpy(&blk.sum, p + ActPanel::sum(K, j), 4);
  for (int m = 0; m < 4; ++m) std::memcpy(blk.q + 8 * m, p + ActPanel::q8(K, j, m), 8);
  return blk;
}

// Copies row i of a batch of n panelled rows (act, stride) into the per-row format at dst (nb
// blocks).
inline void act_panel_row(const uint8_t* act, size_t stride, int n, int i, int64_t nb, uint8_t* dst) {
  const ActPanelOf at = act_panel_of(n, i);
  const uint8_t* panel = act + size_t(at.i0) * stride;
  for (int64_t b = 0; b < nb; ++b) {
    const PackedActBlock blk = act_panel_get(panel, at.rows, i - at.i0, b);
    std::memcpy(dst + size_t(b) * sizeof(blk), &blk, sizeof(blk));
  }
}

}  // namespace loom::quant::detail

// vec_dot_tile kernels (quant.h, type_traits.h VecDotTileFn) of the IQ1/IQ2/IQ3 formats
// (kernels_iq_tile.cpp) and of TQ1_0, TQ2_0, MXFP4, Q1_0, Q2_0 (kernels_small_tile.cpp).
//
// For the type table's AVX2 kernel set: each needs cpu_features().has_avx2_set() and computes
// every pair bit for bit as the vec_dot that set dispatches for the type (IQ: iq::avx512:: where
// has_avx512_vnni_set(), else iq::avx2::, both bit-identical with the reference; small types:
// small_simd::vec_dot_*_x86, which equals the reference only up to float rounding, so the tile
// reproduces that kernel's float steps lane for lane). Where the CPU has AVX-512 VNNI a weight
// row's blocks are decoded once (grid lookups, signs, trits, FP4 codes -> int8 levels, mask
// registers and integer scales) and reused for every activation row of the tile; without it, and
// for a single activation row (decode), the tile is the loop over the dispatched vec_dot.
// x86-64 builds only.
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::quant::detail::new_tile {

#define LOOM_NEW_TILE_DECL(t)                                                                                    \
  void vec_dot_tile_##t(int64_t n, const void* w, size_t w_stride, int n_rows_w, const void* a, size_t a_stride, \
                        int n_rows_a, float* out, size_t out_stride);
#if defined(__x86_64__)
LOOM_NEW_TILE_DECL(iq2_xxs)
LOOM_NEW_TILE_DECL(iq2_xs)
LOOM_NEW_TILE_DECL(iq2_s)
LOOM_NEW_TILE_DECL(iq3_xxs)
LOOM_NEW_TILE_DECL(iq3_s)
LOOM_NEW_TILE_DECL(iq1_s)
LOOM_NEW_TILE_DECL(iq1_m)
LOOM_NEW_TILE_DECL(tq1_0)
LOOM_NEW_TILE_DECL(tq2_0)
LOOM_NEW_TILE_DECL(mxfp4)
LOOM_NEW_TILE_DECL(q1_0)
LOOM_NEW_TILE_DECL(q2_0)
#endif
#undef LOOM_NEW_TILE_DECL

}  // namespace loom::quant::detail::new_tile

// Internal to src/quant: the SIMD kernel sets and shared failure reporting. quant.cpp dispatches,
// per call, to the first of these that has a kernel for the type:
//   x86-64: avx2 (int8 maddubs kernels)   AArch64: neon (SDOT kernels, CPUs with dotprod)
//   then highway (every architecture, best Highway target of the CPU)
//   then the scalar references in formats_ref.cpp / kquants_ref.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/tensor_type.h"

namespace loom::quant::detail {

// Reports a call with a type this build cannot handle or an n that is not a whole number of
// blocks, then aborts: both are programming errors (loading refuses unsupported types).
[[noreturn]] void fail(const char* fn, TensorType t, int64_t n);
// Elements per block of a supported type (1 for F32/F16/BF16, 256 for the k-quants, Q8_K and
// IQ4_XS, 32 otherwise); 0 when unsupported.
int64_t block_size_of(TensorType t);

// The register tiles of the vec_dot_tile kernels (AVX2, Highway, NEON): up to kTileA activation
// rows x kTileW weight rows per call, or one activation row x up to kTileW1 weight rows,
// fn(len, w, w_stride, a, a_stride, out, out_stride). Batch invariance: every kernel computes a
// pair's dot with the same operations whatever the tile shape, and that type's vec_dot is its
// 1 x 1 tile, so a matmul row's result does not depend on how many rows share the call.
constexpr int kTileA = 4, kTileW = 2, kTileW1 = 4;
using TileFn = void (*)(int64_t, const uint8_t*, size_t, const uint8_t*, size_t, float*, size_t);
// Covers an na x nw output with them: full tiles, then partial ones (fns[rows_a - 1][rows_w - 1],
// a single activation row through row_fns[rows_w - 1], whose several independent pairs hide the
// latency of each pair's accumulation chain); activation rows outermost so a group of them stays
// in L1 across the weight rows.
void run_register_tiles(const TileFn (&fns)[kTileA][kTileW], const TileFn (&row_fns)[kTileW1], int64_t len,
                        const uint8_t* w, size_t ws, int nw, const uint8_t* a, size_t as, int na, float* out,
                        size_t os);

// Kernels written once with Google Highway (kernels_hwy.cpp), dispatched at run time to the best
// target the CPU supports (or the one loom::for_each_hwy_target pins). Same contract as avx2::
// below: false when there is no kernel for t; arguments already validated. They do not consult
// simd_enabled(): callers do. Kernels for:
//   vec_dot: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, IQ4_NL, Q2_K..Q6_K, IQ4_XS, Q8_K
//   vec_dot_tile: F16, Q4_0, Q5_0, Q8_0, IQ4_NL (their vec_dot is the 1 x 1 tile)
//   quantize_row: Q8_0, Q8_1, Q8_K, F16, BF16 (byte-identical with the references)
//   dequantize_row: F16, BF16 and the 32-element block formats (bit-identical)
namespace highway {
bool dequantize_row(TensorType t, const void* src, float* dst, int64_t n);
bool quantize_row(TensorType t, const float* src, void* dst, int64_t n);
bool vec_dot(TensorType t, int64_t n, const void* w, const void* a, float* out);
bool vec_dot_tile(TensorType t, int64_t n, const void* w, size_t w_stride, int n_rows_w,
                  const void* a, size_t a_stride, int n_rows_a, float* out, size_t out_stride);
}  // namespace highway

#if defined(__aarch64__)
// ARMv8.2 dotprod (SDOT) kernels (kernels_neon.cpp); call only when
// cpu_features().neon_dotprod. Same contract as highway::.
namespace neon {
bool vec_dot(TensorType t, int64_t n, const void* w, const void* a, float* out);
bool vec_dot_tile(TensorType t, int64_t n, const void* w, size_t w_stride, int n_rows_w,
                  const void* a, size_t a_stride, int n_rows_a, float* out, size_t out_stride);
}  // namespace neon
#endif

#if defined(__x86_64__)
// AVX2 + FMA + F16C int8 kernels (kernels_avx2.cpp, kernels_avx2_k.cpp). Each returns false when
// it has no kernel for t, so the caller moves on to Highway's; arguments are already validated.
namespace avx2 {
bool dequantize_row(TensorType t, const void* src, float* dst, int64_t n);
bool quantize_row(TensorType t, const float* src, void* dst, int64_t n);
// nb blocks of 32 floats into the packed activation format (packed_layout.h), exactly as
// quant::quantize_packed_act's reference path.
void quantize_packed_act(const float* x, int64_t nb, uint8_t* dst);
bool vec_dot(TensorType t, int64_t n, const void* w, const void* a, float* out);
// See quant::vec_dot_tile; false when there is no tile kernel for t (Q4_0, Q5_0, Q8_0, IQ4_NL
// have one). No kernel here handles F32/F16/BF16: those are Highway's.
bool vec_dot_tile(TensorType t, int64_t n, const void* w, size_t w_stride, int n_rows_w,
                  const void* a, size_t a_stride, int n_rows_a, float* out, size_t out_stride);
// The super-block formats (kernels_avx2_k.cpp), called by the three above for the types they do
// not handle themselves; nb = number of 256-element super-blocks.
bool kq_dequantize_row(TensorType t, const void* src, float* dst, int64_t nb);
bool kq_quantize_row(TensorType t, const float* src, void* dst, int64_t nb);
bool kq_vec_dot(TensorType t, int64_t nb, const void* w, const void* a, float* out);
}  // namespace avx2
#endif

}  // namespace loom::quant::detail

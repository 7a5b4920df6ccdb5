// Internal to src/quant: the kernels of each type, one function per type and operation, and
// shared failure reporting. type_traits.cpp puts them in the table; quant.cpp dispatches, per
// call, to the first enabled kernel set that has a kernel for the type:
//   x86-64: avx2 (int8 maddubs kernels)   AArch64: neon (SDOT kernels, CPUs with dotprod)
//   then highway (every architecture, best Highway target of the CPU)
//   then the scalar references (detail::scalar: formats_ref.cpp / kquants_ref.cpp /
//   kquants_quantize.cpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/tensor_type.h"

namespace loom::quant::detail {

// Reports a call with a type this build cannot handle or an n that is not a whole number of
// blocks, then aborts: both are programming errors (loading refuses unsupported types).
[[noreturn]] void fail(const char* fn, TensorType t, int64_t n);

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
void run_register_tiles(const TileFn (&fns)[kTileA][kTileW], const TileFn (&row_fns)[kTileW1], int64_t len, const uint8_t* w,
                        size_t ws, int nw, const uint8_t* a, size_t as, int na, float* out, size_t os);

// ---- the kernels, one function per type and operation -------------------------------------
// Every function has the signature of its slot in TypeTraits (type_traits.h): n elements, a whole
// number of blocks (validated by quant.cpp), any alignment. type_traits.cpp names them in the
// table; nothing else needs to know which set has which type. The set-level functions
// (bool f(TensorType t, ...), false when the set has no kernel for t) look the type up in the
// table: tests call them to exercise one set directly.

// The scalar references (formats_ref.cpp, kquants_ref.cpp, kquants_quantize.cpp), byte- and
// bit-exact with ggml's reference code; the ground truth of every SIMD kernel.
namespace scalar {
#define LOOM_SCALAR_ROW(t)                                     \
  void dequantize_##t(const void* src, float* dst, int64_t n); \
  void quantize_##t(const float* src, void* dst, int64_t n);   \
  float vec_dot_##t(int64_t n, const void* w, const void* a);
LOOM_SCALAR_ROW(f32)
LOOM_SCALAR_ROW(f16)
LOOM_SCALAR_ROW(bf16)
LOOM_SCALAR_ROW(q4_0)
LOOM_SCALAR_ROW(q4_1)
LOOM_SCALAR_ROW(q5_0)
LOOM_SCALAR_ROW(q5_1)
LOOM_SCALAR_ROW(q8_0)
LOOM_SCALAR_ROW(q8_1)
LOOM_SCALAR_ROW(iq4_nl)
LOOM_SCALAR_ROW(q2_k)
LOOM_SCALAR_ROW(q3_k)
LOOM_SCALAR_ROW(q4_k)
LOOM_SCALAR_ROW(q5_k)
LOOM_SCALAR_ROW(q6_k)
LOOM_SCALAR_ROW(q8_k)
LOOM_SCALAR_ROW(iq4_xs)
#undef LOOM_SCALAR_ROW
}  // namespace scalar

// Kernels written once with Google Highway (kernels_hwy.cpp), dispatched at run time to the best
// target the CPU supports (or the one loom::for_each_hwy_target pins). They do not consult
// simd_enabled(): callers do.
//   vec_dot: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, IQ4_NL, Q2_K..Q6_K, IQ4_XS, Q8_K
//   vec_dot_tile: F16, Q4_0, Q5_0, Q8_0, IQ4_NL (their vec_dot is the 1 x 1 tile)
//   quantize_row: Q8_0, Q8_1, Q8_K, F16, BF16 (byte-identical with the references)
//   dequantize_row: F16, BF16 and the 32-element block formats (bit-identical)
namespace highway {
// Every Highway kernel: DEQUANT(t, Impl), QUANT(t, Impl), DOT(t, Impl), TILE(t, Impl), where
// Impl is the per-target function in kernels_hwy.cpp that highway::<op>_<t> dispatches to.
// The list as written (clang-format-14 does not reach a fixed point on it).
// clang-format off
#define LOOM_HWY_KERNELS(DEQUANT, QUANT, DOT, TILE)                                              \
  DEQUANT(f16, DequantF16) DEQUANT(bf16, DequantBF16) DEQUANT(q4_0, DequantQ4_0)                \
  DEQUANT(q4_1, DequantQ4_1) DEQUANT(q5_0, DequantQ5_0) DEQUANT(q5_1, DequantQ5_1)              \
  DEQUANT(q8_0, DequantQ8_0) DEQUANT(q8_1, DequantQ8_1) DEQUANT(iq4_nl, DequantIQ4_NL)          \
  QUANT(f16, QuantizeF16) QUANT(bf16, QuantizeBF16) QUANT(q8_0, QuantizeQ8_0)                   \
  QUANT(q8_1, QuantizeQ8_1) QUANT(q8_k, QuantizeQ8_K)                                           \
  DOT(f32, DotF32) DOT(f16, DotF16) DOT(bf16, DotBF16) DOT(q4_0, DotQ4_0) DOT(q4_1, DotQ4_1)    \
  DOT(q5_0, DotQ5_0) DOT(q5_1, DotQ5_1) DOT(q8_0, DotQ8_0) DOT(q8_1, DotQ8_1)                   \
  DOT(iq4_nl, DotIQ4_NL) DOT(q2_k, DotQ2_K) DOT(q3_k, DotQ3_K) DOT(q4_k, DotQ4_K)               \
  DOT(q5_k, DotQ5_K) DOT(q6_k, DotQ6_K) DOT(q8_k, DotQ8_K) DOT(iq4_xs, DotIQ4_XS)               \
  TILE(f16, RowsTileF16) TILE(q4_0, RowsTileQ4_0) TILE(q5_0, RowsTileQ5_0)                      \
  TILE(q8_0, RowsTileQ8_0) TILE(iq4_nl, RowsTileIQ4_NL)
// clang-format on
#define LOOM_HWY_DECLARE_DEQUANT(t, Impl) void dequantize_##t(const void* src, float* dst, int64_t n);
#define LOOM_HWY_DECLARE_QUANT(t, Impl) void quantize_##t(const float* src, void* dst, int64_t n);
#define LOOM_HWY_DECLARE_DOT(t, Impl) float vec_dot_##t(int64_t n, const void* w, const void* a);
#define LOOM_HWY_DECLARE_TILE(t, Impl)                                                                           \
  void vec_dot_tile_##t(int64_t n, const void* w, size_t w_stride, int n_rows_w, const void* a, size_t a_stride, \
                        int n_rows_a, float* out, size_t out_stride);
LOOM_HWY_KERNELS(LOOM_HWY_DECLARE_DEQUANT, LOOM_HWY_DECLARE_QUANT, LOOM_HWY_DECLARE_DOT, LOOM_HWY_DECLARE_TILE)
#undef LOOM_HWY_DECLARE_DEQUANT
#undef LOOM_HWY_DECLARE_QUANT
#undef LOOM_HWY_DECLARE_DOT
#undef LOOM_HWY_DECLARE_TILE

// dst = src rounded through t (F16 or BF16) and widened back, in one pass: the bits of
// quantize_row(t) then dequantize_row(t).
void round_row_half(TensorType t, const float* src, float* dst, int64_t n);

bool dequantize_row(TensorType t, const void* src, float* dst, int64_t n);
bool quantize_row(TensorType t, const float* src, void* dst, int64_t n);
bool vec_dot(TensorType t, int64_t n, const void* w, const void* a, float* out);
bool vec_dot_tile(TensorType t, int64_t n, const void* w, size_t w_stride, int n_rows_w, const void* a, size_t a_stride,
                  int n_rows_a, float* out, size_t out_stride);
}  // namespace highway

#if defined(__aarch64__)
// ARMv8.2 dotprod (SDOT) kernels (kernels_neon.cpp); call only when cpu_features().neon_dotprod.
namespace neon {
float vec_dot_q4_0(int64_t n, const void* w, const void* a);
float vec_dot_q5_0(int64_t n, const void* w, const void* a);
float vec_dot_q8_0(int64_t n, const void* w, const void* a);
float vec_dot_iq4_nl(int64_t n, const void* w, const void* a);
float vec_dot_q4_k(int64_t n, const void* w, const void* a);
float vec_dot_q6_k(int64_t n, const void* w, const void* a);
#define LOOM_NEON_TILE(t)                                                                                        \
  void vec_dot_tile_##t(int64_t n, const void* w, size_t w_stride, int n_rows_w, const void* a, size_t a_stride, \
                        int n_rows_a, float* out, size_t out_stride);
LOOM_NEON_TILE(q4_0)
LOOM_NEON_TILE(q5_0)
LOOM_NEON_TILE(q8_0)
LOOM_NEON_TILE(iq4_nl)
#undef LOOM_NEON_TILE

bool vec_dot(TensorType t, int64_t n, const void* w, const void* a, float* out);
bool vec_dot_tile(TensorType t, int64_t n, const void* w, size_t w_stride, int n_rows_w, const void* a, size_t a_stride,
                  int n_rows_a, float* out, size_t out_stride);
}  // namespace neon
#endif

#if defined(__x86_64__)
// AVX2 + FMA + F16C int8 kernels (kernels_avx2.cpp: the 32-element blocks; kernels_avx2_k.cpp:
// the super-block formats); call only when cpu_features().has_avx2_set(). No kernel here handles
// F32/F16/BF16: those are Highway's.
namespace avx2 {
#define LOOM_AVX2_DEQUANT_DOT(t)                               \
  void dequantize_##t(const void* src, float* dst, int64_t n); \
  float vec_dot_##t(int64_t n, const void* w, const void* a);
LOOM_AVX2_DEQUANT_DOT(q4_0)
LOOM_AVX2_DEQUANT_DOT(q4_1)
LOOM_AVX2_DEQUANT_DOT(q5_0)
LOOM_AVX2_DEQUANT_DOT(q5_1)
LOOM_AVX2_DEQUANT_DOT(q8_0)
LOOM_AVX2_DEQUANT_DOT(q8_1)
LOOM_AVX2_DEQUANT_DOT(iq4_nl)
LOOM_AVX2_DEQUANT_DOT(q2_k)
LOOM_AVX2_DEQUANT_DOT(q3_k)
LOOM_AVX2_DEQUANT_DOT(q4_k)
LOOM_AVX2_DEQUANT_DOT(q5_k)
LOOM_AVX2_DEQUANT_DOT(q6_k)
LOOM_AVX2_DEQUANT_DOT(q8_k)
LOOM_AVX2_DEQUANT_DOT(iq4_xs)
#undef LOOM_AVX2_DEQUANT_DOT
void quantize_q8_0(const float* src, void* dst, int64_t n);
void quantize_q8_1(const float* src, void* dst, int64_t n);
void quantize_q8_k(const float* src, void* dst, int64_t n);
#define LOOM_AVX2_TILE(t)                                                                                        \
  void vec_dot_tile_##t(int64_t n, const void* w, size_t w_stride, int n_rows_w, const void* a, size_t a_stride, \
                        int n_rows_a, float* out, size_t out_stride);
LOOM_AVX2_TILE(q4_0)
LOOM_AVX2_TILE(q5_0)
LOOM_AVX2_TILE(q8_0)
LOOM_AVX2_TILE(iq4_nl)
#undef LOOM_AVX2_TILE
// nb blocks of 32 floats into the packed activation format (packed_layout.h), exactly as
// quant::quantize_packed_act's reference path.
void quantize_packed_act(const float* x, int64_t nb, uint8_t* dst);

bool dequantize_row(TensorType t, const void* src, float* dst, int64_t n);
bool quantize_row(TensorType t, const float* src, void* dst, int64_t n);
bool vec_dot(TensorType t, int64_t n, const void* w, const void* a, float* out);
bool vec_dot_tile(TensorType t, int64_t n, const void* w, size_t w_stride, int n_rows_w, const void* a, size_t a_stride,
                  int n_rows_a, float* out, size_t out_stride);
}  // namespace avx2
#endif

}  // namespace loom::quant::detail

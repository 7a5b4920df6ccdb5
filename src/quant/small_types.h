// Internal to src/quant: the ternary, 1-bit, 2-bit and FP4 block formats TQ1_0, TQ2_0, MXFP4,
// Q1_0 and Q2_0 — block layouts byte-exact with GGUF/ggml, scalar references (loom::quant::ref)
// and their SIMD kernels (loom::quant::detail::small_simd).
//
// Each format, element e of a block (all multi-byte fields little-endian):
//   Q1_0  {f16 d; u8 qs[16]}              128 elements. bit b = (qs[e / 8] >> (e % 8)) & 1;
//                                          x = b ? d : -d.
//   Q2_0  {f16 d; u8 qs[16]}              64 elements. q = (qs[e / 4] >> 2 (e % 4)) & 3;
//                                          x = (q - 1) d (levels -1, 0, 1, 2).
//   TQ2_0 {u8 qs[64]; f16 d}              256 elements. e = 128 h + 32 l + m (h < 2, l < 4,
//                                          m < 32): q = (qs[32 h + m] >> 2 l) & 3; x = (q - 1) d.
//   TQ1_0 {u8 qs[48]; u8 qh[4]; f16 d}    256 elements, ternary digits (trits t in 0..2,
//                                          x = (t - 1) d) packed five per byte as the byte
//                                          ceil(v * 256 / 243) of their base-3 number v (first
//                                          trit most significant); trit k of byte B is
//                                          ((uint8_t)(B * 3^k) * 3) >> 8. Elements 0..159: trit
//                                          e / 32 of qs[e % 32]; 160..239 (f = e - 160): trit
//                                          f / 16 of qs[32 + f % 16]; 240..255 (g = e - 240):
//                                          trit g / 4 of qh[g % 4] (four trits, a fifth 0).
//   MXFP4 {u8 e; u8 qs[16]}               32 elements, nibble order of Q4_0 (element j < 16 the
//                                          low nibble of qs[j], j + 16 the high one). The nibble
//                                          is an E2M1 code (sign bit 3, exponent bits 2-1,
//                                          mantissa bit 0) whose value doubled is kMxfp4Values;
//                                          e is an E8M0 exponent: x = kMxfp4Values[nibble] *
//                                          2^(e - 128) (the halving folded into the scale).
//
// Dot products pair with the activation formats of llama.cpp's CPU backend (ggml-cpu's type
// traits): Q8_K for TQ1_0 and TQ2_0, Q8_0 for MXFP4, Q1_0 and Q2_0.
#pragma once

#include <cstddef>
#include <cstdint>

namespace loom::quant {

namespace detail {

struct BlockQ1_0 {
  uint16_t d;
  uint8_t qs[16];
};
struct BlockQ2_0 {
  uint16_t d;
  uint8_t qs[16];
};
struct BlockTQ1_0 {
  uint8_t qs[48];
  uint8_t qh[4];
  uint16_t d;
};
struct BlockTQ2_0 {
  uint8_t qs[64];
  uint16_t d;
};
struct BlockMXFP4 {
  uint8_t e;
  uint8_t qs[16];
};

static_assert(sizeof(BlockQ1_0) == 18);
static_assert(sizeof(BlockQ2_0) == 18);
static_assert(sizeof(BlockTQ1_0) == 54);
static_assert(sizeof(BlockTQ2_0) == 66);
static_assert(sizeof(BlockMXFP4) == 17);

constexpr int kQ1_0Block = 128;
constexpr int kQ2_0Block = 64;
constexpr int kTQBlock = 256;
constexpr int kMxfp4Block = 32;

// Twice the E2M1 value of each 4-bit code: 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives.
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128) as a float (half the E8M0 value 2^(e - 127)): e = 0 and 1 are the subnormals 2^-128
// and 2^-127, e = 255 is 2^127 (E8M0's NaN code is not special-cased, as ggml).
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? (0x00200000u << e) : uint32_t(e - 1) << 23;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

// The x86 AVX-512 dots of MXFP4 and Q1_0 (and so their tiles, which must equal them bit for
// bit) sum each 32-element unit (an MXFP4 block; a quarter of a Q1_0 block: one Q8_0 activation
// block) exactly in int32, then accumulate float(isum_u) * s_u (s_u = d_a(u) * d_w(u), one
// float product; fused multiply-add) in 16 float slots: unit u goes to slot l with
// kUnitSlotOf16[l] == u % 16, the slots' units in increasing order; the result is the slots'
// sum in the fixed tree unit_tree_sum below. kUnitSlotOf16 is the order in which the dot's
// transpose-add of eight 2-unit VPDPBUSD registers leaves the unit sums.
inline constexpr int kUnitSlotOf16[16] = {0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15};
// ((s[l] + s[l + 8]) + (s[l + 4] + s[l + 12])) for l < 4, then those four in pairs (0 + 2),
// (1 + 3), then the two: the steps of GCC's and Clang's _mm512_reduce_add_ps.
inline float unit_tree_sum(const float* s) {
  float t8[8], t4[4];
  for (int l = 0; l < 8; ++l) t8[l] = s[l] + s[l + 8];
  for (int l = 0; l < 4; ++l) t4[l] = t8[l] + t8[l + 4];
  return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}

// Trit k (0 = most significant) of a TQ1_0 byte.
inline int tq1_trit(uint8_t byte, int k) {
  static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  const uint8_t q = uint8_t(byte * kPow3[k]);
  return (int(q) * 3) >> 8;
}

}  // namespace detail

namespace ref {
// Scalar references: dequantize bit-exact with ggml's to_float, quantize byte-identical with
// ggml's quantize_row_*_ref (on x86-64: float-to-integer conversions of out-of-range values behave
// as x86's cvtt instructions, which ggml's C code leaves to the hardware), vec_dot computing what
// ggml's scalar ggml_vec_dot_*_generic computes (same integer sums and float steps in the same
// order). n is a multiple of the block size (checked: abort otherwise); any alignment.
// Activations a: Q8_K rows for TQ1_0/TQ2_0, Q8_0 rows for MXFP4/Q1_0/Q2_0.
void dequantize_row_tq1_0(const void* src, float* dst, int64_t n);
void dequantize_row_tq2_0(const void* src, float* dst, int64_t n);
void dequantize_row_mxfp4(const void* src, float* dst, int64_t n);
void dequantize_row_q1_0(const void* src, float* dst, int64_t n);
void dequantize_row_q2_0(const void* src, float* dst, int64_t n);

void quantize_row_tq1_0(const float* src, void* dst, int64_t n);
void quantize_row_tq2_0(const float* src, void* dst, int64_t n);
void quantize_row_mxfp4(const float* src, void* dst, int64_t n);
void quantize_row_q1_0(const float* src, void* dst, int64_t n);
void quantize_row_q2_0(const float* src, void* dst, int64_t n);

float vec_dot_tq1_0(int64_t n, const void* w, const void* a);  // a: Q8_K
float vec_dot_tq2_0(int64_t n, const void* w, const void* a);  // a: Q8_K
float vec_dot_mxfp4(int64_t n, const void* w, const void* a);  // a: Q8_0
float vec_dot_q1_0(int64_t n, const void* w, const void* a);   // a: Q8_0
float vec_dot_q2_0(int64_t n, const void* w, const void* a);   // a: Q8_0
}  // namespace ref

namespace detail::small_simd {
// x86-64 kernels. The *_avx2 functions (kernels_small_avx2.cpp) need
// cpu_features().has_avx2_set(), the *_avx512 ones (kernels_small_avx512.cpp)
// cpu_features().has_avx512_vnni_set() (AVX-512 F/BW/VL + VNNI). Same signatures and contracts
// as the references: dequantize bit-identical, vec_dot equal up to float rounding (the same
// integer sums, accumulated in another order).
#if defined(__x86_64__)
float vec_dot_tq1_0_avx2(int64_t n, const void* w, const void* a);
float vec_dot_tq2_0_avx2(int64_t n, const void* w, const void* a);
float vec_dot_mxfp4_avx2(int64_t n, const void* w, const void* a);
float vec_dot_q1_0_avx2(int64_t n, const void* w, const void* a);
float vec_dot_q2_0_avx2(int64_t n, const void* w, const void* a);
void dequantize_row_tq1_0_avx2(const void* src, float* dst, int64_t n);
void dequantize_row_tq2_0_avx2(const void* src, float* dst, int64_t n);
void dequantize_row_mxfp4_avx2(const void* src, float* dst, int64_t n);
void dequantize_row_q1_0_avx2(const void* src, float* dst, int64_t n);
void dequantize_row_q2_0_avx2(const void* src, float* dst, int64_t n);

float vec_dot_tq1_0_avx512(int64_t n, const void* w, const void* a);
float vec_dot_tq2_0_avx512(int64_t n, const void* w, const void* a);
float vec_dot_mxfp4_avx512(int64_t n, const void* w, const void* a);
float vec_dot_q1_0_avx512(int64_t n, const void* w, const void* a);
float vec_dot_q2_0_avx512(int64_t n, const void* w, const void* a);

// The vec_dot of n_rows_w weight rows (w_stride bytes apart) with one activation row, out[j]
// bit-identical with the vec_dot_*_avx512 of row j (the activation side prepared once).
void vec_dots_mxfp4_avx512(int64_t n, const void* w, size_t w_stride, int n_rows_w, const void* a, float* out);
void vec_dots_q1_0_avx512(int64_t n, const void* w, size_t w_stride, int n_rows_w, const void* a, float* out);

// The fastest of the above this CPU runs (needs has_avx2_set(), like the *_avx2 functions; the
// AVX-512 kernel where has_avx512_vnni_set()). For the type table's AVX2 kernel set.
// Dequantization is AVX2 only.
float vec_dot_tq1_0_x86(int64_t n, const void* w, const void* a);
float vec_dot_tq2_0_x86(int64_t n, const void* w, const void* a);
float vec_dot_mxfp4_x86(int64_t n, const void* w, const void* a);
float vec_dot_q1_0_x86(int64_t n, const void* w, const void* a);
float vec_dot_q2_0_x86(int64_t n, const void* w, const void* a);
#endif
}  // namespace detail::small_simd

}  // namespace loom::quant

// The IQ1/IQ2/IQ3 weight formats of GGUF (llama.cpp's "i-quants" on lattice grids): block layouts
// and scalar references of dequantization and of the dot product with Q8_K activations.
//
// Every type has 256-element super-blocks; n (elements) must be a multiple of 256, rows may start
// at any byte address. The references compute what ggml's reference to_float and its generic
// (scalar) vec_dot compute: the same integer sums, the same float operations in the same order
// (loom_quant is built with -ffp-contract=off). vec_dot's activations are Q8_K blocks
// (quant::quantize_row(TensorType::Q8_K, ...)); for IQ1_S the dot uses their bsums, as ggml does.
//
// Element order: a super-block is 8 sub-blocks of 32 (ib), each 4 groups of 8 (l); element
// 32 ib + 8 l + j is element j of group l's grid entry (for the IQ3 types, whose entries hold 4
// levels, groups are two entries: elements 0-3 and 4-7). Per type (d = the f16 block scale):
//   IQ2_XXS {f16 d; u16 qs[32]}   per ib: bytes 8ib..8ib+3 of qs are the 4 grid indices (kIq2xxsGrid);
//       the next 4 bytes as u32 v: 7 sign bits of group l at bit 7l (kSignsIq2xs), scale s = v >> 28.
//       x = d * (0.5 + s) / 4 * level
//   IQ2_XS {f16 d; u16 qs[32]; u8 scales[8]}   qs[4ib + l]: bits 0-8 grid index (kIq2xsGrid),
//       bits 9-15 the 7 sign bits; s = low nibble of scales[ib] for groups 0-1, high for 2-3.
//       x = d * (0.5 + s) / 4 * level
//   IQ2_S {f16 d; u8 qs[64]; u8 qh[8]; u8 scales[8]}   grid index (kIq2sGrid) of group l of ib =
//       qs[4ib + l] | bits 2l..2l+1 of qh[ib] << 8; its 8 sign bits are qs[32 + 4ib + l]; s as IQ2_XS.
//   IQ3_XXS {f16 d; u8 qs[96]}   qs[8ib + 2l], qs[8ib + 2l + 1]: grid indices (kIq3xxsGrid) of
//       elements 0-3 and 4-7 of group l; bytes 64 + 4ib.. as u32 v: signs and s as IQ2_XXS.
//       x = d * (0.5 + s) / 2 * level
//   IQ3_S {f16 d; u8 qs[64]; u8 qh[8]; u8 signs[32]; u8 scales[4]}   grid indices (kIq3sGrid)
//       qs[8ib + k] | bit k of qh[ib] << 8 (k < 8: group k / 2, half k % 2); signs[4ib + l] the 8
//       sign bits of group l; s = nibble ib % 2 of scales[ib / 2].  x = d * (1 + 2 s) * level
//   IQ1_S {f16 d; u8 qs[32]; u16 qh[8]}   grid index (kIq1sGrid) qs[4ib + l] | bits 3l..3l+2 of
//       qh[ib] << 8; s = bits 12-14 of qh[ib], bit 15 the delta sign of the whole sub-block.
//       x = d * (2 s + 1) * (level + delta), delta = -+kIq1sDelta
//   IQ1_M {u8 qs[32]; u8 qh[16]; u8 scales[8]}   grid index qs[4ib + l] | bits 0-2 (l even) or
//       4-6 (l odd) of qh[2ib + l / 2] << 8, delta sign bit 3 / bit 7 of the same byte (per
//       group); scales as u16 sc[4]: s of groups 0-1 of ib = bits 6(ib%2)..+2 of sc[ib/2], groups
//       2-3 the next 3 bits; d = the f16 made of the top nibbles of sc[0..3] (sc[0] lowest).
//       x = d * (2 s + 1) * (level + delta), delta = -+kIq1mDelta
// Dot products: per sub-block (IQ2_XS/IQ2_S/IQ1_M: per 16 elements) an exact integer sum of
// level * activation times the odd integer 2 s + 1, summed per block; then per block
// sum += (d * d_a) * block_sum, and the row's result is sum * 1/8 (IQ2), * 1/4 (IQ3_XXS),
// * 1 (IQ3_S). IQ1: sum += d * d_a * (isum + delta * isum_delta) with isum_delta the
// activations' sums times the signs of delta and the scales.
#pragma once

#include <cstdint>

namespace loom::quant::iq {

constexpr int kSuperIq = 256;

struct BlockIQ2_XXS {
  uint16_t d;
  uint16_t qs[32];
};
struct BlockIQ2_XS {
  uint16_t d;
  uint16_t qs[32];
  uint8_t scales[8];
};
struct BlockIQ2_S {
  uint16_t d;
  uint8_t qs[64];
  uint8_t qh[8];
  uint8_t scales[8];
};
struct BlockIQ3_XXS {
  uint16_t d;
  uint8_t qs[96];
};
struct BlockIQ3_S {
  uint16_t d;
  uint8_t qs[64];
  uint8_t qh[8];
  uint8_t signs[32];
  uint8_t scales[4];
};
struct BlockIQ1_S {
  uint16_t d;
  uint8_t qs[32];
  uint16_t qh[8];
};
struct BlockIQ1_M {
  uint8_t qs[32];
  uint8_t qh[16];
  uint8_t scales[8];
};

// GGUF block sizes (bytes per 256 elements); the structs have no padding.
static_assert(sizeof(BlockIQ2_XXS) == 66);
static_assert(sizeof(BlockIQ2_XS) == 74);
static_assert(sizeof(BlockIQ2_S) == 82);
static_assert(sizeof(BlockIQ3_XXS) == 98);
static_assert(sizeof(BlockIQ3_S) == 110);
static_assert(sizeof(BlockIQ1_S) == 50);
static_assert(sizeof(BlockIQ1_M) == 56);

// The f16 block scale of IQ1_M (it has no d field): the top nibbles of its four u16 scale words.
inline uint16_t iq1m_d_bits(const uint8_t* scales) {
  const auto w = [&](int k) { return uint16_t(scales[2 * k] | scales[2 * k + 1] << 8); };
  return uint16_t((w(0) >> 12) | ((w(1) >> 8) & 0x00f0) | ((w(2) >> 4) & 0x0f00) | (w(3) & 0xf000));
}

}  // namespace loom::quant::iq

namespace loom::quant::ref {

// dst[0..n) = the n elements of the blocks at src. n % 256 == 0.
void dequantize_row_iq2_xxs(const void* src, float* dst, int64_t n);
void dequantize_row_iq2_xs(const void* src, float* dst, int64_t n);
void dequantize_row_iq2_s(const void* src, float* dst, int64_t n);
void dequantize_row_iq3_xxs(const void* src, float* dst, int64_t n);
void dequantize_row_iq3_s(const void* src, float* dst, int64_t n);
void dequantize_row_iq1_s(const void* src, float* dst, int64_t n);
void dequantize_row_iq1_m(const void* src, float* dst, int64_t n);

// sum_i w[i] * a[i] over n elements: w in the named type, a in Q8_K. n % 256 == 0.
float vec_dot_iq2_xxs_q8_k(int64_t n, const void* w, const void* a);
float vec_dot_iq2_xs_q8_k(int64_t n, const void* w, const void* a);
float vec_dot_iq2_s_q8_k(int64_t n, const void* w, const void* a);
float vec_dot_iq3_xxs_q8_k(int64_t n, const void* w, const void* a);
float vec_dot_iq3_s_q8_k(int64_t n, const void* w, const void* a);
float vec_dot_iq1_s_q8_k(int64_t n, const void* w, const void* a);
float vec_dot_iq1_m_q8_k(int64_t n, const void* w, const void* a);

}  // namespace loom::quant::ref

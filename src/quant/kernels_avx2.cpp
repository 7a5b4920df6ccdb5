// AVX2 + FMA + F16C kernels. Every function carries the target attribute instead of the file
// being compiled with -mavx2, so the rest of the binary stays runnable on older x86 CPUs;
// quant.cpp only calls in here when cpu_features().has_avx2_set().
//
// Exactness contract with the references (formats_ref.cpp), checked by tests/quant:
//  - dequantize_row: bit-identical (same float multiply, then add; never fused).
//  - quantize_row: byte-identical, including roundf's half-away-from-zero rounding.
//  - vec_dot: same integer block dots, but float accumulation order differs (8 lanes, FMA), so
//    results agree to rounding only.
//  - vec_dot_tile (Q4_0, Q5_0, Q8_0, IQ4_NL): vec_dot of these types is the 1 x 1 tile, so every
//    tile shape gives each pair the bits vec_dot gives it (batch invariance).
// All loads and stores are unaligned (loadu/storeu/memcpy). Block layouts: see blocks.h. The
// super-block formats (Q2_K..Q6_K, Q8_K, IQ4_XS) are in kernels_avx2_k.cpp. The float formats
// (F32, F16, BF16 dots and conversions) have no kernels here: Highway's (kernels_hwy.cpp) are as
// fast on AVX2 and use AVX-512 where the CPU has it.
#if defined(__x86_64__)

#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "quant/avx2_util.h"
#include "quant/blocks.h"
#include "quant/kernels.h"

namespace loom::quant::detail::avx2 {
namespace {

// Decoded weight levels of one block, as signed (x_sym) or unsigned (x_min) bytes.
LOOM_AVX2 inline __m256i levels_q4_0(const uint8_t* blk) {
  return _mm256_sub_epi8(unpack_nibbles(blk + 2), _mm256_set1_epi8(8));
}
LOOM_AVX2 inline __m256i levels_q4_1(const uint8_t* blk) { return unpack_nibbles(blk + 4); }
// IQ4_NL: the nibbles index the 16 int8 levels (one table per 128-bit lane for the byte shuffle).
LOOM_AVX2 inline __m256i levels_iq4_nl(const uint8_t* blk) {
  const __m128i table = loadu128(kIq4nlValues);
  return _mm256_shuffle_epi8(_mm256_set_m128i(table, table), unpack_nibbles(blk + 2));
}
LOOM_AVX2 inline __m256i levels_q5_0(const uint8_t* blk) {
  // (nibble | hi << 4) - 16: equals the nibble where hi is set, nibble - 16 (= nibble | 0xf0 as
  // int8) where it is not.
  const __m256i hi = expand_bits(blk + 2);
  return _mm256_or_si256(unpack_nibbles(blk + 6), _mm256_andnot_si256(hi, _mm256_set1_epi8(-16)));
}
LOOM_AVX2 inline __m256i levels_q5_1(const uint8_t* blk) {
  const __m256i hi = expand_bits(blk + 4);
  return _mm256_or_si256(unpack_nibbles(blk + 8), _mm256_and_si256(hi, _mm256_set1_epi8(0x10)));
}

// Eight partial sums (as floats) of x[i] * y[i] over 32 int8 pairs (x: weights, y: activations).
// maddubs multiplies unsigned by signed bytes, so x's sign is moved onto y first: |x| as u8 is
// right even for x = -128, but y must not be -128 where x < 0 (negation would overflow). Q8
// activations from the quantizers are within [-127, 127], so pair sums stay within
// 2 * 128 * 127 and the int16 saturation of maddubs never triggers.
LOOM_AVX2 inline __m256 dot_i8(__m256i x, __m256i y) {
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}
// Same for unsigned x in 0..31 (no sign transfer needed).
LOOM_AVX2 inline __m256 dot_u8(__m256i ux, __m256i y) {
  const __m256i p16 = _mm256_maddubs_epi16(ux, y);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

// ---- dot products -------------------------------------------------------------------------

// Symmetric weights (Q4_0/Q5_0/Q8_0 against Q8_0, Q8_1 against Q8_1): per block
// acc += (d_w * d_a) * isum, with isum kept in 8 float lanes.
template <int kWBytes, int kABytes, __m256i (*Levels)(const uint8_t*)>
LOOM_AVX2 float dot_sym(int64_t nb, const uint8_t* w, const uint8_t* a) {
  // The activation's int8 values start after its header (d, or d and s).
  constexpr int kAOff = kABytes - 32;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 1 < nb; i += 2) {  // two independent chains hide the FMA latency
    const uint8_t* w0 = w + i * kWBytes;
    const uint8_t* a0 = a + i * kABytes;
    const uint8_t* w1 = w0 + kWBytes;
    const uint8_t* a1 = a0 + kABytes;
    const __m256 p0 = dot_i8(Levels(w0), loadu256(a0 + kAOff));
    const __m256 p1 = dot_i8(Levels(w1), loadu256(a1 + kAOff));
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(w0) * f16(a0)), p0, acc0);
    acc1 = _mm256_fmadd_ps(_mm256_set1_ps(f16(w1) * f16(a1)), p1, acc1);
  }
  for (; i < nb; ++i) {
    const uint8_t* w0 = w + i * kWBytes;
    const uint8_t* a0 = a + i * kABytes;
    const __m256 p0 = dot_i8(Levels(w0), loadu256(a0 + kAOff));
    acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f16(w0) * f16(a0)), p0, acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

LOOM_AVX2 inline __m256i levels_q8_0(const uint8_t* blk) { return loadu256(blk + 2); }
LOOM_AVX2 inline __m256i levels_q8_1(const uint8_t* blk) { return loadu256(blk + 4); }

// Weights with a minimum (Q4_1/Q5_1) against Q8_1: acc += (d_w d_a) isum, plus m_w * s_a.
template <int kWBytes, __m256i (*Levels)(const uint8_t*)>
LOOM_AVX2 float dot_min(int64_t nb, const uint8_t* w, const uint8_t* a) {
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* wb = w + i * kWBytes;
    const uint8_t* ab = a + i * int64_t(sizeof(BlockQ8_1));
    const __m256 p = dot_u8(Levels(wb), loadu256(ab + 4));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(wb) * f16(ab)), p, acc);
    mins += f16(wb + 2) * f16(ab + 2);
  }
  return hsum(acc) + mins;
}

// ---- tiles of dot products (matrix x matrix) -----------------------------------------------

// Horizontal sums of a tile's accumulators into out[i * os + j], each with the same hsum tree
// (so a pair's result does not depend on the tile shape it was computed in).
template <int RN, int RM>
LOOM_AVX2 inline void store_tile(const __m256 (&acc)[RN][RM], float* out, size_t os) {
  for (int i = 0; i < RN; ++i)
    for (int j = 0; j < RM; ++j) out[size_t(i) * os + size_t(j)] = hsum(acc[i][j]);
}

// The f16 at p, converted and broadcast to 8 lanes.
LOOM_AVX2 inline __m256 f16x8(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _mm256_cvtph_ps(_mm_set1_epi16(short(h)));
}

// RN activation rows x RM weight rows, one accumulator per pair (RN * RM <= 8 leaves registers
// for the weight levels): each weight block is decoded once and each activation block loaded
// once per tile instead of once per pair. Per pair: acc += (d_w * d_a) * isum per block, fused,
// blocks in order in one chain, then hsum. This is *the* dot of these types: vec_dot is the 1 x 1
// tile, so every pair's result is bit-identical whatever tile computes it (batch invariance);
// the latency of the chain is hidden by the other pairs of the tile (1 x 4 for one activation
// row).
template <int kWBytes, __m256i (*Levels)(const uint8_t*), int RN, int RM>
LOOM_AVX2 void tile_sym(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t os) {
  constexpr int kAB = sizeof(BlockQ8_0);
  __m256 acc[RN][RM];
  for (int i = 0; i < RN; ++i)
    for (int j = 0; j < RM; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i x[RM], ax[RM];
    __m256 dw[RM];
    for (int j = 0; j < RM; ++j) {
      const uint8_t* wb = w + size_t(j) * ws + b * kWBytes;
      x[j] = Levels(wb);
      ax[j] = _mm256_sign_epi8(x[j], x[j]);
      dw[j] = f16x8(wb);
    }
    for (int i = 0; i < RN; ++i) {
      const uint8_t* ab = a + size_t(i) * as + b * kAB;
      const __m256i y = loadu256(ab + 2);
      const __m256 da = f16x8(ab);
      for (int j = 0; j < RM; ++j) {
        const __m256i p16 = _mm256_maddubs_epi16(ax[j], _mm256_sign_epi8(y, x[j]));
        const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
        acc[i][j] = _mm256_fmadd_ps(_mm256_mul_ps(dw[j], da), p, acc[i][j]);
      }
    }
  }
  store_tile<RN, RM>(acc, out, os);
}

// A tile kernel K<rows of a, rows of w> over any number of rows (kernels.h: run_register_tiles).
template <template <int, int> class K>
LOOM_AVX2 void tile_loop(int64_t len, const uint8_t* w, size_t ws, int nw, const uint8_t* a, size_t as, int na, float* out,
                         size_t os) {
  static constexpr TileFn fns[kTileA][kTileW] = {
      {K<1, 1>::fn, K<1, 2>::fn}, {K<2, 1>::fn, K<2, 2>::fn}, {K<3, 1>::fn, K<3, 2>::fn}, {K<4, 1>::fn, K<4, 2>::fn}};
  static constexpr TileFn row_fns[kTileW1] = {K<1, 1>::fn, K<1, 2>::fn, K<1, 3>::fn, K<1, 4>::fn};
  run_register_tiles(fns, row_fns, len, w, ws, nw, a, as, na, out, os);
}

template <int kWBytes, __m256i (*Levels)(const uint8_t*)>
struct SymTile {
  template <int RN, int RM>
  struct K {
    static constexpr TileFn fn = tile_sym<kWBytes, Levels, RN, RM>;
  };
};

// vec_dot of the tile types: the 1 x 1 tile.
template <int kWBytes, __m256i (*Levels)(const uint8_t*)>
LOOM_AVX2 float dot_tile1(int64_t nb, const uint8_t* w, const uint8_t* a) {
  float out;
  tile_sym<kWBytes, Levels, 1, 1>(nb, w, 0, a, 0, &out, 1);
  return out;
}

// ---- dequantization -----------------------------------------------------------------------

// 32 signed levels -> q * d.
LOOM_AVX2 inline void store_scaled(__m256i q, float d, uint8_t* y) {
  const __m256 vd = _mm256_set1_ps(d);
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int k = 0; k < 4; ++k) {
    const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[k]));
    _mm256_storeu_ps(reinterpret_cast<float*>(y + 32 * k), _mm256_mul_ps(f, vd));
  }
}
// 32 unsigned levels -> q * d + m, rounded after the multiply and after the add (no FMA).
LOOM_AVX2 inline void store_affine(__m256i q, float d, float m, uint8_t* y) {
  const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int k = 0; k < 4; ++k) {
    const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[k]));
    _mm256_storeu_ps(reinterpret_cast<float*>(y + 32 * k), _mm256_add_ps(_mm256_mul_ps(f, vd), vm));
  }
}

template <int kBytes, __m256i (*Levels)(const uint8_t*)>
LOOM_AVX2 void dequant_sym(int64_t nb, const uint8_t* x, uint8_t* y) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* b = x + i * kBytes;
    store_scaled(Levels(b), f16(b), y + i * 128);
  }
}
template <int kBytes, __m256i (*Levels)(const uint8_t*)>
LOOM_AVX2 void dequant_min(int64_t nb, const uint8_t* x, uint8_t* y) {
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* b = x + i * kBytes;
    store_affine(Levels(b), f16(b), f16(b + 2), y + i * 128);
  }
}

// ---- quantization -------------------------------------------------------------------------

// roundf (half away from zero) of 8 floats, exactly: trunc(v) plus copysign(1, v) when the
// discarded fraction, which subtraction computes exactly, is at least one half. Adding 0.5 and
// truncating would be wrong for the float just below 0.5.
LOOM_AVX2 inline __m256 round_half_away(__m256 v) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
  const __m256 up = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 one = _mm256_or_ps(_mm256_and_ps(v, sign), _mm256_set1_ps(1.0f));
  return _mm256_add_ps(t, _mm256_and_ps(up, one));
}

// One Q8 block of 32 floats: writes the 32 int8 values, returns d (f32) and sum of the values.
LOOM_AVX2 inline int quant_q8_block(const uint8_t* x, int8_t* qs, float* d_out) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(reinterpret_cast<const float*>(x + 32 * k));
    amax = _mm256_max_ps(_mm256_andnot_ps(sign, v[k]), amax);
  }
  // Same scalar steps as the reference: d = amax / 127 and id = 1 / d, both in f32.
  const float d = hmax(amax) / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const __m256 vid = _mm256_set1_ps(id);
  __m256i q[4];
  for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(round_half_away(_mm256_mul_ps(v[k], vid)));
  const int sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
  // Narrow 32 -> 16 -> 8 bits; packs works within 128-bit lanes, which leaves the 4-byte groups
  // in the order 0 2 4 6 1 3 5 7 (in units of 4 elements); the permute restores element order.
  const __m256i p16a = _mm256_packs_epi32(q[0], q[1]);
  const __m256i p16b = _mm256_packs_epi32(q[2], q[3]);
  __m256i p8 = _mm256_packs_epi16(p16a, p16b);
  p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), p8);
  *d_out = d;
  return sum;
}

LOOM_AVX2 void quant_q8_0(int64_t nb, const uint8_t* x, uint8_t* y) {
  for (int64_t i = 0; i < nb; ++i) {
    float d;
    uint8_t* b = y + i * int64_t(sizeof(BlockQ8_0));
    quant_q8_block(x + i * 128, reinterpret_cast<int8_t*>(b + 2), &d);
    const uint16_t hd = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    std::memcpy(b, &hd, 2);
  }
}

LOOM_AVX2 void quant_packed_act(int64_t nb, const float* x, uint8_t* y) {
  // PackedActBlock {f32 d; i32 sum; i8 q[32]} with d rounded through f16 like Q8_0's.
  for (int64_t i = 0; i < nb; ++i) {
    float d;
    uint8_t* b = y + i * 40;
    const int32_t sum = quant_q8_block(reinterpret_cast<const uint8_t*>(x + i * 32), reinterpret_cast<int8_t*>(b + 8), &d);
    const float dr = _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
    std::memcpy(b, &dr, 4);
    std::memcpy(b + 4, &sum, 4);
  }
}

LOOM_AVX2 void quant_q8_1(int64_t nb, const uint8_t* x, uint8_t* y) {
  for (int64_t i = 0; i < nb; ++i) {
    float d;
    uint8_t* b = y + i * int64_t(sizeof(BlockQ8_1));
    const int sum = quant_q8_block(x + i * 128, reinterpret_cast<int8_t*>(b + 4), &d);
    const uint16_t h[2] = {_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT), _cvtss_sh(float(sum) * d, _MM_FROUND_TO_NEAREST_INT)};
    std::memcpy(b, h, 4);
  }
}

}  // namespace

// ---- entry points (arguments validated by the caller) -----------------------------------

LOOM_AVX2 void quantize_packed_act(const float* x, int64_t nb, uint8_t* dst) { quant_packed_act(nb, x, dst); }

// One entry point per type and operation (kernels.h); type_traits.cpp puts them in the table.
#define LOOM_U8(p) static_cast<const uint8_t*>(p)
#define LOOM_AVX2_DEQUANT(t, kind, Block, levels)                                                     \
  LOOM_AVX2 void dequantize_##t(const void* src, float* dst, int64_t n) {                             \
    dequant_##kind<sizeof(Block), levels>(n / kBlock, LOOM_U8(src), reinterpret_cast<uint8_t*>(dst)); \
  }
LOOM_AVX2_DEQUANT(q4_0, sym, BlockQ4_0, levels_q4_0)
LOOM_AVX2_DEQUANT(q5_0, sym, BlockQ5_0, levels_q5_0)
LOOM_AVX2_DEQUANT(q8_0, sym, BlockQ8_0, levels_q8_0)
LOOM_AVX2_DEQUANT(q8_1, sym, BlockQ8_1, levels_q8_1)
LOOM_AVX2_DEQUANT(iq4_nl, sym, BlockIQ4_NL, levels_iq4_nl)
LOOM_AVX2_DEQUANT(q4_1, min, BlockQ4_1, levels_q4_1)
LOOM_AVX2_DEQUANT(q5_1, min, BlockQ5_1, levels_q5_1)
#undef LOOM_AVX2_DEQUANT

LOOM_AVX2 void quantize_q8_0(const float* src, void* dst, int64_t n) {
  quant_q8_0(n / kBlock, reinterpret_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst));
}
LOOM_AVX2 void quantize_q8_1(const float* src, void* dst, int64_t n) {
  quant_q8_1(n / kBlock, reinterpret_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst));
}

#define LOOM_AVX2_DOT_TILE1(t, Block, levels)                                    \
  LOOM_AVX2 float vec_dot_##t(int64_t n, const void* w, const void* a) {         \
    return dot_tile1<sizeof(Block), levels>(n / kBlock, LOOM_U8(w), LOOM_U8(a)); \
  }
LOOM_AVX2_DOT_TILE1(q4_0, BlockQ4_0, levels_q4_0)
LOOM_AVX2_DOT_TILE1(q5_0, BlockQ5_0, levels_q5_0)
LOOM_AVX2_DOT_TILE1(q8_0, BlockQ8_0, levels_q8_0)
LOOM_AVX2_DOT_TILE1(iq4_nl, BlockIQ4_NL, levels_iq4_nl)
#undef LOOM_AVX2_DOT_TILE1
LOOM_AVX2 float vec_dot_q8_1(int64_t n, const void* w, const void* a) {
  constexpr int k81 = sizeof(BlockQ8_1);
  return dot_sym<sizeof(BlockQ8_1), k81, levels_q8_1>(n / kBlock, LOOM_U8(w), LOOM_U8(a));
}
LOOM_AVX2 float vec_dot_q4_1(int64_t n, const void* w, const void* a) {
  return dot_min<sizeof(BlockQ4_1), levels_q4_1>(n / kBlock, LOOM_U8(w), LOOM_U8(a));
}
LOOM_AVX2 float vec_dot_q5_1(int64_t n, const void* w, const void* a) {
  return dot_min<sizeof(BlockQ5_1), levels_q5_1>(n / kBlock, LOOM_U8(w), LOOM_U8(a));
}

#define LOOM_AVX2_TILE(t, Block, levels)                                                                                   \
  LOOM_AVX2 void vec_dot_tile_##t(int64_t n, const void* w, size_t w_stride, int n_rows_w, const void* a, size_t a_stride, \
                                  int n_rows_a, float* out, size_t out_stride) {                                           \
    tile_loop<SymTile<sizeof(Block), levels>::K>(n / kBlock, LOOM_U8(w), w_stride, n_rows_w, LOOM_U8(a), a_stride,         \
                                                 n_rows_a, out, out_stride);                                               \
  }
LOOM_AVX2_TILE(q4_0, BlockQ4_0, levels_q4_0)
LOOM_AVX2_TILE(q5_0, BlockQ5_0, levels_q5_0)
LOOM_AVX2_TILE(q8_0, BlockQ8_0, levels_q8_0)
LOOM_AVX2_TILE(iq4_nl, BlockIQ4_NL, levels_iq4_nl)
#undef LOOM_AVX2_TILE
#undef LOOM_U8

}  // namespace loom::quant::detail::avx2

#endif  // __x86_64__

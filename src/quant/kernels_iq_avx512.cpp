// AVX-512 (F, BW, VL, VNNI) dot products of the IQ1/IQ2/IQ3 formats with Q8_K activations
// (contract: iq_kernels.h). Every function carries the target attribute.
//
// Two 32-element sub-blocks per step: their 8 grid entries (16 for IQ3) are gathered into one
// 64-byte register with indices computed in vector registers, the 64 sign bits (for the formats
// that store 7 per group, a block's 32 sign bytes with their parity bits are computed at once in
// vector registers) are a mask register, so negating activations is one masked subtract, and VPDPWSSD multiplies maddubs' int16 pair sums by the scales and
// accumulates in one instruction. IQ1_S uses level + 1 (unsigned) minus the activations' pair
// sums; IQ1_M folds its delta into the level as 8 * level +- 1. Each block's integer sum is exact
// and goes through the reference's float steps, so results are bit-identical with iq_ref.
#if defined(__x86_64__)

// GCC 12's 512-bit intrinsics start from an undefined vector it then warns about (GCC PR 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <cstring>

#include "quant/iq_grids.h"
#include "quant/iq_kernels.h"
#include "quant/iq_ref.h"

#define LOOM_IQ_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

namespace loom::quant::iq::avx512 {
namespace {

constexpr int kQ8K = 292;  // bytes of a Q8_K block: f32 d, i8 qs[256], i16 bsums[16]

inline uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t u64_at(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline uint16_t u16_at(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
LOOM_IQ_AVX512 inline float f16_at(const uint8_t* p) { return _cvtsh_ss(u16_at(p)); }
inline float f32_at(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

inline int64_t rep16(int v) { return int64_t(uint64_t(uint16_t(v)) * 0x0001000100010001ull); }
// int16 lanes: elements 0-31 get scale s0, 32-63 s1.
LOOM_IQ_AVX512 inline __m512i scales2(int s0, int s1) {
  return _mm512_mask_blend_epi16(__mmask32(0xffff0000u), _mm512_set1_epi16(int16_t(s0)), _mm512_set1_epi16(int16_t(s1)));
}
// int16 lanes: the 16-element quarter q of the 64 elements gets scale s_q.
LOOM_IQ_AVX512 inline __m512i scales4(int s0, int s1, int s2, int s3) {
  return _mm512_set_epi64(rep16(s3), rep16(s3), rep16(s2), rep16(s2), rep16(s1), rep16(s1), rep16(s0), rep16(s0));
}

// The same from packed fields: quarter q gets 2 * ((bits >> shift_q) & mask) + 1, computed in
// vector registers (shift_q: 4 q for 4-bit fields, 3 q for IQ1_M's 3-bit ones).
LOOM_IQ_AVX512 inline __m512i scales4_fields(int bits, int field_bits) {
  const __m512i q = _mm512_set_epi64(3, 3, 2, 2, 1, 1, 0, 0);  // the quarter of each int16 lane, in qwords
  const __m512i quarter = _mm512_or_si512(_mm512_or_si512(q, _mm512_slli_epi64(q, 16)),
                                          _mm512_or_si512(_mm512_slli_epi64(q, 32), _mm512_slli_epi64(q, 48)));
  const __m512i shift = _mm512_mullo_epi16(quarter, _mm512_set1_epi16(int16_t(field_bits)));
  const __m512i f = _mm512_and_si512(_mm512_srlv_epi16(_mm512_set1_epi16(int16_t(bits)), shift),
                                     _mm512_set1_epi16(int16_t((1 << field_bits) - 1)));
  return _mm512_add_epi16(_mm512_add_epi16(f, f), _mm512_set1_epi16(1));
}

// Sign bytes of 16 groups whose 7 stored sign bits are bits 0-6 of each 32-bit lane: the bits
// plus their parity at bit 7 (what kSignsIq2xs holds), as 16 bytes.
LOOM_IQ_AVX512 inline __m128i sign_bytes16(__m512i bits7) {
  __m512i x = _mm512_xor_si512(bits7, _mm512_srli_epi32(bits7, 4));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 2));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 1));
  const __m512i p = _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(1)), 7);
  return _mm512_cvtepi32_epi8(_mm512_or_si512(bits7, p));
}
// The 32 sign bytes of a block (8 bytes per pair of sub-blocks) from its 8 sign/scale words
// (IQ2_XXS, IQ3_XXS: 4 fields of 7 bits at bits 7 l), in the low 8 lanes of `words`.
LOOM_IQ_AVX512 inline void signs_7bit_words(__m512i words, uint64_t* out) {
  const __m512i lo = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i hi = _mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7);
  const __m512i shifts = _mm512_setr_epi32(0, 7, 14, 21, 0, 7, 14, 21, 0, 7, 14, 21, 0, 7, 14, 21);
  const __m512i m127 = _mm512_set1_epi32(127);
  const auto bits = [&](__m512i idx) LOOM_IQ_AVX512 {
    return _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(idx, words), shifts), m127);
  };
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), sign_bytes16(bits(lo)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2), sign_bytes16(bits(hi)));
}

// acc += sum over 64 elements of level * (+-activation), weighted per 16 elements by ls.
LOOM_IQ_AVX512 inline __m512i pair_dot(__m512i acc, __m512i levels, uint64_t signs, __m512i ls, const uint8_t* q8) {
  const __m512i y = _mm512_loadu_si512(q8);
  const __m512i ys = _mm512_mask_sub_epi8(y, __mmask64(signs), _mm512_setzero_si512(), y);
  return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(levels, ys), ls);
}

// Sum of the 16 int32 lanes (without _mm512_reduce_add_epi32, whose extract GCC 12 warns about).
LOOM_IQ_AVX512 inline int reduce_i32(__m512i v) {
  const __m512i hi = _mm512_shuffle_i64x2(v, v, 0xee);  // lanes 8-15 to 0-7
  const __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_castsi512_si256(hi));
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// ---- per-format decoders of sub-blocks 2p and 2p + 1 ----------------------------------------

struct Iq2xxs {
  static constexpr int kBytes = 66;
  // qs as u32: even words hold 4 grid indices, odd words the signs and scale.
  LOOM_IQ_AVX512 static void signs(const uint8_t* b, uint64_t* out) {
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 0, 0, 0, 0, 0, 0, 0, 0);
    signs_7bit_words(_mm512_permutexvar_epi32(odd, _mm512_loadu_si512(b + 2)), out);
  }
  LOOM_IQ_AVX512 static __m512i pair(__m512i acc, const uint8_t* b, int p, const uint8_t* q8, uint64_t signs) {
    const uint8_t* q = b + 2 + 16 * p;
    const uint32_t v0 = u32_at(q + 4), v1 = u32_at(q + 12);
    const uint64_t ib8 = uint64_t(u32_at(q)) | uint64_t(u32_at(q + 8)) << 32;
    const __m256i idx = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(ib8)));
    const __m512i levels = _mm512_i32gather_epi64(idx, reinterpret_cast<const long long*>(kIq2xxsGrid), 8);
    const int l0 = int(2 * (v0 >> 28) + 1), l1 = int(2 * (v1 >> 28) + 1);
    return pair_dot(acc, levels, signs, scales2(l0, l1), q8);
  }
};
struct Iq2xs {
  static constexpr int kBytes = 74;
  // qs as u16: bits 9-15 are the signs of a group.
  LOOM_IQ_AVX512 static void signs(const uint8_t* b, uint64_t* out) {
    const __m512i q = _mm512_loadu_si512(b + 2);
    const __m512i lo = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(q));
    const __m512i hi = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(q, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), sign_bytes16(_mm512_srli_epi32(lo, 9)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2), sign_bytes16(_mm512_srli_epi32(hi, 9)));
  }
  LOOM_IQ_AVX512 static __m512i pair(__m512i acc, const uint8_t* b, int p, const uint8_t* q8, uint64_t signs) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + 16 * p)));
    const __m256i idx = _mm256_and_si256(v, _mm256_set1_epi32(511));
    const __m512i levels = _mm512_i32gather_epi64(idx, reinterpret_cast<const long long*>(kIq2xsGrid), 8);
    const int s0 = b[66 + 2 * p], s1 = b[67 + 2 * p];
    return pair_dot(acc, levels, signs, scales4_fields(s0 | s1 << 8, 4), q8);
  }
};
struct Iq2s {
  static constexpr int kBytes = 82;
  LOOM_IQ_AVX512 static void signs(const uint8_t* b, uint64_t* out) { std::memcpy(out, b + 34, 32); }
  LOOM_IQ_AVX512 static __m512i pair(__m512i acc, const uint8_t* b, int p, const uint8_t* q8, uint64_t signs) {
    const uint8_t* q = b + 2 + 8 * p;
    const int h0 = b[66 + 2 * p], h1 = b[67 + 2 * p];
    // index k: q[k] | 2 bits of qh at 2 (k % 4) of byte k / 4, as 8 int32 lanes.
    const __m256i hv = _mm256_setr_epi32(h0, h0, h0, h0, h1, h1, h1, h1);
    const __m256i hi =
        _mm256_and_si256(_mm256_srlv_epi32(hv, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)), _mm256_set1_epi32(3));
    const __m256i idx = _mm256_or_si256(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))),
                                        _mm256_slli_epi32(hi, 8));
    const __m512i levels = _mm512_i32gather_epi64(idx, reinterpret_cast<const long long*>(kIq2sGrid), 8);
    const int s0 = b[74 + 2 * p], s1 = b[75 + 2 * p];
    return pair_dot(acc, levels, signs, scales4_fields(s0 | s1 << 8, 4), q8);
  }
};
struct Iq3xxs {
  static constexpr int kBytes = 98;
  // The 8 sign/scale words follow the 64 index bytes.
  LOOM_IQ_AVX512 static void signs(const uint8_t* b, uint64_t* out) {
    signs_7bit_words(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 66))), out);
  }
  LOOM_IQ_AVX512 static __m512i pair(__m512i acc, const uint8_t* b, int p, const uint8_t* q8, uint64_t signs) {
    const uint8_t* q = b + 2 + 16 * p;
    const uint32_t v0 = u32_at(b + 66 + 8 * p), v1 = u32_at(b + 70 + 8 * p);
    const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
    const __m512i levels = _mm512_i32gather_epi32(idx, reinterpret_cast<const int*>(kIq3xxsGrid), 4);
    const int l0 = int(2 * (v0 >> 28) + 1), l1 = int(2 * (v1 >> 28) + 1);
    return pair_dot(acc, levels, signs, scales2(l0, l1), q8);
  }
};
struct Iq3s {
  static constexpr int kBytes = 110;
  LOOM_IQ_AVX512 static void signs(const uint8_t* b, uint64_t* out) { std::memcpy(out, b + 74, 32); }
  LOOM_IQ_AVX512 static __m512i pair(__m512i acc, const uint8_t* b, int p, const uint8_t* q8, uint64_t signs) {
    const uint8_t* q = b + 2 + 16 * p;
    const int h = b[66 + 2 * p] | b[67 + 2 * p] << 8;
    // index k: q[k] | bit k of the 16 qh bits (a lane mask) << 8.
    const __m512i qv = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
    const __m512i idx = _mm512_mask_or_epi32(qv, __mmask16(h), qv, _mm512_set1_epi32(256));
    const __m512i levels = _mm512_i32gather_epi32(idx, reinterpret_cast<const int*>(kIq3sGrid), 4);
    const int s = b[106 + p];
    const int l0 = 2 * (s & 15) + 1, l1 = 2 * (s >> 4) + 1;
    return pair_dot(acc, levels, signs, scales2(l0, l1), q8);
  }
};

template <class F>
LOOM_IQ_AVX512 float dot_grid(int64_t n, const void* wv, const void* av, float factor) {
  const auto* w = static_cast<const uint8_t*>(wv);
  const auto* a = static_cast<const uint8_t*>(av);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / 256; ++i, w += F::kBytes, a += kQ8K) {
    // The weights stream from memory: ask for them ~2 KiB ahead (past the row: the next one).
    _mm_prefetch(reinterpret_cast<const char*>(w + 2048), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(w + 2048 + F::kBytes - 1), _MM_HINT_T0);
    alignas(16) uint64_t signs[4];
    F::signs(w, signs);
    __m512i acc0 = F::pair(_mm512_setzero_si512(), w, 0, a + 4, signs[0]);
    __m512i acc1 = F::pair(_mm512_setzero_si512(), w, 1, a + 68, signs[1]);
    acc0 = F::pair(acc0, w, 2, a + 132, signs[2]);
    acc1 = F::pair(acc1, w, 3, a + 196, signs[3]);
    const int isum = reduce_i32(_mm512_add_epi32(acc0, acc1));
    const float d = f16_at(w) * f32_at(a);
    sumf += d * float(isum);
  }
  return factor * sumf;
}

// IQ1: sum of level * y for levels -1/0/1 = maddubs(level + 1, y) - maddubs(1, y), as int16 pairs.
LOOM_IQ_AVX512 inline __m512i iq1_pairs(__m512i levels, __m512i y, __m512i y_pairs) {
  return _mm512_sub_epi16(_mm512_maddubs_epi16(_mm512_add_epi8(levels, _mm512_set1_epi8(1)), y), y_pairs);
}

// ---- several weight rows against one activation row (decode) ----------------------------------
//
// Up to 16 weight rows go through each block in step: the activation side is prepared once per
// block, each row leaves its block's integer sum unreduced (16 int32 lanes), the 16 sums are
// reduced together (reduce16) and the float steps run lane-wise, one lane per row, with the
// same operations in the same order as the row dots above, so every output is bit-identical
// with them.

// Lane r of the result: the sum of v[r]'s 16 lanes.
LOOM_IQ_AVX512 inline __m512i reduce16(const __m512i* v) {
  __m512i t[8], u[4];
  for (int j = 0; j < 8; ++j) {  // 128-bit lanes: [row 2j: 2 x 4 partials, row 2j + 1: 2 x 4]
    const __m512i a = v[2 * j], b = v[2 * j + 1];
    t[j] = _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, 0x44), _mm512_shuffle_i32x4(a, b, 0xee));
  }
  for (int j = 0; j < 4; ++j) {  // 128-bit lane k: row 4j + k's 4 partials
    const __m512i a = t[2 * j], b = t[2 * j + 1];
    u[j] = _mm512_add_epi32(_mm512_shuffle_i32x4(a, b, 0x88), _mm512_shuffle_i32x4(a, b, 0xdd));
  }
  // Lane L of 128 bits: rows L, L + 4 (x0) or L + 8, L + 12 (x1), 2 partials each.
  const __m512i x0 = _mm512_add_epi32(_mm512_unpacklo_epi64(u[0], u[1]), _mm512_unpackhi_epi64(u[0], u[1]));
  const __m512i x1 = _mm512_add_epi32(_mm512_unpacklo_epi64(u[2], u[3]), _mm512_unpackhi_epi64(u[2], u[3]));
  const __m512i y =
      _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(_mm512_castsi512_ps(x0), _mm512_castsi512_ps(x1), 0x88)),
                       _mm512_castps_si512(_mm512_shuffle_ps(_mm512_castsi512_ps(x0), _mm512_castsi512_ps(x1), 0xdd)));
  // y's lane 4 L + k is row L + 4 k.
  return _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), y);
}

// The grid formats, decoded per block rather than per pair: the block's 32 grid indices, its
// sign bytes and its scales are computed once, so that a pair of sub-blocks costs its gather,
// the sign transfer (a masked subtract), a maddubs and a VPDPWSSD. The integer sums are the row
// dot's, exactly. (AVX-512 F/BW/VL/VNNI only: no VBMI byte permutes.)
struct GridAct {
  __m512i y[4];  // the activations of 64-element chunk p
};
LOOM_IQ_AVX512 inline void grid_prepare(const uint8_t* a, GridAct& act) {
  for (int p = 0; p < 4; ++p) act.y[p] = _mm512_loadu_si512(a + 4 + 64 * p);
}
// 32 sign bytes (what kSignsIq2xs holds) from 32 bytes of 7 sign bits: bit 7 = their parity,
// the parities of the low nibble and the upper 3 bits from one 16-entry table.
LOOM_IQ_AVX512 inline void sign_lookup(__m256i bits7, uint64_t* out) {
  const __m256i par = _mm256_setr_epi8(0, -128, -128, 0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0, 0, -128, -128,
                                       0, -128, 0, 0, -128, -128, 0, 0, -128, 0, -128, -128, 0);
  const __m256i m4 = _mm256_set1_epi8(15);
  const __m256i lo = _mm256_shuffle_epi8(par, _mm256_and_si256(bits7, m4));
  const __m256i hi = _mm256_shuffle_epi8(par, _mm256_and_si256(_mm256_srli_epi16(bits7, 4), m4));
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), _mm256_ternarylogic_epi32(bits7, lo, hi, 0xf6));  // a | (b ^ c)
}
// Sign fields of IQ2_XXS/IQ3_XXS: dword b is sub-block b's sign/scale word; byte 4 b + l of the
// result = its field l (bits 7 l..7 l + 6).
LOOM_IQ_AVX512 inline __m256i fields7(__m256i words) {
  __m256i x = _mm256_mask_blend_epi8(0x22222222u, words, _mm256_slli_epi32(words, 1));
  x = _mm256_mask_blend_epi8(0x44444444u, x, _mm256_slli_epi32(words, 2));
  x = _mm256_mask_blend_epi8(0x88888888u, x, _mm256_slli_epi32(words, 3));
  return _mm256_and_si256(x, _mm256_set1_epi8(127));
}
LOOM_IQ_AVX512 inline __m512i grid_pair2(__m512i acc, __m512i levels, uint64_t neg, __m512i y, __m512i ls) {
  const __m512i ys = _mm512_mask_sub_epi8(y, __mmask64(neg), _mm512_setzero_si512(), y);
  return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(levels, ys), ls);
}
LOOM_IQ_AVX512 inline __m512i gather8(__m256i idx, const uint64_t* grid) {
  return _mm512_i32gather_epi64(idx, reinterpret_cast<const long long*>(grid), 8);
}
// 2 s + 1 of the 16 nibbles of 8 scale bytes (nibble j: byte j / 2, low first), int16 lanes 0-15.
LOOM_IQ_AVX512 inline __m512i ls_nibbles16(__m128i bytes8) {
  const __m512i b = _mm512_cvtepu8_epi16(_mm256_zextsi128_si256(bytes8));
  const __m512i sel = _mm512_setr_epi32(0x00000000, 0x00010001, 0x00020002, 0x00030003, 0x00040004, 0x00050005, 0x00060006,
                                        0x00070007, 0, 0, 0, 0, 0, 0, 0, 0);
  const __m512i x = _mm512_and_si512(_mm512_srlv_epi16(_mm512_permutexvar_epi16(sel, b), _mm512_set1_epi32(0x00040000)),
                                     _mm512_set1_epi16(15));
  return _mm512_or_si512(_mm512_slli_epi16(x, 1), _mm512_set1_epi16(1));
}
// Per pair p of scales per 16 elements (int16 word q = scale q): lanes 8 j .. 8 j + 7 take 4 p + j.
LOOM_IQ_AVX512 inline __m512i ls_quarters(int p, __m512i ls) {
  const long long r = 0x0001000100010001ll;
  const __m512i sel = _mm512_set_epi64(r * (4 * p + 3), r * (4 * p + 3), r * (4 * p + 2), r * (4 * p + 2), r * (4 * p + 1),
                                       r * (4 * p + 1), r * (4 * p), r * (4 * p));
  return _mm512_permutexvar_epi16(sel, ls);
}
// Per pair p of scales per 32 elements (scale b at int16 word stride * b): lanes 0-15 take 2 p,
// 16-31 take 2 p + 1.
LOOM_IQ_AVX512 inline __m512i ls_halves(int p, __m512i ls, int stride) {
  const __m512i lo = _mm512_set1_epi16(int16_t(stride * 2 * p)), hi = _mm512_set1_epi16(int16_t(stride * (2 * p + 1)));
  return _mm512_permutexvar_epi16(_mm512_mask_blend_epi16(__mmask32(0xffff0000u), lo, hi), ls);
}

struct GridRowsBase {
  static constexpr bool kIq1 = false;
  using Act = GridAct;
  LOOM_IQ_AVX512 static void prepare(const uint8_t* a, Act& act) { grid_prepare(a, act); }
  LOOM_IQ_AVX512 static uint16_t d_bits(const uint8_t* b) { return u16_at(b); }
};

struct Iq2xxsRows : GridRowsBase {
  static constexpr int kBytes = 66;
  LOOM_IQ_AVX512 static __m512i block(const uint8_t* w, const uint8_t*, const Act& act) {
    // Even dwords: 4 grid indices (low 256 bits after the permute); odd: signs and scale.
    const __m512i ev = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15),
                                                _mm512_loadu_si512(w + 2));
    const __m512i i0 = _mm512_cvtepu8_epi32(_mm512_castsi512_si128(ev));
    const __m512i i1 = _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(ev, 1));
    const __m256i od = _mm512_extracti64x4_epi64(ev, 1);
    alignas(32) uint64_t neg[4];
    sign_lookup(fields7(od), neg);
    // 2 s + 1 per sub-block b: int16 word 2 b.
    const __m512i ls =
        _mm512_zextsi256_si512(_mm256_or_si256(_mm256_slli_epi32(_mm256_srli_epi32(od, 28), 1), _mm256_set1_epi32(1)));
    __m512i acc0 = grid_pair2(_mm512_setzero_si512(), gather8(_mm512_castsi512_si256(i0), kIq2xxsGrid), neg[0], act.y[0],
                              ls_halves(0, ls, 2));
    __m512i acc1 = grid_pair2(_mm512_setzero_si512(), gather8(_mm512_extracti64x4_epi64(i0, 1), kIq2xxsGrid), neg[1],
                              act.y[1], ls_halves(1, ls, 2));
    acc0 = grid_pair2(acc0, gather8(_mm512_castsi512_si256(i1), kIq2xxsGrid), neg[2], act.y[2], ls_halves(2, ls, 2));
    acc1 = grid_pair2(acc1, gather8(_mm512_extracti64x4_epi64(i1, 1), kIq2xxsGrid), neg[3], act.y[3], ls_halves(3, ls, 2));
    return _mm512_add_epi32(acc0, acc1);
  }
};
struct Iq2xsRows : GridRowsBase {
  static constexpr int kBytes = 74;
  LOOM_IQ_AVX512 static __m512i block(const uint8_t* w, const uint8_t*, const Act& act) {
    const __m512i q = _mm512_loadu_si512(w + 2);  // u16: bits 0-8 grid index, 9-15 signs
    alignas(32) uint64_t neg[4];
    sign_lookup(_mm512_cvtepi16_epi8(_mm512_srli_epi16(q, 9)), neg);
    const __m512i qi = _mm512_and_si512(q, _mm512_set1_epi16(511));
    const __m512i i0 = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(qi));
    const __m512i i1 = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(qi, 1));
    const __m512i ls = ls_nibbles16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + 66)));
    __m512i acc0 = grid_pair2(_mm512_setzero_si512(), gather8(_mm512_castsi512_si256(i0), kIq2xsGrid), neg[0], act.y[0],
                              ls_quarters(0, ls));
    __m512i acc1 = grid_pair2(_mm512_setzero_si512(), gather8(_mm512_extracti64x4_epi64(i0, 1), kIq2xsGrid), neg[1],
                              act.y[1], ls_quarters(1, ls));
    acc0 = grid_pair2(acc0, gather8(_mm512_castsi512_si256(i1), kIq2xsGrid), neg[2], act.y[2], ls_quarters(2, ls));
    acc1 = grid_pair2(acc1, gather8(_mm512_extracti64x4_epi64(i1, 1), kIq2xsGrid), neg[3], act.y[3], ls_quarters(3, ls));
    return _mm512_add_epi32(acc0, acc1);
  }
};
struct Iq2sRows : GridRowsBase {
  static constexpr int kBytes = 82;
  LOOM_IQ_AVX512 static __m512i block(const uint8_t* w, const uint8_t*, const Act& act) {
    // index k: qs[k] | bits 2 (k % 4).. of qh[k / 4] << 8.
    const __m512i qhs =
        _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + 66))), 8);
    const __m512i sh = _mm512_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6, 0, 2, 4, 6);
    const __m512i sel0 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i sel1 = _mm512_add_epi32(sel0, _mm512_set1_epi32(4));
    const __m512i hi2 = _mm512_set1_epi32(0x300);
    const __m512i q0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2)));
    const __m512i q1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 18)));
    const __m512i i0 = _mm512_ternarylogic_epi32(q0, _mm512_srlv_epi32(_mm512_permutexvar_epi32(sel0, qhs), sh), hi2, 0xf8);
    const __m512i i1 = _mm512_ternarylogic_epi32(q1, _mm512_srlv_epi32(_mm512_permutexvar_epi32(sel1, qhs), sh), hi2, 0xf8);
    const __m512i ls = ls_nibbles16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + 74)));
    const uint8_t* sg = w + 34;  // 8 sign bytes per pair
    __m512i acc0 = grid_pair2(_mm512_setzero_si512(), gather8(_mm512_castsi512_si256(i0), kIq2sGrid), u64_at(sg), act.y[0],
                              ls_quarters(0, ls));
    __m512i acc1 = grid_pair2(_mm512_setzero_si512(), gather8(_mm512_extracti64x4_epi64(i0, 1), kIq2sGrid), u64_at(sg + 8),
                              act.y[1], ls_quarters(1, ls));
    acc0 = grid_pair2(acc0, gather8(_mm512_castsi512_si256(i1), kIq2sGrid), u64_at(sg + 16), act.y[2], ls_quarters(2, ls));
    acc1 = grid_pair2(acc1, gather8(_mm512_extracti64x4_epi64(i1, 1), kIq2sGrid), u64_at(sg + 24), act.y[3],
                      ls_quarters(3, ls));
    return _mm512_add_epi32(acc0, acc1);
  }
};
LOOM_IQ_AVX512 inline __m512i gather4x16(const uint8_t* q, const uint32_t* grid) {
  const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
  return _mm512_i32gather_epi32(idx, reinterpret_cast<const int*>(grid), 4);
}
struct Iq3xxsRows : GridRowsBase {
  static constexpr int kBytes = 98;
  LOOM_IQ_AVX512 static __m512i block(const uint8_t* w, const uint8_t*, const Act& act) {
    const __m256i od = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 66));
    alignas(32) uint64_t neg[4];
    sign_lookup(fields7(od), neg);
    const __m512i ls =
        _mm512_zextsi256_si512(_mm256_or_si256(_mm256_slli_epi32(_mm256_srli_epi32(od, 28), 1), _mm256_set1_epi32(1)));
    __m512i acc0 = grid_pair2(_mm512_setzero_si512(), gather4x16(w + 2, kIq3xxsGrid), neg[0], act.y[0], ls_halves(0, ls, 2));
    __m512i acc1 =
        grid_pair2(_mm512_setzero_si512(), gather4x16(w + 18, kIq3xxsGrid), neg[1], act.y[1], ls_halves(1, ls, 2));
    acc0 = grid_pair2(acc0, gather4x16(w + 34, kIq3xxsGrid), neg[2], act.y[2], ls_halves(2, ls, 2));
    acc1 = grid_pair2(acc1, gather4x16(w + 50, kIq3xxsGrid), neg[3], act.y[3], ls_halves(3, ls, 2));
    return _mm512_add_epi32(acc0, acc1);
  }
};
struct Iq3sRows : GridRowsBase {
  static constexpr int kBytes = 110;
  LOOM_IQ_AVX512 static __m512i pair_levels(const uint8_t* w, int p) {
    // index k: qs[k] | bit k of the pair's 16 qh bits << 8.
    const __m512i qv = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2 + 16 * p)));
    const __m512i idx = _mm512_mask_or_epi32(qv, __mmask16(u16_at(w + 66 + 2 * p)), qv, _mm512_set1_epi32(256));
    return _mm512_i32gather_epi32(idx, reinterpret_cast<const int*>(kIq3sGrid), 4);
  }
  LOOM_IQ_AVX512 static __m512i block(const uint8_t* w, const uint8_t*, const Act& act) {
    // Scales: 4 bytes, nibble b (low first) of sub-block b.
    const __m512i ls = ls_nibbles16(_mm_cvtsi32_si128(int(u32_at(w + 106))));
    const uint8_t* sg = w + 74;
    __m512i acc0 = grid_pair2(_mm512_setzero_si512(), pair_levels(w, 0), u64_at(sg), act.y[0], ls_halves(0, ls, 1));
    __m512i acc1 = grid_pair2(_mm512_setzero_si512(), pair_levels(w, 1), u64_at(sg + 8), act.y[1], ls_halves(1, ls, 1));
    acc0 = grid_pair2(acc0, pair_levels(w, 2), u64_at(sg + 16), act.y[2], ls_halves(2, ls, 1));
    acc1 = grid_pair2(acc1, pair_levels(w, 3), u64_at(sg + 24), act.y[3], ls_halves(3, ls, 1));
    return _mm512_add_epi32(acc0, acc1);
  }
};

// IQ1_S / IQ1_M: each block's sum is 8 isum + isum_delta (what the IQ1_M dot accumulates; for
// IQ1_S float(isum) + 0.125 float(isum_delta) equals float(8 isum + isum_delta) * 0.125 exactly,
// both being below 2^23 in magnitude), computed as
//   sum over pairs of 8 ls * maddubs(level + 1, y)                 (the grid with levels + 1)
//   + sum over groups of ls * (delta sign - 8) * (sum of the group's activations)
// so that a pair costs its gather, one maddubs and one VPDPWSSD.
struct Iq1Grid {
  alignas(64) uint64_t g[2048];  // kIq1sGrid with 1 added to each level (0, 1, 2)
};
inline const Iq1Grid& iq1_grid_p1() {
  static const Iq1Grid t = [] {
    Iq1Grid r;
    for (int i = 0; i < 2048; ++i) {
      uint64_t v = 0;
      for (int j = 0; j < 8; ++j) v |= uint64_t((uint8_t(kIq1sGrid[i] >> (8 * j)) + 1u) & 0xffu) << (8 * j);
      r.g[i] = v;
    }
    return r;
  }();
  return t;
}

struct Iq1Act {
  __m512i y[4];  // the activations of 64-element chunk p
  __m512i ysum;  // IQ1_S: the 16 bsums (int16, low 256 bits, the rest 0); IQ1_M: the 32 sums of 8 (int16)
  const uint64_t* grid;
};

// acc += sum over chunk p of 8 ls * (level + 1) * y; idx: 8 grid indices (int32).
LOOM_IQ_AVX512 inline __m512i iq1_pair(__m512i acc, const uint64_t* grid, __m256i idx, __m512i y, __m512i ls8) {
  const __m512i g = _mm512_i32gather_epi64(idx, reinterpret_cast<const long long*>(grid), 8);
  return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(g, y), ls8);
}

struct Iq1sRows {
  static constexpr int kBytes = 50;
  static constexpr bool kIq1 = true;
  using Act = Iq1Act;
  LOOM_IQ_AVX512 static void prepare(const uint8_t* a, Act& act) {
    act.grid = iq1_grid_p1().g;
    for (int p = 0; p < 4; ++p) act.y[p] = _mm512_loadu_si512(a + 4 + 64 * p);
    act.ysum = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 260)));
  }
  LOOM_IQ_AVX512 static uint16_t d_bits(const uint8_t* b) { return u16_at(b); }
  LOOM_IQ_AVX512 static __m512i block(const uint8_t* w, const uint8_t*, const Act& act) {
    const uint64_t* grid = act.grid;
    // qh[b] of sub-block b (32 elements): bits 0-11 the index bits of its 4 groups, 12-14 s, 15 the delta sign.
    const __m512i qh =
        _mm512_cvtepu16_epi32(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 34))));
    // 8 ls = 16 s + 8 and ls = 2 s + 1 per sub-block (dword lanes 0-7).
    const __m512i ls8 =
        _mm512_ternarylogic_epi32(_mm512_srli_epi32(qh, 8), _mm512_set1_epi32(0x70), _mm512_set1_epi32(8), 0xea);
    const __m512i ls1 =
        _mm512_ternarylogic_epi32(_mm512_srli_epi32(qh, 11), _mm512_set1_epi32(0xe), _mm512_set1_epi32(1), 0xea);
    // Group coefficients ls (sign - 8): -7 ls or -9 ls.
    const __mmask16 neg = _mm512_test_epi32_mask(qh, _mm512_set1_epi32(0x8000));
    const __m512i c =
        _mm512_mask_sub_epi32(_mm512_sub_epi32(ls1, ls8), neg, _mm512_setzero_si512(), _mm512_add_epi32(ls1, ls8));
    // The 16 bsums (16 elements each) take sub-block j / 2's coefficient: word j of dword j / 2.
    const __m512i cw =
        _mm512_permutexvar_epi16(_mm512_setr_epi32(0x00000000, 0x00020002, 0x00040004, 0x00060006, 0x00080008, 0x000a000a,
                                                   0x000c000c, 0x000e000e, 0, 0, 0, 0, 0, 0, 0, 0),
                                 c);
    __m512i acc = _mm512_dpwssd_epi32(_mm512_setzero_si512(), act.ysum, cw);  // ysum's upper half is 0
    // Grid indices: qs[k] | the 3 bits of qh[k / 4] at 3 (k % 4), << 8; lanes k of two halves.
    const __m512i qhs = _mm512_slli_epi32(qh, 8);
    const __m512i sh = _mm512_setr_epi32(0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9, 0, 3, 6, 9);
    const __m512i sel0 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512i sel1 = _mm512_add_epi32(sel0, _mm512_set1_epi32(4));
    const __m512i q0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 2)));
    const __m512i q1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 18)));
    const __m512i hi3 = _mm512_set1_epi32(0x700);
    const __m512i i0 = _mm512_ternarylogic_epi32(q0, _mm512_srlv_epi32(_mm512_permutexvar_epi32(sel0, qhs), sh), hi3, 0xf8);
    const __m512i i1 = _mm512_ternarylogic_epi32(q1, _mm512_srlv_epi32(_mm512_permutexvar_epi32(sel1, qhs), sh), hi3, 0xf8);
    // Per chunk p: int16 lanes 0-15 take sub-block 2p's 8 ls, 16-31 sub-block 2p + 1's.
    const auto lsp = [&](int p) LOOM_IQ_AVX512 {
      const __m512i lo = _mm512_set1_epi16(int16_t(4 * p)), hi = _mm512_set1_epi16(int16_t(4 * p + 2));
      return _mm512_permutexvar_epi16(_mm512_mask_blend_epi16(__mmask32(0xffff0000u), lo, hi), ls8);
    };
    acc = iq1_pair(acc, grid, _mm512_castsi512_si256(i0), act.y[0], lsp(0));
    acc = iq1_pair(acc, grid, _mm512_extracti64x4_epi64(i0, 1), act.y[1], lsp(1));
    acc = iq1_pair(acc, grid, _mm512_castsi512_si256(i1), act.y[2], lsp(2));
    acc = iq1_pair(acc, grid, _mm512_extracti64x4_epi64(i1, 1), act.y[3], lsp(3));
    return acc;
  }
};

struct Iq1mRows {
  static constexpr int kBytes = 56;
  static constexpr bool kIq1 = true;
  using Act = Iq1Act;
  LOOM_IQ_AVX512 static void prepare(const uint8_t* a, Act& act) {
    act.grid = iq1_grid_p1().g;
    const __m512i ones = _mm512_set1_epi8(1);
    __m512i s4[4];  // sums of 4 activations, 16 per chunk
    for (int p = 0; p < 4; ++p) {
      act.y[p] = _mm512_loadu_si512(a + 4 + 64 * p);
      s4[p] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, act.y[p]);
    }
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    const __m512i g0 =
        _mm512_add_epi32(_mm512_permutex2var_epi32(s4[0], ev, s4[1]), _mm512_permutex2var_epi32(s4[0], od, s4[1]));
    const __m512i g1 =
        _mm512_add_epi32(_mm512_permutex2var_epi32(s4[2], ev, s4[3]), _mm512_permutex2var_epi32(s4[2], od, s4[3]));
    act.ysum = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(g0)), _mm512_cvtepi32_epi16(g1), 1);
  }
  LOOM_IQ_AVX512 static uint16_t d_bits(const uint8_t* b) { return iq1m_d_bits(b + 48); }
  LOOM_IQ_AVX512 static __m512i block(const uint8_t* w, const uint8_t*, const Act& act) {
    const uint64_t* grid = act.grid;
    // Scales: field q (16 elements) = bits 3 (q % 4) of sc[q / 4]; as int16 lanes q = 0..15.
    const __m512i sc = _mm512_castsi128_si512(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + 48)));
    const __m512i qsel = _mm512_set_epi64(0, 0, 0, 0, 0x0003000300030003ll, 0x0002000200020002ll, 0x0001000100010001ll, 0);
    const __m512i qsh =
        _mm512_set_epi64(0, 0, 0, 0, 0x0009000600030000ll, 0x0009000600030000ll, 0x0009000600030000ll, 0x0009000600030000ll);
    const __m512i s = _mm512_and_si512(_mm512_srlv_epi16(_mm512_permutexvar_epi16(qsel, sc), qsh), _mm512_set1_epi16(7));
    const __m512i ls1 = _mm512_add_epi16(_mm512_add_epi16(s, s), _mm512_set1_epi16(1));  // 2 s + 1
    const __m512i ls8 = _mm512_slli_epi16(ls1, 3);
    // qh nibble g (byte g / 2, low nibble for even g): bits 0-2 the index bits, bit 3 the delta sign.
    const __m128i qh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 32));
    const __m512i nsh = _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
    const __m512i qh32 = _mm512_castsi128_si512(qh);
    const __m512i n0 = _mm512_srlv_epi32(
        _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), qh32), nsh);
    const __m512i n1 = _mm512_srlv_epi32(
        _mm512_permutexvar_epi32(_mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3), qh32), nsh);
    const __m512i b8 = _mm512_set1_epi32(8);
    const __mmask32 neg = __mmask32(_mm512_test_epi32_mask(n0, b8)) | __mmask32(_mm512_test_epi32_mask(n1, b8)) << 16;
    // Group coefficients ls (sign - 8), group g taking scale field g / 2.
    const __m512i gsel =
        _mm512_setr_epi32(0x00000000, 0x00010001, 0x00020002, 0x00030003, 0x00040004, 0x00050005, 0x00060006, 0x00070007,
                          0x00080008, 0x00090009, 0x000a000a, 0x000b000b, 0x000c000c, 0x000d000d, 0x000e000e, 0x000f000f);
    const __m512i l1g = _mm512_permutexvar_epi16(gsel, ls1), l8g = _mm512_permutexvar_epi16(gsel, ls8);
    const __m512i c =
        _mm512_mask_sub_epi16(_mm512_sub_epi16(l1g, l8g), neg, _mm512_setzero_si512(), _mm512_add_epi16(l1g, l8g));
    __m512i acc = _mm512_dpwssd_epi32(_mm512_setzero_si512(), act.ysum, c);
    const __m512i hi3 = _mm512_set1_epi32(0x700);
    const __m512i q0 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
    const __m512i q1 = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 16)));
    const __m512i i0 = _mm512_ternarylogic_epi32(q0, _mm512_slli_epi32(n0, 8), hi3, 0xf8);
    const __m512i i1 = _mm512_ternarylogic_epi32(q1, _mm512_slli_epi32(n1, 8), hi3, 0xf8);
    // Per chunk p: int16 lanes 8 j .. 8 j + 7 take field 4 p + j's 8 ls.
    const auto lsp = [&](int p) LOOM_IQ_AVX512 {
      const __m512i sel = _mm512_set_epi64(0x0001000100010001ll * (4 * p + 3), 0x0001000100010001ll * (4 * p + 3),
                                           0x0001000100010001ll * (4 * p + 2), 0x0001000100010001ll * (4 * p + 2),
                                           0x0001000100010001ll * (4 * p + 1), 0x0001000100010001ll * (4 * p + 1),
                                           0x0001000100010001ll * (4 * p), 0x0001000100010001ll * (4 * p));
      return _mm512_permutexvar_epi16(sel, ls8);
    };
    acc = iq1_pair(acc, grid, _mm512_castsi512_si256(i0), act.y[0], lsp(0));
    acc = iq1_pair(acc, grid, _mm512_extracti64x4_epi64(i0, 1), act.y[1], lsp(1));
    acc = iq1_pair(acc, grid, _mm512_castsi512_si256(i1), act.y[2], lsp(2));
    acc = iq1_pair(acc, grid, _mm512_extracti64x4_epi64(i1, 1), act.y[3], lsp(3));
    return acc;
  }
};

// out[j] = the row dot of weight row j (w + j ws) with the activation row a, for j < nw.
template <class K>
LOOM_IQ_AVX512 void dot_rows(int64_t n, const uint8_t* w, size_t ws, int nw, const uint8_t* a, float* out, float factor) {
  const int64_t nb = n / 256;
  __m512i acc[16];
  alignas(32) uint16_t db[16];
  for (int r0 = 0; r0 < nw; r0 += 16) {
    const int rows = nw - r0 < 16 ? nw - r0 : 16;
    for (int r = rows; r < 16; ++r) {
      acc[r] = _mm512_setzero_si512();
      db[r] = 0;
    }
    const uint8_t* wr = w + size_t(r0) * ws;
    // The weights stream from memory, and the rows are read across rather than along: ask for
    // the next 16 rows (those of the next group, or of the caller's next call) while computing
    // these, a block step's share of their bytes at a time.
    const uint8_t* next = wr + 16 * ws;
    const size_t share = nb > 0 ? (16 * ws + size_t(nb) - 1) / size_t(nb) : 0;  // (k = 0: no blocks)
    __m512 sumf = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
      const uint8_t* ai = a + i * kQ8K;
      typename K::Act act;
      K::prepare(ai, act);
      for (size_t o = size_t(i) * share; o < size_t(i + 1) * share; o += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(next + o), _MM_HINT_T0);
      }
      for (int r = 0; r < rows; ++r) {
        const uint8_t* b = wr + size_t(r) * ws + size_t(i) * K::kBytes;
        acc[r] = K::block(b, ai, act);
        db[r] = K::d_bits(b);
      }
      const __m512 x = _mm512_cvtepi32_ps(reduce16(acc));
      const __m512 d = _mm512_mul_ps(_mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(db))),
                                     _mm512_set1_ps(f32_at(ai)));
      if constexpr (K::kIq1) {
        sumf = _mm512_add_ps(sumf, _mm512_mul_ps(d, _mm512_mul_ps(x, _mm512_set1_ps(0.125f))));
      } else {
        sumf = _mm512_add_ps(sumf, _mm512_mul_ps(d, x));
      }
    }
    const __m512 res = K::kIq1 ? sumf : _mm512_mul_ps(_mm512_set1_ps(factor), sumf);
    _mm512_mask_storeu_ps(out + r0, __mmask16((1u << rows) - 1), res);
  }
}

}  // namespace

float vec_dot_iq2_xxs_q8_k(int64_t n, const void* w, const void* a) { return dot_grid<Iq2xxs>(n, w, a, 0.125f); }
float vec_dot_iq2_xs_q8_k(int64_t n, const void* w, const void* a) { return dot_grid<Iq2xs>(n, w, a, 0.125f); }
float vec_dot_iq2_s_q8_k(int64_t n, const void* w, const void* a) { return dot_grid<Iq2s>(n, w, a, 0.125f); }
float vec_dot_iq3_xxs_q8_k(int64_t n, const void* w, const void* a) { return dot_grid<Iq3xxs>(n, w, a, 0.25f); }
float vec_dot_iq3_s_q8_k(int64_t n, const void* w, const void* a) { return dot_grid<Iq3s>(n, w, a, 1.0f); }

void vec_dot_rows_iq2_xxs_q8_k(int64_t n, const void* w, size_t ws, int nw, const void* a, float* out) {
  dot_rows<Iq2xxsRows>(n, static_cast<const uint8_t*>(w), ws, nw, static_cast<const uint8_t*>(a), out, 0.125f);
}
void vec_dot_rows_iq2_xs_q8_k(int64_t n, const void* w, size_t ws, int nw, const void* a, float* out) {
  dot_rows<Iq2xsRows>(n, static_cast<const uint8_t*>(w), ws, nw, static_cast<const uint8_t*>(a), out, 0.125f);
}
void vec_dot_rows_iq2_s_q8_k(int64_t n, const void* w, size_t ws, int nw, const void* a, float* out) {
  dot_rows<Iq2sRows>(n, static_cast<const uint8_t*>(w), ws, nw, static_cast<const uint8_t*>(a), out, 0.125f);
}
void vec_dot_rows_iq3_xxs_q8_k(int64_t n, const void* w, size_t ws, int nw, const void* a, float* out) {
  dot_rows<Iq3xxsRows>(n, static_cast<const uint8_t*>(w), ws, nw, static_cast<const uint8_t*>(a), out, 0.25f);
}
void vec_dot_rows_iq3_s_q8_k(int64_t n, const void* w, size_t ws, int nw, const void* a, float* out) {
  dot_rows<Iq3sRows>(n, static_cast<const uint8_t*>(w), ws, nw, static_cast<const uint8_t*>(a), out, 1.0f);
}
void vec_dot_rows_iq1_s_q8_k(int64_t n, const void* w, size_t ws, int nw, const void* a, float* out) {
  dot_rows<Iq1sRows>(n, static_cast<const uint8_t*>(w), ws, nw, static_cast<const uint8_t*>(a), out, 1.0f);
}
void vec_dot_rows_iq1_m_q8_k(int64_t n, const void* w, size_t ws, int nw, const void* a, float* out) {
  dot_rows<Iq1mRows>(n, static_cast<const uint8_t*>(w), ws, nw, static_cast<const uint8_t*>(a), out, 1.0f);
}

LOOM_IQ_AVX512 float vec_dot_iq1_s_q8_k(int64_t n, const void* wv, const void* av) {
  const auto* w = static_cast<const uint8_t*>(wv);
  const auto* a = static_cast<const uint8_t*>(av);
  const __m512i ones = _mm512_set1_epi8(1);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / 256; ++i, w += 50, a += kQ8K) {
    // The weights stream from memory: ask for them ~2 KiB ahead (past the row: the next one).
    _mm_prefetch(reinterpret_cast<const char*>(w + 2048), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(w + 2048 + 50 - 1), _MM_HINT_T0);
    __m512i acc = _mm512_setzero_si512();
    int32_t isum_delta = 0;
    for (int p = 0; p < 4; ++p) {
      const uint8_t* q = w + 2 + 8 * p;
      const int h0 = u16_at(w + 34 + 4 * p), h1 = u16_at(w + 36 + 4 * p);
      const __m256i hv = _mm256_setr_epi32(h0, h0, h0, h0, h1, h1, h1, h1);
      const __m256i hi =
          _mm256_and_si256(_mm256_srlv_epi32(hv, _mm256_setr_epi32(0, 3, 6, 9, 0, 3, 6, 9)), _mm256_set1_epi32(7));
      const __m256i idx = _mm256_or_si256(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))),
                                          _mm256_slli_epi32(hi, 8));
      const __m512i levels = _mm512_i32gather_epi64(idx, reinterpret_cast<const long long*>(kIq1sGrid), 8);
      const int l0 = 2 * ((h0 >> 12) & 7) + 1, l1 = 2 * ((h1 >> 12) & 7) + 1;
      const __m512i y = _mm512_loadu_si512(a + 4 + 64 * p);
      const __m512i pairs = iq1_pairs(levels, y, _mm512_maddubs_epi16(ones, y));
      acc = _mm512_dpwssd_epi32(acc, pairs, scales2(l0, l1));
      const uint8_t* bs = a + 260 + 8 * p;
      isum_delta += l0 * (h0 & 0x8000 ? -1 : 1) * (int16_t(u16_at(bs)) + int16_t(u16_at(bs + 2)));
      isum_delta += l1 * (h1 & 0x8000 ? -1 : 1) * (int16_t(u16_at(bs + 4)) + int16_t(u16_at(bs + 6)));
    }
    const int isum = reduce_i32(acc);
    sumf += f16_at(w) * f32_at(a) * (float(isum) + kIq1sDelta * float(isum_delta));
  }
  return sumf;
}

LOOM_IQ_AVX512 float vec_dot_iq1_m_q8_k(int64_t n, const void* wv, const void* av) {
  const auto* w = static_cast<const uint8_t*>(wv);
  const auto* a = static_cast<const uint8_t*>(av);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / 256; ++i, w += 56, a += kQ8K) {
    // The weights stream from memory: ask for them ~2 KiB ahead (past the row: the next one).
    _mm_prefetch(reinterpret_cast<const char*>(w + 2048), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(w + 2048 + 56 - 1), _MM_HINT_T0);
    uint16_t sc[4];
    std::memcpy(sc, w + 48, 8);
    __m512i acc = _mm512_setzero_si512();
    for (int p = 0; p < 4; ++p) {  // sub-blocks 2p, 2p + 1: scale word sc[p], qh bytes 4p..4p+3
      const uint8_t* q = w + 8 * p;
      const uint32_t h = u32_at(w + 32 + 4 * p);  // nibble g: group g's 3 index bits + delta bit
      const __m256i hn = _mm256_srlv_epi32(_mm256_set1_epi32(int(h)), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
      const __m256i idx = _mm256_or_si256(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))),
                                          _mm256_slli_epi32(_mm256_and_si256(hn, _mm256_set1_epi32(7)), 8));
      const __m512i grid = _mm512_i32gather_epi64(idx, reinterpret_cast<const long long*>(kIq1sGrid), 8);
      // 8 * level + delta sign (-9..9): the delta bits (bit 3 of each nibble) as a byte mask per group.
      const __mmask8 neg8 = _mm256_test_epi32_mask(hn, _mm256_set1_epi32(8));
      const __mmask64 neg = _mm512_movepi8_mask(_mm512_maskz_set1_epi64(neg8, -1));  // group bit -> 8 bytes
      // 8 * level per byte: a 16-bit shift moves 3 bits of each low byte into its high byte's
      // bits 0-2, which the mask clears (bits 3-7 are the high byte's own).
      const __m512i lv8 = _mm512_and_si512(_mm512_slli_epi16(grid, 3), _mm512_set1_epi8(int8_t(0xf8)));
      const __m512i lv = _mm512_mask_sub_epi8(_mm512_add_epi8(lv8, _mm512_set1_epi8(1)), neg, lv8, _mm512_set1_epi8(1));
      // |lv| times the activation with lv's sign.
      const __m512i y = _mm512_loadu_si512(a + 4 + 64 * p);
      const __mmask64 lneg = _mm512_movepi8_mask(lv);
      const __m512i ys = _mm512_mask_sub_epi8(y, lneg, _mm512_setzero_si512(), y);
      const int s = sc[p];
      const __m512i ls = scales4_fields(s, 3);
      acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(_mm512_abs_epi8(lv), ys), ls);
    }
    // acc holds 8 * isum + isum_delta; both are below 2^23 in magnitude, so
    // float(isum) + delta * float(isum_delta) (delta = 1/8) equals float(acc) / 8 exactly.
    const int isum8 = reduce_i32(acc);
    const float d = _cvtsh_ss(iq1m_d_bits(w + 48));
    sumf += d * f32_at(a) * (float(isum8) * 0.125f);
  }
  return sumf;
}

}  // namespace loom::quant::iq::avx512

#endif  // __x86_64__

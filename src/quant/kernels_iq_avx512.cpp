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
LOOM_IQ_AVX512 inline __m512i pair_dot(__m512i acc, __m512i levels, uint64_t signs, __m512i ls,
                                       const uint8_t* q8) {
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
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(hv, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)),
                                        _mm256_set1_epi32(3));
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

}  // namespace

float vec_dot_iq2_xxs_q8_k(int64_t n, const void* w, const void* a) { return dot_grid<Iq2xxs>(n, w, a, 0.125f); }
float vec_dot_iq2_xs_q8_k(int64_t n, const void* w, const void* a) { return dot_grid<Iq2xs>(n, w, a, 0.125f); }
float vec_dot_iq2_s_q8_k(int64_t n, const void* w, const void* a) { return dot_grid<Iq2s>(n, w, a, 0.125f); }
float vec_dot_iq3_xxs_q8_k(int64_t n, const void* w, const void* a) { return dot_grid<Iq3xxs>(n, w, a, 0.25f); }
float vec_dot_iq3_s_q8_k(int64_t n, const void* w, const void* a) { return dot_grid<Iq3s>(n, w, a, 1.0f); }

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
      const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(hv, _mm256_setr_epi32(0, 3, 6, 9, 0, 3, 6, 9)),
                                          _mm256_set1_epi32(7));
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
      const __m512i lv = _mm512_mask_sub_epi8(_mm512_add_epi8(lv8, _mm512_set1_epi8(1)), neg,
                                              lv8, _mm512_set1_epi8(1));
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

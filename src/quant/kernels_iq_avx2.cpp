// AVX2 dot products of the IQ1/IQ2/IQ3 formats with Q8_K activations (contract: iq_kernels.h).
// Every function carries the target attribute, so the rest of the binary runs on older CPUs.
//
// Per 32-element sub-block: the grid entries of its 4 groups (or 8 half-groups for IQ3, gathered
// with indices computed in a register) are looked up into 32 unsigned level bytes, the signs are
// moved onto the activations (sign_epi8), maddubs forms int16 pair sums and madd with the
// sub-block's (or half's) 2 s + 1 widens them to int32, accumulated over the block. IQ1_M folds
// its delta into the levels (8 * level +- 1) and computes a block's 32 grid indices and delta
// signs at once in vector registers (then gathers the grid entries). The block's exact integer sum then goes through the
// reference's float operations (iq_ref.cpp), so results are bit-identical with it.
#if defined(__x86_64__)

#include <immintrin.h>

#include <cstring>

#include "quant/iq_grids.h"
#include "quant/iq_kernels.h"
#include "quant/iq_ref.h"

#define LOOM_IQ_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace loom::quant::iq::avx2 {
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
LOOM_IQ_AVX2 inline float f16_at(const uint8_t* p) { return _cvtsh_ss(u16_at(p)); }
LOOM_IQ_AVX2 inline float f32_at(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
LOOM_IQ_AVX2 inline __m256i load(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// 32 sign bits (bit e: element e negated) -> bytes -1 / +1.
LOOM_IQ_AVX2 inline __m256i signs_pm1(uint32_t bits) {
  const __m256i shuf =
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(int(bits)), shuf);
  const __m256i bit = _mm256_set1_epi64x(int64_t(0x8040201008040201ull));
  return _mm256_or_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), _mm256_set1_epi8(1));
}

// Bits 0-6 of each 16-bit lane plus their parity at bit 7 (the sign byte kSignsIq2xs holds).
LOOM_IQ_AVX2 inline __m256i with_parity16(__m256i bits7) {
  __m256i x = _mm256_xor_si256(bits7, _mm256_srli_epi16(bits7, 4));
  x = _mm256_xor_si256(x, _mm256_srli_epi16(x, 2));
  x = _mm256_xor_si256(x, _mm256_srli_epi16(x, 1));
  return _mm256_or_si256(bits7, _mm256_slli_epi16(_mm256_and_si256(x, _mm256_set1_epi16(1)), 7));
}

// The 4 sign bytes of groups whose 7 stored bits sit at bit 7 l of v (IQ2_XXS, IQ3_XXS; table
// lookups measured as fast as computing the parity in vector registers for these).
inline uint32_t signs_from_7bit(uint32_t v) {
  return uint32_t(kSignsIq2xs.v[v & 127]) | uint32_t(kSignsIq2xs.v[(v >> 7) & 127]) << 8 |
         uint32_t(kSignsIq2xs.v[(v >> 14) & 127]) << 16 | uint32_t(kSignsIq2xs.v[(v >> 21) & 127]) << 24;
}

LOOM_IQ_AVX2 inline __m256i grid64(const uint64_t* grid, int i0, int i1, int i2, int i3) {
  return _mm256_set_epi64x(int64_t(grid[i3]), int64_t(grid[i2]), int64_t(grid[i1]), int64_t(grid[i0]));
}
LOOM_IQ_AVX2 inline __m256i scales2(int ls_lo, int ls_hi) {  // elements 0-15, 16-31
  return _mm256_set_m128i(_mm_set1_epi16(int16_t(ls_hi)), _mm_set1_epi16(int16_t(ls_lo)));
}

// One sub-block: sum over its 32 elements of level * activation, times its scale(s), as 8 int32.
LOOM_IQ_AVX2 inline __m256i sub_dot(__m256i levels, uint32_t signs, __m256i ls, const uint8_t* q8) {
  const __m256i y = _mm256_sign_epi8(load(q8), signs_pm1(signs));
  return _mm256_madd_epi16(_mm256_maddubs_epi16(levels, y), ls);
}

LOOM_IQ_AVX2 inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// ---- per-format sub-block decoders ------------------------------------------------------------

// Sub-block ib of a block: 32 unsigned grid levels, 32 sign bits (bit e: element e negated) and
// the scale fields s of elements 0-15 and 16-31.
struct Sub {
  __m256i levels;
  uint32_t signs;
  int s_lo, s_hi;
};

struct Iq2xxs {
  static constexpr int kBytes = 66;
  // qs as u32: even words hold 4 grid indices, odd words the signs and scale.
  LOOM_IQ_AVX2 static void signs(const uint8_t* b, uint32_t* out) {
    for (int ib = 0; ib < 8; ++ib) out[ib] = signs_from_7bit(u32_at(b + 6 + 8 * ib));
  }
  LOOM_IQ_AVX2 static Sub decode(const uint8_t* b, int ib, const uint32_t* signs) {
    const uint8_t* q = b + 2 + 8 * ib;
    const int s = int(u32_at(q + 4) >> 28);
    return {grid64(kIq2xxsGrid, q[0], q[1], q[2], q[3]), signs[ib], s, s};
  }
};
struct Iq2xs {
  static constexpr int kBytes = 74;
  // qs as u16: bits 9-15 are a group's 7 sign bits.
  LOOM_IQ_AVX2 static void signs(const uint8_t* b, uint32_t* out) {
    const __m256i lo = with_parity16(_mm256_srli_epi16(load(b + 2), 9));   // groups 0-15
    const __m256i hi = with_parity16(_mm256_srli_epi16(load(b + 34), 9));  // groups 16-31
    // packus works per 128-bit lane: 0-7, 16-23, 8-15, 24-31 -> reorder the 64-bit quarters.
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi16(lo, hi), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), p);
  }
  LOOM_IQ_AVX2 static Sub decode(const uint8_t* b, int ib, const uint32_t* signs) {
    uint16_t q[4];
    std::memcpy(q, b + 2 + 8 * ib, 8);
    const int sc = b[66 + ib];
    return {grid64(kIq2xsGrid, q[0] & 511, q[1] & 511, q[2] & 511, q[3] & 511), signs[ib], sc & 15, sc >> 4};
  }
};
struct Iq2s {
  static constexpr int kBytes = 82;
  LOOM_IQ_AVX2 static void signs(const uint8_t* b, uint32_t* out) { std::memcpy(out, b + 34, 32); }
  LOOM_IQ_AVX2 static Sub decode(const uint8_t* b, int ib, const uint32_t* signs) {
    const uint8_t* q = b + 2 + 4 * ib;
    const int h = b[66 + ib];
    const int sc = b[74 + ib];
    return {grid64(kIq2sGrid, q[0] | (h & 3) << 8, q[1] | (h & 12) << 6, q[2] | (h & 48) << 4, q[3] | (h & 192) << 2),
            signs[ib], sc & 15, sc >> 4};
  }
};
struct Iq3xxs {
  static constexpr int kBytes = 98;
  // The 8 sign/scale words follow the 64 index bytes.
  LOOM_IQ_AVX2 static void signs(const uint8_t* b, uint32_t* out) {
    for (int ib = 0; ib < 8; ++ib) out[ib] = signs_from_7bit(u32_at(b + 66 + 4 * ib));
  }
  LOOM_IQ_AVX2 static Sub decode(const uint8_t* b, int ib, const uint32_t* signs) {
    const uint8_t* q = b + 2 + 8 * ib;
    const uint32_t v = u32_at(b + 66 + 4 * ib);
    const __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)));
    const int s = int(v >> 28);
    return {_mm256_i32gather_epi32(reinterpret_cast<const int*>(kIq3xxsGrid), idx, 4), signs[ib], s, s};
  }
};
struct Iq3s {
  static constexpr int kBytes = 110;
  LOOM_IQ_AVX2 static void signs(const uint8_t* b, uint32_t* out) { std::memcpy(out, b + 74, 32); }
  LOOM_IQ_AVX2 static Sub decode(const uint8_t* b, int ib, const uint32_t* signs) {
    const uint8_t* q = b + 2 + 8 * ib;
    const int h = b[66 + ib];
    // index k: q[k] | bit k of qh[ib] << 8.
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(h), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
                                        _mm256_set1_epi32(1));
    const __m256i idx = _mm256_or_si256(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))),
                                        _mm256_slli_epi32(hi, 8));
    const int s = (b[106 + ib / 2] >> (4 * (ib % 2))) & 15;
    return {_mm256_i32gather_epi32(reinterpret_cast<const int*>(kIq3sGrid), idx, 4), signs[ib], s, s};
  }
};

template <class F>
LOOM_IQ_AVX2 inline __m256i sub(const uint8_t* b, int ib, const uint8_t* q8, const uint32_t* signs) {
  const Sub u = F::decode(b, ib, signs);
  return sub_dot(u.levels, u.signs, scales2(2 * u.s_lo + 1, 2 * u.s_hi + 1), q8);
}

// Row factor of the IQ2 (1/8), IQ3_XXS (1/4) and IQ3_S (1) dots.
template <class F>
LOOM_IQ_AVX2 float dot_grid(int64_t n, const void* wv, const void* av, float factor) {
  const auto* w = static_cast<const uint8_t*>(wv);
  const auto* a = static_cast<const uint8_t*>(av);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / 256; ++i, w += F::kBytes, a += kQ8K) {
    alignas(32) uint32_t signs[8];
    F::signs(w, signs);
    __m256i acc0 = sub<F>(w, 0, a + 4, signs), acc1 = sub<F>(w, 1, a + 36, signs);
    for (int ib = 2; ib < 8; ib += 2) {
      acc0 = _mm256_add_epi32(acc0, sub<F>(w, ib, a + 4 + 32 * ib, signs));
      acc1 = _mm256_add_epi32(acc1, sub<F>(w, ib + 1, a + 36 + 32 * ib, signs));
    }
    const int isum = hsum_i32(_mm256_add_epi32(acc0, acc1));
    const float d = f16_at(w) * f32_at(a);
    sumf += d * float(isum);
  }
  return factor * sumf;
}

// ---- dequantization --------------------------------------------------------------------------

// y[0..32) = db * level for 32 signed levels: elements 0-15 with db_lo, 16-31 with db_hi (one
// float multiply each, as the reference).
LOOM_IQ_AVX2 inline void store_scaled(float* y, __m256i q, float db_lo, float db_hi) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  const __m256 dl = _mm256_set1_ps(db_lo), dh = _mm256_set1_ps(db_hi);
  _mm256_storeu_ps(y, _mm256_mul_ps(dl, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
  _mm256_storeu_ps(y + 8, _mm256_mul_ps(dl, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
  _mm256_storeu_ps(y + 16, _mm256_mul_ps(dh, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
  _mm256_storeu_ps(y + 24, _mm256_mul_ps(dh, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
}

// The group scale of the reference: d * (0.5 + s) / 4 (IQ2), d * (0.5 + s) / 2 (IQ3_XXS),
// d * (1 + 2 s) (IQ3_S), in the reference's operation order.
enum class Db { kIq2, kIq3xxs, kIq3s };
template <Db K>
inline float group_scale(float d, int s) {
  if constexpr (K == Db::kIq2) return d * (0.5f + float(s)) * 0.25f;
  if constexpr (K == Db::kIq3xxs) return d * (0.5f + float(s)) * 0.5f;
  return d * float(1 + 2 * s);
}

template <class F, Db K>
LOOM_IQ_AVX2 void dequant_grid(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n / 256; ++i, b += F::kBytes) {
    const float d = f16_at(b);
    alignas(32) uint32_t signs[8];
    F::signs(b, signs);
    for (int ib = 0; ib < 8; ++ib) {
      const Sub u = F::decode(b, ib, signs);
      const __m256i q = _mm256_sign_epi8(u.levels, signs_pm1(u.signs));  // levels <= 62
      store_scaled(dst + 256 * i + 32 * ib, q, group_scale<K>(d, u.s_lo), group_scale<K>(d, u.s_hi));
    }
  }
}

// IQ1: y = dl * (level + delta) per group of 8 (dl per 16 elements, delta per group).
LOOM_IQ_AVX2 inline void store_iq1(float* y, __m256i q, float dl_lo, float dl_hi, const float* delta) {
  const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
  const __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int g = 0; g < 4; ++g) {
    const __m256 v = _mm256_add_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[g])), _mm256_set1_ps(delta[g]));
    _mm256_storeu_ps(y + 8 * g, _mm256_mul_ps(_mm256_set1_ps(g < 2 ? dl_lo : dl_hi), v));
  }
}

// ---- IQ1_S / IQ1_M: signed grid levels -1/0/1 plus a +-1/8 shift per sub-block or group ------

// sum of level * activation over one sub-block times its scale(s) (levels move onto the
// activations with sign_epi8, ones * that with maddubs pairs them).
LOOM_IQ_AVX2 inline __m256i iq1_sub(__m256i levels, __m256i ls, const uint8_t* q8) {
  const __m256i y = _mm256_sign_epi8(load(q8), levels);
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), y), ls);
}

}  // namespace

void dequantize_row_iq2_xxs(const void* src, float* dst, int64_t n) { dequant_grid<Iq2xxs, Db::kIq2>(src, dst, n); }
void dequantize_row_iq2_xs(const void* src, float* dst, int64_t n) { dequant_grid<Iq2xs, Db::kIq2>(src, dst, n); }
void dequantize_row_iq2_s(const void* src, float* dst, int64_t n) { dequant_grid<Iq2s, Db::kIq2>(src, dst, n); }
void dequantize_row_iq3_xxs(const void* src, float* dst, int64_t n) { dequant_grid<Iq3xxs, Db::kIq3xxs>(src, dst, n); }
void dequantize_row_iq3_s(const void* src, float* dst, int64_t n) { dequant_grid<Iq3s, Db::kIq3s>(src, dst, n); }

LOOM_IQ_AVX2 void dequantize_row_iq1_s(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n / 256; ++i, b += 50) {
    const float d = f16_at(b);
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* q = b + 2 + 4 * ib;
      const int h = u16_at(b + 34 + 2 * ib);
      const __m256i levels =
          grid64(kIq1sGrid, q[0] | (h & 7) << 8, q[1] | (h & 0x38) << 5, q[2] | (h & 0x1c0) << 2, q[3] | (h & 0xe00) >> 1);
      const float dl = d * float(2 * ((h >> 12) & 7) + 1);
      const float dt = h & 0x8000 ? -kIq1sDelta : kIq1sDelta;
      const float delta[4] = {dt, dt, dt, dt};
      store_iq1(dst + 256 * i + 32 * ib, levels, dl, dl, delta);
    }
  }
}

LOOM_IQ_AVX2 void dequantize_row_iq1_m(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < n / 256; ++i, b += 56) {
    uint16_t sc[4];
    std::memcpy(sc, b + 48, 8);
    const float d = _cvtsh_ss(iq1m_d_bits(b + 48));
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* q = b + 4 * ib;
      const int h0 = b[32 + 2 * ib], h1 = b[33 + 2 * ib];
      const int s = sc[ib / 2] >> (6 * (ib % 2));
      const __m256i levels =
          grid64(kIq1sGrid, q[0] | (h0 & 7) << 8, q[1] | (h0 & 0x70) << 4, q[2] | (h1 & 7) << 8, q[3] | (h1 & 0x70) << 4);
      const float delta[4] = {h0 & 0x08 ? -kIq1mDelta : kIq1mDelta, h0 & 0x80 ? -kIq1mDelta : kIq1mDelta,
                              h1 & 0x08 ? -kIq1mDelta : kIq1mDelta, h1 & 0x80 ? -kIq1mDelta : kIq1mDelta};
      store_iq1(dst + 256 * i + 32 * ib, levels, d * float(2 * (s & 7) + 1), d * float(2 * ((s >> 3) & 7) + 1), delta);
    }
  }
}

float vec_dot_iq2_xxs_q8_k(int64_t n, const void* w, const void* a) { return dot_grid<Iq2xxs>(n, w, a, 0.125f); }
float vec_dot_iq2_xs_q8_k(int64_t n, const void* w, const void* a) { return dot_grid<Iq2xs>(n, w, a, 0.125f); }
float vec_dot_iq2_s_q8_k(int64_t n, const void* w, const void* a) { return dot_grid<Iq2s>(n, w, a, 0.125f); }
float vec_dot_iq3_xxs_q8_k(int64_t n, const void* w, const void* a) { return dot_grid<Iq3xxs>(n, w, a, 0.25f); }
float vec_dot_iq3_s_q8_k(int64_t n, const void* w, const void* a) { return dot_grid<Iq3s>(n, w, a, 1.0f); }

LOOM_IQ_AVX2 float vec_dot_iq1_s_q8_k(int64_t n, const void* wv, const void* av) {
  const auto* w = static_cast<const uint8_t*>(wv);
  const auto* a = static_cast<const uint8_t*>(av);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / 256; ++i, w += 50, a += kQ8K) {
    __m256i acc = _mm256_setzero_si256();
    int32_t isum_delta = 0;
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* q = w + 2 + 4 * ib;
      const int h = u16_at(w + 34 + 2 * ib);
      const int ls = 2 * ((h >> 12) & 7) + 1;
      const __m256i levels =
          grid64(kIq1sGrid, q[0] | (h & 7) << 8, q[1] | (h & 0x38) << 5, q[2] | (h & 0x1c0) << 2, q[3] | (h & 0xe00) >> 1);
      acc = _mm256_add_epi32(acc, iq1_sub(levels, _mm256_set1_epi16(int16_t(ls)), a + 4 + 32 * ib));
      const int bs = int16_t(u16_at(a + 260 + 4 * ib)) + int16_t(u16_at(a + 262 + 4 * ib));
      isum_delta += ls * (h & 0x8000 ? -1 : 1) * bs;
    }
    const int isum = hsum_i32(acc);
    sumf += f16_at(w) * f32_at(a) * (float(isum) + kIq1sDelta * float(isum_delta));
  }
  return sumf;
}

LOOM_IQ_AVX2 float vec_dot_iq1_m_q8_k(int64_t n, const void* wv, const void* av) {
  const auto* w = static_cast<const uint8_t*>(wv);
  const auto* a = static_cast<const uint8_t*>(av);
  // Byte k of a sub-block's 4 group bytes replicated over the group's 8 bytes.
  const __m256i spread =
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i eight = _mm256_set1_epi8(8), one = _mm256_set1_epi8(1);
  float sumf = 0.0f;
  for (int64_t i = 0; i < n / 256; ++i, w += 56, a += kQ8K) {
    // The block's 32 grid indices (qs | 3 bits of each qh nibble << 8) and delta signs (bit 3 of
    // the nibble), in group order.
    const __m128i qh = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 32));
    const __m128i nib_lo = _mm_and_si128(qh, _mm_set1_epi8(0x0f));
    const __m128i nib_hi = _mm_and_si128(_mm_srli_epi16(qh, 4), _mm_set1_epi8(0x0f));
    const __m256i nib = _mm256_set_m128i(_mm_unpackhi_epi8(nib_lo, nib_hi), _mm_unpacklo_epi8(nib_lo, nib_hi));
    const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    const __m256i hi3 = _mm256_and_si256(nib, _mm256_set1_epi8(7));
    alignas(32) uint16_t idx[32];  // groups 0-7, 16-23, then 8-15, 24-31 (unpack works per lane)
    _mm256_store_si256(reinterpret_cast<__m256i*>(idx), _mm256_unpacklo_epi8(qs, hi3));
    _mm256_store_si256(reinterpret_cast<__m256i*>(idx + 16), _mm256_unpackhi_epi8(qs, hi3));
    alignas(32) uint32_t dneg[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(dneg), _mm256_cmpeq_epi8(_mm256_and_si256(nib, eight), eight));
    uint16_t sc[4];
    std::memcpy(sc, w + 48, 8);
    __m256i acc = _mm256_setzero_si256();
    for (int ib = 0; ib < 8; ++ib) {
      // Group g sits at idx[g % 8 + 16 * ((g / 8) % 2) + 8 * (g / 16)].
      const int base = (ib % 2) * 4 + (ib / 2 % 2) * 16 + (ib / 4) * 8;
      const __m128i ix = _mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(idx + base)));
      const __m256i grid = _mm256_i32gather_epi64(reinterpret_cast<const long long*>(kIq1sGrid), ix, 8);
      const __m256i dmask = _mm256_shuffle_epi8(_mm256_set1_epi32(int(dneg[ib])), spread);
      // 8 * level +- 1 (the group's delta sign): the sum against the activations is
      // 8 isum + isum_delta.
      const __m256i lv = _mm256_add_epi8(_mm256_sign_epi8(eight, grid), _mm256_or_si256(dmask, one));
      const __m256i y = _mm256_sign_epi8(load(a + 4 + 32 * ib), lv);
      const int s = sc[ib / 2] >> (6 * (ib % 2));
      const __m256i ls = scales2(2 * (s & 7) + 1, 2 * ((s >> 3) & 7) + 1);
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(lv), y), ls));
    }
    // acc holds 8 isum + isum_delta; both below 2^23 in magnitude, so the reference's
    // float(isum) + delta * float(isum_delta) (delta = 1/8) equals float(acc) / 8 exactly.
    const int isum8 = hsum_i32(acc);
    const float d = _cvtsh_ss(iq1m_d_bits(w + 48));
    sumf += d * f32_at(a) * (float(isum8) * 0.125f);
  }
  return sumf;
}

}  // namespace loom::quant::iq::avx2

#endif  // __x86_64__

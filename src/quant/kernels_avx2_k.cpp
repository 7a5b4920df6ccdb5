// AVX2 kernels of the 256-element super-block formats: Q8_K activation quantization, the dot
// products of Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS (and Q8_K) weights with Q8_K activations, and
// dequantization of all of them.
//
// Exactness contract with kquants_ref.cpp (checked by tests/quant):
//  - quantize_row (Q8_K): byte-identical.
//  - dequantize_row: bit-identical.
//  - vec_dot: the same integer sums per super-block (exact), float accumulation in another order,
//    so results agree to rounding only.
//
// Dot products: each group of 32 weight levels is brought into element order as unsigned bytes
// (offsets such as Q6_K's -32 or Q3_K's -4 are taken out afterwards through the activations'
// bsums), multiplied with the 32 int8 activations by maddubs (pairs of u8 * i8 summed into
// int16: at most 2 * 63 * 127, no saturation since Q8_K values lie in [-127, 127]), and the
// int16 pair sums are multiplied by their sub-block scale and summed into int32 by madd. Per
// super-block the int32 lanes are converted once and scaled by d_w * d_a.
#if defined(__x86_64__)

#include <cmath>
#include <cstring>

#include "quant/avx2_util.h"
#include "quant/blocks.h"
#include "quant/kernels.h"

#if defined(__GNUC__) && !defined(__clang__)
#define LOOM_NOIPA __attribute__((noipa))
#else
#define LOOM_NOIPA
#endif

namespace loom::quant::detail::avx2 {
namespace {

constexpr int64_t kQ8K = sizeof(BlockQ8_K);
// Byte offsets inside a Q8_K block.
constexpr int kQ8KQs = 4, kQ8KBsums = 4 + 256;

LOOM_AVX2 inline float q8k_d(const uint8_t* a) {
  float d;
  std::memcpy(&d, a, 4);
  return d;
}

// int16 scale vector for 32 elements spanning two 16-element sub-blocks: s[0] over the low
// 128-bit lane (elements 0..15), s[1] over the high lane.
LOOM_AVX2 inline __m256i scale_pair(const int16_t* s) {
  int32_t pair;
  std::memcpy(&pair, s, 4);
  const __m256i shuf =
      _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
  return _mm256_shuffle_epi8(_mm256_set1_epi32(pair), shuf);
}

// 32 unsigned levels times 32 activations, scaled per sub-block, into 8 int32 lanes.
LOOM_AVX2 inline __m256i scaled_dot(__m256i u, const uint8_t* a, __m256i scales) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, loadu256(a)), scales);
}

// sum_j s16[j] * bsums[j] over the 16 sub-blocks (int32).
LOOM_AVX2 inline int bsum_dot(const int16_t* s16, const uint8_t* a) {
  const __m256i s = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s16));
  return hsum_i32(_mm256_madd_epi16(s, loadu256(a + kQ8KBsums)));
}

// ---- Q2_K ---------------------------------------------------------------------------------

LOOM_AVX2 float dot_q2_k(int64_t nb, const uint8_t* w, const uint8_t* a) {
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.0f;
  const __m256i m3 = _mm256_set1_epi8(3);
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* x = w + i * int64_t(sizeof(BlockQ2_K));
    const uint8_t* y = a + i * kQ8K;
    alignas(32) int16_t sc[16], mn[16];
    for (int s = 0; s < 16; ++s) {
      sc[s] = int16_t(x[s] & 0x0f);
      mn[s] = int16_t(x[s] >> 4);
    }
    __m256i isum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i q = loadu256(x + 16 + 32 * h);
      for (int j = 0; j < 4; ++j) {
        const __m256i u = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
        const int e = 128 * h + 32 * j;
        isum = _mm256_add_epi32(isum, scaled_dot(u, y + kQ8KQs + e, scale_pair(sc + e / 16)));
      }
    }
    const float dy = q8k_d(y);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(dy * f16(x + 80)), _mm256_cvtepi32_ps(isum), acc);
    mins += (dy * f16(x + 82)) * float(bsum_dot(mn, y));
  }
  return hsum(acc) - mins;
}

// ---- Q3_K ---------------------------------------------------------------------------------

// The 16 stored 6-bit scales (value + 32) of a Q3_K block, as bytes.
inline void q3k_scales(const uint8_t* s, uint8_t* out) {
  uint32_t a0, a1, t;
  std::memcpy(&a0, s, 4);
  std::memcpy(&a1, s + 4, 4);
  std::memcpy(&t, s + 8, 4);
  const uint32_t lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
  const uint32_t r[4] = {(a0 & lo4) | ((t & lo2) << 4), (a1 & lo4) | (((t >> 2) & lo2) << 4),
                         ((a0 >> 4) & lo4) | (((t >> 4) & lo2) << 4), ((a1 >> 4) & lo4) | (((t >> 6) & lo2) << 4)};
  std::memcpy(out, r, 16);
}

LOOM_AVX2 float dot_q3_k(int64_t nb, const uint8_t* w, const uint8_t* a) {
  __m256 acc = _mm256_setzero_ps();
  const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(4);
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* x = w + i * int64_t(sizeof(BlockQ3_K));
    const uint8_t* y = a + i * kQ8K;
    alignas(16) uint8_t raw[16];
    q3k_scales(x + 96, raw);
    alignas(32) int16_t sc[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(sc),
                       _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(raw))),
                                        _mm256_set1_epi16(32)));
    __m256i hm = loadu256(x);  // shifted right by one bit per 32-element group
    __m256i isum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i q = loadu256(x + 32 + 32 * h);
      for (int j = 0; j < 4; ++j) {
        // level + 4 = low 2 bits + 4 * high bit, in 0..7
        const __m256i low = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
        const __m256i high = _mm256_and_si256(_mm256_slli_epi16(hm, 2), m4);
        hm = _mm256_srli_epi16(hm, 1);
        const int e = 128 * h + 32 * j;
        isum = _mm256_add_epi32(isum, scaled_dot(_mm256_or_si256(low, high), y + kQ8KQs + e, scale_pair(sc + e / 16)));
      }
    }
    // Take out the +4 offset: sum_s sc_s * 4 * bsums_s.
    const int offset = 4 * bsum_dot(sc, y);
    isum = _mm256_sub_epi32(isum, _mm256_setr_epi32(offset, 0, 0, 0, 0, 0, 0, 0));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(q8k_d(y) * f16(x + 108)), _mm256_cvtepi32_ps(isum), acc);
  }
  return hsum(acc);
}

// ---- Q4_K / Q5_K --------------------------------------------------------------------------

// The 8 scales and 8 mins of a Q4_K / Q5_K block (see k4_scale_min), as bytes.
inline void k4_scales(const uint8_t* s, uint8_t* sc, uint8_t* mn) {
  uint32_t u0, u1, u2;
  std::memcpy(&u0, s, 4);
  std::memcpy(&u1, s + 4, 4);
  std::memcpy(&u2, s + 8, 4);
  const uint32_t m6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
  const uint32_t scs[2] = {u0 & m6, (u2 & lo4) | (((u0 >> 6) & lo2) << 4)};
  const uint32_t mns[2] = {u1 & m6, ((u2 >> 4) & lo4) | (((u1 >> 6) & lo2) << 4)};
  std::memcpy(sc, scs, 8);
  std::memcpy(mn, mns, 8);
}

// Unsigned levels of elements 64c..64c+31 (lo) and 64c+32..64c+63 (hi) of a Q4_K/Q5_K block:
// nibbles at byte kQs + 32c, for Q5_K (kHigh) plus the 5th bits from qh, which the caller
// loads from byte 16 and this shifts on by two bits per c.
template <bool kHigh, int kQs>
LOOM_AVX2 inline void q45k_levels(const uint8_t* x, int c, __m256i& qh, __m256i& lo, __m256i& hi) {
  const __m256i m4 = _mm256_set1_epi8(0x0f), b4 = _mm256_set1_epi8(0x10);
  const __m256i q = loadu256(x + kQs + 32 * c);
  lo = _mm256_and_si256(q, m4);
  hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
  if (kHigh) {
    lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4), b4));
    hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(qh, 3), b4));
    qh = _mm256_srli_epi16(qh, 2);
  }
}

// kHigh: Q5_K (5th bits in qh at byte 16 of the block, levels at 48) or Q4_K (levels at 16).
template <bool kHigh>
LOOM_AVX2 float dot_q45_k(int64_t nb, const uint8_t* w, const uint8_t* a) {
  constexpr int64_t kBytes = kHigh ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K);
  constexpr int kQs = kHigh ? 48 : 16;
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* x = w + i * kBytes;
    const uint8_t* y = a + i * kQ8K;
    uint8_t sc[8], mn[8];
    k4_scales(x + 4, sc, mn);
    // Mins against the bsums of the 32-element sub-blocks (pairs of 16-element bsums).
    const __m128i bs = _mm_hadd_epi16(loadu128(y + kQ8KBsums), loadu128(y + kQ8KBsums + 16));
    int64_t mn8;
    std::memcpy(&mn8, mn, 8);
    const __m128i m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(mn8));
    const __m128i mprod = _mm_madd_epi16(m16, bs);
    __m128i msum = _mm_add_epi32(mprod, _mm_shuffle_epi32(mprod, _MM_SHUFFLE(1, 0, 3, 2)));
    msum = _mm_add_epi32(msum, _mm_shuffle_epi32(msum, _MM_SHUFFLE(2, 3, 0, 1)));

    __m256i qh = kHigh ? loadu256(x + 16) : _mm256_setzero_si256();
    __m256i isum = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
      __m256i lo, hi;
      q45k_levels<kHigh, kQs>(x, c, qh, lo, hi);
      const uint8_t* yq = y + kQ8KQs + 64 * c;
      isum = _mm256_add_epi32(isum, scaled_dot(lo, yq, _mm256_set1_epi16(sc[2 * c])));
      isum = _mm256_add_epi32(isum, scaled_dot(hi, yq + 32, _mm256_set1_epi16(sc[2 * c + 1])));
    }
    const float dy = q8k_d(y);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(dy * f16(x)), _mm256_cvtepi32_ps(isum), acc);
    mins += (dy * f16(x + 2)) * float(_mm_cvtsi128_si32(msum));
  }
  return hsum(acc) - mins;
}

// ---- Q6_K ---------------------------------------------------------------------------------

// Unsigned levels 0..63 of Q6_K half h (elements 128h + 0-31, 32-63, 64-95, 96-127): low nibbles
// from ql, two high bits from qh (see BlockQ6_K in blocks.h).
LOOM_AVX2 inline void q6k_half_levels(const uint8_t* x, int h, __m256i u[4]) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  const __m256i ql0 = loadu256(x + 64 * h), ql1 = loadu256(x + 64 * h + 32);
  const __m256i qh = loadu256(x + 128 + 32 * h);
  u[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x03)), 4));
  u[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_slli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(0x0c)), 2));
  u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, _mm256_set1_epi8(0x30)));
  u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                         _mm256_srli_epi16(_mm256_and_si256(qh, _mm256_set1_epi8(char(0xc0))), 2));
}

LOOM_AVX2 float dot_q6_k(int64_t nb, const uint8_t* w, const uint8_t* a) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* x = w + i * int64_t(sizeof(BlockQ6_K));
    const uint8_t* y = a + i * kQ8K;
    alignas(32) int16_t sc[16];
    _mm256_store_si256(reinterpret_cast<__m256i*>(sc), _mm256_cvtepi8_epi16(loadu128(x + 192)));
    __m256i isum = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      __m256i u[4];
      q6k_half_levels(x, h, u);
      for (int k = 0; k < 4; ++k) {
        const int e = 128 * h + 32 * k;
        isum = _mm256_add_epi32(isum, scaled_dot(u[k], y + kQ8KQs + e, scale_pair(sc + e / 16)));
      }
    }
    // Take out the +32 offset: sum_s sc_s * 32 * bsums_s.
    const int offset = 32 * bsum_dot(sc, y);
    isum = _mm256_sub_epi32(isum, _mm256_setr_epi32(offset, 0, 0, 0, 0, 0, 0, 0));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(q8k_d(y) * f16(x + 208)), _mm256_cvtepi32_ps(isum), acc);
  }
  return hsum(acc);
}

// ---- IQ4_XS -------------------------------------------------------------------------------

LOOM_AVX2 float dot_iq4_xs(int64_t nb, const uint8_t* w, const uint8_t* a) {
  __m256 acc = _mm256_setzero_ps();
  const __m128i table128 = loadu128(kIq4nlValues);
  const __m256i table = _mm256_set_m128i(table128, table128);
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* x = w + i * int64_t(sizeof(BlockIQ4_XS));
    const uint8_t* y = a + i * kQ8K;
    uint16_t scales_h;
    std::memcpy(&scales_h, x + 2, 2);
    __m256i isum = _mm256_setzero_si256();
    for (int s = 0; s < 8; ++s) {
      // Signed levels: move their sign onto the activations for maddubs (|level| <= 127).
      const __m256i v = _mm256_shuffle_epi8(table, unpack_nibbles(x + 8 + 16 * s));
      const __m256i ya = loadu256(y + kQ8KQs + 32 * s);
      const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(ya, v));
      const int ls = iq4xs_scale(x + 4, scales_h, s) - 32;
      isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p16, _mm256_set1_epi16(int16_t(ls))));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(q8k_d(y) * f16(x)), _mm256_cvtepi32_ps(isum), acc);
  }
  return hsum(acc);
}

// ---- Q8_K as weights (Q8_K x Q8_K) --------------------------------------------------------

LOOM_AVX2 float dot_q8_k(int64_t nb, const uint8_t* w, const uint8_t* a) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* x = w + i * kQ8K;
    const uint8_t* y = a + i * kQ8K;
    __m256i isum = _mm256_setzero_si256();
    for (int k = 0; k < 8; ++k) {
      // Weights may be -128: |x| as u8 is still right; activations are within [-127, 127].
      const __m256i v = loadu256(x + kQ8KQs + 32 * k);
      const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(loadu256(y + kQ8KQs + 32 * k), v));
      isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(q8k_d(y) * q8k_d(x)), _mm256_cvtepi32_ps(isum), acc);
  }
  return hsum(acc);
}

// ---- Q8_K quantization --------------------------------------------------------------------

LOOM_AVX2 void quant_q8_k(int64_t nb, const uint8_t* src, uint8_t* dst) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = reinterpret_cast<const float*>(src + i * 1024);
    uint8_t* b = dst + i * kQ8K;
    __m256 amax = _mm256_setzero_ps();
    // max_ps returns its second operand when either is NaN: NaN inputs are skipped, as in the
    // reference's comparison.
    for (int k = 0; k < 32; ++k) amax = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)), amax);
    const float m = hmax(amax);
    if (!(m > 0.0f)) {  // all zero (NaN inputs are not supported, as in the reference)
      std::memset(b, 0, size_t(kQ8K));
      continue;
    }
    // The first element of largest magnitude, with its sign.
    float vmax = 0.0f;
    const __m256 vm = _mm256_set1_ps(m);
    for (int k = 0; k < 32; ++k) {
      const __m256 v = _mm256_loadu_ps(x + 8 * k);
      const int mask = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, v), vm, _CMP_EQ_OQ));
      if (mask) {
        std::memcpy(&vmax, x + 8 * k + __builtin_ctz(unsigned(mask)), 4);
        break;
      }
    }
    const float iscale = -127.0f / vmax;
    const __m256 vis = _mm256_set1_ps(iscale);
    // Clamp to [-128, 127] before converting (NaN -> 127 through min_ps's second operand), as
    // the reference does.
    const __m256 top = _mm256_set1_ps(127.0f), bottom = _mm256_set1_ps(-128.0f);
    __m128i sums[4];
    for (int g = 0; g < 4; ++g) {  // 64 elements: 2 x 32 output bytes, 4 bsums
      __m256i q[8];
      for (int k = 0; k < 8; ++k) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + 64 * g + 8 * k), vis);
        const __m256 r = _mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q[k] = _mm256_cvtps_epi32(_mm256_max_ps(_mm256_min_ps(r, top), bottom));
      }
      for (int half = 0; half < 2; ++half) {
        const __m256i* p = q + 4 * half;
        __m256i p8 = _mm256_packs_epi16(_mm256_packs_epi32(p[0], p[1]), _mm256_packs_epi32(p[2], p[3]));
        p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(b + kQ8KQs + 64 * g + 32 * half), p8);
      }
      // bsums of the four 16-element groups: horizontal sums of q[0]+q[1], ..., q[6]+q[7].
      const __m256i s01 = _mm256_hadd_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
      const __m256i s23 = _mm256_hadd_epi32(_mm256_add_epi32(q[4], q[5]), _mm256_add_epi32(q[6], q[7]));
      const __m256i s = _mm256_hadd_epi32(s01, s23);
      sums[g] = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b + kQ8KBsums), _mm_packs_epi32(sums[0], sums[1]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(b + kQ8KBsums + 16), _mm_packs_epi32(sums[2], sums[3]));
    const float d = 1.0f / iscale;
    std::memcpy(b, &d, 4);
  }
}

// ---- dequantization -----------------------------------------------------------------------
//
// Bit-identical with kquants_ref.cpp: the levels are decoded with SIMD into 256 int8 values in
// element order, the per-16 factors dl = d * scale and ml = dmin * min are the same scalar float
// products as the reference, and each element is dl * level (exact conversion, one rounding)
// minus ml (a second rounding), never fused.

struct Levels {
  alignas(32) int8_t q[256];
  float dl[16];
  float ml[16];
};

LOOM_AVX2 inline void store_levels(__m256i v, int8_t* q) { _mm256_store_si256(reinterpret_cast<__m256i*>(q), v); }

LOOM_AVX2 void levels_q2_k(const uint8_t* x, Levels& o) {
  const float d = f16(x + 80), dmin = f16(x + 82);
  for (int s = 0; s < 16; ++s) {
    o.dl[s] = d * float(x[s] & 0x0f);
    o.ml[s] = dmin * float(x[s] >> 4);
  }
  const __m256i m3 = _mm256_set1_epi8(3);
  for (int h = 0; h < 2; ++h) {
    const __m256i q = loadu256(x + 16 + 32 * h);
    for (int j = 0; j < 4; ++j) {
      store_levels(_mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3), o.q + 128 * h + 32 * j);
    }
  }
}

LOOM_AVX2 void levels_q3_k(const uint8_t* x, Levels& o) {
  const float d = f16(x + 108);
  alignas(16) uint8_t raw[16];
  q3k_scales(x + 96, raw);
  for (int s = 0; s < 16; ++s) o.dl[s] = d * float(int(raw[s]) - 32);
  const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(4);
  __m256i hm = loadu256(x);
  for (int h = 0; h < 2; ++h) {
    const __m256i q = loadu256(x + 32 + 32 * h);
    for (int j = 0; j < 4; ++j) {
      const __m256i low = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
      const __m256i high = _mm256_and_si256(_mm256_slli_epi16(hm, 2), m4);
      hm = _mm256_srli_epi16(hm, 1);
      store_levels(_mm256_sub_epi8(_mm256_or_si256(low, high), m4), o.q + 128 * h + 32 * j);
    }
  }
}

template <bool kHigh>
LOOM_AVX2 void levels_q45_k(const uint8_t* x, Levels& o) {
  constexpr int kQs = kHigh ? 48 : 16;
  const float d = f16(x), dmin = f16(x + 2);
  uint8_t sc[8], mn[8];
  k4_scales(x + 4, sc, mn);
  for (int j = 0; j < 8; ++j) {
    o.dl[2 * j] = o.dl[2 * j + 1] = d * float(sc[j]);
    o.ml[2 * j] = o.ml[2 * j + 1] = dmin * float(mn[j]);
  }
  __m256i qh = kHigh ? loadu256(x + 16) : _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {
    __m256i lo, hi;
    q45k_levels<kHigh, kQs>(x, c, qh, lo, hi);
    store_levels(lo, o.q + 64 * c);
    store_levels(hi, o.q + 64 * c + 32);
  }
}

LOOM_AVX2 void levels_q6_k(const uint8_t* x, Levels& o) {
  const float d = f16(x + 208);
  for (int s = 0; s < 16; ++s) o.dl[s] = d * float(int8_t(x[192 + s]));
  const __m256i m32 = _mm256_set1_epi8(32);
  for (int h = 0; h < 2; ++h) {
    __m256i u[4];
    q6k_half_levels(x, h, u);
    for (int k = 0; k < 4; ++k) store_levels(_mm256_sub_epi8(u[k], m32), o.q + 128 * h + 32 * k);
  }
}

LOOM_AVX2 void levels_iq4_xs(const uint8_t* x, Levels& o) {
  const float d = f16(x);
  uint16_t scales_h;
  std::memcpy(&scales_h, x + 2, 2);
  const __m128i table128 = loadu128(kIq4nlValues);
  const __m256i table = _mm256_set_m128i(table128, table128);
  for (int s = 0; s < 8; ++s) {
    o.dl[2 * s] = o.dl[2 * s + 1] = d * float(iq4xs_scale(x + 4, scales_h, s) - 32);
    store_levels(_mm256_shuffle_epi8(table, unpack_nibbles(x + 8 + 16 * s)), o.q + 32 * s);
  }
}

LOOM_AVX2 void levels_q8_k(const uint8_t* x, Levels& o) {
  const float d = q8k_d(x);
  for (int s = 0; s < 16; ++s) o.dl[s] = d;  // d * 1, exactly
  for (int k = 0; k < 8; ++k) store_levels(loadu256(x + kQ8KQs + 32 * k), o.q + 32 * k);
}

// kMin: the format subtracts ml (Q2_K, Q4_K, Q5_K); the others store dl * level only.
// LOOM_NOIPA: GCC 12.2 at -O2 drops the calls to these instantiations from kq_dequantize_row
// (with -fno-ipa-pure-const -fno-ipa-modref it keeps them; clang keeps them), so nothing is
// written; keeping them out of inter-procedural analysis avoids that. test_quant_golden's
// dequantization goldens and test_quant's bit-exactness test catch it if it comes back.
template <int64_t kBytes, void (*Decode)(const uint8_t*, Levels&), bool kMin>
LOOM_NOIPA LOOM_AVX2 void dequant_k(int64_t nb, const uint8_t* x, float* y) {
  Levels o;
  for (int64_t i = 0; i < nb; ++i) {
    Decode(x + i * kBytes, o);
    float* out = y + i * kSuper;
    for (int s = 0; s < 16; ++s) {
      const __m128i q16 = _mm_load_si128(reinterpret_cast<const __m128i*>(o.q + 16 * s));
      const __m256 dl = _mm256_set1_ps(o.dl[s]);
      const __m256 ml = _mm256_set1_ps(kMin ? o.ml[s] : 0.0f);
      for (int half = 0; half < 2; ++half) {
        const __m128i q8 = half ? _mm_srli_si128(q16, 8) : q16;
        __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8)), dl);
        if (kMin) v = _mm256_sub_ps(v, ml);
        _mm256_storeu_ps(out + 16 * s + 8 * half, v);
      }
    }
  }
}

}  // namespace

// One entry point per type and operation (kernels.h); type_traits.cpp puts them in the table.
#define LOOM_AVX2_K(t, Block, levels, has_min, dot)                                               \
  LOOM_AVX2 void dequantize_##t(const void* src, float* dst, int64_t n) {                         \
    dequant_k<sizeof(Block), levels, has_min>(n / kSuper, static_cast<const uint8_t*>(src), dst); \
  }                                                                                               \
  LOOM_AVX2 float vec_dot_##t(int64_t n, const void* w, const void* a) {                          \
    return dot(n / kSuper, static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(a));       \
  }
LOOM_AVX2_K(q2_k, BlockQ2_K, levels_q2_k, true, dot_q2_k)
LOOM_AVX2_K(q3_k, BlockQ3_K, levels_q3_k, false, dot_q3_k)
LOOM_AVX2_K(q4_k, BlockQ4_K, levels_q45_k<false>, true, dot_q45_k<false>)
LOOM_AVX2_K(q5_k, BlockQ5_K, levels_q45_k<true>, true, dot_q45_k<true>)
LOOM_AVX2_K(q6_k, BlockQ6_K, levels_q6_k, false, dot_q6_k)
LOOM_AVX2_K(iq4_xs, BlockIQ4_XS, levels_iq4_xs, false, dot_iq4_xs)
LOOM_AVX2_K(q8_k, BlockQ8_K, levels_q8_k, false, dot_q8_k)
#undef LOOM_AVX2_K

LOOM_AVX2 void quantize_q8_k(const float* src, void* dst, int64_t n) {
  quant_q8_k(n / kSuper, reinterpret_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst));
}

}  // namespace loom::quant::detail::avx2

#endif  // __x86_64__

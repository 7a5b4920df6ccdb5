// AVX2 + FMA + F16C kernels of TQ1_0, TQ2_0, MXFP4, Q1_0 and Q2_0 (layouts: small_types.h).
// Every function carries the target attribute, so the binary still runs on CPUs without AVX2;
// callers check cpu_features().has_avx2_set() first.
//
// Contract with the references (small_types.cpp), checked by tests/quant/test_small_types.cpp:
// dequantize_row bit-identical (each value is one float product level * scale, as there), vec_dot
// the same integer block sums with float accumulation in 8 lanes (FMA), so equal up to rounding.
// Loads are unaligned throughout.
#if defined(__x86_64__)

#include <immintrin.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "quant/avx2_util.h"
#include "quant/small_types.h"

namespace loom::quant::detail::small_simd {
namespace {

using avx2::f16;
using avx2::hsum;
using avx2::loadu128;
using avx2::loadu256;

[[noreturn]] void bad_length(const char* fn, int64_t n) {
  std::fprintf(stderr, "loom: %s: %lld elements is not a whole number of blocks\n", fn, static_cast<long long>(n));
  std::abort();
}
inline int64_t blocks(const char* fn, int64_t n, int block) {
  if (n < 0 || n % block != 0) bad_length(fn, n);
  return n / block;
}

constexpr int kQ80Bytes = 34;   // Q8_0 block: f16 d, 32 x i8
constexpr int kQ8KBytes = 292;  // Q8_K block: f32 d, 256 x i8, 16 x i16 bsums

LOOM_AVX2 inline float f32_at(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

// Sum of 32 int8 products w * y with w in [-12, 12] (sign moved onto y for maddubs), as 16
// int16 pair sums.
LOOM_AVX2 inline __m256i mul_i8_pairs(__m256i w, __m256i y) {
  return _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(y, w));
}
LOOM_AVX2 inline __m256i sum_pairs_i32(__m256i p16) { return _mm256_madd_epi16(p16, _mm256_set1_epi16(1)); }

// ---- Q1_0 -----------------------------------------------------------------------------------

// 32 bits -> 32 bytes, 0xff where the element's bit is set.
LOOM_AVX2 inline __m256i bits_to_mask(const uint8_t* p) { return avx2::expand_bits(p); }

// The scales of 8 consecutive Q8_0 blocks at a, each times the f16 scale of the weight block it
// pairs with (weight block k / per of the row at w, blocks of 18 bytes) and by sign: fields
// gathered as dwords (inside the blocks), stored to out[8].
LOOM_AVX2 inline void q8_0_scales8(const uint8_t* a, const uint8_t* w, int per, float sign, float* out) {
  const __m256i k = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i ia = _mm256_mullo_epi32(k, _mm256_set1_epi32(kQ80Bytes));
  const __m256i iw = _mm256_mullo_epi32(_mm256_srli_epi32(k, per == 4 ? 2 : 1), _mm256_set1_epi32(18));
  const __m256i pack = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4, 5, 8, 9, 12, 13,
                                        -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i ga = _mm256_i32gather_epi32(reinterpret_cast<const int*>(a), ia, 1);
  const __m256i gw = _mm256_i32gather_epi32(reinterpret_cast<const int*>(w), iw, 1);
  const __m256 da = _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_shuffle_epi8(ga, pack), 0x08)));
  const __m256 dw = _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_shuffle_epi8(gw, pack), 0x08)));
  _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_mul_ps(da, dw), _mm256_set1_ps(sign)));
}

// sign(y, mask | 1) is -y where the bit is set and y where it is not: the negated products of
// one Q8_0 block, as 8 int32 sums.
LOOM_AVX2 inline __m256i q1_0_negdot(const uint8_t* bits, const uint8_t* y_block) {
  const __m256i one = _mm256_set1_epi8(1);
  const __m256i s = _mm256_sign_epi8(loadu256(y_block + 2), _mm256_or_si256(bits_to_mask(bits), one));
  return sum_pairs_i32(_mm256_maddubs_epi16(one, s));
}

LOOM_AVX2 float dot_q1_0(int64_t nb, const uint8_t* w, const uint8_t* a) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  alignas(32) float sc[8];
  int64_t i = 0;
  // Two blocks (8 Q8_0 blocks) per pass, their scales -d_w * d_a first, kept in memory.
  for (; i + 2 <= nb; i += 2) {
    const uint8_t* w0 = w + i * 18;
    const uint8_t* a0 = a + i * 4 * kQ80Bytes;
    q8_0_scales8(a0, w0, 4, -1.0f, sc);
    __asm__ volatile("" : : "r"(sc) : "memory");
    for (int k = 0; k < 8; k += 2) {
      const uint8_t* bits = w0 + 18 * (k / 4) + 2 + 4 * (k % 4);
      acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q1_0_negdot(bits, a0 + k * kQ80Bytes)), _mm256_broadcast_ss(sc + k), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q1_0_negdot(bits + 4, a0 + (k + 1) * kQ80Bytes)),
                             _mm256_broadcast_ss(sc + k + 1), acc1);
    }
  }
  for (; i < nb; ++i) {
    const uint8_t* bw = w + i * 18;
    const uint8_t* ba = a + i * 4 * kQ80Bytes;
    const float dw = f16(bw);
    for (int k = 0; k < 4; ++k) {
      acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q1_0_negdot(bw + 2 + 4 * k, ba + k * kQ80Bytes)),
                             _mm256_set1_ps(-f16(ba + k * kQ80Bytes) * dw), acc0);
    }
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// ---- Q2_0 -----------------------------------------------------------------------------------

// The 64 levels (0..3) of a Q2_0 block in element order: lo = elements 0..31, hi = 32..63.
LOOM_AVX2 inline void levels_q2_0(const uint8_t* qs, __m256i* lo, __m256i* hi) {
  const __m128i x = loadu128(qs);
  // Lane 0 works on bytes 0..7 (elements 0..31), lane 1 on bytes 8..15 (elements 32..63).
  const __m256i v = _mm256_set_m128i(_mm_srli_si128(x, 8), x);
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m256i v0 = _mm256_and_si256(v, m3);
  const __m256i v1 = _mm256_and_si256(_mm256_srli_epi16(v, 2), m3);
  const __m256i v2 = _mm256_and_si256(_mm256_srli_epi16(v, 4), m3);
  const __m256i v3 = _mm256_and_si256(_mm256_srli_epi16(v, 6), m3);
  // Interleave so that byte 4j + s is field s of source byte j.
  const __m256i a = _mm256_unpacklo_epi8(v0, v1);
  const __m256i b = _mm256_unpacklo_epi8(v2, v3);
  const __m256i e0 = _mm256_unpacklo_epi16(a, b);  // lane 0: elements 0..15, lane 1: 32..47
  const __m256i e1 = _mm256_unpackhi_epi16(a, b);  // lane 0: 16..31, lane 1: 48..63
  *lo = _mm256_permute2x128_si256(e0, e1, 0x20);
  *hi = _mm256_permute2x128_si256(e0, e1, 0x31);
}

LOOM_AVX2 float dot_q2_0(int64_t nb, const uint8_t* w, const uint8_t* a) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const __m256i one = _mm256_set1_epi8(1);
  alignas(32) float sc[8];
  int64_t i = 0;
  // Four blocks (8 Q8_0 blocks) per pass, their scales d_w * d_a first, kept in memory.
  for (; i + 4 <= nb; i += 4) {
    const uint8_t* w0 = w + i * 18;
    const uint8_t* a0 = a + i * 2 * kQ80Bytes;
    q8_0_scales8(a0, w0, 2, 1.0f, sc);
    __asm__ volatile("" : : "r"(sc) : "memory");
    for (int b = 0; b < 4; ++b) {
      const uint8_t* ab = a0 + 2 * b * kQ80Bytes;
      __m256i lo, hi;
      levels_q2_0(w0 + 18 * b + 2, &lo, &hi);
      const __m256i p0 = sum_pairs_i32(mul_i8_pairs(_mm256_sub_epi8(lo, one), loadu256(ab + 2)));
      const __m256i p1 = sum_pairs_i32(mul_i8_pairs(_mm256_sub_epi8(hi, one), loadu256(ab + kQ80Bytes + 2)));
      acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_broadcast_ss(sc + 2 * b), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_broadcast_ss(sc + 2 * b + 1), acc1);
    }
  }
  for (; i < nb; ++i) {
    const uint8_t* bw = w + i * 18;
    const uint8_t* ba = a + i * 2 * kQ80Bytes;
    const float dw = f16(bw);
    __m256i lo, hi;
    levels_q2_0(bw + 2, &lo, &hi);
    const __m256i p0 = sum_pairs_i32(mul_i8_pairs(_mm256_sub_epi8(lo, one), loadu256(ba + 2)));
    const __m256i p1 = sum_pairs_i32(mul_i8_pairs(_mm256_sub_epi8(hi, one), loadu256(ba + kQ80Bytes + 2)));
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p0), _mm256_set1_ps(f16(ba) * dw), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p1), _mm256_set1_ps(f16(ba + kQ80Bytes) * dw), acc1);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// ---- MXFP4 ----------------------------------------------------------------------------------

// 16 bytes of nibbles -> 32 bytes 0..15 in element order, without a lane-crossing shuffle: the
// 16 bytes broadcast to both lanes, the upper lane shifted by 4.
LOOM_AVX2 inline __m256i nibbles_bcast(const uint8_t* qs) {
  const __m256i x = _mm256_broadcastsi128_si256(loadu128(qs));
  return _mm256_and_si256(_mm256_srlv_epi32(x, _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)), _mm256_set1_epi8(0x0f));
}

LOOM_AVX2 inline __m256i levels_mxfp4(const uint8_t* qs) {
  const __m128i table = loadu128(kMxfp4Values);
  return _mm256_shuffle_epi8(_mm256_set_m128i(table, table), nibbles_bcast(qs));
}

// The scales of 8 consecutive blocks, f16 d of the activation times 2^(e - 128), each the same
// float product as the reference's: the fields gathered as dwords (their 4 bytes lie inside the
// blocks), the halves packed for one conversion.
LOOM_AVX2 inline void mxfp4_scales8(const uint8_t* w, const uint8_t* a, float* out) {
  const __m256i ev = _mm256_and_si256(
      _mm256_i32gather_epi32(reinterpret_cast<const int*>(w), _mm256_setr_epi32(0, 17, 34, 51, 68, 85, 102, 119), 1),
      _mm256_set1_epi32(0xff));
  const __m256i dv =
      _mm256_i32gather_epi32(reinterpret_cast<const int*>(a), _mm256_setr_epi32(0, 34, 68, 102, 136, 170, 204, 238), 1);
  const __m256i pack = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 4, 5, 8, 9, 12, 13,
                                        -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i halves = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(dv, pack), 0x08);
  const __m256 d = _mm256_cvtph_ps(_mm256_castsi256_si128(halves));
  // 2^(e - 128): exponent field e - 1, or the subnormals 2^-128, 2^-127 for e = 0, 1.
  const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(ev, _mm256_set1_epi32(1)), 23);
  const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), ev);
  const __m256i bits = _mm256_blendv_epi8(sub, normal, _mm256_cmpgt_epi32(ev, _mm256_set1_epi32(1)));
  _mm256_storeu_ps(out, _mm256_mul_ps(d, _mm256_castsi256_ps(bits)));
}

LOOM_AVX2 inline __m256 mxfp4_block(const uint8_t* w0, const uint8_t* a0) {
  return _mm256_cvtepi32_ps(sum_pairs_i32(mul_i8_pairs(levels_mxfp4(w0 + 1), loadu256(a0 + 2))));
}

LOOM_AVX2 float dot_mxfp4(int64_t nb, const uint8_t* w, const uint8_t* a) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  alignas(32) float sc[8];
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    const uint8_t* w0 = w + i * 17;
    const uint8_t* a0 = a + i * kQ80Bytes;
    mxfp4_scales8(w0, a0, sc);
    for (int j = 0; j < 8; j += 2) {
      acc0 = _mm256_fmadd_ps(mxfp4_block(w0 + j * 17, a0 + j * kQ80Bytes), _mm256_broadcast_ss(sc + j), acc0);
      acc1 =
          _mm256_fmadd_ps(mxfp4_block(w0 + (j + 1) * 17, a0 + (j + 1) * kQ80Bytes), _mm256_broadcast_ss(sc + j + 1), acc1);
    }
  }
  for (; i < nb; ++i) {
    const uint8_t* w0 = w + i * 17;
    const uint8_t* a0 = a + i * kQ80Bytes;
    acc0 = _mm256_fmadd_ps(mxfp4_block(w0, a0), _mm256_set1_ps(f16(a0) * e8m0_half(w0[0])), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// ---- ternary formats ------------------------------------------------------------------------

// The scales of 8 consecutive ternary blocks (f16 d at byte dpos of each wbytes-byte weight
// block) times those of their Q8_K activation blocks (f32 d first), times sign, stored to
// out[8]. The f16 is gathered as the upper half of the dword ending with it (inside the block).
LOOM_AVX2 inline void tq_scales8(const uint8_t* w, int wbytes, int dpos, const uint8_t* a, float sign, float* out) {
  const __m256i k = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i gw = _mm256_i32gather_epi32(reinterpret_cast<const int*>(w + dpos - 2),
                                            _mm256_mullo_epi32(k, _mm256_set1_epi32(wbytes)), 1);
  // The upper halves of the dwords -> 8 contiguous halves.
  const __m256i pack = _mm256_setr_epi8(2, 3, 6, 7, 10, 11, 14, 15, -1, -1, -1, -1, -1, -1, -1, -1, 2, 3, 6, 7, 10, 11, 14,
                                        15, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256 dw = _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_shuffle_epi8(gw, pack), 0x08)));
  const __m256 da =
      _mm256_i32gather_ps(reinterpret_cast<const float*>(a), _mm256_mullo_epi32(k, _mm256_set1_epi32(kQ8KBytes)), 1);
  _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_mul_ps(da, dw), _mm256_set1_ps(sign)));
}

// ---- TQ2_0 ----------------------------------------------------------------------------------

// sum_e (level_e - 1) y_e over a block = sum level * y (maddubs: level unsigned 0..3) minus the
// sum of y, which Q8_K keeps as bsums.
LOOM_AVX2 inline __m256i tq2_block(const uint8_t* bw, const uint8_t* ba) {
  const __m256i m3 = _mm256_set1_epi8(3);
  __m256i s16 = _mm256_setzero_si256();  // at most 8 x 2 x 3 x 127 per lane: fits int16
  for (int h = 0; h < 2; ++h) {
    const __m256i q = loadu256(bw + 32 * h);
    for (int l = 0; l < 4; ++l) {
      const __m256i lv = _mm256_and_si256(_mm256_srli_epi16(q, 2 * l), m3);
      s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(lv, loadu256(ba + 4 + 128 * h + 32 * l)));
    }
  }
  return _mm256_sub_epi32(sum_pairs_i32(s16), sum_pairs_i32(loadu256(ba + 260)));
}

// sum_e (level_e - 1) y_e over a block = sum level * y (maddubs: level unsigned 0..3) minus the
// sum of y, which Q8_K keeps as bsums.
LOOM_AVX2 float dot_tq2_0(int64_t nb, const uint8_t* w, const uint8_t* a) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  alignas(32) float sc[8];
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    tq_scales8(w + i * 66, 66, 64, a + i * kQ8KBytes, 1.0f, sc);
    __asm__ volatile("" : : "r"(sc) : "memory");  // broadcast the scales by loads
    for (int b = 0; b < 8; b += 2) {
      acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tq2_block(w + (i + b) * 66, a + (i + b) * kQ8KBytes)),
                             _mm256_broadcast_ss(sc + b), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tq2_block(w + (i + b + 1) * 66, a + (i + b + 1) * kQ8KBytes)),
                             _mm256_broadcast_ss(sc + b + 1), acc1);
    }
  }
  for (; i < nb; ++i) {
    const uint8_t* bw = w + i * 66;
    const uint8_t* ba = a + i * kQ8KBytes;
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tq2_block(bw, ba)), _mm256_set1_ps(f32_at(ba) * f16(bw + 64)), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// ---- TQ1_0 ----------------------------------------------------------------------------------

// Bytes q (each a trit's position already multiplied into the top: B * 3^k mod 256) -> the
// negated level 1 - trit as int8 (+1, 0, -1): trit = (q >= 86) + (q >= 171).
LOOM_AVX2 inline __m256i neg_level_tq1(__m256i q) {
  const __m256i qs = _mm256_xor_si256(q, _mm256_set1_epi8(int8_t(0x80)));
  const __m256i ge86 = _mm256_cmpgt_epi8(qs, _mm256_set1_epi8(int8_t(85 ^ 0x80)));
  const __m256i ge171 = _mm256_cmpgt_epi8(qs, _mm256_set1_epi8(int8_t(170 ^ 0x80)));
  return _mm256_add_epi8(_mm256_add_epi8(ge86, ge171), _mm256_set1_epi8(1));
}
LOOM_AVX2 inline __m256i times3(__m256i q) { return _mm256_add_epi8(_mm256_add_epi8(q, q), q); }
LOOM_AVX2 inline __m128i times3(__m128i q) { return _mm_add_epi8(_mm_add_epi8(q, q), q); }

// The eight 32-element groups of a TQ1_0 block as shifted bytes (trit = top of the byte), in
// element order: five from qs[0..31], then qs[32..47] x {1, 3}, x {9, 27}, and x 81 with qh.
LOOM_AVX2 inline void tq1_groups(const uint8_t* bw, __m256i (&g)[8]) {
  __m256i q = loadu256(bw);
  for (int k = 0; k < 5; ++k) {
    g[k] = q;
    q = times3(q);
  }
  const __m128i x1 = loadu128(bw + 32);
  const __m128i x3 = times3(x1), x9 = times3(x3), x27 = times3(x9), x81 = times3(x27);
  uint32_t qh;
  std::memcpy(&qh, bw + 48, 4);
  // Element 240 + 4k + j is trit k of qh[j]: the four bytes times 1, 3, 9, 27.
  const __m128i h1 = _mm_set1_epi32(int(qh));
  const __m128i h3 = times3(h1), h9 = times3(h3), h27 = times3(h9);
  const __m128i h = _mm_blend_epi32(_mm_blend_epi32(h1, h3, 0x2), _mm_blend_epi32(h9, h27, 0x8), 0xc);
  g[5] = _mm256_set_m128i(x3, x1);
  g[6] = _mm256_set_m128i(x27, x9);
  g[7] = _mm256_set_m128i(h, x81);
}

// The negated block sum sum_e (1 - trit_e) y_e as 8 int32 lanes.
LOOM_AVX2 inline __m256i tq1_negblock(const uint8_t* bw, const uint8_t* ba) {
  const __m256i one = _mm256_set1_epi8(1);
  __m256i s16 = _mm256_setzero_si256();  // at most 8 x 2 x 127 per lane
  __m256i g[8];
  tq1_groups(bw, g);
  for (int k = 0; k < 8; ++k) {
    const __m256i prod = _mm256_sign_epi8(loadu256(ba + 4 + 32 * k), neg_level_tq1(g[k]));
    s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(one, prod));
  }
  return sum_pairs_i32(s16);
}

LOOM_AVX2 float dot_tq1_0(int64_t nb, const uint8_t* w, const uint8_t* a) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  alignas(32) float sc[8];
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    tq_scales8(w + i * 54, 54, 52, a + i * kQ8KBytes, -1.0f, sc);
    __asm__ volatile("" : : "r"(sc) : "memory");  // broadcast the scales by loads
    for (int b = 0; b < 8; b += 2) {
      acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tq1_negblock(w + (i + b) * 54, a + (i + b) * kQ8KBytes)),
                             _mm256_broadcast_ss(sc + b), acc0);
      acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tq1_negblock(w + (i + b + 1) * 54, a + (i + b + 1) * kQ8KBytes)),
                             _mm256_broadcast_ss(sc + b + 1), acc1);
    }
  }
  for (; i < nb; ++i) {
    const uint8_t* bw = w + i * 54;
    const uint8_t* ba = a + i * kQ8KBytes;
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tq1_negblock(bw, ba)), _mm256_set1_ps(-(f16(bw + 52) * f32_at(ba))), acc0);
  }
  return hsum(_mm256_add_ps(acc0, acc1));
}

// ---- dequantization -------------------------------------------------------------------------

// 32 int8 levels times d into dst (four stores of 8 floats).
LOOM_AVX2 inline void store_levels(__m256i lv, float d, float* dst) {
  const __m256 vd = _mm256_set1_ps(d);
  const __m128i lo = _mm256_castsi256_si128(lv), hi = _mm256_extracti128_si256(lv, 1);
  _mm256_storeu_ps(dst, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), vd));
  _mm256_storeu_ps(dst + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), vd));
  _mm256_storeu_ps(dst + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), vd));
  _mm256_storeu_ps(dst + 24, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), vd));
}

}  // namespace

float vec_dot_q1_0_avx2(int64_t n, const void* w, const void* a) {
  return dot_q1_0(blocks("vec_dot_q1_0", n, kQ1_0Block), static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(a));
}
float vec_dot_q2_0_avx2(int64_t n, const void* w, const void* a) {
  return dot_q2_0(blocks("vec_dot_q2_0", n, kQ2_0Block), static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(a));
}
float vec_dot_mxfp4_avx2(int64_t n, const void* w, const void* a) {
  return dot_mxfp4(blocks("vec_dot_mxfp4", n, kMxfp4Block), static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(a));
}
float vec_dot_tq2_0_avx2(int64_t n, const void* w, const void* a) {
  return dot_tq2_0(blocks("vec_dot_tq2_0", n, kTQBlock), static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(a));
}
float vec_dot_tq1_0_avx2(int64_t n, const void* w, const void* a) {
  return dot_tq1_0(blocks("vec_dot_tq1_0", n, kTQBlock), static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(a));
}

LOOM_AVX2 void dequantize_row_q1_0_avx2(const void* src, float* dst, int64_t n) {
  const int64_t nb = blocks("dequantize_row_q1_0", n, kQ1_0Block);
  const auto* w = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* b = w + i * 18;
    const __m256 d = _mm256_set1_ps(f16(b)), nd = _mm256_set1_ps(-f16(b));
    for (int k = 0; k < 16; ++k) {
      // Bit j of byte k -> lane j: all ones where set (blendv takes the sign bit).
      const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
      const __m256i m = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(b[2 + k]), bit), bit);
      _mm256_storeu_ps(dst + i * kQ1_0Block + 8 * k, _mm256_blendv_ps(nd, d, _mm256_castsi256_ps(m)));
    }
  }
}

LOOM_AVX2 void dequantize_row_q2_0_avx2(const void* src, float* dst, int64_t n) {
  const int64_t nb = blocks("dequantize_row_q2_0", n, kQ2_0Block);
  const auto* w = static_cast<const uint8_t*>(src);
  const __m256i one = _mm256_set1_epi8(1);
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* b = w + i * 18;
    __m256i lo, hi;
    levels_q2_0(b + 2, &lo, &hi);
    store_levels(_mm256_sub_epi8(lo, one), f16(b), dst + i * kQ2_0Block);
    store_levels(_mm256_sub_epi8(hi, one), f16(b), dst + i * kQ2_0Block + 32);
  }
}

LOOM_AVX2 void dequantize_row_mxfp4_avx2(const void* src, float* dst, int64_t n) {
  const int64_t nb = blocks("dequantize_row_mxfp4", n, kMxfp4Block);
  const auto* w = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* b = w + i * 17;
    store_levels(levels_mxfp4(b + 1), e8m0_half(b[0]), dst + i * kMxfp4Block);
  }
}

LOOM_AVX2 void dequantize_row_tq2_0_avx2(const void* src, float* dst, int64_t n) {
  const int64_t nb = blocks("dequantize_row_tq2_0", n, kTQBlock);
  const auto* w = static_cast<const uint8_t*>(src);
  const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* b = w + i * 66;
    const float d = f16(b + 64);
    for (int h = 0; h < 2; ++h) {
      const __m256i q = loadu256(b + 32 * h);
      for (int l = 0; l < 4; ++l) {
        const __m256i lv = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(q, 2 * l), m3), one);
        store_levels(lv, d, dst + i * kTQBlock + 128 * h + 32 * l);
      }
    }
  }
}

LOOM_AVX2 void dequantize_row_tq1_0_avx2(const void* src, float* dst, int64_t n) {
  const int64_t nb = blocks("dequantize_row_tq1_0", n, kTQBlock);
  const auto* w = static_cast<const uint8_t*>(src);
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* b = w + i * 54;
    const float d = f16(b + 52);
    __m256i g[8];
    tq1_groups(b, g);
    for (int k = 0; k < 8; ++k) {
      // The level itself (not its negation times -d: a zero level must give 0 * d's sign).
      const __m256i lv = _mm256_sub_epi8(_mm256_setzero_si256(), neg_level_tq1(g[k]));
      store_levels(lv, d, dst + i * kTQBlock + 32 * k);
    }
  }
}

}  // namespace loom::quant::detail::small_simd

#endif  // __x86_64__

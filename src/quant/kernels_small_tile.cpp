// vec_dot_tile of TQ1_0, TQ2_0, MXFP4, Q1_0 and Q2_0 (new_tile_kernels.h). Every function
// carries its target attribute.
//
// The dots the table dispatches (small_simd::vec_dot_*_x86) equal the reference only up to
// float rounding: on AVX-512 VNNI (kernels_small_avx512.cpp) they accumulate int32 sums of four
// elements, converted to float, in 16 float lanes with FMAs, and reduce the lanes at the end.
// Batch invariance needs each tile output bit-identical with that dot, so the tile kernels here
// are those dots with the weight side hoisted: for up to four activation rows at a time, each
// weight block's levels (Q2_0 2-bit fields, MXFP4 table lookups, TQ2_0 bit fields, TQ1_0 trit
// masks; Q1_0's bits are its masks as stored) are computed once and then combined with every
// row's activations through the same int32 lanes, the same scale products and the same FMAs in
// the same order per row. Without AVX-512 VNNI, and for one activation row, the tile is the loop
// over the dispatched dot.
#if defined(__x86_64__)

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "base/cpu.h"
#include "quant/new_tile_kernels.h"
#include "quant/small_types.h"

#define LOOM_ST_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

namespace loom::quant::detail::new_tile {
namespace {

using namespace loom::quant::detail;
using VecDot = float (*)(int64_t, const void*, const void*);

constexpr int kQ80Bytes = 34;
constexpr int kQ8KBytes = 292;
constexpr int kMaxR = 4;

bool use_avx512() {
  static const bool z = cpu_features().has_avx512_vnni_set();
  return z;
}

LOOM_ST_AVX512 inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
LOOM_ST_AVX512 inline float f32_at(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
LOOM_ST_AVX512 inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
LOOM_ST_AVX512 inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
LOOM_ST_AVX512 inline __m512i join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
LOOM_ST_AVX512 inline __m512i q8_0_pair(const uint8_t* a) {
  return _mm512_mask_loadu_epi8(_mm512_loadu_si512(a + 2), 0xffffffff00000000ull, a + 4);
}
LOOM_ST_AVX512 inline __m512 scale_pair(float s0, float s1) {
  return _mm512_mask_blend_ps(0xff00, _mm512_set1_ps(s0), _mm512_set1_ps(s1));
}
LOOM_ST_AVX512 inline __m512 q8_0_scales_pair(const uint8_t* a) {
  const __m512i raw = _mm512_loadu_si512(a);
  const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0x110011, 0x110011, 0x110011, 0x110011, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(idx, raw)));
}
LOOM_ST_AVX512 inline void q8_0_scales16(const uint8_t* a, const uint8_t* w, int per, int wbytes, float* out) {
  const __m512i k = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i ia = _mm512_mullo_epi32(k, _mm512_set1_epi32(kQ80Bytes));
  const __m512i iw = _mm512_mullo_epi32(_mm512_srli_epi32(k, per == 4 ? 2 : 1), _mm512_set1_epi32(wbytes));
  const __m512 da = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(ia, a, 1)));
  const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(iw, w, 1)));
  _mm512_storeu_ps(out, _mm512_mul_ps(da, dw));
}
LOOM_ST_AVX512 inline __m512 scales_of_pair(const float* s) {
  return _mm512_mask_broadcastss_ps(_mm512_set1_ps(s[0]), 0xff00, _mm_load_ss(s + 1));
}

// ---- Q1_0 ------------------------------------------------------------------------------------

// Q1_0 has no weight decode to hoist (its bits are its masks), so its tile shares the activation
// side instead: R activation rows x C weight rows, each activation pair loaded once for the C
// rows, the activation scales converted once per row and multiplied by each weight row's (the
// same products d_a * d_w as q8_0_scales16).
LOOM_ST_AVX512 inline __m512 q1_0_dw16(const uint8_t* w0) {
  const __m512i k = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i iw = _mm512_mullo_epi32(_mm512_srli_epi32(k, 2), _mm512_set1_epi32(18));
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(iw, w0, 1)));
}
LOOM_ST_AVX512 inline __m512 q8_0_da16(const uint8_t* a0) {
  const __m512i k = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i ia = _mm512_mullo_epi32(k, _mm512_set1_epi32(kQ80Bytes));
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(ia, a0, 1)));
}

template <int R, int C>
LOOM_ST_AVX512 void q1_0_grid(int64_t nb, const uint8_t* const* w, const uint8_t* const* a, float* out /* [R][C] */) {
  __m512 acc0[R][C], acc1[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc0[r][c] = acc1[r][c] = _mm512_setzero_ps();
  const __m512i one = _mm512_set1_epi8(1), zero = _mm512_setzero_si512();
  alignas(64) float sc[R][C][16];
  int64_t i = 0;
  for (; i + 4 <= nb; i += 4) {
    __m512 dw[C];
    for (int c = 0; c < C; ++c) dw[c] = q1_0_dw16(w[c] + i * 18);
    for (int r = 0; r < R; ++r) {
      const __m512 da = q8_0_da16(a[r] + i * 4 * kQ80Bytes);
      for (int c = 0; c < C; ++c) _mm512_store_ps(sc[r][c], _mm512_mul_ps(da, dw[c]));
    }
    __asm__ volatile("" : : "r"(sc) : "memory");
    for (int b = 0; b < 4; ++b) {
      uint64_t bits[C][2];
      for (int c = 0; c < C; ++c) std::memcpy(bits[c], w[c] + i * 18 + 18 * b + 2, 16);
      for (int h = 0; h < 2; ++h) {
        __m512i y[R];
        for (int r = 0; r < R; ++r) y[r] = q8_0_pair(a[r] + (i * 4 + 4 * b + 2 * h) * kQ80Bytes);
        for (int c = 0; c < C; ++c) {
          const __mmask64 m = __mmask64(~bits[c][h]);
          for (int r = 0; r < R; ++r) {
            const __m512i p = _mm512_dpbusd_epi32(zero, one, _mm512_mask_sub_epi8(y[r], m, zero, y[r]));
            if (h == 0) {
              acc0[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scales_of_pair(sc[r][c] + 4 * b), acc0[r][c]);
            } else {
              acc1[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scales_of_pair(sc[r][c] + 4 * b + 2), acc1[r][c]);
            }
          }
        }
      }
    }
  }
  for (; i < nb; ++i) {
    for (int c = 0; c < C; ++c) {
      const uint8_t* bw = w[c] + i * 18;
      uint64_t bits[2];
      std::memcpy(bits, bw + 2, 16);
      const __m512 dwv = _mm512_set1_ps(f16(bw));
      for (int r = 0; r < R; ++r) {
        const uint8_t* ba = a[r] + i * 4 * kQ80Bytes;
        const __m512i y0 = q8_0_pair(ba), y1 = q8_0_pair(ba + 2 * kQ80Bytes);
        const __m512i p0 = _mm512_dpbusd_epi32(zero, one, _mm512_mask_sub_epi8(y0, __mmask64(~bits[0]), zero, y0));
        const __m512i p1 = _mm512_dpbusd_epi32(zero, one, _mm512_mask_sub_epi8(y1, __mmask64(~bits[1]), zero, y1));
        const __m512 part = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p1), q8_0_scales_pair(ba + 2 * kQ80Bytes),
                                            _mm512_mul_ps(_mm512_cvtepi32_ps(p0), q8_0_scales_pair(ba)));
        acc0[r][c] = _mm512_fmadd_ps(part, dwv, acc0[r][c]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) out[r * C + c] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r][c], acc1[r][c]));
}

using GridFn = void (*)(int64_t, const uint8_t* const*, const uint8_t* const*, float*);
constexpr int kGridR = 2, kGridC = 4;

void q1_0_tile(int64_t nb, const uint8_t* w, size_t ws, int nw, const uint8_t* a, size_t as, int na, float* out,
               size_t os) {
  static constexpr GridFn kFns[kGridR][kGridC] = {
      {q1_0_grid<1, 1>, q1_0_grid<1, 2>, q1_0_grid<1, 3>, q1_0_grid<1, 4>},
      {q1_0_grid<2, 1>, q1_0_grid<2, 2>, q1_0_grid<2, 3>, q1_0_grid<2, 4>}};
  for (int r0 = 0; r0 < na; r0 += kGridR) {
    const int rr = na - r0 < kGridR ? na - r0 : kGridR;
    const uint8_t* rows[kGridR];
    for (int r = 0; r < rr; ++r) rows[r] = a + size_t(r0 + r) * as;
    for (int c0 = 0; c0 < nw; c0 += kGridC) {
      const int cc = nw - c0 < kGridC ? nw - c0 : kGridC;
      const uint8_t* cols[kGridC];
      for (int c = 0; c < cc; ++c) cols[c] = w + size_t(c0 + c) * ws;
      float o[kGridR * kGridC];
      kFns[rr - 1][cc - 1](nb, cols, rows, o);
      for (int r = 0; r < rr; ++r)
        for (int c = 0; c < cc; ++c) out[size_t(r0 + r) * os + size_t(c0 + c)] = o[r * cc + c];
    }
  }
}

// ---- Q2_0 ------------------------------------------------------------------------------------

LOOM_ST_AVX512 inline __m512i levels_q2_0(const uint8_t* qs) {
  const __m512i x = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  const __m512i v = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3), x);
  const __m512i m3 = _mm512_set1_epi8(3);
  const __m512i v0 = _mm512_and_si512(v, m3);
  const __m512i v1 = _mm512_and_si512(_mm512_srli_epi16(v, 2), m3);
  const __m512i v2 = _mm512_and_si512(_mm512_srli_epi16(v, 4), m3);
  const __m512i v3 = _mm512_and_si512(_mm512_srli_epi16(v, 6), m3);
  return _mm512_unpacklo_epi16(_mm512_unpacklo_epi8(v0, v1), _mm512_unpacklo_epi8(v2, v3));
}

template <int R>
LOOM_ST_AVX512 void q2_0_rows(int64_t nb, const uint8_t* w, const uint8_t* const* a, float* out) {
  __m512 acc0[R], acc1[R];
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
  const __m512i one = _mm512_set1_epi8(1), zero = _mm512_setzero_si512();
  alignas(64) float sc[R][16];
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    const uint8_t* w0 = w + i * 18;
    for (int r = 0; r < R; ++r) q8_0_scales16(a[r] + i * 2 * kQ80Bytes, w0, 2, 18, sc[r]);
    __asm__ volatile("" : : "r"(sc) : "memory");
    for (int b = 0; b < 8; ++b) {
      const __m512i lv = levels_q2_0(w0 + 18 * b + 2);
      for (int r = 0; r < R; ++r) {
        const __m512i y = q8_0_pair(a[r] + i * 2 * kQ80Bytes + 2 * b * kQ80Bytes);
        const __m512i p = _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, lv, y), _mm512_dpbusd_epi32(zero, one, y));
        if (b & 1) {
          acc1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scales_of_pair(sc[r] + 2 * b), acc1[r]);
        } else {
          acc0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scales_of_pair(sc[r] + 2 * b), acc0[r]);
        }
      }
    }
  }
  for (; i < nb; ++i) {
    const uint8_t* bw = w + i * 18;
    const __m512i lv = levels_q2_0(bw + 2);
    const __m512 dw = _mm512_set1_ps(f16(bw));
    for (int r = 0; r < R; ++r) {
      const uint8_t* ba = a[r] + i * 2 * kQ80Bytes;
      const __m512i y = q8_0_pair(ba);
      const __m512i p = _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, lv, y), _mm512_dpbusd_epi32(zero, one, y));
      acc0[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(p), q8_0_scales_pair(ba)), dw, acc0[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));
}

// ---- MXFP4 -----------------------------------------------------------------------------------

LOOM_ST_AVX512 inline __m512i levels_mxfp4_pair_bcast(const uint8_t* b, __m512i table) {
  __m512i z = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 1)));
  z = _mm512_mask_broadcast_i32x4(z, 0xff00, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 18)));
  const __m512i nib = _mm512_and_si512(_mm512_srlv_epi64(z, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)),
                                       _mm512_set1_epi8(0x0f));
  return _mm512_shuffle_epi8(table, nib);
}
LOOM_ST_AVX512 inline void mxfp4_scales16(const uint8_t* w, const uint8_t* a, float* out) {
  const __m512i k = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i ev = _mm512_and_si512(_mm512_i32gather_epi32(_mm512_mullo_epi32(k, _mm512_set1_epi32(17)), w, 1),
                                      _mm512_set1_epi32(0xff));
  const __m512i dv = _mm512_i32gather_epi32(_mm512_mullo_epi32(k, _mm512_set1_epi32(kQ80Bytes)), a, 1);
  const __m512 d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dv));
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(ev, _mm512_set1_epi32(1)), 23);
  const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), ev);
  const __m512i bits = _mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(ev, _mm512_set1_epi32(1)), sub, normal);
  _mm512_storeu_ps(out, _mm512_mul_ps(d, _mm512_castsi512_ps(bits)));
}

template <int R>
LOOM_ST_AVX512 void mxfp4_rows(int64_t nb, const uint8_t* w, const uint8_t* const* a, float* out) {
  __m512 acc0[R], acc1[R];
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
  const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values)));
  const __m512i zero = _mm512_setzero_si512();
  alignas(64) float sc[R][16];
  int64_t i = 0;
  for (; i + 16 <= nb; i += 16) {
    const uint8_t* w0 = w + i * 17;
    for (int r = 0; r < R; ++r) mxfp4_scales16(w0, a[r] + i * kQ80Bytes, sc[r]);
    __asm__ volatile("" : : "r"(sc) : "memory");
    for (int j = 0; j < 16; j += 4) {
      for (int h = 0; h < 2; ++h) {
        const int b = j + 2 * h;
        const __m512i lv = levels_mxfp4_pair_bcast(w0 + b * 17, table);
        const __mmask64 neg = _mm512_movepi8_mask(lv);
        const __m512i mag = _mm512_abs_epi8(lv);
        for (int r = 0; r < R; ++r) {
          const __m512i y = q8_0_pair(a[r] + (i + b) * kQ80Bytes);
          const __m512i p = _mm512_dpbusd_epi32(zero, mag, _mm512_mask_sub_epi8(y, neg, zero, y));
          const __m512 s = _mm512_mask_broadcastss_ps(_mm512_set1_ps(sc[r][b]), 0xff00, _mm_load_ss(sc[r] + b + 1));
          if (h == 0) {
            acc0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), s, acc0[r]);
          } else {
            acc1[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), s, acc1[r]);
          }
        }
      }
    }
  }
  for (; i + 1 < nb; i += 2) {
    const uint8_t* bw = w + i * 17;
    const __m512i lv = levels_mxfp4_pair_bcast(bw, table);
    const __mmask64 neg = _mm512_movepi8_mask(lv);
    const __m512i mag = _mm512_abs_epi8(lv);
    const float e0 = e8m0_half(bw[0]), e1 = e8m0_half(bw[17]);
    for (int r = 0; r < R; ++r) {
      const uint8_t* ba = a[r] + i * kQ80Bytes;
      const __m512i y = q8_0_pair(ba);
      const __m512i p = _mm512_dpbusd_epi32(zero, mag, _mm512_mask_sub_epi8(y, neg, zero, y));
      acc0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scale_pair(f16(ba) * e0, f16(ba + kQ80Bytes) * e1), acc0[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));
    if (i < nb) {
      const uint8_t* bw = w + i * 17;
      const uint8_t* ba = a[r] + i * kQ80Bytes;
      int isum = 0;
      for (int j = 0; j < 16; ++j) {
        isum += int8_t(ba[2 + j]) * kMxfp4Values[bw[1 + j] & 0x0f] + int8_t(ba[18 + j]) * kMxfp4Values[bw[1 + j] >> 4];
      }
      sum += float(isum) * (f16(ba) * e8m0_half(bw[0]));
    }
    out[r] = sum;
  }
}

// ---- ternary ---------------------------------------------------------------------------------

LOOM_ST_AVX512 inline void tq_scales16(const uint8_t* w, int wbytes, int dpos, const uint8_t* a, float* out) {
  const __m512i k = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i gw = _mm512_srli_epi32(
      _mm512_i32gather_epi32(_mm512_mullo_epi32(k, _mm512_set1_epi32(wbytes)), w + dpos - 2, 1), 16);
  const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(gw));
  const __m512 da = _mm512_i32gather_ps(_mm512_mullo_epi32(k, _mm512_set1_epi32(kQ8KBytes)), a, 1);
  _mm512_storeu_ps(out, _mm512_mul_ps(da, dw));
}

// TQ2_0: a block's four level registers (pieces of 64 elements, as kernels_small_avx512.cpp).
struct Tq2Levels {
  __m512i l[4];
};
LOOM_ST_AVX512 inline Tq2Levels tq2_levels(const uint8_t* bw, __m512i shift_lo, __m512i shift_hi) {
  const __m512i m3 = _mm512_set1_epi8(3);
  Tq2Levels o;
  for (int h = 0; h < 2; ++h) {
    const __m512i q = _mm512_broadcast_i64x4(load256(bw + 32 * h));
    o.l[2 * h] = _mm512_and_si512(_mm512_srlv_epi16(q, shift_lo), m3);
    o.l[2 * h + 1] = _mm512_and_si512(_mm512_srlv_epi16(q, shift_hi), m3);
  }
  return o;
}
LOOM_ST_AVX512 inline __m512i tq2_block(const Tq2Levels& lv, const uint8_t* ba) {
  __m512i s[2];
  for (int h = 0; h < 2; ++h) {
    s[h] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lv.l[2 * h], load512(ba + 4 + 128 * h)),
                               lv.l[2 * h + 1], load512(ba + 4 + 128 * h + 64));
  }
  return _mm512_sub_epi32(_mm512_add_epi32(s[0], s[1]), _mm512_cvtepi16_epi32(load256(ba + 260)));
}

template <int R>
LOOM_ST_AVX512 void tq2_0_rows(int64_t nb, const uint8_t* w, const uint8_t* const* a, float* out) {
  __m512 acc0[R], acc1[R];
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
  const __m512i shift_lo = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  const __m512i shift_hi = _mm512_add_epi16(shift_lo, _mm512_set1_epi16(4));
  alignas(64) float sc[R][16];
  int64_t i = 0;
  for (; i + 16 <= nb; i += 16) {
    for (int r = 0; r < R; ++r) tq_scales16(w + i * 66, 66, 64, a[r] + i * kQ8KBytes, sc[r]);
    __asm__ volatile("" : : "r"(sc) : "memory");
    for (int b = 0; b < 16; ++b) {
      const Tq2Levels lv = tq2_levels(w + (i + b) * 66, shift_lo, shift_hi);
      for (int r = 0; r < R; ++r) {
        const __m512 p = _mm512_cvtepi32_ps(tq2_block(lv, a[r] + (i + b) * kQ8KBytes));
        if (b & 1) {
          acc1[r] = _mm512_fmadd_ps(p, _mm512_set1_ps(sc[r][b]), acc1[r]);
        } else {
          acc0[r] = _mm512_fmadd_ps(p, _mm512_set1_ps(sc[r][b]), acc0[r]);
        }
      }
    }
  }
  for (; i < nb; ++i) {
    const uint8_t* bw = w + i * 66;
    const Tq2Levels lv = tq2_levels(bw, shift_lo, shift_hi);
    const float dw = f16(bw + 64);
    for (int r = 0; r < R; ++r) {
      const uint8_t* ba = a[r] + i * kQ8KBytes;
      acc0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tq2_block(lv, ba)), _mm512_set1_ps(f32_at(ba) * dw), acc0[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));
}

LOOM_ST_AVX512 inline __m256i times3(__m256i q) { return _mm256_add_epi8(_mm256_add_epi8(q, q), q); }
LOOM_ST_AVX512 inline __m128i times3(__m128i q) { return _mm_add_epi8(_mm_add_epi8(q, q), q); }

// TQ1_0: a block's trit masks (trit >= 1, trit == 2) of its four 64-element pieces.
struct Tq1Masks {
  __mmask64 ge86[4], ge171[4];
};
LOOM_ST_AVX512 inline Tq1Masks tq1_masks(const uint8_t* bw) {
  const __m512i c86 = _mm512_set1_epi8(86), c171 = _mm512_set1_epi8(int8_t(171));
  const __m256i q1 = load256(bw);
  const __m256i q3 = times3(q1), q9 = times3(q3), q27 = times3(q9), q81 = times3(q27);
  const __m128i x1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bw + 32));
  const __m128i x3 = times3(x1), x9 = times3(x3), x27 = times3(x9), x81 = times3(x27);
  uint32_t qh;
  std::memcpy(&qh, bw + 48, 4);
  const __m128i h1 = _mm_set1_epi32(int(qh));
  const __m128i h3 = times3(h1), h9 = times3(h3), h27 = times3(h9);
  const __m128i h = _mm_blend_epi32(_mm_blend_epi32(h1, h3, 0x2), _mm_blend_epi32(h9, h27, 0x8), 0xc);
  const __m512i g[4] = {join(q1, q3), join(q9, q27), join(q81, _mm256_set_m128i(x3, x1)),
                        join(_mm256_set_m128i(x27, x9), _mm256_set_m128i(h, x81))};
  Tq1Masks m;
  for (int k = 0; k < 4; ++k) {
    m.ge86[k] = _mm512_cmpge_epu8_mask(g[k], c86);
    m.ge171[k] = _mm512_cmpge_epu8_mask(g[k], c171);
  }
  return m;
}
LOOM_ST_AVX512 inline __m512i tq1_block(const Tq1Masks& m, const uint8_t* ba) {
  const __m512i one = _mm512_set1_epi8(1), zero = _mm512_setzero_si512();
  __m512i s[2] = {zero, zero};
  for (int k = 0; k < 4; ++k) {
    const __m512i y = load512(ba + 4 + 64 * k);
    const __m512i t = _mm512_mask_sub_epi8(_mm512_maskz_mov_epi8(m.ge171[k], y), ~m.ge86[k], zero, y);
    s[k & 1] = _mm512_dpbusd_epi32(s[k & 1], one, t);
  }
  return _mm512_add_epi32(s[0], s[1]);
}

template <int R>
LOOM_ST_AVX512 void tq1_0_rows(int64_t nb, const uint8_t* w, const uint8_t* const* a, float* out) {
  __m512 acc0[R], acc1[R];
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = _mm512_setzero_ps();
  alignas(64) float sc[R][16];
  int64_t i = 0;
  for (; i + 16 <= nb; i += 16) {
    for (int r = 0; r < R; ++r) tq_scales16(w + i * 54, 54, 52, a[r] + i * kQ8KBytes, sc[r]);
    __asm__ volatile("" : : "r"(sc) : "memory");
    for (int b = 0; b < 16; ++b) {
      const Tq1Masks m = tq1_masks(w + (i + b) * 54);
      for (int r = 0; r < R; ++r) {
        const __m512 p = _mm512_cvtepi32_ps(tq1_block(m, a[r] + (i + b) * kQ8KBytes));
        if (b & 1) {
          acc1[r] = _mm512_fmadd_ps(p, _mm512_set1_ps(sc[r][b]), acc1[r]);
        } else {
          acc0[r] = _mm512_fmadd_ps(p, _mm512_set1_ps(sc[r][b]), acc0[r]);
        }
      }
    }
  }
  for (; i < nb; ++i) {
    const uint8_t* bw = w + i * 54;
    const Tq1Masks m = tq1_masks(bw);
    const float dw = f16(bw + 52);
    for (int r = 0; r < R; ++r) {
      const uint8_t* ba = a[r] + i * kQ8KBytes;
      acc0[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tq1_block(m, ba)), _mm512_set1_ps(dw * f32_at(ba)), acc0[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));
}

// ---- the tile driver -------------------------------------------------------------------------

using RowsFn = void (*)(int64_t, const uint8_t*, const uint8_t* const*, float*);

void tile(int64_t n, int block, const RowsFn (&fns)[kMaxR], VecDot dot, const void* w, size_t ws, int nw,
          const void* a, size_t as, int na, float* out, size_t os) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  if (!use_avx512() || na <= 1) {
    for (int r = 0; r < na; ++r) {
      for (int j = 0; j < nw; ++j) out[size_t(r) * os + j] = dot(n, wb + size_t(j) * ws, ab + size_t(r) * as);
    }
    return;
  }
  const int64_t nb = n / block;
  for (int r0 = 0; r0 < na; r0 += kMaxR) {
    const int rr = na - r0 < kMaxR ? na - r0 : kMaxR;
    const uint8_t* rows[kMaxR];
    for (int r = 0; r < rr; ++r) rows[r] = ab + size_t(r0 + r) * as;
    for (int j = 0; j < nw; ++j) {
      float o[kMaxR];
      fns[rr - 1](nb, wb + size_t(j) * ws, rows, o);
      for (int r = 0; r < rr; ++r) out[size_t(r0 + r) * os + j] = o[r];
    }
  }
}

}  // namespace

#define LOOM_SMALL_TILE(t, block)                                                                         \
  void vec_dot_tile_##t(int64_t n, const void* w, size_t ws, int nw, const void* a, size_t as, int na,    \
                        float* out, size_t os) {                                                          \
    static constexpr RowsFn kFns[kMaxR] = {t##_rows<1>, t##_rows<2>, t##_rows<3>, t##_rows<4>};         \
    tile(n, block, kFns, small_simd::vec_dot_##t##_x86, w, ws, nw, a, as, na, out, os);                 \
  }
void vec_dot_tile_q1_0(int64_t n, const void* w, size_t ws, int nw, const void* a, size_t as, int na, float* out,
                       size_t os) {
  if (!use_avx512() || na <= 1) {
    for (int r = 0; r < na; ++r) {
      for (int j = 0; j < nw; ++j) {
        out[size_t(r) * os + j] = small_simd::vec_dot_q1_0_x86(n, static_cast<const uint8_t*>(w) + size_t(j) * ws,
                                                               static_cast<const uint8_t*>(a) + size_t(r) * as);
      }
    }
    return;
  }
  q1_0_tile(n / kQ1_0Block, static_cast<const uint8_t*>(w), ws, nw, static_cast<const uint8_t*>(a), as, na, out, os);
}
LOOM_SMALL_TILE(q2_0, kQ2_0Block)
LOOM_SMALL_TILE(mxfp4, kMxfp4Block)
LOOM_SMALL_TILE(tq2_0, kTQBlock)
LOOM_SMALL_TILE(tq1_0, kTQBlock)
#undef LOOM_SMALL_TILE

}  // namespace loom::quant::detail::new_tile

#endif  // __x86_64__

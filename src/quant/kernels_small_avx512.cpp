// AVX-512 (F/BW/VL + VNNI) dot products of TQ1_0, TQ2_0, MXFP4, Q1_0 and Q2_0 (layouts:
// small_types.h). Callers check cpu_features().has_avx512_vnni_set() first; the functions carry
// the target attribute so the rest of the binary stays runnable without AVX-512.
//
// 64 elements per register: the int8 products are summed four at a time by VPDPBUSD (unsigned
// weights or ones x signed activations), the bit-, ternary- and sign-selections use mask
// registers (a Q1_0 block's bits are its masks as stored). Same integer block sums as the
// references (small_types.cpp); float accumulation in 16 lanes, so equal up to rounding. MXFP4
// and Q1_0 first finish each 32-element unit's sum (a transpose-add of eight registers) so that
// a lane holds whole units in the order small_types.h fixes, which their tile kernels reproduce
// with one lane per weight row.
#if defined(__x86_64__)

// GCC 12's AVX-512 headers initialise their "undefined" vectors from themselves, which
// -Wuninitialized reports at every use (as in packed_avx512.cpp).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "quant/small_types.h"

#define LOOM_AVX512_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

namespace loom::quant::detail::small_simd {
namespace {

[[noreturn]] void bad_length(const char* fn, int64_t n) {
  std::fprintf(stderr, "loom: %s: %lld elements is not a whole number of blocks\n", fn, static_cast<long long>(n));
  std::abort();
}
inline int64_t blocks(const char* fn, int64_t n, int block) {
  if (n < 0 || n % block != 0) bad_length(fn, n);
  return n / block;
}

constexpr int kQ80Bytes = 34;
constexpr int kQ8KBytes = 292;
constexpr int kPrefetch = 2048;

LOOM_AVX512_VNNI inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
LOOM_AVX512_VNNI inline float f32_at(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
LOOM_AVX512_VNNI inline __m512i load512(const void* p) { return _mm512_loadu_si512(p); }
LOOM_AVX512_VNNI inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
// Two 32-byte pieces as one register (lo in bytes 0..31).
LOOM_AVX512_VNNI inline __m512i join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
// The activations of two consecutive Q8_0 blocks by two loads (the second masked to the upper
// 32 bytes, skipping the second block's scale).
LOOM_AVX512_VNNI inline __m512i q8_0_pair(const uint8_t* a) {
  return _mm512_mask_loadu_epi8(_mm512_loadu_si512(a + 2), 0xffffffff00000000ull, a + 4);
}
// The f16 scales of two consecutive Q8_0 blocks as floats: lanes 0..7 the first, 8..15 the
// second (picked from one 64-byte load: halves 0 and 17 of the pair's 68 bytes).
LOOM_AVX512_VNNI inline __m512 q8_0_scales_pair(const uint8_t* a) {
  const __m512i raw = _mm512_loadu_si512(a);
  const __m512i idx = _mm512_setr_epi32(0, 0, 0, 0, 0x110011, 0x110011, 0x110011, 0x110011, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(idx, raw)));
}

// The scales of 16 consecutive Q8_0 blocks at a, each times the f16 scale of the weight block it
// pairs with (weight block k / per of the row at w, blocks of wbytes bytes): fields gathered as
// dwords (inside the blocks), stored to out[16].
LOOM_AVX512_VNNI inline void q8_0_scales16(const uint8_t* a, const uint8_t* w, int per, int wbytes, float* out) {
  const __m512i k = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i ia = _mm512_mullo_epi32(k, _mm512_set1_epi32(kQ80Bytes));
  const __m512i iw = _mm512_mullo_epi32(_mm512_srli_epi32(k, per == 4 ? 2 : 1), _mm512_set1_epi32(wbytes));
  const __m512 da = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(ia, a, 1)));
  const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_i32gather_epi32(iw, w, 1)));
  _mm512_storeu_ps(out, _mm512_mul_ps(da, dw));
}

// Lanes 0..7 s[0], lanes 8..15 s[1], from memory.
LOOM_AVX512_VNNI inline __m512 scales_of_pair(const float* s) {
  return _mm512_mask_broadcastss_ps(_mm512_set1_ps(s[0]), 0xff00, _mm_load_ss(s + 1));
}

// ---- units of 32 elements (MXFP4, Q1_0): small_types.h kUnitSlotOf16 ---------------------

// Eight registers of 2-unit dword partial sums (p[q]: dwords 0..7 unit 2q, 8..15 unit 2q + 1) to
// the 16 unit sums, dword l holding unit kUnitSlotOf16[l]: pairs of registers interleaved and
// added by dwords, then by qwords, then 128-bit lanes.
LOOM_AVX512_VNNI inline __m512i unit_sums16(const __m512i* p) {
  __m512i x[4], y[2];
  for (int k = 0; k < 4; ++k) {
    x[k] = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2 * k], p[2 * k + 1]), _mm512_unpackhi_epi32(p[2 * k], p[2 * k + 1]));
  }
  for (int m = 0; m < 2; ++m) {
    y[m] = _mm512_add_epi32(_mm512_unpacklo_epi64(x[2 * m], x[2 * m + 1]), _mm512_unpackhi_epi64(x[2 * m], x[2 * m + 1]));
  }
  return _mm512_add_epi32(_mm512_shuffle_i32x4(y[0], y[1], 0x88), _mm512_shuffle_i32x4(y[0], y[1], 0xdd));
}
LOOM_AVX512_VNNI inline __m512i unit_slots() {
  return _mm512_setr_epi32(kUnitSlotOf16[0], kUnitSlotOf16[1], kUnitSlotOf16[2], kUnitSlotOf16[3], kUnitSlotOf16[4],
                           kUnitSlotOf16[5], kUnitSlotOf16[6], kUnitSlotOf16[7], kUnitSlotOf16[8], kUnitSlotOf16[9],
                           kUnitSlotOf16[10], kUnitSlotOf16[11], kUnitSlotOf16[12], kUnitSlotOf16[13], kUnitSlotOf16[14],
                           kUnitSlotOf16[15]);
}
// small_types.h unit_tree_sum of the 16 slots.
LOOM_AVX512_VNNI inline float slot_tree_sum(__m512 acc) {
  const __m256 t8 =
      _mm256_add_ps(_mm512_castps512_ps256(acc), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
  const __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t8), _mm256_extractf128_ps(t8, 1));
  const __m128 t2 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));
  return _mm_cvtss_f32(_mm_add_ss(t2, _mm_shuffle_ps(t2, t2, 1)));
}
// The f16 scales d_a of the Q8_0 activation blocks of the 16 units from a, in slot order
// (gathered as dwords, inside the blocks); lanes outside m are 0.
LOOM_AVX512_VNNI inline __m512 act_scales16(const uint8_t* a, __mmask16 m) {
  const __m512i ia = _mm512_mullo_epi32(unit_slots(), _mm512_set1_epi32(kQ80Bytes));
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, ia, a, 1)));
}

// ---- Q1_0: bits are masks -------------------------------------------------------------------

// The weight scales of the 16 units (4 blocks) from w, slot order; lanes outside m 0.
LOOM_AVX512_VNNI inline __m512 q1_0_wscales16(const uint8_t* w, __mmask16 m) {
  const __m512i iw = _mm512_mullo_epi32(_mm512_srli_epi32(unit_slots(), 2), _mm512_set1_epi32(18));
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, iw, w, 1)));
}

// The activation side of the unit dots, prepared once for every weight row they meet: per group
// of 16 units their int8 as 2-unit registers (zero past the row), bias * sum(y) of each unit
// and d_a, both in slot order (zero past the row).
struct alignas(64) ActGroup {
  int8_t y[8][64];
  int32_t c[16];
  float d[16];
};
static_assert(sizeof(ActGroup) == 640);

LOOM_AVX512_VNNI void prepare_act(int64_t nu, const uint8_t* a, int bias, ActGroup* out) {
  const __m512i b8 = _mm512_set1_epi8(int8_t(bias)), zero = _mm512_setzero_si512();
  for (int64_t i = 0; i < nu; i += 16) {
    const int r = nu - i < 16 ? int(nu - i) : 16;
    const uint8_t* a0 = a + i * kQ80Bytes;
    ActGroup& g = out[i / 16];
    __m512i p[8];
    for (int q = 0; q < 8; ++q) {
      __m512i y = zero;
      if (2 * q + 1 < r) {
        y = q8_0_pair(a0 + 2 * q * kQ80Bytes);
      } else if (2 * q < r) {
        y = _mm512_maskz_loadu_epi8(0xffffffffull, a0 + 2 * q * kQ80Bytes + 2);
      }
      _mm512_store_si512(g.y[q], y);
      p[q] = _mm512_dpbusd_epi32(zero, b8, y);
    }
    const __mmask16 m = r == 16 ? __mmask16(0xffff) : _mm512_cmplt_epi32_mask(unit_slots(), _mm512_set1_epi32(r));
    _mm512_store_si512(g.c, unit_sums16(p));
    _mm512_store_ps(g.d, act_scales16(a0, m));
  }
}

thread_local std::vector<ActGroup> t_act;
LOOM_AVX512_VNNI const ActGroup* prepared(int64_t nu, const uint8_t* a, int bias) {
  if (t_act.size() < size_t((nu + 15) / 16)) t_act.resize(size_t((nu + 15) / 16));
  prepare_act(nu, a, bias, t_act.data());
  return t_act.data();
}

// The unit sums of a group (p: 2-unit registers of sum_e (level_e + bias) y_e) to float, times
// d_a * d_w (w_scales in slot order), added to the slots acc (lanes of m).
LOOM_AVX512_VNNI inline __m512 unit_step(const __m512i* p, const ActGroup& g, __m512 w_scales, __mmask16 m, __m512 acc) {
  const __m512i isum = _mm512_sub_epi32(unit_sums16(p), _mm512_load_si512(g.c));
  return _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(_mm512_load_ps(g.d), w_scales), acc, m);
}

// Units of 32 elements (16 per group, 4 blocks): sum_e (2 bit) y - sum y by VPDPBUSD of the
// bits as bytes 0 / 2 with the activations, then small_types.h's slots. out[j] for the nw rows.
LOOM_AVX512_VNNI void dots_q1_0(int64_t nb, const uint8_t* w, size_t ws, int nw, const uint8_t* a, float* out) {
  const int64_t nu = 4 * nb;
  const ActGroup* act = prepared(nu, a, 1);
  const __m512i two = _mm512_set1_epi8(2), zero = _mm512_setzero_si512();
  for (int j = 0; j < nw; ++j) {
    const uint8_t* wr = w + size_t(j) * ws;
    __m512 acc = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i += 4) {
      const int nblk = nb - i < 4 ? int(nb - i) : 4;
      const uint8_t* w0 = wr + i * 18;
      const ActGroup& g = act[i / 4];
      _mm_prefetch(reinterpret_cast<const char*>(w0 + kPrefetch), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(w0 + kPrefetch + 71), _MM_HINT_T0);
      __m512i p[8];
      for (int q = 0; q < 8; ++q) {
        if (q / 2 < nblk) {
          uint64_t bits;
          std::memcpy(&bits, w0 + 18 * (q / 2) + 2 + 8 * (q % 2), 8);
          p[q] = _mm512_dpbusd_epi32(zero, _mm512_maskz_mov_epi8(__mmask64(bits), two), _mm512_load_si512(g.y[q]));
        } else {
          p[q] = zero;
        }
      }
      const __mmask16 m = nblk == 4 ? __mmask16(0xffff) : _mm512_cmplt_epi32_mask(unit_slots(), _mm512_set1_epi32(4 * nblk));
      acc = unit_step(p, g, q1_0_wscales16(w0, m), m, acc);
    }
    out[j] = slot_tree_sum(acc);
  }
}

// ---- Q2_0 -----------------------------------------------------------------------------------

// The 64 levels (0..3) of a Q2_0 block in element order: 128-bit lane L holds elements
// 16 L .. 16 L + 15, from source bytes 4 L .. 4 L + 3.
LOOM_AVX512_VNNI inline __m512i levels_q2_0(const uint8_t* qs) {
  const __m512i x = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  const __m512i v = _mm512_permutexvar_epi32(_mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3), x);
  const __m512i m3 = _mm512_set1_epi8(3);
  const __m512i v0 = _mm512_and_si512(v, m3);
  const __m512i v1 = _mm512_and_si512(_mm512_srli_epi16(v, 2), m3);
  const __m512i v2 = _mm512_and_si512(_mm512_srli_epi16(v, 4), m3);
  const __m512i v3 = _mm512_and_si512(_mm512_srli_epi16(v, 6), m3);
  return _mm512_unpacklo_epi16(_mm512_unpacklo_epi8(v0, v1), _mm512_unpacklo_epi8(v2, v3));
}

LOOM_AVX512_VNNI float dot_q2_0(int64_t nb, const uint8_t* w, const uint8_t* a) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  const __m512i one = _mm512_set1_epi8(1), zero = _mm512_setzero_si512();
  alignas(64) float sc[16];
  int64_t i = 0;
  // Eight blocks (16 Q8_0 blocks) per pass: their scales d_w * d_a first, kept in memory.
  for (; i + 8 <= nb; i += 8) {
    const uint8_t* w0 = w + i * 18;
    const uint8_t* a0 = a + i * 2 * kQ80Bytes;
    q8_0_scales16(a0, w0, 2, 18, sc);
    __asm__ volatile("" : : "r"(sc) : "memory");
    for (int b = 0; b < 8; ++b) {
      const __m512i y = q8_0_pair(a0 + 2 * b * kQ80Bytes);
      // sum (level - 1) y = sum level * y - sum y.
      const __m512i p =
          _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, levels_q2_0(w0 + 18 * b + 2), y), _mm512_dpbusd_epi32(zero, one, y));
      if (b & 1) {
        acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scales_of_pair(sc + 2 * b), acc1);
      } else {
        acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), scales_of_pair(sc + 2 * b), acc0);
      }
    }
  }
  for (; i < nb; ++i) {
    const uint8_t* bw = w + i * 18;
    const uint8_t* ba = a + i * 2 * kQ80Bytes;
    const __m512i y = q8_0_pair(ba);
    const __m512i p = _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, levels_q2_0(bw + 2), y), _mm512_dpbusd_epi32(zero, one, y));
    acc0 = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(p), q8_0_scales_pair(ba)), _mm512_set1_ps(f16(bw)), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

// ---- MXFP4 ----------------------------------------------------------------------------------

// Levels of the pair at b without lane-crossing shuffles: both blocks' 16 code bytes broadcast
// into their two 128-bit lanes, the upper lane of each shifted by 4.
LOOM_AVX512_VNNI inline __m512i levels_mxfp4_pair_bcast(const uint8_t* b, __m512i table) {
  __m512i z = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 1)));
  z = _mm512_mask_broadcast_i32x4(z, 0xff00, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 18)));
  const __m512i nib =
      _mm512_and_si512(_mm512_srlv_epi64(z, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(0x0f));
  return _mm512_shuffle_epi8(table, nib);
}

// The levels + 12 (0..24) of one block (lanes 0..1 of the pair layout, lanes 2..3 zero), for an
// odd last block.
LOOM_AVX512_VNNI inline __m512i levels_mxfp4_one(const uint8_t* b, __m512i table) {
  const __m512i z = _mm512_maskz_broadcast_i32x4(0x00ff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 1)));
  const __m512i nib =
      _mm512_and_si512(_mm512_srlv_epi64(z, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(0x0f));
  return _mm512_maskz_shuffle_epi8(0x00000000ffffffffull, table, nib);
}

// 2^(e - 128) of the 16 blocks' E8M0 bytes from w, slot order (e8m0_half); lanes outside m 0.
LOOM_AVX512_VNNI inline __m512 mxfp4_wscales16(const uint8_t* w, __mmask16 m) {
  const __m512i iw = _mm512_mullo_epi32(unit_slots(), _mm512_set1_epi32(17));
  const __m512i ev =
      _mm512_and_si512(_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, iw, w, 1), _mm512_set1_epi32(0xff));
  const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(ev, _mm512_set1_epi32(1)), 23);
  const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), ev);
  const __m512i bits = _mm512_mask_blend_epi32(_mm512_cmpgt_epi32_mask(ev, _mm512_set1_epi32(1)), sub, normal);
  return _mm512_maskz_mov_ps(m, _mm512_castsi512_ps(bits));
}

// Blocks are the 32-element units: 16 per group, sum_e (level_e + 12) y_e - 12 sum y by VPDPBUSD
// of the biased levels (a table lookup) with the activations, small_types.h's slots.
LOOM_AVX512_VNNI void dots_mxfp4(int64_t nb, const uint8_t* w, size_t ws, int nw, const uint8_t* a, float* out) {
  const ActGroup* act = prepared(nb, a, 12);
  alignas(16) int8_t biased[16];
  for (int k = 0; k < 16; ++k) biased[k] = int8_t(kMxfp4Values[k] + 12);
  const __m512i table = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(biased)));
  const __m512i zero = _mm512_setzero_si512();
  for (int j = 0; j < nw; ++j) {
    const uint8_t* wr = w + size_t(j) * ws;
    __m512 acc = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= nb; i += 16) {
      const uint8_t* w0 = wr + i * 17;
      const ActGroup& g = act[i / 16];
      // The weights stream from memory: ask for them ~2 KiB ahead (past the row: the next one).
      for (int c = 0; c < 272; c += 64) _mm_prefetch(reinterpret_cast<const char*>(w0 + kPrefetch + c), _MM_HINT_T0);
      __m512i p[8];
      for (int q = 0; q < 8; ++q) {
        p[q] = _mm512_dpbusd_epi32(zero, levels_mxfp4_pair_bcast(w0 + 2 * q * 17, table), _mm512_load_si512(g.y[q]));
      }
      acc = unit_step(p, g, mxfp4_wscales16(w0, 0xffff), 0xffff, acc);
    }
    if (i < nb) {
      const int r = int(nb - i);
      const uint8_t* w0 = wr + i * 17;
      const ActGroup& g = act[i / 16];
      __m512i p[8];
      for (int q = 0; q < 8; ++q) {
        if (2 * q + 1 < r) {
          p[q] = _mm512_dpbusd_epi32(zero, levels_mxfp4_pair_bcast(w0 + 2 * q * 17, table), _mm512_load_si512(g.y[q]));
        } else if (2 * q < r) {
          p[q] = _mm512_dpbusd_epi32(zero, levels_mxfp4_one(w0 + 2 * q * 17, table), _mm512_load_si512(g.y[q]));
        } else {
          p[q] = zero;
        }
      }
      const __mmask16 m = _mm512_cmplt_epi32_mask(unit_slots(), _mm512_set1_epi32(r));
      acc = unit_step(p, g, mxfp4_wscales16(w0, m), m, acc);
    }
    out[j] = slot_tree_sum(acc);
  }
}

// ---- ternary formats ------------------------------------------------------------------------

// The scales of 16 consecutive ternary blocks (f16 d at byte dpos of each wbytes-byte weight
// block) times those of their Q8_K activation blocks (f32 d first), stored to out[16]. The f16
// is gathered as the upper half of the dword ending with it, which lies inside the block.
LOOM_AVX512_VNNI inline void tq_scales16(const uint8_t* w, int wbytes, int dpos, const uint8_t* a, float* out) {
  const __m512i k = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i gw =
      _mm512_srli_epi32(_mm512_i32gather_epi32(_mm512_mullo_epi32(k, _mm512_set1_epi32(wbytes)), w + dpos - 2, 1), 16);
  const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(gw));
  const __m512 da = _mm512_i32gather_ps(_mm512_mullo_epi32(k, _mm512_set1_epi32(kQ8KBytes)), a, 1);
  _mm512_storeu_ps(out, _mm512_mul_ps(da, dw));
}

// ---- TQ2_0 ----------------------------------------------------------------------------------

// sum_e level_e y_e - sum_e y_e of one block (16 int32 lanes).
LOOM_AVX512_VNNI inline __m512i tq2_block(const uint8_t* bw, const uint8_t* ba, __m512i shift_lo, __m512i shift_hi) {
  const __m512i m3 = _mm512_set1_epi8(3);
  // Activations in 64-byte pieces: piece 2h + k holds elements 128 h + 64 k .. + 63, i.e. the
  // levels at shifts 4k (first 32 bytes) and 4k + 2 (last 32) of qs[32 h .. 32 h + 31]. Two
  // accumulation chains (the blocks are independent, so out-of-order execution overlaps them).
  __m512i s[2];
  for (int h = 0; h < 2; ++h) {
    const __m512i q = _mm512_broadcast_i64x4(load256(bw + 32 * h));
    const __m512i l0 = _mm512_and_si512(_mm512_srlv_epi16(q, shift_lo), m3);
    const __m512i l1 = _mm512_and_si512(_mm512_srlv_epi16(q, shift_hi), m3);
    s[h] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), l0, load512(ba + 4 + 128 * h)), l1,
                               load512(ba + 4 + 128 * h + 64));
  }
  // Minus the sum of the activations (bsums, widened to 16 lanes).
  return _mm512_sub_epi32(_mm512_add_epi32(s[0], s[1]), _mm512_cvtepi16_epi32(load256(ba + 260)));
}

LOOM_AVX512_VNNI inline int reduce_i32(__m512i v) {
  const __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// Whole blocks in order: sum = fma(float(isum), d_a * d_w, sum), block by block (the order the
// TQ2_0 tile reproduces with one lane per weight row).
LOOM_AVX512_VNNI float dot_tq2_0(int64_t nb, const uint8_t* w, const uint8_t* a) {
  const __m512i shift_lo = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  const __m512i shift_hi = _mm512_add_epi16(shift_lo, _mm512_set1_epi16(4));
  __m128 sum = _mm_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* bw = w + i * 66;
    _mm_prefetch(reinterpret_cast<const char*>(bw + kPrefetch), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(bw + kPrefetch + 65), _MM_HINT_T0);
    const uint8_t* ba = a + i * kQ8KBytes;
    const float isum = float(reduce_i32(tq2_block(bw, ba, shift_lo, shift_hi)));
    sum = _mm_fmadd_ss(_mm_set_ss(isum), _mm_set_ss(f32_at(ba) * f16(bw + 64)), sum);
  }
  return _mm_cvtss_f32(sum);
}

// ---- TQ1_0 ----------------------------------------------------------------------------------

LOOM_AVX512_VNNI inline __m256i times3(__m256i q) { return _mm256_add_epi8(_mm256_add_epi8(q, q), q); }
LOOM_AVX512_VNNI inline __m128i times3(__m128i q) { return _mm_add_epi8(_mm_add_epi8(q, q), q); }

// sum_e (trit_e - 1) y_e of one block (16 int32 lanes).
LOOM_AVX512_VNNI inline __m512i tq1_block(const uint8_t* bw, const uint8_t* ba) {
  const __m512i one = _mm512_set1_epi8(1), zero = _mm512_setzero_si512();
  const __m512i c86 = _mm512_set1_epi8(86), c171 = _mm512_set1_epi8(int8_t(171));
  // Four registers of shifted bytes in element order (trit = (q >= 86) + (q >= 171)):
  // qs[0..31] x {1, 3}, {9, 27}, then x 81 with qs[32..47] x {1, 3}, then x {9, 27} and
  // (x 81, qh x {1, 3, 9, 27}).
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
  __m512i s[2] = {zero, zero};  // two accumulation chains
  for (int k = 0; k < 4; ++k) {
    const __m512i y = load512(ba + 4 + 64 * k);
    const __mmask64 ge86 = _mm512_cmpge_epu8_mask(g[k], c86);
    const __mmask64 ge171 = _mm512_cmpge_epu8_mask(g[k], c171);
    // Level trit - 1: y where the trit is 2, -y where it is 0, 0 where it is 1.
    const __m512i t = _mm512_mask_sub_epi8(_mm512_maskz_mov_epi8(ge171, y), ~ge86, zero, y);
    s[k & 1] = _mm512_dpbusd_epi32(s[k & 1], one, t);
  }
  return _mm512_add_epi32(s[0], s[1]);
}

LOOM_AVX512_VNNI float dot_tq1_0(int64_t nb, const uint8_t* w, const uint8_t* a) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  alignas(64) float sc[16];
  int64_t i = 0;
  for (; i + 16 <= nb; i += 16) {
    tq_scales16(w + i * 54, 54, 52, a + i * kQ8KBytes, sc);
    __asm__ volatile("" : : "r"(sc) : "memory");  // broadcast the scales by loads
    for (int b = 0; b < 16; b += 2) {
      for (int c = 0; c < 2 * 54; c += 64)
        _mm_prefetch(reinterpret_cast<const char*>(w + (i + b) * 54 + kPrefetch + c), _MM_HINT_T0);
      acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tq1_block(w + (i + b) * 54, a + (i + b) * kQ8KBytes)), _mm512_set1_ps(sc[b]),
                             acc0);
      acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tq1_block(w + (i + b + 1) * 54, a + (i + b + 1) * kQ8KBytes)),
                             _mm512_set1_ps(sc[b + 1]), acc1);
    }
  }
  for (; i < nb; ++i) {
    const uint8_t* bw = w + i * 54;
    _mm_prefetch(reinterpret_cast<const char*>(bw + kPrefetch), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(bw + kPrefetch + 53), _MM_HINT_T0);
    const uint8_t* ba = a + i * kQ8KBytes;
    acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tq1_block(bw, ba)), _mm512_set1_ps(f16(bw + 52) * f32_at(ba)), acc0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
}

}  // namespace

float vec_dot_q1_0_avx512(int64_t n, const void* w, const void* a) {
  float out;
  dots_q1_0(blocks("vec_dot_q1_0", n, kQ1_0Block), static_cast<const uint8_t*>(w), 0, 1, static_cast<const uint8_t*>(a),
            &out);
  return out;
}
void vec_dots_q1_0_avx512(int64_t n, const void* w, size_t w_stride, int n_rows_w, const void* a, float* out) {
  dots_q1_0(blocks("vec_dot_q1_0", n, kQ1_0Block), static_cast<const uint8_t*>(w), w_stride, n_rows_w,
            static_cast<const uint8_t*>(a), out);
}
float vec_dot_q2_0_avx512(int64_t n, const void* w, const void* a) {
  return dot_q2_0(blocks("vec_dot_q2_0", n, kQ2_0Block), static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(a));
}
float vec_dot_mxfp4_avx512(int64_t n, const void* w, const void* a) {
  float out;
  dots_mxfp4(blocks("vec_dot_mxfp4", n, kMxfp4Block), static_cast<const uint8_t*>(w), 0, 1, static_cast<const uint8_t*>(a),
             &out);
  return out;
}
void vec_dots_mxfp4_avx512(int64_t n, const void* w, size_t w_stride, int n_rows_w, const void* a, float* out) {
  dots_mxfp4(blocks("vec_dot_mxfp4", n, kMxfp4Block), static_cast<const uint8_t*>(w), w_stride, n_rows_w,
             static_cast<const uint8_t*>(a), out);
}
float vec_dot_tq2_0_avx512(int64_t n, const void* w, const void* a) {
  return dot_tq2_0(blocks("vec_dot_tq2_0", n, kTQBlock), static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(a));
}
float vec_dot_tq1_0_avx512(int64_t n, const void* w, const void* a) {
  return dot_tq1_0(blocks("vec_dot_tq1_0", n, kTQBlock), static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(a));
}

}  // namespace loom::quant::detail::small_simd

#endif  // __x86_64__

// vec_dot_tile of TQ1_0, TQ2_0, MXFP4, Q1_0 and Q2_0 (new_tile_kernels.h). Every function
// carries its target attribute.
//
// The dots the table dispatches (small_simd::vec_dot_*_x86) equal the reference only up to
// float rounding, and batch invariance needs each tile output bit-identical with that dot.
// MXFP4, Q1_0 and TQ2_0 (AVX-512 VNNI): their dots sum whole blocks (MXFP4, TQ2_0) or 32-element
// units (Q1_0) exactly and add them in a fixed order (TQ2_0: block by block; MXFP4, Q1_0: 16
// float slots, small_types.h kUnitSlotOf16), so the tile here decodes 16 weight rows once into an
// interleaved int8 panel, one lane per weight row, and runs each activation row over it with a
// VPDPBUSD per 4 elements of 16 rows (see "units of 32 elements" and TQ2_0 below). TQ1_0 and
// Q2_0: their dots accumulate int32 sums of four elements, converted to float, in 16 float lanes
// with FMAs and reduce the lanes at the end, so their tile kernels are those dots with the weight
// side hoisted: for up to four activation rows at a time, each weight block's levels (Q2_0 2-bit
// fields, TQ1_0 trit masks) are computed once and then combined with every row's activations
// through the same int32 lanes, the same scale products and the same FMAs in the same order per
// row. Without AVX-512 VNNI, and for one activation row, the tile is the loop over the
// dispatched dot (MXFP4 and Q1_0: small_simd::vec_dots_*, that dot over several weight rows with
// the activation side prepared once).
#if defined(__x86_64__)

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <vector>

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
LOOM_ST_AVX512 inline __m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
LOOM_ST_AVX512 inline __m512i q8_0_pair(const uint8_t* a) {
  return _mm512_mask_loadu_epi8(_mm512_loadu_si512(a + 2), 0xffffffff00000000ull, a + 4);
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

// ---- units of 32 elements: MXFP4 and Q1_0 ------------------------------------------------------
//
// Their dots (kernels_small_avx512.cpp) sum each 32-element unit exactly and accumulate
// float(isum) * (d_a * d_w) in 16 slots summed in a fixed tree (small_types.h kUnitSlotOf16,
// unit_tree_sum), which a tile reproduces lane-wise with one lane per weight row. 16 weight rows
// are decoded once into a panel (UnitPanel per unit): the signed level of each element, group g
// of 4 elements of row r at wv[g][r], so one 64-byte load holds those 4 elements of all 16 rows
// and VPDPBUSD with a broadcast of the 4 activation bytes as unsigned (y + 128: the activation
// rows are XORed with 0x80 once per call) multiplies them all; starting the sum from
// -128 * sum(level) leaves the exact isum. Slot l's units are visited in increasing order as the
// dot adds them, and the slots of each row are summed in the dot's tree.
constexpr int kPanel = 16;
struct alignas(64) UnitPanel {
  uint8_t wv[8][kPanel][4];
  int32_t nbias[kPanel];  // -128 * sum of the row's 32 levels
  float ws[kPanel];       // the row's weight scale of the unit (2^(e - 128); Q1_0's f16 d)
};
static_assert(sizeof(UnitPanel) == 640);

template <class T>
T* scratch(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
  return v.data();
}

// The panel this thread decoded last, with a copy of the weight bytes it came from (matmul calls
// the tile for successive groups of activation rows against the same 16 weight rows): reused
// only when the decoder and every weight byte are the same.
struct UnitPanelCache {
  const void* decoder = nullptr;
  int64_t nu = 0;
  int rows = 0;
  std::vector<uint8_t> raw;
  std::vector<UnitPanel> panel;
};

// Row r of the panel from the 32 signed levels (bytes) of a unit.
LOOM_ST_AVX512 inline void put_unit(UnitPanel& pb, int r, __m256i lv, float ws) {
  alignas(32) uint32_t d[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(d), lv);
  for (int g = 0; g < 8; ++g) std::memcpy(pb.wv[g][r], &d[g], 4);
  const __m256i s = _mm256_sad_epu8(_mm256_xor_si256(lv, _mm256_set1_epi8(int8_t(0x80))), _mm256_setzero_si256());
  const __m128i t = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  pb.nbias[r] = -128 * (_mm_cvtsi128_si32(t) + _mm_extract_epi32(t, 2) - 32 * 128);
  pb.ws[r] = ws;
}

// MXFP4: levels kMxfp4Values.
LOOM_ST_AVX512 void decode_mxfp4_row(int64_t nu, const uint8_t* w, int r, UnitPanel* pan) {
  const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kMxfp4Values));
  const __m128i m4 = _mm_set1_epi8(0x0f);
  for (int64_t u = 0; u < nu; ++u) {
    const uint8_t* b = w + u * 17;
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 1));
    const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(q, m4));
    const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(q, 4), m4));
    put_unit(pan[u], r, _mm256_set_m128i(hi, lo), e8m0_half(b[0]));
  }
}
// Q1_0: levels +-1 (bit set: +1); unit u is the quarter u % 4 of block u / 4.
LOOM_ST_AVX512 void decode_q1_0_row(int64_t nu, const uint8_t* w, int r, UnitPanel* pan) {
  const __m256i one = _mm256_set1_epi8(1), minus = _mm256_set1_epi8(-1);
  for (int64_t u = 0; u < nu; ++u) {
    const uint8_t* b = w + (u / 4) * 18;
    uint32_t bits;
    std::memcpy(&bits, b + 2 + 4 * (u % 4), 4);
    put_unit(pan[u], r, _mm256_mask_mov_epi8(minus, __mmask32(bits), one), f16(b));
  }
}

using UnitDecode = void (*)(int64_t, const uint8_t*, int, UnitPanel*);

// The panel of rows w[0 .. pw) (row bytes rb), from the cache when it holds them.
const UnitPanel* unit_panel(UnitDecode dec, int64_t nu, const uint8_t* w, size_t ws, int pw, size_t rb) {
  thread_local UnitPanelCache c;
  bool same = c.decoder == reinterpret_cast<const void*>(dec) && c.nu == nu && c.rows == pw;
  for (int r = 0; same && r < pw; ++r) same = std::memcmp(c.raw.data() + size_t(r) * rb, w + size_t(r) * ws, rb) == 0;
  if (same) return c.panel.data();
  c.decoder = reinterpret_cast<const void*>(dec);
  c.nu = nu;
  c.rows = pw;
  c.raw.resize(rb * size_t(pw));
  for (int r = 0; r < pw; ++r) std::memcpy(c.raw.data() + size_t(r) * rb, w + size_t(r) * ws, rb);
  UnitPanel* pan = scratch(c.panel, size_t(nu));
  if (pw < kPanel) std::memset(static_cast<void*>(pan), 0, size_t(nu) * sizeof(UnitPanel));
  for (int r = 0; r < pw; ++r) dec(nu, w + size_t(r) * ws, r, pan);
  return pan;
}

// The bytes of an activation row XORed with 0x80 (n bytes).
LOOM_ST_AVX512 void xor80(const uint8_t* src, size_t n, uint8_t* dst) {
  const __m512i x80 = _mm512_set1_epi8(int8_t(0x80));
  size_t i = 0;
  for (; i + 64 <= n; i += 64) _mm512_storeu_si512(dst + i, _mm512_xor_si512(_mm512_loadu_si512(src + i), x80));
  if (i < n) {
    const __mmask64 m = (~0ull) >> (64 - (n - i));
    _mm512_mask_storeu_epi8(dst + i, m, _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, src + i), x80));
  }
}

LOOM_ST_AVX512 inline int32_t i32_at(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
LOOM_ST_AVX512 inline __m512 f16_bcast(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _mm512_cvtph_ps(_mm256_set1_epi16(int16_t(h)));
}

// R activation rows (a: as stored, x: XORed) against the panel: res[k] lane r = the dot of
// weight row r with row k.
template <int R>
LOOM_ST_AVX512 void unit_panel_rows(int64_t nu, const UnitPanel* pan, const uint8_t* const* a, const uint8_t* const* x,
                                    __m512* res) {
  alignas(64) float slot[R][16][16];
  for (int l = 0; l < 16; ++l) {
    __m512 acc[R];
    for (int k = 0; k < R; ++k) acc[k] = _mm512_setzero_ps();
    for (int64_t u = kUnitSlotOf16[l]; u < nu; u += 16) {
      const UnitPanel& pb = pan[u];
      const __m512i nbias = _mm512_load_si512(pb.nbias);
      // Two accumulation chains per row (even and odd groups): VPDPBUSD's latency would
      // otherwise bound R chains.
      __m512i s[R], t[R];
      for (int k = 0; k < R; ++k) {
        s[k] = nbias;
        t[k] = _mm512_setzero_si512();
      }
      for (int g = 0; g < 8; g += 2) {
        const __m512i wv0 = _mm512_load_si512(pb.wv[g]), wv1 = _mm512_load_si512(pb.wv[g + 1]);
        for (int k = 0; k < R; ++k) {
          const uint8_t* y = x[k] + u * kQ80Bytes + 2 + 4 * g;
          s[k] = _mm512_dpbusd_epi32(s[k], _mm512_set1_epi32(i32_at(y)), wv0);
          t[k] = _mm512_dpbusd_epi32(t[k], _mm512_set1_epi32(i32_at(y + 4)), wv1);
        }
      }
      const __m512 wsc = _mm512_load_ps(pb.ws);
      for (int k = 0; k < R; ++k) {
        const __m512i isum = _mm512_add_epi32(s[k], t[k]);
        acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(f16_bcast(a[k] + u * kQ80Bytes), wsc), acc[k]);
      }
    }
    for (int k = 0; k < R; ++k) _mm512_store_ps(slot[k][l], acc[k]);
  }
  for (int k = 0; k < R; ++k) {
    __m512 t8[8], t4[4];
    for (int l = 0; l < 8; ++l) t8[l] = _mm512_add_ps(_mm512_load_ps(slot[k][l]), _mm512_load_ps(slot[k][l + 8]));
    for (int l = 0; l < 4; ++l) t4[l] = _mm512_add_ps(t8[l], t8[l + 4]);
    res[k] = _mm512_add_ps(_mm512_add_ps(t4[0], t4[2]), _mm512_add_ps(t4[1], t4[3]));
  }
}

LOOM_ST_AVX512 void unit_tile(UnitDecode dec, int64_t nu, size_t rb, const uint8_t* w, size_t ws, int nw, const uint8_t* a,
                              size_t as, int na, float* out, size_t os) {
  thread_local std::vector<uint8_t> xbuf;
  const size_t arb = size_t(nu) * kQ80Bytes;
  uint8_t* xa = scratch(xbuf, size_t(na) * arb);
  for (int k = 0; k < na; ++k) xor80(a + size_t(k) * as, arb, xa + size_t(k) * arb);
  constexpr int kR = 4;
  for (int j0 = 0; j0 < nw; j0 += kPanel) {
    const int pw = nw - j0 < kPanel ? nw - j0 : kPanel;
    const UnitPanel* pan = unit_panel(dec, nu, w + size_t(j0) * ws, ws, pw, rb);
    const __mmask16 lanes = __mmask16((1u << pw) - 1);
    for (int r0 = 0; r0 < na; r0 += kR) {
      const int rr = na - r0 < kR ? na - r0 : kR;
      const uint8_t* rows[kR];
      const uint8_t* xrows[kR];
      for (int k = 0; k < rr; ++k) {
        rows[k] = a + size_t(r0 + k) * as;
        xrows[k] = xa + size_t(r0 + k) * arb;
      }
      __m512 res[kR];
      switch (rr) {
        case 4: unit_panel_rows<4>(nu, pan, rows, xrows, res); break;
        case 3: unit_panel_rows<3>(nu, pan, rows, xrows, res); break;
        case 2: unit_panel_rows<2>(nu, pan, rows, xrows, res); break;
        default: unit_panel_rows<1>(nu, pan, rows, xrows, res); break;
      }
      for (int k = 0; k < rr; ++k) _mm512_mask_storeu_ps(out + size_t(r0 + k) * os + j0, lanes, res[k]);
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

// ---- ternary ---------------------------------------------------------------------------------

LOOM_ST_AVX512 inline void tq_scales16(const uint8_t* w, int wbytes, int dpos, const uint8_t* a, float* out) {
  const __m512i k = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i gw =
      _mm512_srli_epi32(_mm512_i32gather_epi32(_mm512_mullo_epi32(k, _mm512_set1_epi32(wbytes)), w + dpos - 2, 1), 16);
  const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(gw));
  const __m512 da = _mm512_i32gather_ps(_mm512_mullo_epi32(k, _mm512_set1_epi32(kQ8KBytes)), a, 1);
  _mm512_storeu_ps(out, _mm512_mul_ps(da, dw));
}

// TQ2_0: its dot (kernels_small_avx512.cpp) adds float(isum) * (d_a * d_w) block by block with
// one FMA, so the tile runs 16 weight rows as the lanes of a panel: per block the unsigned 2-bit
// fields q (0..3) of element group g (4 elements) of row r at q[g][r], one VPDPBUSD with a
// broadcast of the 4 activation bytes per group for all 16 rows, isum = that sum - sum(y) (the
// Q8_K block's bsums).
struct alignas(64) Tq2Panel {
  uint8_t q[64][kPanel][4];
  float d[kPanel];
};
static_assert(sizeof(Tq2Panel) == 4096 + 64);

// Row r of the panel from the nb blocks at w.
LOOM_ST_AVX512 void decode_tq2_row(int64_t nb, const uint8_t* w, int r, Tq2Panel* pan) {
  const __m256i m3 = _mm256_set1_epi8(3);
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* b = w + i * 66;
    alignas(32) uint32_t e[64];  // element order, 4 per dword
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load256(b + 32 * h);
      for (int l = 0; l < 4; ++l) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(e + 32 * h + 8 * l),
                           _mm256_and_si256(_mm256_srli_epi16(q, 2 * l), m3));
      }
    }
    for (int g = 0; g < 64; ++g) std::memcpy(pan[i].q[g][r], &e[g], 4);
    pan[i].d[r] = f16(b + 64);
  }
}

struct Tq2PanelCache {
  int64_t nb = 0;
  int rows = 0;
  std::vector<uint8_t> raw;
  std::vector<Tq2Panel> panel;
};

const Tq2Panel* tq2_panel(int64_t nb, const uint8_t* w, size_t ws, int pw) {
  thread_local Tq2PanelCache c;
  const size_t rb = size_t(nb) * 66;
  bool same = c.nb == nb && c.rows == pw;
  for (int r = 0; same && r < pw; ++r) same = std::memcmp(c.raw.data() + size_t(r) * rb, w + size_t(r) * ws, rb) == 0;
  if (same) return c.panel.data();
  c.nb = nb;
  c.rows = pw;
  c.raw.resize(rb * size_t(pw));
  for (int r = 0; r < pw; ++r) std::memcpy(c.raw.data() + size_t(r) * rb, w + size_t(r) * ws, rb);
  Tq2Panel* pan = scratch(c.panel, size_t(nb));
  if (pw < kPanel) std::memset(static_cast<void*>(pan), 0, size_t(nb) * sizeof(Tq2Panel));
  for (int r = 0; r < pw; ++r) decode_tq2_row(nb, w + size_t(r) * ws, r, pan);
  return pan;
}

LOOM_ST_AVX512 inline int32_t bsum_total(const uint8_t* ba) {
  const __m256i s = _mm256_madd_epi16(load256(ba + 260), _mm256_set1_epi16(1));
  __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(1, 0, 3, 2)));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(t);
}

template <int R>
LOOM_ST_AVX512 void tq2_panel_rows(int64_t nb, const Tq2Panel* pan, const uint8_t* const* a, __m512* res) {
  __m512 sum[R];
  for (int k = 0; k < R; ++k) sum[k] = _mm512_setzero_ps();
  for (int64_t i = 0; i < nb; ++i) {
    const Tq2Panel& pb = pan[i];
    __m512i s[R], t[R];  // two chains per row (even and odd groups)
    for (int k = 0; k < R; ++k) {
      s[k] = _mm512_set1_epi32(-bsum_total(a[k] + i * kQ8KBytes));
      t[k] = _mm512_setzero_si512();
    }
    for (int g = 0; g < 64; g += 2) {
      const __m512i wv0 = _mm512_load_si512(pb.q[g]), wv1 = _mm512_load_si512(pb.q[g + 1]);
      for (int k = 0; k < R; ++k) {
        const uint8_t* y = a[k] + i * kQ8KBytes + 4 + 4 * g;
        s[k] = _mm512_dpbusd_epi32(s[k], wv0, _mm512_set1_epi32(i32_at(y)));
        t[k] = _mm512_dpbusd_epi32(t[k], wv1, _mm512_set1_epi32(i32_at(y + 4)));
      }
    }
    const __m512 dw = _mm512_load_ps(pb.d);
    for (int k = 0; k < R; ++k) {
      const __m512 d = _mm512_mul_ps(_mm512_set1_ps(f32_at(a[k] + i * kQ8KBytes)), dw);
      sum[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s[k], t[k])), d, sum[k]);
    }
  }
  for (int k = 0; k < R; ++k) res[k] = sum[k];
}

LOOM_ST_AVX512 void tq2_tile(int64_t nb, const uint8_t* w, size_t ws, int nw, const uint8_t* a, size_t as, int na,
                             float* out, size_t os) {
  constexpr int kR = 4;
  for (int j0 = 0; j0 < nw; j0 += kPanel) {
    const int pw = nw - j0 < kPanel ? nw - j0 : kPanel;
    const Tq2Panel* pan = tq2_panel(nb, w + size_t(j0) * ws, ws, pw);
    const __mmask16 lanes = __mmask16((1u << pw) - 1);
    for (int r0 = 0; r0 < na; r0 += kR) {
      const int rr = na - r0 < kR ? na - r0 : kR;
      const uint8_t* rows[kR];
      for (int k = 0; k < rr; ++k) rows[k] = a + size_t(r0 + k) * as;
      __m512 res[kR];
      switch (rr) {
        case 4: tq2_panel_rows<4>(nb, pan, rows, res); break;
        case 3: tq2_panel_rows<3>(nb, pan, rows, res); break;
        case 2: tq2_panel_rows<2>(nb, pan, rows, res); break;
        default: tq2_panel_rows<1>(nb, pan, rows, res); break;
      }
      for (int k = 0; k < rr; ++k) _mm512_mask_storeu_ps(out + size_t(r0 + k) * os + j0, lanes, res[k]);
    }
  }
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

void tile_loop(VecDot dot, int64_t n, const uint8_t* w, size_t ws, int nw, const uint8_t* a, size_t as, int na, float* out,
               size_t os) {
  for (int r = 0; r < na; ++r) {
    for (int j = 0; j < nw; ++j) out[size_t(r) * os + j] = dot(n, w + size_t(j) * ws, a + size_t(r) * as);
  }
}

void tile(int64_t n, int block, const RowsFn (&fns)[kMaxR], VecDot dot, const void* w, size_t ws, int nw, const void* a,
          size_t as, int na, float* out, size_t os) {
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

#define LOOM_SMALL_TILE(t, block)                                                                                  \
  void vec_dot_tile_##t(int64_t n, const void* w, size_t ws, int nw, const void* a, size_t as, int na, float* out, \
                        size_t os) {                                                                               \
    static constexpr RowsFn kFns[kMaxR] = {t##_rows<1>, t##_rows<2>, t##_rows<3>, t##_rows<4>};                    \
    tile(n, block, kFns, small_simd::vec_dot_##t##_x86, w, ws, nw, a, as, na, out, os);                            \
  }
void vec_dot_tile_q1_0(int64_t n, const void* w, size_t ws, int nw, const void* a, size_t as, int na, float* out,
                       size_t os) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  if (!use_avx512()) return tile_loop(small_simd::vec_dot_q1_0_x86, n, wb, ws, nw, ab, as, na, out, os);
  if (na == 1) return small_simd::vec_dots_q1_0_avx512(n, wb, ws, nw, ab, out);
  if (na < 1) return;
  const int64_t nb = n / kQ1_0Block;
  unit_tile(decode_q1_0_row, 4 * nb, size_t(nb) * 18, wb, ws, nw, ab, as, na, out, os);
}
void vec_dot_tile_mxfp4(int64_t n, const void* w, size_t ws, int nw, const void* a, size_t as, int na, float* out,
                        size_t os) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  if (!use_avx512()) return tile_loop(small_simd::vec_dot_mxfp4_x86, n, wb, ws, nw, ab, as, na, out, os);
  if (na == 1) return small_simd::vec_dots_mxfp4_avx512(n, wb, ws, nw, ab, out);
  if (na < 1) return;
  const int64_t nb = n / kMxfp4Block;
  unit_tile(decode_mxfp4_row, nb, size_t(nb) * 17, wb, ws, nw, ab, as, na, out, os);
}
LOOM_SMALL_TILE(q2_0, kQ2_0Block)
void vec_dot_tile_tq2_0(int64_t n, const void* w, size_t ws, int nw, const void* a, size_t as, int na, float* out,
                        size_t os) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  if (!use_avx512() || na <= 1) return tile_loop(small_simd::vec_dot_tq2_0_x86, n, wb, ws, nw, ab, as, na, out, os);
  tq2_tile(n / kTQBlock, wb, ws, nw, ab, as, na, out, os);
}
LOOM_SMALL_TILE(tq1_0, kTQBlock)
#undef LOOM_SMALL_TILE

}  // namespace loom::quant::detail::new_tile

#endif  // __x86_64__

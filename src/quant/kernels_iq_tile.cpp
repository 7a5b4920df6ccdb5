// vec_dot_tile of the IQ1/IQ2/IQ3 formats (new_tile_kernels.h). Every function carries its
// target attribute.
//
// AVX-512 VNNI: a weight row is decoded once per tile into, per 256-element block, 256 level
// magnitudes (unsigned bytes), 256 sign bits (four 64-bit masks), the int16 scale of each
// element pair (four 64-byte vectors) and the f16 block scale as a float; then each activation
// row runs over the decoded row with four masked subtracts, maddubs and VPDPWSSD per block.
// The integer block sums are exact (the contract of iq_kernels.h: activations in [-127, 127]),
// and each is turned into float with the float steps of the vec_dot the table dispatches, in the
// same order, so every output is bit-identical with that dot (and with the reference):
//   grid types:  sumf += (d_w * d_a) * float(isum); result factor * sumf
//   IQ1_S/IQ1_M: sumf += (d_w * d_a) * (float(8 isum + isum_delta) * 0.125f) (IQ1_S's
//                float(isum) + 0.125f * float(isum_delta) is that value exactly: both are below
//                2^23 in magnitude).
// IQ1_S and IQ1_M decode to 8 * level +- 1 (the delta's sign), as the AVX-512 IQ1_M dot does.
#if defined(__x86_64__)

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <immintrin.h>

#include <cstring>
#include <vector>

#include "base/cpu.h"
#include "quant/iq_grids.h"
#include "quant/iq_kernels.h"
#include "quant/iq_ref.h"
#include "quant/new_tile_kernels.h"

#define LOOM_IQT_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

namespace loom::quant::detail::new_tile {
namespace {

using namespace loom::quant::iq;
using VecDot = float (*)(int64_t, const void*, const void*);

constexpr int kQ8K = 292;

bool use_avx512() {
  static const bool z = cpu_features().has_avx512_vnni_set();
  return z;
}

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
inline float f32_at(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

// One decoded 256-element block.
struct alignas(64) Dec {
  uint8_t lv[4][64];  // |level| of elements 64 p .. 64 p + 63
  int16_t ls[4][32];  // scale of each element pair
  uint64_t neg[4];    // sign bits (1: negative level)
  float d;            // the f16 block scale
  uint8_t pad[28];
};
static_assert(sizeof(Dec) == 576);

inline int64_t rep16(int v) { return int64_t(uint64_t(uint16_t(v)) * 0x0001000100010001ull); }
LOOM_IQT_AVX512 inline __m512i scales2(int s0, int s1) {
  return _mm512_mask_blend_epi16(__mmask32(0xffff0000u), _mm512_set1_epi16(int16_t(s0)), _mm512_set1_epi16(int16_t(s1)));
}
LOOM_IQT_AVX512 inline __m512i scales4(int s0, int s1, int s2, int s3) {
  return _mm512_set_epi64(rep16(s3), rep16(s3), rep16(s2), rep16(s2), rep16(s1), rep16(s1), rep16(s0), rep16(s0));
}
LOOM_IQT_AVX512 inline __m128i sign_bytes16(__m512i bits7) {
  __m512i x = _mm512_xor_si512(bits7, _mm512_srli_epi32(bits7, 4));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 2));
  x = _mm512_xor_si512(x, _mm512_srli_epi32(x, 1));
  const __m512i p = _mm512_slli_epi32(_mm512_and_si512(x, _mm512_set1_epi32(1)), 7);
  return _mm512_cvtepi32_epi8(_mm512_or_si512(bits7, p));
}
LOOM_IQT_AVX512 inline void signs_7bit_words(__m512i words, uint64_t* out) {
  const __m512i lo = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i hi = _mm512_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7);
  const __m512i shifts = _mm512_setr_epi32(0, 7, 14, 21, 0, 7, 14, 21, 0, 7, 14, 21, 0, 7, 14, 21);
  const __m512i m127 = _mm512_set1_epi32(127);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                   sign_bytes16(_mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(lo, words), shifts), m127)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2),
                   sign_bytes16(_mm512_and_si512(_mm512_srlv_epi32(_mm512_permutexvar_epi32(hi, words), shifts), m127)));
}
LOOM_IQT_AVX512 inline void put(Dec& o, int p, __m512i levels, __m512i ls) {
  _mm512_store_si512(o.lv[p], levels);
  _mm512_store_si512(o.ls[p], ls);
}
// Signed levels (8 level +- 1 of the IQ1 formats): magnitudes and sign bits.
LOOM_IQT_AVX512 inline void put_signed(Dec& o, int p, __m512i lv, __m512i ls) {
  o.neg[p] = _mm512_movepi8_mask(lv);
  put(o, p, _mm512_abs_epi8(lv), ls);
}

// ---- decoders: one block at b into o ---------------------------------------------------------

LOOM_IQT_AVX512 void dec_iq2_xxs(const uint8_t* b, Dec& o) {
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 0, 0, 0, 0, 0, 0, 0, 0);
  signs_7bit_words(_mm512_permutexvar_epi32(odd, _mm512_loadu_si512(b + 2)), o.neg);
  for (int p = 0; p < 4; ++p) {
    const uint8_t* q = b + 2 + 16 * p;
    const uint32_t v0 = u32_at(q + 4), v1 = u32_at(q + 12);
    const uint64_t ib8 = uint64_t(u32_at(q)) | uint64_t(u32_at(q + 8)) << 32;
    const __m256i idx = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(ib8)));
    const __m512i levels = _mm512_i32gather_epi64(idx, reinterpret_cast<const long long*>(kIq2xxsGrid), 8);
    put(o, p, levels, scales2(int(2 * (v0 >> 28) + 1), int(2 * (v1 >> 28) + 1)));
  }
  o.d = _cvtsh_ss(u16_at(b));
}
LOOM_IQT_AVX512 void dec_iq2_xs(const uint8_t* b, Dec& o) {
  const __m512i q = _mm512_loadu_si512(b + 2);
  const __m512i lo = _mm512_cvtepu16_epi32(_mm512_castsi512_si256(q));
  const __m512i hi = _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(q, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(o.neg), sign_bytes16(_mm512_srli_epi32(lo, 9)));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(o.neg + 2), sign_bytes16(_mm512_srli_epi32(hi, 9)));
  for (int p = 0; p < 4; ++p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 + 16 * p)));
    const __m256i idx = _mm256_and_si256(v, _mm256_set1_epi32(511));
    const __m512i levels = _mm512_i32gather_epi64(idx, reinterpret_cast<const long long*>(kIq2xsGrid), 8);
    const int s0 = b[66 + 2 * p], s1 = b[67 + 2 * p];
    put(o, p, levels, scales4(2 * (s0 & 15) + 1, 2 * (s0 >> 4) + 1, 2 * (s1 & 15) + 1, 2 * (s1 >> 4) + 1));
  }
  o.d = _cvtsh_ss(u16_at(b));
}
LOOM_IQT_AVX512 void dec_iq2_s(const uint8_t* b, Dec& o) {
  std::memcpy(o.neg, b + 34, 32);
  for (int p = 0; p < 4; ++p) {
    const uint8_t* q = b + 2 + 8 * p;
    const int h0 = b[66 + 2 * p], h1 = b[67 + 2 * p];
    const __m256i hv = _mm256_setr_epi32(h0, h0, h0, h0, h1, h1, h1, h1);
    const __m256i hi =
        _mm256_and_si256(_mm256_srlv_epi32(hv, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)), _mm256_set1_epi32(3));
    const __m256i idx = _mm256_or_si256(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))),
                                        _mm256_slli_epi32(hi, 8));
    const __m512i levels = _mm512_i32gather_epi64(idx, reinterpret_cast<const long long*>(kIq2sGrid), 8);
    const int s0 = b[74 + 2 * p], s1 = b[75 + 2 * p];
    put(o, p, levels, scales4(2 * (s0 & 15) + 1, 2 * (s0 >> 4) + 1, 2 * (s1 & 15) + 1, 2 * (s1 >> 4) + 1));
  }
  o.d = _cvtsh_ss(u16_at(b));
}
LOOM_IQT_AVX512 void dec_iq3_xxs(const uint8_t* b, Dec& o) {
  signs_7bit_words(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 66))), o.neg);
  for (int p = 0; p < 4; ++p) {
    const uint8_t* q = b + 2 + 16 * p;
    const uint32_t v0 = u32_at(b + 66 + 8 * p), v1 = u32_at(b + 70 + 8 * p);
    const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
    const __m512i levels = _mm512_i32gather_epi32(idx, reinterpret_cast<const int*>(kIq3xxsGrid), 4);
    put(o, p, levels, scales2(int(2 * (v0 >> 28) + 1), int(2 * (v1 >> 28) + 1)));
  }
  o.d = _cvtsh_ss(u16_at(b));
}
LOOM_IQT_AVX512 void dec_iq3_s(const uint8_t* b, Dec& o) {
  std::memcpy(o.neg, b + 74, 32);
  for (int p = 0; p < 4; ++p) {
    const uint8_t* q = b + 2 + 16 * p;
    const int h = b[66 + 2 * p] | b[67 + 2 * p] << 8;
    const __m512i qv = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
    const __m512i idx = _mm512_mask_or_epi32(qv, __mmask16(h), qv, _mm512_set1_epi32(256));
    const __m512i levels = _mm512_i32gather_epi32(idx, reinterpret_cast<const int*>(kIq3sGrid), 4);
    const int s = b[106 + p];
    put(o, p, levels, scales2(2 * (s & 15) + 1, 2 * (s >> 4) + 1));
  }
  o.d = _cvtsh_ss(u16_at(b));
}
LOOM_IQT_AVX512 void dec_iq1_s(const uint8_t* b, Dec& o) {
  for (int p = 0; p < 4; ++p) {
    const uint8_t* q = b + 2 + 8 * p;
    const int h0 = u16_at(b + 34 + 4 * p), h1 = u16_at(b + 36 + 4 * p);
    const __m256i hv = _mm256_setr_epi32(h0, h0, h0, h0, h1, h1, h1, h1);
    const __m256i hi =
        _mm256_and_si256(_mm256_srlv_epi32(hv, _mm256_setr_epi32(0, 3, 6, 9, 0, 3, 6, 9)), _mm256_set1_epi32(7));
    const __m256i idx = _mm256_or_si256(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))),
                                        _mm256_slli_epi32(hi, 8));
    const __m512i grid = _mm512_i32gather_epi64(idx, reinterpret_cast<const long long*>(kIq1sGrid), 8);
    // 8 level + (delta sign): -1 for the first 32 bytes where bit 15 of h0 is set, likewise h1.
    const __mmask64 neg = (h0 & 0x8000 ? 0x00000000ffffffffull : 0) | (h1 & 0x8000 ? 0xffffffff00000000ull : 0);
    // grid bytes are -1, 0, 1: 8 x each byte by adds.
    const __m512i g2 = _mm512_add_epi8(grid, grid), g4 = _mm512_add_epi8(g2, g2), g8 = _mm512_add_epi8(g4, g4);
    const __m512i lv = _mm512_mask_sub_epi8(_mm512_add_epi8(g8, _mm512_set1_epi8(1)), neg, g8, _mm512_set1_epi8(1));
    put_signed(o, p, lv, scales2(2 * ((h0 >> 12) & 7) + 1, 2 * ((h1 >> 12) & 7) + 1));
  }
  o.d = _cvtsh_ss(u16_at(b));
}
LOOM_IQT_AVX512 void dec_iq1_m(const uint8_t* w, Dec& o) {
  uint16_t sc[4];
  std::memcpy(sc, w + 48, 8);
  for (int p = 0; p < 4; ++p) {
    const uint8_t* q = w + 8 * p;
    const uint32_t h = u32_at(w + 32 + 4 * p);
    const __m256i hn = _mm256_srlv_epi32(_mm256_set1_epi32(int(h)), _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    const __m256i idx = _mm256_or_si256(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q))),
                                        _mm256_slli_epi32(_mm256_and_si256(hn, _mm256_set1_epi32(7)), 8));
    const __m512i grid = _mm512_i32gather_epi64(idx, reinterpret_cast<const long long*>(kIq1sGrid), 8);
    const __mmask8 neg8 = _mm256_test_epi32_mask(hn, _mm256_set1_epi32(8));
    const __mmask64 neg = _mm512_movepi8_mask(_mm512_maskz_set1_epi64(neg8, -1));
    const __m512i lv8 = _mm512_and_si512(_mm512_slli_epi16(grid, 3), _mm512_set1_epi8(int8_t(0xf8)));
    const __m512i lv = _mm512_mask_sub_epi8(_mm512_add_epi8(lv8, _mm512_set1_epi8(1)), neg, lv8, _mm512_set1_epi8(1));
    const int s = sc[p];
    put_signed(o, p, lv, scales4(2 * (s & 7) + 1, 2 * ((s >> 3) & 7) + 1, 2 * ((s >> 6) & 7) + 1, 2 * ((s >> 9) & 7) + 1));
  }
  o.d = _cvtsh_ss(iq1m_d_bits(w + 48));
}

LOOM_IQT_AVX512 inline int reduce_i32(__m512i v) {
  const __m512i hi = _mm512_shuffle_i64x2(v, v, 0xee);
  const __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_castsi512_si256(hi));
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

LOOM_IQT_AVX512 inline __m512i part(__m512i acc, const Dec& o, int p, const uint8_t* q8) {
  const __m512i y = _mm512_loadu_si512(q8);
  const __m512i ys = _mm512_mask_sub_epi8(y, __mmask64(o.neg[p]), _mm512_setzero_si512(), y);
  return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(_mm512_load_si512(o.lv[p]), ys), _mm512_load_si512(o.ls[p]));
}
LOOM_IQT_AVX512 inline int block_isum(const Dec& o, const uint8_t* a) {
  __m512i acc0 = part(_mm512_setzero_si512(), o, 0, a + 4);
  __m512i acc1 = part(_mm512_setzero_si512(), o, 1, a + 68);
  acc0 = part(acc0, o, 2, a + 132);
  acc1 = part(acc1, o, 3, a + 196);
  return reduce_i32(_mm512_add_epi32(acc0, acc1));
}

// ---- panels of 16 weight rows ------------------------------------------------------------------
//
// A block of 16 weight rows decoded for VPDPBUSD with the activations as unsigned bytes
// (y + 128, exact for every int8 y): the signed levels of 16-element sub-block sb, group g of 4
// elements, row r at qs[sb][g][r] (4 bytes), so one 64-byte load holds those 4 elements of all 16
// rows and a broadcast of 4 activation bytes multiplies them all; the sub-block scales sc[sb][r];
// bias[r] = 128 * sum_e scale_e * level_e (subtracted at the end); the block scales d[r]. Per
// (activation row, weight row) the integer block sum is the same exact isum as the vec_dot's, and
// the float steps run lane-wise in the same order, so the outputs are bit-identical with it.
constexpr int kPanel = 16;
struct alignas(64) PanelBlock {
  int32_t qs[16][4][kPanel];
  int32_t sc[16][kPanel];
  int32_t bias[kPanel];
  float d[kPanel];
};
static_assert(sizeof(PanelBlock) == 4096 + 1024 + 128);

std::vector<PanelBlock>& panel_scratch(size_t blocks) {
  thread_local std::vector<PanelBlock> buf;
  if (buf.size() < blocks) buf.resize(blocks);
  return buf;
}

// Row r of the panel block from a decoded block.
LOOM_IQT_AVX512 void to_panel(const Dec& o, int r, PanelBlock& pb) {
  __m512i tot = _mm512_setzero_si512();
  for (int p = 0; p < 4; ++p) {
    const __m512i lv = _mm512_load_si512(o.lv[p]);
    const __m512i sw = _mm512_mask_sub_epi8(lv, __mmask64(o.neg[p]), _mm512_setzero_si512(), lv);
    alignas(64) int32_t dw[16];
    _mm512_store_si512(dw, sw);
    for (int k = 0; k < 16; ++k) pb.qs[4 * p + k / 4][k % 4][r] = dw[k];
    // The scale of each dword's 4 elements (the int16 of its first pair), times their sum.
    const __m512i sc32 = _mm512_madd_epi16(_mm512_load_si512(o.ls[p]), _mm512_set1_epi32(1));
    const __m512i sums = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(1), sw);
    tot = _mm512_add_epi32(tot, _mm512_mullo_epi32(sums, sc32));
    for (int q = 0; q < 4; ++q) pb.sc[4 * p + q][r] = o.ls[p][8 * q];
  }
  pb.bias[r] = 128 * reduce_i32(tot);
  pb.d[r] = o.d;
}

template <void (*Decode)(const uint8_t*, Dec&), int Bytes>
LOOM_IQT_AVX512 void decode_panel(int64_t nb, const uint8_t* w, size_t ws, int nw, PanelBlock* pan) {
  if (nw < kPanel) std::memset(static_cast<void*>(pan), 0, size_t(nb) * sizeof(PanelBlock));  // absent rows: zeros
  Dec o;
  for (int r = 0; r < nw; ++r) {
    const uint8_t* wr = w + size_t(r) * ws;
    for (int64_t i = 0; i < nb; ++i) {
      Decode(wr + i * Bytes, o);
      to_panel(o, r, pan[i]);
    }
  }
}

// R activation rows against a panel: out[k][r] for the 16 rows (lanes).
// Sub32: the format's scales are per 32 elements (equal for sub-blocks 2t and 2t + 1), so one
// multiply per pair of sub-blocks.
template <int R, bool Iq1, bool Sub32>
LOOM_IQT_AVX512 void panel_rows(int64_t nb, const PanelBlock* pan, const uint8_t* const* a, __m512* res) {
  __m512 s[R];
  for (int k = 0; k < R; ++k) s[k] = _mm512_setzero_ps();
  const __m512i x80 = _mm512_set1_epi8(int8_t(0x80));
  alignas(64) uint8_t u[R][256];
  for (int64_t i = 0; i < nb; ++i) {
    const PanelBlock& pb = pan[i];
    for (int k = 0; k < R; ++k) {
      const uint8_t* q = a[k] + i * kQ8K + 4;
      for (int c = 0; c < 4; ++c) {
        _mm512_store_si512(u[k] + 64 * c, _mm512_xor_si512(_mm512_loadu_si512(q + 64 * c), x80));
      }
    }
    __m512i isum[R];
    for (int k = 0; k < R; ++k) isum[k] = _mm512_setzero_si512();
    constexpr int kStep = Sub32 ? 2 : 1;
    for (int sb = 0; sb < 16; sb += kStep) {
      __m512i acc[R];
      for (int k = 0; k < R; ++k) acc[k] = _mm512_setzero_si512();
      for (int g = 0; g < 4 * kStep; ++g) {
        const __m512i wv = _mm512_load_si512(pb.qs[sb][0] + kPanel * g);
        for (int k = 0; k < R; ++k) {
          int32_t uu;
          std::memcpy(&uu, u[k] + 16 * sb + 4 * g, 4);  // g may run into sub-block sb + 1
          acc[k] = _mm512_dpbusd_epi32(acc[k], _mm512_set1_epi32(uu), wv);
        }
      }
      const __m512i sc = _mm512_load_si512(pb.sc[sb]);
      for (int k = 0; k < R; ++k) isum[k] = _mm512_add_epi32(isum[k], _mm512_mullo_epi32(acc[k], sc));
    }
    const __m512i bias = _mm512_load_si512(pb.bias);
    const __m512 dw = _mm512_load_ps(pb.d);
    for (int k = 0; k < R; ++k) {
      const __m512 x = _mm512_cvtepi32_ps(_mm512_sub_epi32(isum[k], bias));
      const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(f32_at(a[k] + i * kQ8K)));
      if constexpr (Iq1) {
        s[k] = _mm512_add_ps(s[k], _mm512_mul_ps(d, _mm512_mul_ps(x, _mm512_set1_ps(0.125f))));
      } else {
        s[k] = _mm512_add_ps(s[k], _mm512_mul_ps(d, x));
      }
    }
  }
  for (int k = 0; k < R; ++k) res[k] = s[k];
}

// The last panel this thread decoded, with a copy of the weight bytes it came from: matmul calls
// the tile for successive groups of activation rows against the same weight rows, and a panel is
// reused only when its decoder and every one of its weight bytes are the same.
struct PanelCache {
  const void* decoder = nullptr;
  int64_t nb = 0;
  int rows = 0;
  std::vector<uint8_t> raw;
};

// One per thread, shared by the types like the panel buffer it describes.
PanelCache& panel_cache() {
  thread_local PanelCache c;
  return c;
}

template <void (*Decode)(const uint8_t*, Dec&), int Bytes>
bool cached(PanelCache& c, int64_t nb, const uint8_t* w, size_t ws, int pw) {
  const size_t rb = size_t(nb) * Bytes;
  bool same = c.decoder == reinterpret_cast<const void*>(Decode) && c.nb == nb && c.rows == pw;
  for (int r = 0; same && r < pw; ++r) same = std::memcmp(c.raw.data() + size_t(r) * rb, w + size_t(r) * ws, rb) == 0;
  if (same) return true;
  c.decoder = reinterpret_cast<const void*>(Decode);
  c.nb = nb;
  c.rows = pw;
  c.raw.resize(rb * size_t(pw));
  for (int r = 0; r < pw; ++r) std::memcpy(c.raw.data() + size_t(r) * rb, w + size_t(r) * ws, rb);
  return false;
}

template <void (*Decode)(const uint8_t*, Dec&), int Bytes, bool Iq1, bool Sub32>
LOOM_IQT_AVX512 void tile_avx512(int64_t n, const uint8_t* w, size_t ws, int nw, const uint8_t* a, size_t as, int na,
                                 float* out, size_t os, float factor) {
  const int64_t nb = n / 256;
  PanelBlock* pan = panel_scratch(size_t(nb)).data();
  PanelCache& cache = panel_cache();
  constexpr int kR = 4;
  for (int j0 = 0; j0 < nw; j0 += kPanel) {
    const int pw = nw - j0 < kPanel ? nw - j0 : kPanel;
    if (!cached<Decode, Bytes>(cache, nb, w + size_t(j0) * ws, ws, pw)) {
      decode_panel<Decode, Bytes>(nb, w + size_t(j0) * ws, ws, pw, pan);
    }
    const __mmask16 lanes = __mmask16((1u << pw) - 1);
    for (int r0 = 0; r0 < na; r0 += kR) {
      const int rr = na - r0 < kR ? na - r0 : kR;
      const uint8_t* rows[kR];
      for (int k = 0; k < rr; ++k) rows[k] = a + size_t(r0 + k) * as;
      __m512 res[kR];
      switch (rr) {
        case 4: panel_rows<4, Iq1, Sub32>(nb, pan, rows, res); break;
        case 3: panel_rows<3, Iq1, Sub32>(nb, pan, rows, res); break;
        case 2: panel_rows<2, Iq1, Sub32>(nb, pan, rows, res); break;
        default: panel_rows<1, Iq1, Sub32>(nb, pan, rows, res); break;
      }
      for (int k = 0; k < rr; ++k) {
        const __m512 v = Iq1 ? res[k] : _mm512_mul_ps(_mm512_set1_ps(factor), res[k]);
        _mm512_mask_storeu_ps(out + size_t(r0 + k) * os + j0, lanes, v);
      }
    }
  }
}

void tile_loop(VecDot dot, int64_t n, const uint8_t* w, size_t ws, int nw, const uint8_t* a, size_t as, int na, float* out,
               size_t os) {
  for (int r = 0; r < na; ++r) {
    for (int j = 0; j < nw; ++j) out[size_t(r) * os + j] = dot(n, w + size_t(j) * ws, a + size_t(r) * as);
  }
}

using VecDotRows = void (*)(int64_t, const void*, size_t, int, const void*, float*);

template <void (*Decode)(const uint8_t*, Dec&), int Bytes, bool Iq1, bool Sub32, VecDot Avx2, VecDotRows Rows>
void tile(int64_t n, const void* w, size_t ws, int nw, const void* a, size_t as, int na, float* out, size_t os,
          float factor) {
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  if (!use_avx512()) return tile_loop(Avx2, n, wb, ws, nw, ab, as, na, out, os);
  // Decode (one activation row): the AVX-512 dot over all weight rows at once.
  if (na <= 1) {
    if (na == 1) Rows(n, w, ws, nw, a, out);
    return;
  }
  tile_avx512<Decode, Bytes, Iq1, Sub32>(n, wb, ws, nw, ab, as, na, out, os, factor);
}

}  // namespace

#define LOOM_IQ_TILE(t, bytes, iq1, sub32, factor)                                                                       \
  void vec_dot_tile_##t(int64_t n, const void* w, size_t ws, int nw, const void* a, size_t as, int na, float* out,       \
                        size_t os) {                                                                                     \
    tile<dec_##t, bytes, iq1, sub32, avx2::vec_dot_##t##_q8_k, avx512::vec_dot_rows_##t##_q8_k>(n, w, ws, nw, a, as, na, \
                                                                                                out, os, factor);        \
  }
LOOM_IQ_TILE(iq2_xxs, 66, false, true, 0.125f)
LOOM_IQ_TILE(iq2_xs, 74, false, false, 0.125f)
LOOM_IQ_TILE(iq2_s, 82, false, false, 0.125f)
LOOM_IQ_TILE(iq3_xxs, 98, false, true, 0.25f)
LOOM_IQ_TILE(iq3_s, 110, false, true, 1.0f)
LOOM_IQ_TILE(iq1_s, 50, true, true, 1.0f)
LOOM_IQ_TILE(iq1_m, 56, true, false, 1.0f)
#undef LOOM_IQ_TILE

}  // namespace loom::quant::detail::new_tile

#endif  // __x86_64__

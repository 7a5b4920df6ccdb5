// Packed GEMM with AVX-512 VNNI: one zmm register holds the 16 rows of a group (one 32-bit lane
// per row), VPDPBUSD adds 4 products per lane against a broadcast of 4 activation bytes. A tile
// (32 columns of 16 rows) is decoded once into 8 registers and reused for up to 8 activation rows.
// Only called when cpu_features().has_avx512_vnni_set(); see packed.h for the layout.
#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "quant/blocks.h"
#include "quant/packed.h"
#include "quant/packed_layout.h"

// GCC 12 reports a false "(may be) used uninitialized" inside its own AVX-512 headers (the
// undefined upper part of _mm512_broadcast_i32x4's pass-through operand, for one).
#if defined(__GNUC__) && !defined(__clang__)  // clang has no such warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#define LOOM_AVX512_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

namespace loom::quant::detail {
namespace {

// What a 32-column block type's tile holds beyond Q4_0's (PackedLayout): the kernels are
// instantiated per combination.
struct Blocks32 {
  bool nibbles;    // two weights per byte (else Q8_0's bytes)
  bool has_min;    // f16 m[16] after d; activations carry Q8_1's s
  bool fifth_bit;  // a byte of fifth bits per row and chunk after the chunks
  bool lut;        // nibbles index kIq4nlBiased (kMxfp4Biased with mxfp4)
  bool mxfp4;
};
constexpr Blocks32 blocks32_of(const PackedLayout& L) { return Blocks32{L.nibbles, L.has_min, L.fifth_bit, L.lut, L.mxfp4}; }

// 16 unsigned bytes widened to 16 int32 lanes.
LOOM_AVX512_VNNI inline __m512i u8x16(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Adds `add` to the bytes of w whose bit is set in the chunk mask at p (ChunkMask: one bit per
// byte of the register): a level's high bit (Q5_0, Q5_1, Q5_K's fifth, Q3_K's third) in one
// masked add.
LOOM_AVX512_VNNI inline __m512i add_masked(__m512i w, const uint8_t* p, __m512i add) {
  uint64_t m;
  std::memcpy(&m, p, 8);
  return _mm512_mask_add_epi8(w, _cvtu64_mask64(m), w, add);
}

// na activation rows against one group of a 32-column block type: out[a * out_stride + r] for
// r < valid.
template <int NA, Blocks32 F>
LOOM_AVX512_VNNI void group_kernel(const uint8_t* grp, const PackedLayout& L, int64_t nb, const uint8_t* act,
                                   size_t act_stride, float* out, size_t out_stride, int valid) {
  __m512 acc[NA];
  for (int a = 0; a < NA; ++a) acc[a] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const __m512i sixteen = _mm512_set1_epi8(16);
  const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(biased_table(F.mxfp4))));
  const size_t tile_bytes = L.tile_bytes, q_offset = L.q_offset(), qh_offset = L.qh_offset();
  const int32_t bias = L.bias;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* tile = grp + size_t(b) * tile_bytes;
    prefetch_ahead(tile, tile_bytes);
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile)));
    __m512 mw = _mm512_setzero_ps();
    if constexpr (F.has_min) mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + 32)));
    const uint8_t* q = tile + q_offset;
    // w[j]: lane r = the unsigned levels of row r at elements 4j..4j+3 (for nibbles, chunk j's low
    // nibbles are elements 4j.., its high nibbles 16+4j.. = 4(j+4)..).
    __m512i w[8];
    if constexpr (F.nibbles) {
      for (int j = 0; j < 4; ++j) {
        const __m512i c = _mm512_loadu_si512(q + 64 * j);
        __m512i lo = _mm512_and_si512(c, m4), hi = _mm512_and_si512(_mm512_srli_epi16(c, 4), m4);
        if constexpr (F.fifth_bit) {
          lo = add_masked(lo, tile + qh_offset + 16 * size_t(j), sixteen);
          hi = add_masked(hi, tile + qh_offset + 16 * size_t(j) + 8, sixteen);
        }
        if constexpr (F.lut) {
          lo = _mm512_shuffle_epi8(lut, lo);
          hi = _mm512_shuffle_epi8(lut, hi);
        }
        w[j] = lo;
        w[j + 4] = hi;
      }
    } else {
      for (int j = 0; j < 8; ++j) w[j] = _mm512_loadu_si512(q + 64 * j);
    }
    for (int a = 0; a < NA; ++a) {
      const uint8_t* ab = act + size_t(a) * act_stride + size_t(b) * sizeof(PackedActBlock);
      float da;
      int32_t sum;
      std::memcpy(&da, ab, 4);
      std::memcpy(&sum, ab + 4, 4);
      const uint8_t* aq = ab + 8;
      // Two chains halve the VPDPBUSD latency; the bias term starts one of them.
      __m512i i0 = F.has_min ? _mm512_setzero_si512() : _mm512_set1_epi32(-bias * sum), i1 = _mm512_setzero_si512();
      for (int j = 0; j < 8; j += 2) {
        int32_t x0, x1;
        std::memcpy(&x0, aq + 4 * j, 4);
        std::memcpy(&x1, aq + 4 * j + 4, 4);
        i0 = _mm512_dpbusd_epi32(i0, w[j], _mm512_set1_epi32(x0));
        i1 = _mm512_dpbusd_epi32(i1, w[j + 1], _mm512_set1_epi32(x1));
      }
      acc[a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(i0, i1)), _mm512_mul_ps(dw, _mm512_set1_ps(da)), acc[a]);
      if constexpr (F.has_min) {
        float sa;
        std::memcpy(&sa, ab + 4, 4);
        acc[a] = _mm512_fmadd_ps(mw, _mm512_set1_ps(sa), acc[a]);
      }
    }
  }
  const __mmask16 mask = __mmask16((1u << valid) - 1u);
  for (int a = 0; a < NA; ++a) _mm512_mask_storeu_ps(out + size_t(a) * out_stride, mask, acc[a]);
}

// F16 (BF16) weights: column c of a group is 16 f16 (bf16), one per row; acc[g][a] += w_c * x_a[c] for NG
// groups of 16 weight rows against NA activation rows. Every output is one FMA chain over the
// columns in order, whatever NA and NG (batch invariance: a row's result must not depend on how
// many other rows share the call), so the latency of that chain is hidden by running several
// chains at once: up to 16 activation rows share each converted column (FMA-port bound: 16 FMAs
// per conversion), and runs of 1 or 2 activation rows take 4 or 2 groups at a time instead.
// 16 f16 (or bf16) at p widened to f32.
template <bool kBf16>
LOOM_AVX512_VNNI inline __m512 load16_f32(const uint8_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  if constexpr (kBf16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return _mm512_cvtph_ps(h);
}

template <int NA, int NG, bool kBf16>
LOOM_AVX512_VNNI void group_kernel_f16(const uint8_t* grp, size_t group_bytes, int64_t cols, const uint8_t* act,
                                       size_t act_stride, float* out, size_t out_stride, const int* valid) {
  __m512 acc[NG][NA];
  for (int g = 0; g < NG; ++g) {
    for (int a = 0; a < NA; ++a) acc[g][a] = _mm512_setzero_ps();
  }
  const float* x[NA];
  for (int a = 0; a < NA; ++a) x[a] = reinterpret_cast<const float*>(act + size_t(a) * act_stride);
  for (int64_t c = 0; c < cols; c += 32) {
    const uint8_t* tile = grp + size_t(c) * 32;
    if constexpr (NA == 1) {
      prefetch_next_groups(tile, group_bytes, NG, 1024);
    } else {
      for (int g = 0; g < NG; ++g) prefetch_ahead(tile + size_t(g) * group_bytes, 1024);
    }
    for (int k = 0; k < 32; ++k) {
      for (int g = 0; g < NG; ++g) {
        const __m512 w = load16_f32<kBf16>(tile + size_t(g) * group_bytes + 32 * k);
        for (int a = 0; a < NA; ++a) {
          float xv;
          std::memcpy(&xv, x[a] + c + k, 4);
          acc[g][a] = _mm512_fmadd_ps(w, _mm512_set1_ps(xv), acc[g][a]);
        }
      }
    }
  }
  for (int g = 0; g < NG; ++g) {
    const __mmask16 mask = __mmask16((1u << valid[g]) - 1u);
    for (int a = 0; a < NA; ++a) _mm512_mask_storeu_ps(out + size_t(a) * out_stride + size_t(16 * g), mask, acc[g][a]);
  }
}

// The float step of a super-block for the k-quant kernels, on their integer sums: with mins
// (Q2_K, Q4_K, Q5_K: f16 d[16] at 0 and dmin[16] at 32 of the tile) acc += d_a (d isum - dmin msum),
// without (Q3_K, IQ4_XS: d at 0) acc += d_a (d isum). d_a is the f32 at the start of each Q8_K block ab[a].
template <bool kMins, int NA>
LOOM_AVX512_VNNI inline void fold_super(const uint8_t* tile, const uint8_t* const* ab, const __m512i* isum,
                                        const __m512i* msum, __m512* acc) {
  const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile)));
  for (int a = 0; a < NA; ++a) {
    float da;
    std::memcpy(&da, ab[a], 4);
    if constexpr (kMins) {
      const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + 32)));
      const __m512 t = _mm512_fmsub_ps(d, _mm512_cvtepi32_ps(isum[a]), _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(msum[a])));
      acc[a] = _mm512_fmadd_ps(_mm512_set1_ps(da), t, acc[a]);
    } else {
      acc[a] = _mm512_fmadd_ps(_mm512_set1_ps(da), _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum[a])), acc[a]);
    }
  }
}
static_assert(PackedQ4K::kD == 0 && PackedQ4K::kDmin == 32 && PackedQ2K::kD == 0 && PackedQ2K::kDmin == 32 &&
              PackedQ3K::kD == 0 && PackedIQ4XS::kD == 0);

// The super-block types with Q4_K's nibble arrangement.
enum class Nib256 { kQ4K, kQ5K, kIQ4XS };

// Q4_K against Q8_K: per 64-column pair of sub-blocks, 8 chunks give 16 unsigned nibble
// registers (low: sub-block 2g, high: 2g+1), VPDPBUSD per activation row; the sub-block sums are
// weighted by the 6-bit scales (VPMULLD) and the mins by the activation's sub-block sums, all in
// int32 as llama.cpp's Q4_K x Q8_K dot does; floats only once per super-block.
// Q5_K: the tile also holds the fifth bits of each chunk as byte masks, which add 16 where set,
// so the levels are 0..31 and everything else is Q4_K's.
// IQ4_XS: the nibbles go through the biased IQ4_NL table (VPSHUFB), each sub-block sum starts at
// -128 · (the activation's sum over it), the scales are signed bytes, and there are no mins.
template <int NA, Nib256 K>
LOOM_AVX512_VNNI void group_kernel_q4k(const uint8_t* grp, int64_t cols, const uint8_t* act, size_t act_stride, float* out,
                                       size_t out_stride, int valid) {
  constexpr bool kQ5 = K == Nib256::kQ5K, kIq4 = K == Nib256::kIQ4XS;
  __m512 acc[NA];
  for (int a = 0; a < NA; ++a) acc[a] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const __m512i sixteen = _mm512_set1_epi8(16);
  const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlBiased)));
  constexpr size_t tile_bytes = kQ5 ? PackedQ5K::kTileBytes : kIq4 ? PackedIQ4XS::kTileBytes : PackedQ4K::kTileBytes;
  constexpr size_t kQs = kIq4 ? PackedIQ4XS::kQs : PackedQ4K::kQs, kSc = kIq4 ? PackedIQ4XS::kSc : PackedQ4K::kSc;
  const int64_t ns = cols / PackedQ4K::kCols;
  for (int64_t sb = 0; sb < ns; ++sb) {
    const uint8_t* tile = grp + size_t(sb) * tile_bytes;
    if constexpr (kQ5) prefetch_ahead(tile + PackedQ5K::kQh, 512);
    if constexpr (kIq4) prefetch_ahead(tile, kQs);
    const uint8_t* ab[NA];
    for (int a = 0; a < NA; ++a) ab[a] = act + size_t(a) * act_stride + size_t(sb) * sizeof(BlockQ8_K);
    __m512i isum[NA], msum[NA];
    for (int a = 0; a < NA; ++a) isum[a] = msum[a] = _mm512_setzero_si512();
    for (int g = 0; g < 4; ++g) {
      const uint8_t* q = tile + kQs + 512 * size_t(g);
      prefetch_ahead(q, 512);
      __m512i lo[NA], hi[NA];
      int16_t bs[NA][4];  // bsums of sub-blocks 2g, 2g+1 (16 columns each)
      for (int a = 0; a < NA; ++a) {
        std::memcpy(bs[a], ab[a] + 4 + 256 + 2 * 4 * g, 8);
        if constexpr (kIq4) {
          lo[a] = _mm512_set1_epi32(-128 * (bs[a][0] + bs[a][1]));
          hi[a] = _mm512_set1_epi32(-128 * (bs[a][2] + bs[a][3]));
        } else {
          lo[a] = hi[a] = _mm512_setzero_si512();
        }
      }
      for (int c = 0; c < 8; ++c) {
        const __m512i chunk = _mm512_loadu_si512(q + 64 * c);
        __m512i wl = _mm512_and_si512(chunk, m4);
        __m512i wh = _mm512_and_si512(_mm512_srli_epi16(chunk, 4), m4);
        if constexpr (kQ5) {
          wl = add_masked(wl, tile + PackedQ5K::kQh + 128 * size_t(g) + 16 * size_t(c), sixteen);
          wh = add_masked(wh, tile + PackedQ5K::kQh + 128 * size_t(g) + 16 * size_t(c) + 8, sixteen);
        }
        if constexpr (kIq4) {
          wl = _mm512_shuffle_epi8(lut, wl);
          wh = _mm512_shuffle_epi8(lut, wh);
        }
        for (int a = 0; a < NA; ++a) {
          int32_t xl, xh;
          std::memcpy(&xl, ab[a] + 4 + 64 * g + 4 * c, 4);  // Q8_K: f32 d, then qs
          std::memcpy(&xh, ab[a] + 4 + 64 * g + 32 + 4 * c, 4);
          lo[a] = _mm512_dpbusd_epi32(lo[a], wl, _mm512_set1_epi32(xl));
          hi[a] = _mm512_dpbusd_epi32(hi[a], wh, _mm512_set1_epi32(xh));
        }
      }
      const int j0 = 2 * g, j1 = 2 * g + 1;
      if constexpr (kIq4) {
        const __m512i sc0 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + kSc + 16 * j0)));
        const __m512i sc1 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + kSc + 16 * j1)));
        for (int a = 0; a < NA; ++a) {
          isum[a] =
              _mm512_add_epi32(isum[a], _mm512_add_epi32(_mm512_mullo_epi32(lo[a], sc0), _mm512_mullo_epi32(hi[a], sc1)));
        }
      } else {
        const __m512i sc0 = u8x16(tile + kSc + 16 * j0), sc1 = u8x16(tile + kSc + 16 * j1);
        const __m512i mn0 = u8x16(tile + PackedQ4K::kM + 16 * j0), mn1 = u8x16(tile + PackedQ4K::kM + 16 * j1);
        for (int a = 0; a < NA; ++a) {
          isum[a] =
              _mm512_add_epi32(isum[a], _mm512_add_epi32(_mm512_mullo_epi32(lo[a], sc0), _mm512_mullo_epi32(hi[a], sc1)));
          msum[a] =
              _mm512_add_epi32(msum[a], _mm512_add_epi32(_mm512_mullo_epi32(mn0, _mm512_set1_epi32(bs[a][0] + bs[a][1])),
                                                         _mm512_mullo_epi32(mn1, _mm512_set1_epi32(bs[a][2] + bs[a][3]))));
        }
      }
    }
    fold_super<!kIq4, NA>(tile, ab, isum, msum, acc);
  }
  const __mmask16 mask = __mmask16((1u << valid) - 1u);
  for (int a = 0; a < NA; ++a) _mm512_mask_storeu_ps(out + size_t(a) * out_stride, mask, acc[a]);
}

// Q2_K and Q3_K against Q8_K: per 64 columns (4 chunks), each chunk's 4 planes (shift by 2 p,
// mask 3) are 4 columns of sub-blocks 4 G + p; VPDPBUSD into one sum per sub-block and activation
// row, weighted by the sub-block's scale (VPMULLD). Q2_K: 4-bit scales and mins (the mins against
// the activation's sub-block sums), floats once per super-block as Q4_K. Q3_K: the third bits
// add 4 (byte masks), each sum starts at -4 · (the activation's sub-block sum), signed scales.
template <int NA, bool Q3>
LOOM_AVX512_VNNI void group_kernel_q23k(const uint8_t* grp, int64_t cols, const uint8_t* act, size_t act_stride, float* out,
                                        size_t out_stride, int valid) {
  __m512 acc[NA];
  for (int a = 0; a < NA; ++a) acc[a] = _mm512_setzero_ps();
  const __m512i m3 = _mm512_set1_epi8(3), m4 = _mm512_set1_epi32(0x0f), four = _mm512_set1_epi8(4);
  constexpr size_t tile_bytes = Q3 ? PackedQ3K::kTileBytes : PackedQ2K::kTileBytes;
  constexpr size_t kQs = Q3 ? PackedQ3K::kQs : PackedQ2K::kQs;
  const int64_t ns = cols / PackedQ2K::kCols;
  for (int64_t sb = 0; sb < ns; ++sb) {
    const uint8_t* tile = grp + size_t(sb) * tile_bytes;
    prefetch_ahead(tile, kQs);
    if constexpr (Q3) prefetch_ahead(tile + PackedQ3K::kQh, 512);
    const uint8_t* ab[NA];
    for (int a = 0; a < NA; ++a) ab[a] = act + size_t(a) * act_stride + size_t(sb) * sizeof(BlockQ8_K);
    __m512i isum[NA], msum[NA];
    for (int a = 0; a < NA; ++a) isum[a] = msum[a] = _mm512_setzero_si512();
    for (int G = 0; G < 4; ++G) {
      const uint8_t* q = tile + kQs + 256 * size_t(G);
      prefetch_ahead(q, 256);
      int16_t bs[NA][4];  // bsums of sub-blocks 4G..4G+3
      __m512i dot[NA][4];
      for (int a = 0; a < NA; ++a) {
        std::memcpy(bs[a], ab[a] + 4 + 256 + 2 * 4 * G, 8);
        for (int p = 0; p < 4; ++p) dot[a][p] = Q3 ? _mm512_set1_epi32(-4 * bs[a][p]) : _mm512_setzero_si512();
      }
      for (int qd = 0; qd < 4; ++qd) {
        const __m512i chunk = _mm512_loadu_si512(q + 64 * qd);
        __m512i w[4];
        w[0] = _mm512_and_si512(chunk, m3);
        w[1] = _mm512_and_si512(_mm512_srli_epi16(chunk, 2), m3);
        w[2] = _mm512_and_si512(_mm512_srli_epi16(chunk, 4), m3);
        w[3] = _mm512_and_si512(_mm512_srli_epi16(chunk, 6), m3);
        if constexpr (Q3) {
          const uint8_t* h = tile + PackedQ3K::kQh + 32 * size_t(4 * G + qd);
          for (int p = 0; p < 4; ++p) w[p] = add_masked(w[p], h + 8 * p, four);
        }
        for (int a = 0; a < NA; ++a) {
          for (int p = 0; p < 4; ++p) {
            int32_t x;
            std::memcpy(&x, ab[a] + 4 + 64 * G + 16 * p + 4 * qd, 4);  // Q8_K: f32 d, then qs
            dot[a][p] = _mm512_dpbusd_epi32(dot[a][p], w[p], _mm512_set1_epi32(x));
          }
        }
      }
      for (int p = 0; p < 4; ++p) {
        const int s = 4 * G + p;
        if constexpr (Q3) {
          const __m512i sc =
              _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + PackedQ3K::kSc + 16 * s)));
          for (int a = 0; a < NA; ++a) isum[a] = _mm512_add_epi32(isum[a], _mm512_mullo_epi32(dot[a][p], sc));
        } else {
          const __m512i sm = u8x16(tile + PackedQ2K::kSm + 16 * s);
          const __m512i sc = _mm512_and_si512(sm, m4), mn = _mm512_srli_epi32(sm, 4);
          for (int a = 0; a < NA; ++a) {
            isum[a] = _mm512_add_epi32(isum[a], _mm512_mullo_epi32(dot[a][p], sc));
            msum[a] = _mm512_add_epi32(msum[a], _mm512_mullo_epi32(mn, _mm512_set1_epi32(bs[a][p])));
          }
        }
      }
    }
    fold_super<!Q3, NA>(tile, ab, isum, msum, acc);
  }
  const __mmask16 mask = __mmask16((1u << valid) - 1u);
  for (int a = 0; a < NA; ++a) _mm512_mask_storeu_ps(out + size_t(a) * out_stride, mask, acc[a]);
}

// Q6_K against Q8_K: per sub-block of 16 columns, 4 chunks of levels (0..63) through VPDPBUSD
// into a sum started at -32 · (the activation's sum over those columns), weighted by the int8
// scale (VPMULLD); floats once per super-block.
template <int NA>
LOOM_AVX512_VNNI void group_kernel_q6k(const uint8_t* grp, int64_t cols, const uint8_t* act, size_t act_stride, float* out,
                                       size_t out_stride, int valid) {
  __m512 acc[NA];
  for (int a = 0; a < NA; ++a) acc[a] = _mm512_setzero_ps();
  const int64_t ns = cols / PackedQ6K::kCols;
  for (int64_t sb = 0; sb < ns; ++sb) {
    const uint8_t* tile = grp + size_t(sb) * PackedQ6K::kTileBytes;
    const uint8_t* ab[NA];
    for (int a = 0; a < NA; ++a) ab[a] = act + size_t(a) * act_stride + size_t(sb) * sizeof(BlockQ8_K);
    __m512i isum[NA];
    for (int a = 0; a < NA; ++a) isum[a] = _mm512_setzero_si512();
    for (int sub = 0; sub < 16; ++sub) {
      const uint8_t* q = tile + PackedQ6K::kQs + 256 * size_t(sub);
      prefetch_ahead(q, 256);
      __m512i dot[NA];
      for (int a = 0; a < NA; ++a) {
        int16_t bs;
        std::memcpy(&bs, ab[a] + 4 + 256 + 2 * sub, 2);
        dot[a] = _mm512_set1_epi32(-32 * int32_t(bs));
      }
      for (int c = 0; c < 4; ++c) {
        const __m512i w = _mm512_loadu_si512(q + 64 * c);
        for (int a = 0; a < NA; ++a) {
          int32_t x;
          std::memcpy(&x, ab[a] + 4 + 16 * sub + 4 * c, 4);
          dot[a] = _mm512_dpbusd_epi32(dot[a], w, _mm512_set1_epi32(x));
        }
      }
      const __m512i sc =
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + PackedQ6K::kSc + 16 * sub)));
      for (int a = 0; a < NA; ++a) isum[a] = _mm512_add_epi32(isum[a], _mm512_mullo_epi32(dot[a], sc));
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + PackedQ6K::kD)));
    for (int a = 0; a < NA; ++a) {
      float da;
      std::memcpy(&da, ab[a], 4);
      acc[a] = _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(da)), _mm512_cvtepi32_ps(isum[a]), acc[a]);
    }
  }
  const __mmask16 mask = __mmask16((1u << valid) - 1u);
  for (int a = 0; a < NA; ++a) _mm512_mask_storeu_ps(out + size_t(a) * out_stride, mask, acc[a]);
}

// The super-block kernels (which take their column count) share one driver: K::run<NA> for
// runs of NA activation rows, NA from kNas (largest first).
template <typename K, int... kNas>
void run_by_cols(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                 size_t act_stride, int n, float* out, size_t out_stride) {
  auto kernel = [cols](int na, const uint8_t* grp, const PackedLayout&, int64_t, const uint8_t* a, size_t as, float* o,
                       size_t os, int valid) {
    with_na<kNas...>(na, [&]<int NA>() { K::template run<NA>(grp, cols, a, as, o, os, valid); });
  };
  packed_gemm_loop(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride, std::max({kNas...}), kernel);
}

struct Q6K {
  template <int NA>
  static void run(const uint8_t* g, int64_t c, const uint8_t* a, size_t as, float* o, size_t os, int v) {
    group_kernel_q6k<NA>(g, c, a, as, o, os, v);
  }
};
template <Nib256 K>
struct Q4K {
  template <int NA>
  static void run(const uint8_t* g, int64_t c, const uint8_t* a, size_t as, float* o, size_t os, int v) {
    group_kernel_q4k<NA, K>(g, c, a, as, o, os, v);
  }
};
template <bool Q3>
struct Q23K {
  template <int NA>
  static void run(const uint8_t* g, int64_t c, const uint8_t* a, size_t as, float* o, size_t os, int v) {
    group_kernel_q23k<NA, Q3>(g, c, a, as, o, os, v);
  }
};

}  // namespace

void packed_gemm_q6k_avx512(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                            size_t act_stride, int n, float* out, size_t out_stride) {
  run_by_cols<Q6K, 4, 2, 1>(TensorType::Q6_K, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
}

void packed_gemm_q4k_avx512(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                            size_t act_stride, int n, float* out, size_t out_stride) {
  run_by_cols<Q4K<Nib256::kQ4K>, 4, 2, 1>(TensorType::Q4_K, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
}

void packed_gemm_q5k_avx512(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                            size_t act_stride, int n, float* out, size_t out_stride) {
  run_by_cols<Q4K<Nib256::kQ5K>, 4, 2, 1>(TensorType::Q5_K, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
}

void packed_gemm_iq4xs_avx512(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                              size_t act_stride, int n, float* out, size_t out_stride) {
  run_by_cols<Q4K<Nib256::kIQ4XS>, 4, 2, 1>(TensorType::IQ4_XS, rows, cols, packed, g0, g1, act, act_stride, n, out,
                                            out_stride);
}

void packed_gemm_q2k_avx512(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                            size_t act_stride, int n, float* out, size_t out_stride) {
  run_by_cols<Q23K<false>, 4, 2, 1>(TensorType::Q2_K, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
}

void packed_gemm_q3k_avx512(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                            size_t act_stride, int n, float* out, size_t out_stride) {
  run_by_cols<Q23K<true>, 4, 2, 1>(TensorType::Q3_K, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
}

namespace {
template <bool kBf16>
void run_f16(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act, size_t act_stride,
             int n, float* out, size_t out_stride) {
  const size_t gb = packed_group_bytes(TensorType::F16, cols);
  const auto* p = static_cast<const uint8_t*>(packed);
  const auto* a = static_cast<const uint8_t*>(act);
  auto valid_rows = [rows](int64_t g) { return int(rows - g * 16 < 16 ? rows - g * 16 : 16); };
  // Runs of 16, 8 and 4 activation rows per group (the group's columns stay in cache while the
  // activation rows stream by).
  const int n4 = n / 4 * 4;
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* grp = p + size_t(g) * gb;
    const int valid[1] = {valid_rows(g)};
    int i = 0;
    for (int na = 16; na >= 4; na /= 2) {
      for (; i + na <= n4; i += na) {
        with_na<16, 8, 4>(na, [&]<int NA>() {
          group_kernel_f16<NA, 1, kBf16>(grp, gb, cols, a + size_t(i) * act_stride, act_stride,
                                         out + size_t(i) * out_stride + size_t(16 * g), out_stride, valid);
        });
      }
    }
  }
  // The last 1..3 rows: a run of 2 over two groups at a time, a run of 1 over four.
  for (int i = n4; i < n;) {
    const int na = n - i >= 2 ? 2 : 1;
    const int ng_max = na == 2 ? 2 : 4;
    for (int64_t g = g0; g < g1;) {
      const int ng = int(g1 - g < ng_max ? g1 - g : ng_max);
      int valid[4];
      for (int k = 0; k < ng; ++k) valid[k] = valid_rows(g + k);
      const uint8_t* grp = p + size_t(g) * gb;
      const uint8_t* ai = a + size_t(i) * act_stride;
      float* o = out + size_t(i) * out_stride + size_t(16 * g);
      if (na == 2) {
        if (ng == 2) group_kernel_f16<2, 2, kBf16>(grp, gb, cols, ai, act_stride, o, out_stride, valid);
        else group_kernel_f16<2, 1, kBf16>(grp, gb, cols, ai, act_stride, o, out_stride, valid);
      } else {
        switch (ng) {
          case 4: group_kernel_f16<1, 4, kBf16>(grp, gb, cols, ai, act_stride, o, out_stride, valid); break;
          case 3: group_kernel_f16<1, 3, kBf16>(grp, gb, cols, ai, act_stride, o, out_stride, valid); break;
          case 2: group_kernel_f16<1, 2, kBf16>(grp, gb, cols, ai, act_stride, o, out_stride, valid); break;
          default: group_kernel_f16<1, 1, kBf16>(grp, gb, cols, ai, act_stride, o, out_stride, valid); break;
        }
      }
      g += ng;
    }
    i += na;
  }
}
}  // namespace

void packed_gemm_f16_avx512(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                            size_t act_stride, int n, float* out, size_t out_stride) {
  run_f16<false>(rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
}

void packed_gemm_bf16_avx512(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                             size_t act_stride, int n, float* out, size_t out_stride) {
  run_f16<true>(rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
}

namespace {
template <Blocks32 F>
void run_blocks32(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                  size_t act_stride, int n, float* out, size_t out_stride) {
  auto kernel = [](int na, const uint8_t* grp, const PackedLayout& L, int64_t nb, const uint8_t* a, size_t as, float* o,
                   size_t os, int valid) {
    with_na<8, 4, 2, 1>(na, [&]<int NA>() { group_kernel<NA, F>(grp, L, nb, a, as, o, os, valid); });
  };
  packed_gemm_loop(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride, 8, kernel);
}
}  // namespace

void packed_gemm_avx512(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                        const void* act, size_t act_stride, int n, float* out, size_t out_stride) {
  constexpr Blocks32 kQ40 = blocks32_of(kLayoutQ4_0), kQ41 = blocks32_of(kLayoutQ4_1), kQ50 = blocks32_of(kLayoutQ5_0),
                     kQ51 = blocks32_of(kLayoutQ5_1), kQ80 = blocks32_of(kLayoutQ8_0), kIq4 = blocks32_of(kLayoutIQ4_NL),
                     kMxfp4 = blocks32_of(kLayoutMXFP4);
  switch (t) {
    case TensorType::Q4_1: return run_blocks32<kQ41>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::Q5_0: return run_blocks32<kQ50>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::Q5_1: return run_blocks32<kQ51>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::Q8_0: return run_blocks32<kQ80>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::IQ4_NL: return run_blocks32<kIq4>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::MXFP4: return run_blocks32<kMxfp4>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    default: return run_blocks32<kQ40>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
  }
}

}  // namespace loom::quant::detail

#endif  // __x86_64__

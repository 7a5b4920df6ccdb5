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

// GCC 12 reports a false "may be used uninitialized" inside its own AVX-512 headers.
#if defined(__GNUC__) && !defined(__clang__)  // clang has no such warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define LOOM_AVX512_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))

namespace loom::quant::detail {
namespace {

// na activation rows against one group: out[a * out_stride + r] for r < valid.
template <int NA, bool kNibbles>
LOOM_AVX512_VNNI void group_kernel(const uint8_t* grp, size_t tile_bytes, int64_t nb, int32_t bias,
                                   const uint8_t* act, size_t act_stride, float* out, size_t out_stride,
                                   int valid) {
  __m512 acc[NA];
  for (int a = 0; a < NA; ++a) acc[a] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* tile = grp + size_t(b) * tile_bytes;
    prefetch_ahead(tile, tile_bytes);
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile)));
    const uint8_t* q = tile + PackedLayout::kScaleBytes;
    // w[j]: lane r = the unsigned levels of row r at elements 4j..4j+3 (for Q4_0, chunk j's low
    // nibbles are elements 4j.., its high nibbles 16+4j.. = 4(j+4)..).
    __m512i w[8];
    if constexpr (kNibbles) {
      for (int j = 0; j < 4; ++j) {
        const __m512i c = _mm512_loadu_si512(q + 64 * j);
        w[j] = _mm512_and_si512(c, m4);
        w[j + 4] = _mm512_and_si512(_mm512_srli_epi16(c, 4), m4);
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
      __m512i i0 = _mm512_set1_epi32(-bias * sum), i1 = _mm512_setzero_si512();
      for (int j = 0; j < 8; j += 2) {
        int32_t x0, x1;
        std::memcpy(&x0, aq + 4 * j, 4);
        std::memcpy(&x1, aq + 4 * j + 4, 4);
        i0 = _mm512_dpbusd_epi32(i0, w[j], _mm512_set1_epi32(x0));
        i1 = _mm512_dpbusd_epi32(i1, w[j + 1], _mm512_set1_epi32(x1));
      }
      acc[a] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(i0, i1)),
                               _mm512_mul_ps(dw, _mm512_set1_ps(da)), acc[a]);
    }
  }
  const __mmask16 mask = __mmask16((1u << valid) - 1u);
  for (int a = 0; a < NA; ++a) _mm512_mask_storeu_ps(out + size_t(a) * out_stride, mask, acc[a]);
}

// F16 weights: column c of a group is 16 f16 (one per row); acc[g][a] += w_c * x_a[c] for NG
// groups of 16 weight rows against NA activation rows. Every output is one FMA chain over the
// columns in order, whatever NA and NG (batch invariance: a row's result must not depend on how
// many other rows share the call), so the latency of that chain is hidden by running several
// chains at once: up to 16 activation rows share each converted column (FMA-port bound: 16 FMAs
// per conversion), and runs of 1 or 2 activation rows take 4 or 2 groups at a time instead.
template <int NA, int NG>
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
    for (int g = 0; g < NG; ++g) prefetch_ahead(tile + size_t(g) * group_bytes, 1024);
    for (int k = 0; k < 32; ++k) {
      for (int g = 0; g < NG; ++g) {
        const __m512 w = _mm512_cvtph_ps(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + size_t(g) * group_bytes + 32 * k)));
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

// 16 unsigned bytes widened to 16 int32 lanes.
LOOM_AVX512_VNNI inline __m512i u8x16(const uint8_t* p) {
  return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Q4_K against Q8_K: per 64-column pair of sub-blocks, 8 chunks give 16 unsigned nibble
// registers (low: sub-block 2g, high: 2g+1), VPDPBUSD per activation row; the sub-block sums are
// weighted by the 6-bit scales (VPMULLD) and the mins by the activation's sub-block sums, all in
// int32 as llama.cpp's Q4_K x Q8_K dot does; floats only once per super-block.
// Q5 (Q5_K): the tile also holds a byte of fifth bits per row and chunk; each is spread over its
// row's four lanes (VPSHUFB), tested against the lane's bit (VPTESTMB) and adds 16 where set, so
// the levels are 0..31 and everything else is Q4_K's.
template <int NA, bool Q5>
LOOM_AVX512_VNNI void group_kernel_q4k(const uint8_t* grp, int64_t cols, const uint8_t* act, size_t act_stride,
                                       float* out, size_t out_stride, int valid) {
  __m512 acc[NA];
  for (int a = 0; a < NA; ++a) acc[a] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const __m512i sixteen = _mm512_set1_epi8(16);
  // Byte 0 of each dword (a row's bits) into all four bytes; the bit each byte tests.
  const __m512i spread = _mm512_set4_epi32(0x0c0c0c0c, 0x08080808, 0x04040404, 0x00000000);
  const __m512i bit_lo = _mm512_set1_epi32(0x08040201), bit_hi = _mm512_set1_epi32(int32_t(0x80402010u));
  const size_t tile_bytes = Q5 ? PackedQ5K::kTileBytes : PackedQ4K::kTileBytes;
  const int64_t ns = cols / PackedQ4K::kCols;
  for (int64_t sb = 0; sb < ns; ++sb) {
    const uint8_t* tile = grp + size_t(sb) * tile_bytes;
    if constexpr (Q5) prefetch_ahead(tile + PackedQ5K::kQh, 512);
    const uint8_t* ab[NA];
    for (int a = 0; a < NA; ++a) ab[a] = act + size_t(a) * act_stride + size_t(sb) * sizeof(BlockQ8_K);
    __m512i isum[NA], msum[NA];
    for (int a = 0; a < NA; ++a) isum[a] = msum[a] = _mm512_setzero_si512();
    for (int g = 0; g < 4; ++g) {
      const uint8_t* q = tile + PackedQ4K::kQs + 512 * size_t(g);
      prefetch_ahead(q, 512);
      __m512i lo[NA], hi[NA];
      for (int a = 0; a < NA; ++a) lo[a] = hi[a] = _mm512_setzero_si512();
      for (int c = 0; c < 8; ++c) {
        const __m512i chunk = _mm512_loadu_si512(q + 64 * c);
        __m512i wl = _mm512_and_si512(chunk, m4);
        __m512i wh = _mm512_and_si512(_mm512_srli_epi16(chunk, 4), m4);
        if constexpr (Q5) {
          const __m512i bits = _mm512_shuffle_epi8(u8x16(tile + PackedQ5K::kQh + 128 * size_t(g) + 16 * size_t(c)), spread);
          wl = _mm512_mask_add_epi8(wl, _mm512_test_epi8_mask(bits, bit_lo), wl, sixteen);
          wh = _mm512_mask_add_epi8(wh, _mm512_test_epi8_mask(bits, bit_hi), wh, sixteen);
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
      const __m512i sc0 = u8x16(tile + PackedQ4K::kSc + 16 * j0), sc1 = u8x16(tile + PackedQ4K::kSc + 16 * j1);
      const __m512i mn0 = u8x16(tile + PackedQ4K::kM + 16 * j0), mn1 = u8x16(tile + PackedQ4K::kM + 16 * j1);
      for (int a = 0; a < NA; ++a) {
        int16_t bs[4];
        std::memcpy(bs, ab[a] + 4 + 256 + 2 * 4 * g, 8);  // bsums of sub-blocks 2g, 2g+1 (16 each)
        isum[a] = _mm512_add_epi32(isum[a], _mm512_add_epi32(_mm512_mullo_epi32(lo[a], sc0), _mm512_mullo_epi32(hi[a], sc1)));
        msum[a] = _mm512_add_epi32(msum[a], _mm512_add_epi32(_mm512_mullo_epi32(mn0, _mm512_set1_epi32(bs[0] + bs[1])),
                                                             _mm512_mullo_epi32(mn1, _mm512_set1_epi32(bs[2] + bs[3]))));
      }
    }
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + PackedQ4K::kD)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + PackedQ4K::kDmin)));
    for (int a = 0; a < NA; ++a) {
      float da;
      std::memcpy(&da, ab[a], 4);
      const __m512 t = _mm512_fmsub_ps(d, _mm512_cvtepi32_ps(isum[a]), _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(msum[a])));
      acc[a] = _mm512_fmadd_ps(_mm512_set1_ps(da), t, acc[a]);
    }
  }
  const __mmask16 mask = __mmask16((1u << valid) - 1u);
  for (int a = 0; a < NA; ++a) _mm512_mask_storeu_ps(out + size_t(a) * out_stride, mask, acc[a]);
}

// Q6_K against Q8_K: per sub-block of 16 columns, 4 chunks of levels (0..63) through VPDPBUSD
// into a sum started at -32 · (the activation's sum over those columns), weighted by the int8
// scale (VPMULLD); floats once per super-block.
template <int NA>
LOOM_AVX512_VNNI void group_kernel_q6k(const uint8_t* grp, int64_t cols, const uint8_t* act, size_t act_stride,
                                       float* out, size_t out_stride, int valid) {
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
      const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + PackedQ6K::kSc + 16 * sub)));
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


// The Q4_K and Q6_K kernels (which take their column count) share one driver: K::run<NA> for
// runs of NA activation rows, NA from kNas (largest first).
template <typename K, int... kNas>
void run_by_cols(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                 const void* act, size_t act_stride, int n, float* out, size_t out_stride) {
  auto kernel = [cols](int na, const uint8_t* grp, const PackedLayout&, int64_t, const uint8_t* a, size_t as,
                       float* o, size_t os, int valid) {
    with_na<kNas...>(na, [&]<int NA>() { K::template run<NA>(grp, cols, a, as, o, os, valid); });
  };
  packed_gemm_loop(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride, std::max({kNas...}), kernel);
}

struct Q6K {
  template <int NA> static void run(const uint8_t* g, int64_t c, const uint8_t* a, size_t as, float* o, size_t os, int v) {
    group_kernel_q6k<NA>(g, c, a, as, o, os, v);
  }
};
template <bool Q5>
struct Q4K {
  template <int NA> static void run(const uint8_t* g, int64_t c, const uint8_t* a, size_t as, float* o, size_t os, int v) {
    group_kernel_q4k<NA, Q5>(g, c, a, as, o, os, v);
  }
};

}  // namespace

void packed_gemm_q6k_avx512(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                            const void* act, size_t act_stride, int n, float* out, size_t out_stride) {
  run_by_cols<Q6K, 4, 2, 1>(TensorType::Q6_K, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
}

void packed_gemm_q4k_avx512(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                            const void* act, size_t act_stride, int n, float* out, size_t out_stride) {
  run_by_cols<Q4K<false>, 4, 2, 1>(TensorType::Q4_K, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
}

void packed_gemm_q5k_avx512(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                            const void* act, size_t act_stride, int n, float* out, size_t out_stride) {
  run_by_cols<Q4K<true>, 4, 2, 1>(TensorType::Q5_K, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
}

void packed_gemm_f16_avx512(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                            const void* act, size_t act_stride, int n, float* out, size_t out_stride) {
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
          group_kernel_f16<NA, 1>(grp, gb, cols, a + size_t(i) * act_stride, act_stride,
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
        if (ng == 2) group_kernel_f16<2, 2>(grp, gb, cols, ai, act_stride, o, out_stride, valid);
        else group_kernel_f16<2, 1>(grp, gb, cols, ai, act_stride, o, out_stride, valid);
      } else {
        switch (ng) {
          case 4: group_kernel_f16<1, 4>(grp, gb, cols, ai, act_stride, o, out_stride, valid); break;
          case 3: group_kernel_f16<1, 3>(grp, gb, cols, ai, act_stride, o, out_stride, valid); break;
          case 2: group_kernel_f16<1, 2>(grp, gb, cols, ai, act_stride, o, out_stride, valid); break;
          default: group_kernel_f16<1, 1>(grp, gb, cols, ai, act_stride, o, out_stride, valid); break;
        }
      }
      g += ng;
    }
    i += na;
  }
}

void packed_gemm_avx512(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                        const void* act, size_t act_stride, int n, float* out, size_t out_stride) {
  auto kernel = [](int na, const uint8_t* grp, const PackedLayout& L, int64_t nb, const uint8_t* a, size_t as,
                   float* o, size_t os, int valid) {
    with_na<8, 4, 2, 1>(na, [&]<int NA>() {
      if (L.nibbles) group_kernel<NA, true>(grp, L.tile_bytes, nb, L.bias, a, as, o, os, valid);
      else group_kernel<NA, false>(grp, L.tile_bytes, nb, L.bias, a, as, o, os, valid);
    });
  };
  packed_gemm_loop(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride, 8, kernel);
}

}  // namespace loom::quant::detail

#endif  // __x86_64__

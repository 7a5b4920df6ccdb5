// Packed GEMM with AVX-512 VNNI: one zmm register holds the 16 rows of a group (one 32-bit lane
// per row), VPDPBUSD adds 4 products per lane against a broadcast of 4 activation bytes. A tile
// (32 columns of 16 rows) is decoded once into 8 registers and reused for up to 8 activation rows.
// Only called when cpu_features().has_avx512_vnni_set(); see packed.h for the layout.
#if defined(__x86_64__)

#include <immintrin.h>

#include <cstring>

#include "quant/packed.h"
#include "quant/packed_layout.h"

// GCC 12 reports a false "may be used uninitialized" inside its own AVX-512 headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

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

// F16 weights: column c of a group is 16 f16 (one per row); acc[a] += w_c * x_a[c]. Up to 16
// activation rows share each converted column (FMA-port bound: 16 FMAs per conversion); a single
// activation row uses four partial sums to hide the FMA latency.
template <int NA>
LOOM_AVX512_VNNI void group_kernel_f16(const uint8_t* grp, int64_t cols, const uint8_t* act, size_t act_stride,
                                       float* out, size_t out_stride, int valid) {
  constexpr int kParts = NA == 1 ? 4 : 1;
  __m512 acc[NA][kParts];
  for (int a = 0; a < NA; ++a) {
    for (int k = 0; k < kParts; ++k) acc[a][k] = _mm512_setzero_ps();
  }
  const float* x[NA];
  for (int a = 0; a < NA; ++a) x[a] = reinterpret_cast<const float*>(act + size_t(a) * act_stride);
  for (int64_t c = 0; c < cols; c += 32) {
    const uint8_t* tile = grp + size_t(c) * 32;
    prefetch_ahead(tile, 1024);
    for (int k = 0; k < 32; ++k) {
      const __m512 w = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + 32 * k)));
      for (int a = 0; a < NA; ++a) {
        float xv;
        std::memcpy(&xv, x[a] + c + k, 4);
        acc[a][k % kParts] = _mm512_fmadd_ps(w, _mm512_set1_ps(xv), acc[a][k % kParts]);
      }
    }
  }
  const __mmask16 mask = __mmask16((1u << valid) - 1u);
  for (int a = 0; a < NA; ++a) {
    __m512 sum = acc[a][0];
    for (int k = 1; k < kParts; ++k) sum = _mm512_add_ps(sum, acc[a][k]);
    _mm512_mask_storeu_ps(out + size_t(a) * out_stride, mask, sum);
  }
}

}  // namespace

void packed_gemm_f16_avx512(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                            const void* act, size_t act_stride, int n, float* out, size_t out_stride) {
  auto kernel = [cols](int na, const uint8_t* grp, const PackedLayout&, int64_t, const uint8_t* a, size_t as,
                       float* o, size_t os, int valid) {
    with_na<16, 8, 4, 2, 1>(na, [&]<int NA>() { group_kernel_f16<NA>(grp, cols, a, as, o, os, valid); });
  };
  packed_gemm_loop(TensorType::F16, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride, 16, kernel);
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

// Packed GEMM with AVX2 + AVX-VNNI (256-bit VPDPBUSD): a group's 16 rows are two halves of 8
// lanes (bytes 0..31 and 32..63 of every 64-byte chunk). With only 16 ymm registers, each chunk
// is decoded just before use and applied to up to 4 activation rows.
// Only called when cpu_features().has_avx_vnni_set(); see packed.h for the layout.
#if defined(__x86_64__)

#include <immintrin.h>

#include <cstring>

#include "quant/packed.h"
#include "quant/packed_layout.h"

#define LOOM_AVX_VNNI __attribute__((target("avx2,fma,f16c,avxvnni")))

namespace loom::quant::detail {
namespace {

template <int NA, bool kNibbles>
LOOM_AVX_VNNI void group_kernel(const uint8_t* grp, size_t tile_bytes, int64_t nb, int32_t bias,
                                const uint8_t* act, size_t act_stride, float* out, size_t out_stride,
                                int valid) {
  __m256 acc[NA][2];
  for (int a = 0; a < NA; ++a) acc[a][0] = acc[a][1] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* tile = grp + size_t(b) * tile_bytes;
    prefetch_ahead(tile, tile_bytes);
    const uint8_t* q = tile + PackedLayout::kScaleBytes;
    const uint8_t* ab[NA];
    for (int a = 0; a < NA; ++a) ab[a] = act + size_t(a) * act_stride + size_t(b) * sizeof(PackedActBlock);
    for (int h = 0; h < 2; ++h) {
      const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + 16 * h)));
      __m256i isum[NA];
      for (int a = 0; a < NA; ++a) {
        int32_t sum;
        std::memcpy(&sum, ab[a] + 4, 4);
        isum[a] = _mm256_set1_epi32(-bias * sum);
      }
      // Elements 4j..4j+3 of the 8 rows of this half, then their products with each activation.
      for (int j = 0; j < 8; ++j) {
        __m256i w;
        if constexpr (kNibbles) {
          const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * (j & 3) + 32 * h));
          w = j < 4 ? _mm256_and_si256(c, m4) : _mm256_and_si256(_mm256_srli_epi16(c, 4), m4);
        } else {
          w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 64 * j + 32 * h));
        }
        for (int a = 0; a < NA; ++a) {
          int32_t x;
          std::memcpy(&x, ab[a] + 8 + 4 * j, 4);
          isum[a] = _mm256_dpbusd_avx_epi32(isum[a], w, _mm256_set1_epi32(x));
        }
      }
      for (int a = 0; a < NA; ++a) {
        float da;
        std::memcpy(&da, ab[a], 4);
        acc[a][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[a]), _mm256_mul_ps(dw, _mm256_set1_ps(da)), acc[a][h]);
      }
    }
  }
  for (int a = 0; a < NA; ++a) {
    float* o = out + size_t(a) * out_stride;
    if (valid == 16) {
      _mm256_storeu_ps(o, acc[a][0]);
      _mm256_storeu_ps(o + 8, acc[a][1]);
    } else {
      alignas(32) float tmp[16];
      _mm256_store_ps(tmp, acc[a][0]);
      _mm256_store_ps(tmp + 8, acc[a][1]);
      std::memcpy(o, tmp, sizeof(float) * size_t(valid));
    }
  }
}

}  // namespace

void packed_gemm_avxvnni(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                         const void* act, size_t act_stride, int n, float* out, size_t out_stride) {
  auto kernel = [](int na, const uint8_t* grp, const PackedLayout& L, int64_t nb, const uint8_t* a, size_t as,
                   float* o, size_t os, int valid) {
    with_na<4, 2, 1>(na, [&]<int NA>() {
      if (L.nibbles) group_kernel<NA, true>(grp, L.tile_bytes, nb, L.bias, a, as, o, os, valid);
      else group_kernel<NA, false>(grp, L.tile_bytes, nb, L.bias, a, as, o, os, valid);
    });
  };
  packed_gemm_loop(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride, 4, kernel);
}

}  // namespace loom::quant::detail

#endif  // __x86_64__

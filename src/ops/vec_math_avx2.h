// Internal to src/ops: vectorised float math of the AVX2 kernels (SiLU for SwiGLU; e^x comes
// from base/simd_avx2.h). Include only from x86-64 code called after the run-time AVX2 check.
#pragma once
#if defined(__x86_64__)

#include <immintrin.h>

#include "base/simd_avx2.h"

#define LOOM_OPS_AVX2 LOOM_SIMD_AVX2

namespace loom::ops::detail {

using simd::exp_nonpos_ps;

// x · sigmoid(x) per lane, with only e^(-|x|) evaluated (never overflows):
// sigmoid(x) = 1 / (1 + t) for x >= 0 and t / (1 + t) for x < 0, t = e^(-|x|). x = -inf gives
// -0 (the limit), not -inf · 0. Same formula as ops::silu, the scalar twin.
LOOM_OPS_AVX2 inline __m256 silu_ps(__m256 x) {
  const __m256 abs = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  const __m256 t = exp_nonpos_ps(_mm256_sub_ps(_mm256_setzero_ps(), abs));
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 num = _mm256_blendv_ps(one, t, x);  // sign bit of x selects t
  const __m256 xc = _mm256_max_ps(x, _mm256_set1_ps(-3.40282347e38f));
  return _mm256_mul_ps(xc, _mm256_div_ps(num, _mm256_add_ps(one, t)));
}

}  // namespace loom::ops::detail

#endif  // __x86_64__

// Internal to src/ops: vectorised float math shared by the AVX2 kernels (attention's online
// softmax, SwiGLU). Include only from x86-64 code called after the run-time AVX2 check.
#pragma once
#if defined(__x86_64__)

#include <immintrin.h>

#define LOOM_OPS_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace loom::ops::detail {

// e^x per lane for x <= 0 (any x below ln(FLT_MIN), -inf included, gives 0): x = n ln2 + r with
// |r| <= ln2 / 2 (ln2 split in two for an exact n ln2), e^r by a degree-7 polynomial (the
// classic Cephes expf coefficients), 2^n built in the exponent bits. Relative error ~1e-7.
LOOM_OPS_AVX2 inline __m256 exp_nonpos_ps(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.33654f);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_max_ps(x, lo);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(under, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
}

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

#include "ops/ssm.h"

#include <cmath>

#include "base/simd.h"
#include "ops/ops.h"
#include "ops/vec_math.h"

namespace loom::ops {

float softplus(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }

void ssm_conv(const SsmConv& p, int64_t c0, int64_t c1) {
  const int K = p.d_conv;
  for (int64_t c = c0; c < c1; ++c) {
    const float* w = p.w + c * K;
    float* st = p.state + c * (K - 1);
    float win[64];  // the last K inputs, oldest first (K <= 64, checked at load)
    for (int k = 0; k < K - 1; ++k) win[k] = st[k];
    for (int t = 0; t < p.n_tokens; ++t) {
      win[K - 1] = p.x[int64_t(t) * p.x_stride + c];
      float sum = 0.0f;
      for (int k = 0; k < K; ++k) sum += win[k] * w[k];
      if (p.b) sum += p.b[c];
      p.y[int64_t(t) * p.y_stride + c] = silu(sum);
      for (int k = 0; k < K - 1; ++k) win[k] = win[k + 1];
    }
    for (int k = 0; k < K - 1; ++k) st[k] = win[k];
  }
}

namespace detail {

float scan_states(float* s, const float* A, const float* B, const float* C, float d, float u, int n0, int n1) {
  float sum = 0.0f;
  for (int n = n0; n < n1; ++n) {
    const float v = s[n] * std::exp(d * A[n]) + B[n] * u;
    sum += v * C[n];
    s[n] = v;
  }
  return sum;
}

void scan_output(const SsmScan& p, int64_t c, int t, float xv, float sum) {
  if (p.D) sum += p.D[c] * xv;
  if (p.z) sum *= silu(p.z[int64_t(t) * p.z_stride + c]);
  p.y[int64_t(t) * p.y_stride + c] = sum;
}

}  // namespace detail

namespace ref {

void ssm_scan(const SsmScan& p, int64_t c0, int64_t c1) {
  const int S = p.d_state;
  for (int64_t c = c0; c < c1; ++c) {
    for (int t = 0; t < p.n_tokens; ++t) {
      const float xv = p.x[int64_t(t) * p.x_stride + c];
      const float d = softplus(p.dt[int64_t(t) * p.dt_stride + c]);
      const float* B = p.B + int64_t(t) * p.bc_stride;
      const float sum = detail::scan_states(p.state + c * S, p.A + c * S, B, p.C + int64_t(t) * p.bc_stride, d, xv * d, 0, S);
      detail::scan_output(p, c, t, xv, sum);
    }
  }
}

}  // namespace ref

void ssm_scan(const SsmScan& p, int64_t c0, int64_t c1) {
  if (simd_enabled()) {
    detail::ssm_scan_simd(p, c0, c1);
    return;
  }
  ref::ssm_scan(p, c0, c1);
}

}  // namespace loom::ops

#include "ops/ssm.h"

#include <cmath>

#include "base/simd.h"
#include "ops/ops.h"
#include "ops/vec_math.h"

namespace loom::ops {

float softplus(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }

void ssm_conv(const SsmConv& p, int64_t c0, int64_t c1) {
  if (simd_enabled()) {
    detail::ssm_conv_simd(p, c0, c1);
    return;
  }
  ref::ssm_conv(p, c0, c1);
}

namespace ref {

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
      p.y[int64_t(t) * p.y_stride + c] = p.silu ? silu(sum) : sum;
      for (int k = 0; k < K - 1; ++k) win[k] = win[k + 1];
    }
    for (int k = 0; k < K - 1; ++k) st[k] = win[k];
  }
}

}  // namespace ref

namespace detail {

ScanStep scan_step(const SsmScan& p, int64_t c, int t) {
  ScanStep st;
  st.head = p.head_dim > 0 ? c / p.head_dim : c;
  st.x = p.x[int64_t(t) * p.x_stride + c];
  const float dt = p.dt[int64_t(t) * p.dt_stride + st.head];
  st.d = p.dt_is_step ? dt : softplus(dt);
  st.u = st.x * st.d;
  st.A = p.head_dim > 0 ? nullptr : p.A + c * p.d_state;
  st.decay = p.head_dim > 0 ? std::exp(st.d * p.A[st.head]) : 0.0f;
  const int64_t bc = p.group_channels > 0 ? (c / p.group_channels) * p.d_state : 0;
  st.B = p.B + int64_t(t) * p.bc_stride + bc;
  st.C = p.C + int64_t(t) * p.bc_stride + bc;
  return st;
}

float scan_states(float* s, const ScanStep& st, int n0, int n1) {
  float sum = 0.0f;
  for (int n = n0; n < n1; ++n) {
    const float v = s[n] * (st.A ? std::exp(st.d * st.A[n]) : st.decay) + st.B[n] * st.u;
    sum += v * st.C[n];
    s[n] = v;
  }
  return sum;
}

void scan_output(const SsmScan& p, int64_t c, int t, const ScanStep& st, float sum) {
  if (p.D) sum += p.D[st.head] * st.x;
  if (p.z) sum *= silu(p.z[int64_t(t) * p.z_stride + c]);
  p.y[int64_t(t) * p.y_stride + c] = sum;
}

}  // namespace detail

namespace ref {

void ssm_scan(const SsmScan& p, int64_t c0, int64_t c1) {
  const int S = p.d_state;
  // By head (one channel for Mamba-1): the step's softplus and decay once per head and token.
  for (int64_t c = c0, e; c < c1; c = e) {
    e = detail::head_end(p, c, c1);
    for (int t = 0; t < p.n_tokens; ++t) {
      const detail::ScanStep head = detail::scan_step(p, c, t);
      for (int64_t ch = c; ch < e; ++ch) {
        const detail::ScanStep st = detail::channel_step(head, p, ch, t);
        detail::scan_output(p, ch, t, st, detail::scan_states(p.state + ch * S, st, 0, S));
      }
    }
  }
}

void softplus_inplace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = softplus(x[i]);
}

}  // namespace ref

void softplus_inplace(float* x, int64_t n) {
  if (simd_enabled()) {
    detail::softplus_simd(x, n);
    return;
  }
  ref::softplus_inplace(x, n);
}

void ssm_scan(const SsmScan& p, int64_t c0, int64_t c1) {
  if (simd_enabled()) {
    detail::ssm_scan_simd(p, c0, c1);
    return;
  }
  ref::ssm_scan(p, c0, c1);
}

}  // namespace loom::ops

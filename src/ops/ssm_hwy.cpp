// The selective scan of ops/ssm.h written once with Google Highway: the d_state loop of each
// (channel, token) in vectors. ssm.cpp dispatches here after simd_enabled() and keeps the
// scalar twin (ops::ref::ssm_scan).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/ssm_hwy.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include "base/simd_hwy-inl.h"
#include "ops/ops.h"
#include "ops/ssm.h"
#include "ops/vec_math.h"

HWY_BEFORE_NAMESPACE();
namespace loom::ops::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void SsmScanImpl(const SsmScan& p, int64_t c0, int64_t c1) {
  const hn::ScalableTag<float> d;
  const int N = int(hn::Lanes(d));
  const int S = p.d_state;
  const int Sv = S - S % N;  // whole vectors; the rest as the scalar twin computes it
  // By head (one channel for Mamba-1): the step's softplus and decay once per head and token.
  for (int64_t c = c0, e; c < c1; c = e) {
    e = head_end(p, c, c1);
    for (int t = 0; t < p.n_tokens; ++t) {
      const ScanStep head = scan_step(p, c, t);
      const auto vd = hn::Set(d, head.d), vdecay = hn::Set(d, head.decay);
      for (int64_t ch = c; ch < e; ++ch) {
        const ScanStep st = channel_step(head, p, ch, t);
        float* s = p.state + ch * S;
        const auto vu = hn::Set(d, st.u);
        auto acc = hn::Zero(d);
        for (int n = 0; n < Sv; n += N) {
          // d >= 0 and A <= 0: the decay's exponent is never positive.
          const auto decay = st.A ? loom::simd::HWY_NAMESPACE::ExpNonPos(d, hn::Mul(vd, hn::LoadU(d, st.A + n))) : vdecay;
          const auto v = hn::MulAdd(hn::LoadU(d, s + n), decay, hn::Mul(hn::LoadU(d, st.B + n), vu));
          acc = hn::MulAdd(v, hn::LoadU(d, st.C + n), acc);
          hn::StoreU(v, d, s + n);
        }
        float sum = Sv > 0 ? hn::GetLane(hn::SumOfLanes(d, acc)) : 0.0f;
        if (Sv < S) sum += scan_states(s, st, Sv, S);
        scan_output(p, ch, t, st, sum);
      }
    }
  }
}

// ops::ssm_conv over channels [c0, c1): N channels at a time, token by token; each channel's taps
// summed in the scalar twin's order (oldest first, then the bias), so only silu's rounding differs.
void SsmConvImpl(const SsmConv& p, int64_t c0, int64_t c1) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const int K = p.d_conv;
  HWY_ALIGN float wt[64 * hn::MaxLanes(d)];    // wt[k·N + lane] = w[c + lane][k]
  HWY_ALIGN float hist[64 * hn::MaxLanes(d)];  // the last K - 1 inputs, oldest first, per lane
  int64_t c = c0;
  for (; c + N <= c1; c += N) {
    for (int64_t l = 0; l < N; ++l) {
      for (int k = 0; k < K; ++k) wt[k * N + l] = p.w[(c + l) * K + k];
      for (int k = 0; k < K - 1; ++k) hist[k * N + l] = p.state[(c + l) * (K - 1) + k];
    }
    const auto vb = p.b ? hn::LoadU(d, p.b + c) : hn::Zero(d);
    for (int t = 0; t < p.n_tokens; ++t) {
      const auto x = hn::LoadU(d, p.x + int64_t(t) * p.x_stride + c);
      auto sum = hn::Zero(d);
      for (int k = 0; k < K - 1; ++k) sum = hn::Add(sum, hn::Mul(hn::Load(d, hist + k * N), hn::Load(d, wt + k * N)));
      sum = hn::Add(sum, hn::Mul(x, hn::Load(d, wt + (K - 1) * N)));
      if (p.b) sum = hn::Add(sum, vb);
      if (p.silu) sum = loom::simd::HWY_NAMESPACE::Silu(d, sum);
      hn::StoreU(sum, d, p.y + int64_t(t) * p.y_stride + c);
      for (int k = 0; k + 1 < K - 1; ++k) hn::Store(hn::Load(d, hist + (k + 1) * N), d, hist + k * N);
      if (K > 1) hn::Store(x, d, hist + (K - 2) * N);
    }
    for (int64_t l = 0; l < N; ++l) {
      for (int k = 0; k < K - 1; ++k) p.state[(c + l) * (K - 1) + k] = hist[k * N + l];
    }
  }
  if (c < c1) ref::ssm_conv(p, c, c1);
}

void SoftplusImpl(float* x, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto big = hn::Set(d, 20.0f);
  auto one = [&](auto v) {
    const auto sp = hn::Log1p(d, hn::Exp(d, hn::Min(v, big)));
    return hn::IfThenElse(hn::Gt(v, big), v, sp);
  };
  int64_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(one(hn::LoadU(d, x + i)), d, x + i);
  if (i < n) {  // the tail through a padded vector
    HWY_ALIGN float buf[hn::MaxLanes(d)] = {};
    for (int64_t k = 0; k < n - i; ++k) buf[k] = x[i + k];
    hn::Store(one(hn::Load(d, buf)), d, buf);
    for (int64_t k = 0; k < n - i; ++k) x[i + k] = buf[k];
  }
}

}  // namespace loom::ops::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::ops::detail {
HWY_EXPORT(SsmScanImpl);
HWY_EXPORT(SoftplusImpl);
HWY_EXPORT(SsmConvImpl);

void ssm_conv_simd(const SsmConv& p, int64_t c0, int64_t c1) { HWY_DYNAMIC_DISPATCH(SsmConvImpl)(p, c0, c1); }

void softplus_simd(float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(SoftplusImpl)(x, n); }

void ssm_scan_simd(const SsmScan& p, int64_t c0, int64_t c1) { HWY_DYNAMIC_DISPATCH(SsmScanImpl)(p, c0, c1); }
}  // namespace loom::ops::detail
#endif  // HWY_ONCE

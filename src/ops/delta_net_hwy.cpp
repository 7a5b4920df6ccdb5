// ops::delta_net written once with Google Highway: each state row's decay, read-outs and write in
// vectors (the sums reduced across lanes: rounding differs from ref::delta_net). delta_net.cpp
// dispatches here after simd_enabled().
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/delta_net_hwy.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>

#include "ops/delta_net.h"

HWY_BEFORE_NAMESPACE();
namespace loom::ops::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void DeltaNetImpl(const DeltaNet& p, int64_t h0, int64_t h1) {
  const hn::ScalableTag<float> d;
  const int N = int(hn::Lanes(d));
  const int S = p.head_dim;
  const int Sv = S - S % N;  // whole vectors; the rest one by one
  for (int64_t h = h0; h < h1; ++h) {
    float* M = p.state + h * S * S;
    const int64_t kh = h % p.n_k_heads;
    for (int t = 0; t < p.n_tokens; ++t) {
      const float* q = p.q + t * p.qk_stride + kh * S;
      const float* k = p.k + t * p.qk_stride + kh * S;
      const float* v = p.v + t * p.v_stride + h * S;
      float* o = p.out + t * p.out_stride + h * S;
      const float decay = std::exp(p.g[t * p.gb_stride + h]), beta = p.beta[t * p.gb_stride + h];
      const auto vdecay = hn::Set(d, decay);
      for (int j = 0; j < S; ++j) {
        float* row = M + int64_t(j) * S;
        auto acc = hn::Zero(d);
        for (int i = 0; i < Sv; i += N) {
          const auto r = hn::Mul(hn::LoadU(d, row + i), vdecay);
          hn::StoreU(r, d, row + i);
          acc = hn::MulAdd(r, hn::LoadU(d, k + i), acc);
        }
        float mk = Sv > 0 ? hn::GetLane(hn::SumOfLanes(d, acc)) : 0.0f;
        for (int i = Sv; i < S; ++i) {
          row[i] *= decay;
          mk += row[i] * k[i];
        }
        const float dj = beta * (v[j] - mk);
        const auto vd = hn::Set(d, dj);
        acc = hn::Zero(d);
        for (int i = 0; i < Sv; i += N) {
          const auto r = hn::MulAdd(vd, hn::LoadU(d, k + i), hn::LoadU(d, row + i));
          hn::StoreU(r, d, row + i);
          acc = hn::MulAdd(r, hn::LoadU(d, q + i), acc);
        }
        float mq = Sv > 0 ? hn::GetLane(hn::SumOfLanes(d, acc)) : 0.0f;
        for (int i = Sv; i < S; ++i) {
          row[i] += dj * k[i];
          mq += row[i] * q[i];
        }
        o[j] = mq * p.scale;
      }
    }
  }
}

}  // namespace loom::ops::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::ops::detail {
HWY_EXPORT(DeltaNetImpl);

void delta_net_simd(const DeltaNet& p, int64_t h0, int64_t h1) { HWY_DYNAMIC_DISPATCH(DeltaNetImpl)(p, h0, h1); }
}  // namespace loom::ops::detail
#endif  // HWY_ONCE

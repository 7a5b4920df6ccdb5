// Row-wise float kernels of ops.cpp written once with Google Highway (base/simd.h): SwiGLU and
// the two passes of RMSNorm. Compiled once per Highway target; ops.cpp calls them through
// ops/vec_math.h after simd_enabled() and keeps the scalar twins.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/vec_math_hwy.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "base/simd_hwy-inl.h"
#include "ops/vec_math.h"

HWY_BEFORE_NAMESPACE();
namespace loom::ops::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void SwigluImpl(float* gate, const float* up, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto g = loom::simd::HWY_NAMESPACE::Silu(d, hn::LoadU(d, gate + i));
    hn::StoreU(hn::Mul(g, hn::LoadU(d, up + i)), d, gate + i);
  }
  if (i < n) {  // the tail through a full vector of padding (no reads or writes past n)
    HWY_ALIGN float gb[hn::MaxLanes(d)] = {}, ub[hn::MaxLanes(d)] = {};
    for (int64_t k = 0; k < n - i; ++k) gb[k] = gate[i + k], ub[k] = up[i + k];
    const auto g = loom::simd::HWY_NAMESPACE::Silu(d, hn::Load(d, gb));
    hn::Store(hn::Mul(g, hn::Load(d, ub)), d, gb);
    for (int64_t k = 0; k < n - i; ++k) gate[i + k] = gb[k];
  }
}

// Each square formed and added in double, as the scalar twin; two accumulators.
double SumSquaresImpl(const float* x, int64_t n) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;  // as many floats as dd has doubles
  const int64_t N = int64_t(hn::Lanes(dd));
  auto a0 = hn::Zero(dd), a1 = hn::Zero(dd);
  int64_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    const auto lo = hn::PromoteTo(dd, hn::LoadU(df, x + i));
    const auto hi = hn::PromoteTo(dd, hn::LoadU(df, x + i + N));
    a0 = hn::MulAdd(lo, lo, a0);
    a1 = hn::MulAdd(hi, hi, a1);
  }
  double ss = hn::GetLane(hn::SumOfLanes(dd, hn::Add(a0, a1)));
  for (; i < n; ++i) ss += double(x[i]) * x[i];
  return ss;
}

// out[i] = x[i] * s * (w ? w[i] : 1), the products in the scalar twin's order.
void ScaleRowImpl(const float* x, const float* w, float s, int64_t n, float* out) {
  const hn::ScalableTag<float> d;
  const int64_t N = int64_t(hn::Lanes(d));
  const auto vs = hn::Set(d, s);
  int64_t i = 0;
  if (w) {
    for (; i + N <= n; i += N) {
      hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, x + i), vs), hn::LoadU(d, w + i)), d, out + i);
    }
    for (; i < n; ++i) out[i] = x[i] * s * w[i];
  } else {
    for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(d, x + i), vs), d, out + i);
    for (; i < n; ++i) out[i] = x[i] * s;
  }
}

}  // namespace loom::ops::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace loom::ops::detail {
HWY_EXPORT(SwigluImpl);
HWY_EXPORT(SumSquaresImpl);
HWY_EXPORT(ScaleRowImpl);

void swiglu_simd(float* gate, const float* up, int64_t n) { HWY_DYNAMIC_DISPATCH(SwigluImpl)(gate, up, n); }
double sum_squares_simd(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(SumSquaresImpl)(x, n); }
void scale_row_simd(const float* x, const float* w, float s, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(ScaleRowImpl)(x, w, s, n, out);
}
}  // namespace loom::ops::detail
#endif  // HWY_ONCE

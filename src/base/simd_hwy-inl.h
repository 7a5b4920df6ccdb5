// Float helpers for kernels written with Google Highway, shared by src/quant and src/ops.
// Highway "-inl" header: include it after <hwy/highway.h> from inside a file that is compiled
// once per target (foreach_target.h); it defines loom::simd::HWY_NAMESPACE for each target.
// (The include guard below toggles per target, as Highway's own -inl headers do.)
#if defined(LOOM_BASE_SIMD_HWY_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef LOOM_BASE_SIMD_HWY_INL_H_
#undef LOOM_BASE_SIMD_HWY_INL_H_
#else
#define LOOM_BASE_SIMD_HWY_INL_H_
#endif

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace loom::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// e^x per lane for x <= 0 (any x below ln(FLT_MIN), -inf included, gives 0): x = n ln2 + r with
// |r| <= ln2 / 2 (ln2 split in two for an exact n ln2), e^r by a degree-7 polynomial (the
// classic Cephes expf coefficients), 2^n built in the exponent bits. Relative error ~1e-7.
// Bit-identical to simd_avx2.h's exp_nonpos_ps on targets with FMA.
template <class D, class V = hn::VFromD<D>>
HWY_INLINE V ExpNonPos(D d, V x) {
  const V lo = hn::Set(d, -87.33654f);
  const auto under = hn::Lt(x, lo);
  x = hn::Max(x, lo);
  const V n = hn::Round(hn::Mul(x, hn::Set(d, 1.44269504088896341f)));
  V r = hn::NegMulAdd(n, hn::Set(d, 0.693359375f), x);
  r = hn::NegMulAdd(n, hn::Set(d, -2.12194440e-4f), r);
  V y = hn::Set(d, 1.9875691500e-4f);
  y = hn::MulAdd(y, r, hn::Set(d, 1.3981999507e-3f));
  y = hn::MulAdd(y, r, hn::Set(d, 8.3334519073e-3f));
  y = hn::MulAdd(y, r, hn::Set(d, 4.1665795894e-2f));
  y = hn::MulAdd(y, r, hn::Set(d, 1.6666665459e-1f));
  y = hn::MulAdd(y, r, hn::Set(d, 5.0000001201e-1f));
  y = hn::MulAdd(y, hn::Mul(r, r), hn::Add(r, hn::Set(d, 1.0f)));
  const hn::RebindToSigned<D> di;
  const auto e = hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127)));
  return hn::IfThenZeroElse(under, hn::Mul(y, hn::BitCast(d, e)));
}

// x · sigmoid(x) per lane with only e^(-|x|) evaluated (never overflows): sigmoid(x) = 1/(1+t)
// for x >= 0 and t/(1+t) for x < 0, t = e^(-|x|); x = -inf gives -0. Same formula as ops::silu.
template <class D, class V = hn::VFromD<D>>
HWY_INLINE V Silu(D d, V x) {
  const V t = ExpNonPos(d, hn::Neg(hn::Abs(x)));
  const V one = hn::Set(d, 1.0f);
  const V num = hn::IfThenElse(hn::Lt(x, hn::Zero(d)), t, one);
  const V xc = hn::Max(x, hn::Set(d, -3.40282347e38f));
  return hn::Mul(xc, hn::Div(num, hn::Add(one, t)));
}

}  // namespace loom::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // LOOM_BASE_SIMD_HWY_INL_H_

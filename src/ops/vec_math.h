// Internal to src/ops: the Highway kernels of vec_math_hwy.cpp (dispatched to the best target
// the CPU has). Callers check simd_enabled() (base/simd.h) first and otherwise run the scalar
// twins in ops.cpp.
#pragma once

#include <cstdint>

namespace loom::ops {
struct SsmScan;
struct SsmConv;
}  // namespace loom::ops

namespace loom::ops::detail {

// gate[i] = silu(gate[i]) * up[i]; agrees with ops::silu to ~1e-7 relative.
void swiglu_simd(float* gate, const float* up, int64_t n);
// sum of x[i]^2, each square formed and added in double (order differs from the scalar loop).
double sum_squares_simd(const float* x, int64_t n);
// out[i] = x[i] * s * (w ? w[i] : 1)
void scale_row_simd(const float* x, const float* w, float s, int64_t n, float* out);
// ops::ssm_scan over channels [c0, c1): the d_state loop in vectors (the decay through
// simd::ExpNonPos, the C-weighted sum reduced across lanes: rounding differs from ref::ssm_scan).
void ssm_scan_simd(const SsmScan& p, int64_t c0, int64_t c1);
// ops::ssm_conv over channels [c0, c1) in vectors of channels (silu's rounding differs from ref::ssm_conv).
void ssm_conv_simd(const SsmConv& p, int64_t c0, int64_t c1);
// x[i] = x > 20 ? x : log1p(e^x) (Highway's Exp and Log1p; the scalar twin's log(1 + e^x) rounds differently).
void softplus_simd(float* x, int64_t n);

}  // namespace loom::ops::detail

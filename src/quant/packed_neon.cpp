// Packed GEMM on AArch64 (packed.h has the layout, packed_neon_impl.h the kernels): the same
// 16-row layout as the x86 kernels, compiled three times — plain NEON (ARMv8.0), dotprod (SDOT)
// and i8mm (SMMLA for prompt runs) — plus F16 by FMLAL (FEAT_FHM) once, in the plain copy, each
// with its own target attribute only, so the baseline binary holds no instruction a core lacks
// until cpu_features() selects that code (type_traits' neon / neon_dot / neon_i8mm entries,
// packed.cpp's dispatch; neon_fhm for F16 inside each copy).
#if defined(__aarch64__)

#include <arm_neon.h>

#include <cstring>
#include <utility>

#include "base/cpu.h"
#include "quant/blocks.h"
#include "quant/packed.h"
#include "quant/packed_act_panels.h"
#include "quant/packed_layout.h"

// GCC 12 declares the dotprod and i8mm intrinsics under target("arch=armv8.2-a+...") and refuses
// to inline them into functions with target("+dotprod") alone (kernels_neon.cpp); Clang (Apple)
// takes the feature names.
#if defined(__clang__)
#define LOOM_PN_DOT_ATTR __attribute__((target("dotprod")))
#define LOOM_PN_I8MM_ATTR __attribute__((target("dotprod,i8mm")))
#else
#define LOOM_PN_DOT_ATTR __attribute__((target("arch=armv8.2-a+dotprod")))
#define LOOM_PN_I8MM_ATTR __attribute__((target("arch=armv8.2-a+dotprod+i8mm")))
#endif
// FMLAL / FMLAL2 (FEAT_FHM; "fp16fml" implies FP16 arithmetic in both compilers).
#if defined(__clang__)
#define LOOM_PN_FHM_ATTR __attribute__((target("fp16fml")))
#else
#define LOOM_PN_FHM_ATTR __attribute__((target("arch=armv8.2-a+fp16fml")))
#endif

#define LOOM_PN_NS neon_plain
#define LOOM_PN_ATTR
#define LOOM_PN_LEVEL 0
#include "quant/packed_neon_impl.h"
#undef LOOM_PN_NS
#undef LOOM_PN_ATTR
#undef LOOM_PN_LEVEL

#define LOOM_PN_NS neon_dot
#define LOOM_PN_ATTR LOOM_PN_DOT_ATTR
#define LOOM_PN_LEVEL 1
#include "quant/packed_neon_impl.h"
#undef LOOM_PN_NS
#undef LOOM_PN_ATTR
#undef LOOM_PN_LEVEL

#define LOOM_PN_NS neon_i8mm
#define LOOM_PN_ATTR LOOM_PN_I8MM_ATTR
#define LOOM_PN_LEVEL 2
#include "quant/packed_neon_impl.h"
#undef LOOM_PN_NS
#undef LOOM_PN_ATTR
#undef LOOM_PN_LEVEL

namespace loom::quant::detail {

bool packed_neon_has_kernel(TensorType t) {
  switch (t) {
    case TensorType::Q4_0:
    case TensorType::Q4_1:
    case TensorType::Q5_0:
    case TensorType::Q5_1:
    case TensorType::Q8_0:
    case TensorType::IQ4_NL:
    case TensorType::MXFP4:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
    case TensorType::IQ4_XS:
    case TensorType::F16:
    case TensorType::BF16: return true;
    default: return false;
  }
}

void packed_gemm_neon(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                      size_t act_stride, int n, float* out, size_t out_stride) {
  neon_plain::packed_gemm(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
}

void packed_gemm_f16_neon_fcvtl(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                                size_t act_stride, int n, float* out, size_t out_stride) {
  neon_plain::f16_fcvtl(rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
}

void packed_gemm_f16_neon_fhm(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                              size_t act_stride, int n, float* out, size_t out_stride) {
  neon_plain::f16_fhm(rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
}

void packed_gemm_neon_dot(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                          const void* act, size_t act_stride, int n, float* out, size_t out_stride) {
  neon_dot::packed_gemm(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
}

void packed_gemm_neon_i8mm(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                           const void* act, size_t act_stride, int n, float* out, size_t out_stride) {
  neon_i8mm::packed_gemm(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
}

}  // namespace loom::quant::detail

#endif  // __aarch64__

// Packed GEMM on 256-bit registers for the x86-64 CPUs without AVX-512 (packed.h has the
// layout): packed_avx2_impl.h compiled twice, once with the plain AVX2 dot step (VPMADDUBSW +
// VPMADDWD: AMD Zen 2/3, Intel Haswell..Comet Lake) and once with AVX-VNNI's VPDPBUSD (Alder Lake
// on, Zen 5 without AVX-512), each for its own target ISA only. F16 / BF16 (FMA, no integer dot)
// are in the AVX2 copy only.
#if defined(__x86_64__)

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "quant/blocks.h"
#include "quant/packed.h"
#include "quant/packed_layout.h"

#define LOOM_PK_NS avx2_dot
#define LOOM_PK_TARGET "avx2,fma,f16c"
#define LOOM_PK_VNNI 0
#include "quant/packed_avx2_impl.h"
#undef LOOM_PK_NS
#undef LOOM_PK_TARGET
#undef LOOM_PK_VNNI

#define LOOM_PK_NS avxvnni_dot
#define LOOM_PK_TARGET "avx2,fma,f16c,avxvnni"
#define LOOM_PK_VNNI 1
#include "quant/packed_avx2_impl.h"
#undef LOOM_PK_NS
#undef LOOM_PK_TARGET
#undef LOOM_PK_VNNI

namespace loom::quant::detail {

bool packed_avx2_has_kernel(TensorType t) {
  switch (t) {
    case TensorType::Q4_0:
    case TensorType::Q4_1:
    case TensorType::Q5_0:
    case TensorType::Q5_1:
    case TensorType::Q8_0:
    case TensorType::IQ4_NL:
    case TensorType::MXFP4:
    case TensorType::Q2_K:
    case TensorType::Q3_K:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
    case TensorType::IQ4_XS:
    case TensorType::F16:
    case TensorType::BF16: return true;
    default: return false;
  }
}

void packed_gemm_avx2(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                      size_t act_stride, int n, float* out, size_t out_stride) {
  avx2_dot::packed_gemm(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
}

void packed_gemm_avxvnni(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                         const void* act, size_t act_stride, int n, float* out, size_t out_stride) {
  // F16 / BF16 take no integer dot: the AVX2 copy's FMA kernels.
  if (t == TensorType::F16 || t == TensorType::BF16) {
    return avx2_dot::packed_gemm(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
  }
  avxvnni_dot::packed_gemm(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
}

}  // namespace loom::quant::detail

#endif  // __x86_64__

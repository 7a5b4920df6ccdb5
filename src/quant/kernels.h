// Internal to src/quant: the SIMD kernel set and shared failure reporting. quant.cpp dispatches
// between these kernels and the scalar references in formats_ref.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/tensor_type.h"

namespace loom::quant::detail {

// Reports a call with a type this build cannot handle or an n that is not a whole number of
// blocks, then aborts: both are programming errors (loading refuses unsupported types).
[[noreturn]] void fail(const char* fn, TensorType t, int64_t n);
// Elements per block of a supported type (1 for F32/F16/BF16, 256 for the k-quants, Q8_K and
// IQ4_XS, 32 otherwise); 0 when unsupported.
int64_t block_size_of(TensorType t);

#if defined(__x86_64__)
// AVX2 + FMA + F16C kernels (kernels_avx2.cpp). Each returns false when it has no kernel for t,
// so the caller falls back to the reference; arguments are already validated.
namespace avx2 {
bool dequantize_row(TensorType t, const void* src, float* dst, int64_t n);
bool quantize_row(TensorType t, const float* src, void* dst, int64_t n);
// nb blocks of 32 floats into the packed activation format (packed_layout.h), exactly as
// quant::quantize_packed_act's reference path.
void quantize_packed_act(const float* x, int64_t nb, uint8_t* dst);
bool vec_dot(TensorType t, int64_t n, const void* w, const void* a, float* out);
// See quant::vec_dot_tile; false when there is no tile kernel for t (Q4_0, Q5_0, Q8_0, IQ4_NL,
// F16 have one).
bool vec_dot_tile(TensorType t, int64_t n, const void* w, size_t w_stride, int n_rows_w,
                  const void* a, size_t a_stride, int n_rows_a, float* out, size_t out_stride);
// The super-block formats (kernels_avx2_k.cpp), called by the three above for the types they do
// not handle themselves; nb = number of 256-element super-blocks.
bool kq_dequantize_row(TensorType t, const void* src, float* dst, int64_t nb);
bool kq_quantize_row(TensorType t, const float* src, void* dst, int64_t nb);
bool kq_vec_dot(TensorType t, int64_t nb, const void* w, const void* a, float* out);
}  // namespace avx2
#endif

}  // namespace loom::quant::detail

// Block formats of GGUF tensors: dequantize, quantize (reference) and dot products.
//
// Every public function dispatches at run time to a SIMD kernel when the CPU has one, else to the
// scalar reference in namespace loom::quant::ref, which is the ground truth the SIMD kernels are
// tested against. Block layouts are byte-exact with the GGUF/ggml formats. What loom knows about
// each type (these functions' kernels, vec_dot_type, is_supported, packed layouts) is one row of
// the table in quant/type_traits.h.
//
// Dot products take the weight row in its own type and the activation row already converted to
// vec_dot_type(weight type) — the same activation formats llama.cpp uses on CPUs, so results
// match its numerics: Q8_0 for Q4_0/Q5_0/Q8_0/IQ4_NL, Q8_1 for Q4_1/Q5_1, Q8_K for
// Q2_K..Q6_K/Q8_K/IQ4_XS, F16 for F16, BF16 for BF16, F32 for F32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/tensor_type.h"

namespace loom::quant {

// Types loom can compute with in this build (dequantize + dot); others are refused at load.
bool is_supported(TensorType t);
// The activation format a dot with weights of type t consumes.
TensorType vec_dot_type(TensorType t);

// n must be a multiple of the block size of t (see tensor_type_info). dst/src may be unaligned.
void dequantize_row(TensorType t, const void* src, float* dst, int64_t n);
// Reference quantization, byte-identical with ggml's reference quantizers (for the k-quants and
// IQ4_NL/IQ4_XS: what llama-quantize writes without an importance matrix). Every supported type
// can be quantized. Also used to convert activations to vec_dot_type before dot products (Q8_0,
// Q8_1, Q8_K, F16, BF16 have fast paths; the weight quantizers are slow searches).
void quantize_row(TensorType t, const float* src, void* dst, int64_t n);
// sum_i w[i] * a[i] over n elements; w in type t, a in vec_dot_type(t).
float vec_dot(TensorType t, int64_t n, const void* w, const void* a);
// A tile of dot products for matrix x matrix: for j < n_rows_w and i < n_rows_a,
//   out[i * out_stride + j] = vec_dot(t, n, w + j * w_stride, a + i * a_stride)
// (strides in bytes for w and a, in floats for out). Loaded weight blocks are reused across
// several activation rows and vice versa; every output is bit-identical with vec_dot of its
// pair whatever the tile (batch invariance: the types with a tile kernel compute vec_dot as
// their 1 x 1 tile; the others loop over vec_dot). Any n_rows_w, n_rows_a >= 0.
void vec_dot_tile(TensorType t, int64_t n, const void* w, size_t w_stride, int n_rows_w, const void* a, size_t a_stride,
                  int n_rows_a, float* out, size_t out_stride);

namespace ref {
void dequantize_row(TensorType t, const void* src, float* dst, int64_t n);
void quantize_row(TensorType t, const float* src, void* dst, int64_t n);
float vec_dot(TensorType t, int64_t n, const void* w, const void* a);
// Defined as ref::vec_dot over every (weight row, activation row) pair.
void vec_dot_tile(TensorType t, int64_t n, const void* w, size_t w_stride, int n_rows_w, const void* a, size_t a_stride,
                  int n_rows_a, float* out, size_t out_stride);
}  // namespace ref

}  // namespace loom::quant

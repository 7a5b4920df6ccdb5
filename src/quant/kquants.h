// Internal to src/quant: scalar references of the 256-element super-block formats (Q2_K..Q6_K,
// Q8_K, IQ4_XS) and IQ4_NL, in kquants_ref.cpp. formats_ref.cpp's ref:: entry points dispatch
// here; arguments are already validated (n a multiple of the block size). nb = number of blocks.
#pragma once

#include <cstdint>

#include "gguf/tensor_type.h"

namespace loom::quant::detail::kref {

// False when t is not one of the formats handled here.
bool dequantize(TensorType t, const void* src, float* dst, int64_t nb);
bool quantize(TensorType t, const float* src, void* dst, int64_t nb);
bool vec_dot(TensorType t, int64_t nb, const void* w, const void* a, float* out);
// The weight quantizers (kquants_quantize.cpp): Q2_K..Q6_K, IQ4_XS, IQ4_NL.
bool quantize_weights(TensorType t, const float* src, void* dst, int64_t nb);

}  // namespace loom::quant::detail::kref

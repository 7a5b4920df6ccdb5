// The ggml tensor type ids GGUF files use, with their names and block geometry, as a constexpr
// table: tensor_type.cpp answers the reader's questions from it, and src/quant builds its per-type
// traits (quant/type_traits.h) from it at compile time, so each type's name, block size and block
// bytes are written down once. Geometry follows the block structs of ggml-common.h.
#pragma once

#include <cstdint>
#include <optional>

#include "gguf/tensor_type.h"

namespace loom::gguf_types {

struct Entry {
  TensorType type;
  TensorTypeInfo info;
};

inline constexpr Entry kTable[] = {
    {TensorType::F32, {"f32", 1, 4}},
    {TensorType::F16, {"f16", 1, 2}},
    {TensorType::Q4_0, {"q4_0", 32, 18}},
    {TensorType::Q4_1, {"q4_1", 32, 20}},
    {TensorType::Q5_0, {"q5_0", 32, 22}},
    {TensorType::Q5_1, {"q5_1", 32, 24}},
    {TensorType::Q8_0, {"q8_0", 32, 34}},
    {TensorType::Q8_1, {"q8_1", 32, 36}},
    {TensorType::Q2_K, {"q2_k", 256, 84}},
    {TensorType::Q3_K, {"q3_k", 256, 110}},
    {TensorType::Q4_K, {"q4_k", 256, 144}},
    {TensorType::Q5_K, {"q5_k", 256, 176}},
    {TensorType::Q6_K, {"q6_k", 256, 210}},
    {TensorType::Q8_K, {"q8_k", 256, 292}},
    {TensorType::IQ2_XXS, {"iq2_xxs", 256, 66}},
    {TensorType::IQ2_XS, {"iq2_xs", 256, 74}},
    {TensorType::IQ3_XXS, {"iq3_xxs", 256, 98}},
    {TensorType::IQ1_S, {"iq1_s", 256, 50}},
    {TensorType::IQ4_NL, {"iq4_nl", 32, 18}},
    {TensorType::IQ3_S, {"iq3_s", 256, 110}},
    {TensorType::IQ2_S, {"iq2_s", 256, 82}},
    {TensorType::IQ4_XS, {"iq4_xs", 256, 136}},
    {TensorType::I8, {"i8", 1, 1}},
    {TensorType::I16, {"i16", 1, 2}},
    {TensorType::I32, {"i32", 1, 4}},
    {TensorType::I64, {"i64", 1, 8}},
    {TensorType::F64, {"f64", 1, 8}},
    {TensorType::IQ1_M, {"iq1_m", 256, 56}},
    {TensorType::BF16, {"bf16", 1, 2}},
    {TensorType::TQ1_0, {"tq1_0", 256, 54}},
    {TensorType::TQ2_0, {"tq2_0", 256, 66}},
    {TensorType::MXFP4, {"mxfp4", 32, 17}},
    {TensorType::NVFP4, {"nvfp4", 64, 36}},
    {TensorType::Q1_0, {"q1_0", 128, 18}},
    {TensorType::Q2_0, {"q2_0", 64, 18}},
};

// One past the largest id in the table (ids index arrays of this size).
inline constexpr uint32_t kIdLimit = [] {
  uint32_t n = 0;
  for (const Entry& e : kTable) n = static_cast<uint32_t>(e.type) + 1 > n ? static_cast<uint32_t>(e.type) + 1 : n;
  return n;
}();

constexpr std::optional<TensorTypeInfo> find(uint32_t id) {
  for (const Entry& e : kTable) {
    if (static_cast<uint32_t>(e.type) == id) return e.info;
  }
  return std::nullopt;
}

}  // namespace loom::gguf_types

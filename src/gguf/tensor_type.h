// The ggml tensor type ids stored in GGUF files, with their block geometry. The reader uses this
// to validate tensor sizes; src/quant implements the arithmetic for the types loom computes with.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace loom::gguf {

enum class TensorType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
  Q1_0 = 41,
  Q2_0 = 42,
};

struct TensorTypeInfo {
  std::string_view name;  // lower-case as llama.cpp prints it: "q4_0", "f16", ...
  int64_t block_size;     // elements per block
  int64_t block_bytes;    // bytes per block
};

// Geometry of a type id, or nullopt when the id is not a known ggml type.
std::optional<TensorTypeInfo> tensor_type_info(uint32_t id);
inline std::optional<TensorTypeInfo> tensor_type_info(TensorType t) { return tensor_type_info(static_cast<uint32_t>(t)); }
std::string_view tensor_type_name(TensorType t);
// Parse a name such as "q8_0" or "F16" (case-insensitive).
std::optional<TensorType> parse_tensor_type(std::string_view name);

// Bytes of a row of n elements; -1 when n is not a multiple of the block size or type unknown.
int64_t row_bytes(TensorType t, int64_t n);

}  // namespace loom::gguf

// Re-exported: the layers above name these as loom::X (CONTRIBUTING.md, "Namespaces").
namespace loom {
using gguf::TensorType;
using gguf::TensorTypeInfo;
}  // namespace loom

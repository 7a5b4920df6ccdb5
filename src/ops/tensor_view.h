// A non-owning view of a (possibly quantized) 2-D weight matrix as stored in a GGUF file:
// `rows` rows of `cols` elements, each row `row_bytes` long. Ops take weights as TensorView.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/tensor_type.h"

namespace loom::ops {

struct TensorView {
  TensorType type = TensorType::F32;
  const void* data = nullptr;
  int64_t cols = 0;      // ne[0]: elements per row (the reduction dimension of a matmul)
  int64_t rows = 0;      // ne[1] * ne[2] * ne[3]
  size_t row_bytes = 0;  // bytes of one row in `type`
  // Optional row-interleaved copy of the same matrix (quant/packed.h), made at model load when
  // the CPU has packed kernels for `type`; matmul prefers it. `data` stays valid either way.
  const void* packed = nullptr;

  bool empty() const { return data == nullptr; }
  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + r * row_bytes; }
};

}  // namespace loom::ops

// Re-exported: the layers above name these as loom::X (CONTRIBUTING.md, "Namespaces").
namespace loom {
using ops::TensorView;
}  // namespace loom

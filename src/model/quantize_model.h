// Model-level quantization: what `llama-quantize IN OUT TYPE` does, for the types loom can
// quantize, without an importance matrix: the plan of model/quantize_rules.h (llama.cpp's file
// types and per-tensor rules) applied to a file, each tensor converted through quant::
// dequantize_row / quantize_row.
//
// The result is byte-identical with llama-quantize for the tensor data; metadata is copied with
// general.quantization_version (2) and general.file_type (the LLAMA_FTYPE value) moved to the end
// as llama.cpp does, and split.* keys dropped. Tensor order is preserved unless
// QuantizeParams::llama_cpp_order asks for llama.cpp's order (then the whole file is identical).
#pragma once

#include <cstdint>
#include <functional>

#include "base/status.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "gguf/tensor_type.h"
#include "model/quantize_rules.h"

namespace loom::model {

// Reported after each tensor is done (in output order).
struct TensorProgress {
  size_t index = 0;  // 0-based
  size_t count = 0;
  const gguf::TensorInfo* tensor = nullptr;  // the input tensor
  TensorType out_type = TensorType::F32;
  uint64_t out_bytes = 0;
  bool converted = false;
  bool fallback = false;
};

struct QuantizeStats {
  uint64_t in_tensor_bytes = 0;
  uint64_t out_tensor_bytes = 0;
  int n_converted = 0;
  int n_copied = 0;
  int n_fallback = 0;
};

// Quantizes `in` into a writer ready for to_bytes()/write_file(). `progress` may be empty.
Expected<gguf::GgufWriter> quantize_model(const gguf::GgufFile& in, const QuantizeParams& params,
                                          const std::function<void(const TensorProgress&)>& progress = {},
                                          QuantizeStats* stats = nullptr);

}  // namespace loom::model

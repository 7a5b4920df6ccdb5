// Model-level quantization: what `llama-quantize [--imatrix F] [--pure] ... IN OUT TYPE` does: the
// plan of model/quantize_rules.h (llama.cpp's file types and per-tensor rules) applied to a file,
// each tensor converted as ggml_quantize_chunk does (quant::quantize_chunk with the tensor's
// importance values from QuantizeParams::imatrix: an expert's rows with that expert's values; the
// reference quantizers of TQ1_0, TQ2_0, MXFP4, Q1_0, Q2_0, Q8_0, F16, BF16, which take none).
//
// The result is byte-identical with llama-quantize for the tensor data; metadata is copied with
// general.quantization_version (2) and general.file_type (the LLAMA_FTYPE value) moved to the end
// as llama.cpp does, then with an imatrix quantize.imatrix.file / .dataset / .entries_count /
// .chunks_count as llama-quantize writes them, and split.* keys dropped. Tensor order is preserved
// unless QuantizeParams::llama_cpp_order asks for llama.cpp's order (then the whole file is
// identical).
//
// llama-quantize's refusals are errors here, before anything is converted: a type that needs an
// importance matrix without one (or without the tensor's entry), an entry of the wrong size (but
// for token_embd, which then goes without), and where llama-quantize would abort in ggml (IQ2_XXS,
// IQ2_XS or IQ1_S for a tensor without importance values, e.g. token_embd under --pure).
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

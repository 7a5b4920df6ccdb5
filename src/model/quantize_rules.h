// llama-quantize's model knowledge: the file types (tensor type mixes such as Q4_K_M) and the
// per-tensor rules that pick each tensor's type from its name, its layer and the model's
// hyper-parameters (llama.cpp's llama_tensor_get_type), for every file type llama-quantize lists
// except NVFP4 and COPY: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, the k-quant mixes (Q2_K_S
// included), IQ4_NL, IQ4_XS, the IQ1/IQ2/IQ3 mixes (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ2_M,
// IQ3_XXS, IQ3_XS, IQ3_S, IQ3_M), TQ1_0, TQ2_0, MXFP4_MOE, Q1_0 and Q2_0; with or without an
// importance matrix (some rules depend on whether there is one, and the very-low-bit types need
// one: see QuantizeParams::imatrix). model/quantize_model.h applies the plan to a file.
//
// A file type ("Q4_K_M") is a mix: every tensor that gets quantized starts from the file type's
// base tensor type, then llama.cpp's per-tensor rules pick a different type for some of them
// (output.weight, attn_v / ffn_down by layer position, attn_output, ...) and fall back to
// another type when the row length is not a multiple of the block size. Tensors that are not
// quantized at all (1-D tensors, norms, position embeddings, ...) are copied unchanged. The rules
// are applied in llama.cpp's tensor order (non-block tensors first, then by layer, by name within
// each), so a file gets the same mix as llama-quantize gives it whatever order its tensors are in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "gguf/gguf.h"
#include "gguf/tensor_type.h"

namespace loom::model {

// llama.cpp's LLAMA_FTYPE values, written to general.file_type.
enum class FileType : uint32_t {
  ALL_F32 = 0,
  MOSTLY_F16 = 1,
  MOSTLY_Q4_0 = 2,
  MOSTLY_Q4_1 = 3,
  MOSTLY_Q8_0 = 7,
  MOSTLY_Q5_0 = 8,
  MOSTLY_Q5_1 = 9,
  MOSTLY_Q2_K = 10,
  MOSTLY_Q3_K_S = 11,
  MOSTLY_Q3_K_M = 12,
  MOSTLY_Q3_K_L = 13,
  MOSTLY_Q4_K_S = 14,
  MOSTLY_Q4_K_M = 15,
  MOSTLY_Q5_K_S = 16,
  MOSTLY_Q5_K_M = 17,
  MOSTLY_Q6_K = 18,
  MOSTLY_IQ2_XXS = 19,
  MOSTLY_IQ2_XS = 20,
  MOSTLY_Q2_K_S = 21,
  MOSTLY_IQ3_XS = 22,
  MOSTLY_IQ3_XXS = 23,
  MOSTLY_IQ1_S = 24,
  MOSTLY_IQ4_NL = 25,
  MOSTLY_IQ3_S = 26,
  MOSTLY_IQ3_M = 27,
  MOSTLY_IQ2_S = 28,
  MOSTLY_IQ2_M = 29,
  MOSTLY_IQ4_XS = 30,
  MOSTLY_IQ1_M = 31,
  MOSTLY_BF16 = 32,
  MOSTLY_TQ1_0 = 36,
  MOSTLY_TQ2_0 = 37,
  MOSTLY_MXFP4_MOE = 38,
  MOSTLY_Q1_0 = 40,
  MOSTLY_Q2_0 = 41,
};

struct FileTypeInfo {
  std::string_view name;  // lower case, as on the command line: "q4_k_m"
  FileType ftype;
  TensorType base;  // the type most quantized tensors get
};

// Every file type quantize_model accepts, in llama-quantize's listing order.
std::span<const FileTypeInfo> file_types();
// Case-insensitive: "q4_k_m", "Q4_K_M", "f16", "IQ2_M", ... (also the number, "15", as
// llama-quantize accepts it).
std::optional<FileType> parse_file_type(std::string_view name);
const FileTypeInfo& file_type_info(FileType ftype);

struct Imatrix;  // model/imatrix.h

struct QuantizeParams {
  FileType ftype = FileType::MOSTLY_Q8_0;
  int n_threads = 0;                             // 0: std::thread::hardware_concurrency()
  bool allow_requantize = false;                 // quantized input tensors may be dequantized and re-quantized
  bool llama_cpp_order = false;                  // write tensors in llama.cpp's order instead of the input's
  bool pure = false;                             // --pure: no per-tensor rules, every tensor the base type (fallbacks kept)
  bool quantize_output_tensor = true;            // false: --leave-output-tensor (output.weight copied)
  std::optional<TensorType> output_tensor_type;  // --output-tensor-type
  std::optional<TensorType> token_embedding_type;  // --token-embedding-type
  // --imatrix: the importance values (already filtered by --include/--exclude-weights: see
  // filter_imatrix); null or without entries: no imatrix, as llama-quantize. Not owned.
  const Imatrix* imatrix = nullptr;
  // The path as given on the command line, written to quantize.imatrix.file (cut to 127 bytes).
  std::string imatrix_path;
};

// llama-quantize's --include-weights / --exclude-weights: keeps only the entries whose name
// contains one of `include` (when not empty), or drops those that contain one of `exclude`.
// Both non-empty is an error, as in llama-quantize.
Expected<Imatrix> filter_imatrix(const Imatrix& im, const std::vector<std::string>& include,
                                 const std::vector<std::string>& exclude);

// Whether quantize_model can write tensors of type t.
bool can_quantize_to(TensorType t);

// The type every tensor of `in` gets under `ftype`, indexed like in.tensors(). Errors: a
// quantized tensor to convert without allow_requantize, or a type loom cannot convert.
struct TensorPlan {
  TensorType type = TensorType::F32;
  bool convert = false;           // false: the bytes are copied unchanged
  bool fallback = false;          // the row length forced a fallback type
  bool requires_imatrix = false;  // llama-quantize refuses to write it without importance values
};
Expected<std::vector<TensorPlan>> plan_tensor_types(const gguf::GgufFile& in, const QuantizeParams& params);

// llama.cpp's loader order of tensors: non-block tensors first, then by layer ("blk.N."); by name
// within each. Indices into ts.
std::vector<size_t> llama_cpp_tensor_order(const std::vector<gguf::TensorInfo>& ts);

}  // namespace loom::model

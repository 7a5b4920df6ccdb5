// llama.cpp's importance-matrix files (what llama-imatrix writes and llama-quantize --imatrix
// reads), turned into the per-tensor importance values llama-quantize hands to ggml's quantizers.
//
// Two formats, told apart by the GGUF magic:
//   GGUF (llama-imatrix's default): per weight tensor W two F32 tensors, "W.in_sum2" (ne0 values
//     per matrix, one row per matrix: experts of a MoE tensor) and "W.counts" (one count per
//     matrix), plus the metadata "imatrix.datasets" (array of strings), "imatrix.chunk_count" and
//     "imatrix.chunk_size" (u32), all three required as llama-quantize requires them. Value i of
//     matrix j = in_sum2[j][i] / float(lround(counts[j])), or 1 where that count is <= 0.
//   legacy ".dat": i32 n_entries (>= 1); per entry i32 name length, the name bytes (cut at a NUL),
//     i32 ncall, i32 nval (>= 1), f32 values[nval]; then optionally i32 chunk count, i32 length and
//     the dataset name. Value i = values[i] / float(ncall) when ncall > 0, else values[i]. A name
//     repeated later replaces the earlier entry.
// Other tensors of a GGUF file are ignored. Like llama-quantize, a non-finite resulting value
// refuses the whole file. Hostile input (truncated, negative or huge lengths and counts, a
// sums/counts pair missing its partner or of another type, sizes that do not divide, NaN)
// is refused with a Status naming the problem, never a crash.
//
// How llama-quantize uses an entry (for `loom quantize --imatrix`): a tensor with ne[0] = n_per_row
// and ne[2] matrices (experts) looks up its own name; no entry: quantized without an imatrix (an
// error for the types that need one: quant/iq_quantize.h); an entry whose size is not
// ne[0] * ne[2]: an error, except for token_embd, which then goes without. Rows of matrix e use
// values [e * n_per_row, (e + 1) * n_per_row). llama-quantize then records in the output file:
// quantize.imatrix.file (the path as given, cut to 127 bytes), quantize.imatrix.dataset
// (datasets[0], cut to 127 bytes, when there is one), quantize.imatrix.entries_count (u32, the
// number of entries) and quantize.imatrix.chunks_count (u32, chunk_count, only when > 0).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace loom::model {

struct Imatrix {
  // Tensor name -> importance values (n_per_row per matrix, matrices back to back).
  std::map<std::string, std::vector<float>, std::less<>> entries;
  std::vector<std::string> datasets;
  int32_t chunk_count = 0;  // GGUF imatrix.chunk_count, legacy trailing chunk count (else 0)
  int32_t chunk_size = 0;   // GGUF imatrix.chunk_size (0 for legacy files)
  bool legacy = false;      // read from the .dat format

  // The entry of a tensor, or null.
  const std::vector<float>* find(std::string_view tensor_name) const;
  // llama-quantize's choice for a tensor of ne0 columns and ne2 matrices: the entry's values, null
  // when there is none, kInvalidArgument when its size is not ne0 * ne2 (the caller lets
  // token_embd go without instead, as llama-quantize does).
  Expected<const float*> for_tensor(std::string_view tensor_name, int64_t ne0, int64_t ne2) const;
};

// Reads a file of either format (what = the path, for messages).
Expected<Imatrix> read_imatrix(const std::string& path);
// The same from bytes in memory (tests, fuzzing); name is used in messages.
Expected<Imatrix> parse_imatrix(std::span<const uint8_t> bytes, const std::string& name = "imatrix");

}  // namespace loom::model

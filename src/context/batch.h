// A batch of tokens (or input embeddings) for Context::decode / encode: for each token its
// position, the set of sequences it belongs to, and whether it produces an output.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

namespace loom::context {

struct Batch {
  std::vector<int32_t> tokens;  // token ids, or empty when `embd` is used
  std::vector<float> embd;      // [n][embd_dim] input embeddings instead of tokens
  int embd_dim = 0;
  std::vector<int32_t> pos;                   // empty: each sequence continues after its last position
  std::vector<std::vector<int32_t>> seq_ids;  // empty: every token is in sequence 0
  std::vector<uint8_t> output;                // empty: only the last token produces an output

  int size() const {
    if (!tokens.empty()) return int(tokens.size());
    return embd_dim > 0 ? int(embd.size() / size_t(embd_dim)) : 0;
  }
  void clear() {
    tokens.clear();
    embd.clear();
    pos.clear();
    seq_ids.clear();
    output.clear();
  }
  void add(int32_t token, int32_t position, std::initializer_list<int32_t> seqs, bool want_output) {
    add(token, position, std::span<const int32_t>(seqs.begin(), seqs.size()), want_output);
  }
  void add(int32_t token, int32_t position, std::span<const int32_t> seqs, bool want_output) {
    tokens.push_back(token);
    pos.push_back(position);
    seq_ids.emplace_back(seqs.begin(), seqs.end());
    output.push_back(want_output ? 1 : 0);
  }
  // ids at positions start.. in sequence `seq`; outputs for the last one (or all).
  static Batch from_tokens(std::span<const int32_t> ids, int32_t start, int32_t seq = 0, bool all_outputs = false) {
    Batch b;
    for (size_t i = 0; i < ids.size(); ++i) b.add(ids[i], start + int32_t(i), {seq}, all_outputs || i + 1 == ids.size());
    return b;
  }
};

}  // namespace loom::context

// Re-exported: the layers above name these as loom::X (CONTRIBUTING.md, "Namespaces").
namespace loom {
using context::Batch;
}  // namespace loom

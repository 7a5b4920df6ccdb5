// A batch of tokens for Context::decode: for each token its id, position, sequence and whether
// its logits are wanted.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace loom {

struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> pos;     // empty: each sequence continues after its last cached position
  std::vector<int32_t> seq_id;  // empty: every token belongs to sequence 0
  std::vector<uint8_t> output;  // empty: only the last token produces logits

  int size() const { return int(tokens.size()); }
  void clear() { tokens.clear(); pos.clear(); seq_id.clear(); output.clear(); }
  void add(int32_t token, int32_t position, int32_t seq, bool want_output) {
    tokens.push_back(token);
    pos.push_back(position);
    seq_id.push_back(seq);
    output.push_back(want_output ? 1 : 0);
  }
  // ids at positions start.. in sequence `seq`; logits for the last one (or all).
  static Batch from_tokens(std::span<const int32_t> ids, int32_t start, int32_t seq = 0, bool all_outputs = false) {
    Batch b;
    for (size_t i = 0; i < ids.size(); ++i) b.add(ids[i], start + int32_t(i), seq, all_outputs || i + 1 == ids.size());
    return b;
  }
};

}  // namespace loom

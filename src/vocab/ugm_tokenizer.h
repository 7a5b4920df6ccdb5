// Unigram segmentation (tokenizer.ggml.model = "t5") as llama.cpp's llm_tokenizer_ugm does it
// (internal to src/vocab).
//
// Normalization first, prefix by prefix of the input: the longest prefix along the trie of
// user-defined tokens is kept as it is (llama.cpp's naive_trie::get_longest_prefix: the deepest
// node reached, whether or not a token ends there); else the longest key of the precompiled
// charsmap is replaced by its string; else one valid UTF-8 character is kept, or one invalid byte
// becomes U+FFFD. Spaces of the normalized text become U+2581; runs of them are merged into one
// before each word with remove_extra_whitespaces (which also drops trailing ones), and
// add_space_prefix puts one U+2581 before the first word.
//
// Then Viterbi: at each character boundary every token of the trie (normal, user-defined and
// unused tokens) starting there extends the best path (score: the token's, 0 for user-defined
// ones, summed in double); a character no token covers by itself is the unknown token at
// min(normal scores) - 10. The best path is read back from the end, runs of unknown tokens merged
// into one. There is no byte fallback, as in llama.cpp: what no token covers is <unk>.
//
// The precompiled charsmap is SentencePiece's: a u32 byte size, then a darts-clone double array
// (XOR-compressed: each unit holds an offset, a leaf flag and a label), then NUL-terminated
// replacement strings that the leaves' values index. llama.cpp throws on an array index or a
// string offset out of bounds; here such a walk stops (no match) and such a value is ignored, so
// no file can make tokenization fail.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace loom::vocab {

class Vocab;

namespace detail {

// A byte trie with ids at the nodes that end a key.
class ByteTrie {
 public:
  ByteTrie() { nodes_.push_back(-1); }
  void insert(std::string_view key, int32_t value);
  // The child of `node` by byte c, or -1.
  int32_t child(int32_t node, uint8_t c) const {
    auto it = edges_.find((uint64_t(uint32_t(node)) << 8) | c);
    return it == edges_.end() ? -1 : it->second;
  }
  int32_t value(int32_t node) const { return nodes_[size_t(node)]; }  // -1: no key ends here
  // Bytes of `text` matched along the trie from the root (the deepest node reached).
  size_t longest_path(std::string_view text) const;
  bool empty() const { return nodes_.size() == 1; }

 private:
  std::vector<int32_t> nodes_;                   // value per node
  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child
};

class UgmTokenizer {
 public:
  // The vocabulary's tokens and attributes must be final. An empty charsmap means no
  // normalization table. kCorrupt for a charsmap whose header does not fit (as llama.cpp's load).
  static Expected<std::shared_ptr<const UgmTokenizer>> create(const Vocab& vocab, std::string charsmap,
                                                              bool add_space_prefix, bool remove_extra_whitespaces);

  // Appends the segmentation of one raw fragment (after special-token splitting).
  void tokenize(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out) const;
  // The normalized text (exposed for tests).
  void normalize(std::string_view text, std::string& out) const;
  const std::string& charsmap() const { return charsmap_; }

 private:
  // Bytes consumed from text[offset..] and what they normalize to.
  struct Prefix {
    const char* data;
    size_t length;
    size_t consumed;
  };
  Prefix normalize_prefix(std::string_view text, size_t offset) const;

  std::string charsmap_;           // the whole blob, owned
  std::vector<uint32_t> xcda_;     // the double array's units
  std::string_view replacements_;  // into charsmap_
  bool add_space_prefix_ = false;
  bool remove_extra_whitespaces_ = false;
  ByteTrie tokens_;  // normal, user-defined and unused tokens
  ByteTrie user_defined_;
  std::vector<uint8_t> user_defined_ids_;  // per token: 1 when user-defined (score 0 in Viterbi)
  float unknown_score_ = 0.0f;
};

// Builds a precompiled charsmap (the format above) that maps each key to its replacement; for
// tests and tools. Keys must be non-empty and free of NUL bytes; replacements free of NUL bytes.
std::string build_precompiled_charsmap(const std::vector<std::pair<std::string, std::string>>& mappings);

}  // namespace detail
}  // namespace loom::vocab

// BPE (tokenizer.ggml.model = "gpt2", or "gemma4"), internal to src/vocab.
//
// A raw text fragment is split into pre-tokens by the steps that `tokenizer.ggml.pre` names
// (llama.cpp's regex lists, run with PCRE2 in Unicode mode, and its hand-written splitters), each
// pre-token's bytes are mapped to GPT-2's printable byte alphabet (or kept as UTF-8 for the
// SentencePiece-style presets), and each word is merged pair by pair in the order of
// tokenizer.ggml.merges.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace loom::vocab {

class Vocab;

namespace detail {

// What a pre-tokenizer name selects besides its regexes (llama.cpp's per-`pre` flags).
struct BpePreset {
  bool ignore_merges = false;        // a pre-token that is a token is emitted whole
  bool clean_spaces = true;          // detokenization removes spaces before punctuation/contractions
  bool force_add_bos = false;        // add BOS unless the metadata says otherwise
  bool no_bos = false;               // the preset has no BOS token (ChatGLM-4)
  bool add_sep = false;              // tokenizer.ggml.add_sep_token's default (RoBERTa-style)
  bool escape_whitespaces = false;   // ' ' becomes U+2581 before pre-tokenization (and back)
  bool byte_encode = true;           // GPT-2 byte alphabet; false: raw UTF-8, <0xXX> byte tokens
  bool whole_newline_words = false;  // a run of '\n' that is a token is emitted whole (Gemma 4)
  bool always_add_bos = false;       // add BOS even when the metadata says not to (Gemma 4)
};

class BpeTokenizer {
 public:
  // kUnsupported for an unknown `pre` name. Merges without a space are ignored.
  // An empty `pre` selects "default".
  static Expected<std::shared_ptr<const BpeTokenizer>> create(std::string_view pre, const std::vector<std::string>& merges);
  ~BpeTokenizer();
  BpeTokenizer(const BpeTokenizer&) = delete;
  BpeTokenizer& operator=(const BpeTokenizer&) = delete;

  const BpePreset& preset() const { return preset_; }
  const std::string& pre() const { return pre_; }

  // Appends the tokens of one raw text fragment (after special-token splitting).
  void tokenize(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out) const;

  // The pre-tokens of `text`, byte-encoded (exposed for tests).
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  // Rank of merging `left` with `right`, or -1.
  int32_t merge_rank(std::string_view left, std::string_view right) const;

 private:
  BpeTokenizer() = default;
  void segment(const Vocab& vocab, const std::string& word, std::vector<int32_t>& out) const;

  struct TextHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  std::string pre_;
  BpePreset preset_;
  struct Regex;
  // One pre-tokenization step: a compiled regex, or one of llama.cpp's hand-written splitters.
  struct Step {
    enum Kind { kRegex, kKimiK2, kDigitGroups, kNewlines } kind = kRegex;
    std::shared_ptr<Regex> regex;
  };
  std::vector<Step> steps_;
  // "LEFT RIGHT" -> rank (first occurrence wins).
  std::unordered_map<std::string, int32_t, TextHash, std::equal_to<>> ranks_;

  // Token ids of recently seen words; bounded.
  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, TextHash, std::equal_to<>> cache_;
};

// One name of each pre-tokenizer preset (distinct regexes and flags), for tests and fuzzing.
std::vector<std::string_view> bpe_preset_names();
// Every accepted tokenizer.ggml.pre name.
std::vector<std::string_view> bpe_pre_tokenizer_names();
// llama.cpp's regex strings for a name (as in its llama-vocab.cpp; empty for an unknown name), for
// the pre-tokenization goldens (tools/dev/make_vocab_pre --regexes).
std::vector<std::string_view> bpe_pre_tokenizer_regexes(std::string_view name);

// GPT-2's byte <-> printable code point mapping.
uint32_t byte_to_codepoint(uint8_t byte);
// Decodes a byte-level token text back to bytes. A code point outside the mapping is rendered as
// "[UNK_BYTE_0x<hex of its UTF-8><the whole token text>]", exactly as llama.cpp does.
std::string byte_level_decode(std::string_view text);

}  // namespace detail
}  // namespace loom::vocab

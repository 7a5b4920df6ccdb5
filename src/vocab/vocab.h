// Vocabulary and tokenizer, behaviour-compatible with llama.cpp.
//
// Vocab holds what every tokenizer family shares: token texts, scores and attributes, the special
// token ids, the end-of-generation set, the special-token splitting of the input (parse_special)
// and detokenization. The segmentation algorithm of each family lives in its own file:
//   - spm_tokenizer.cpp: SentencePiece (tokenizer.ggml.model = "llama"), llama.cpp's
//     llm_tokenizer_spm: bigram merges by score with byte fallback.
//   - bpe_tokenizer.cpp: BPE ("gpt2", and "gemma4": SentencePiece-style BPE over raw UTF-8 with
//     U+2581 for spaces and <0xXX> byte tokens), llama.cpp's llm_tokenizer_bpe: pre-tokenization
//     chosen by tokenizer.ggml.pre (llama.cpp's regex lists via PCRE2, and its hand-written
//     splitters; every name llama.cpp knows), GPT-2 byte mapping, ranked merges.
//   - wpm_tokenizer.cpp: WordPiece ("bert"), llama.cpp's llm_tokenizer_wpm.
//   - ugm_tokenizer.cpp: Unigram ("t5"), llama.cpp's llm_tokenizer_ugm: precompiled charsmap
//     normalization, whitespace escaping, Viterbi over token scores.
// Others (RWKV, PLaMo-2) are not implemented yet: from_gguf refuses them with
// kUnsupported. Adding one means a new VocabType, its defaults in vocab.cpp and a
// *_tokenizer.cpp with the segmentation, dispatched from Vocab::tokenize.
//
// Error model: loading validates the metadata and returns a Status (never asserts) for anything a
// file can get wrong. tokenize() accepts any bytes. Token ids are checked wherever they come in:
// detokenize() returns kOutOfRange, the per-token accessors return a neutral value ("" / 0 /
// kAttrUndefined / false) for an id outside [0, n_tokens()); use is_valid()/check_ids() to tell.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "gguf/gguf.h"
#include "vocab/utf8.h"

namespace loom::vocab {

// The values of `tokenizer.ggml.token_type` (llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Token attribute bits (the values of llama.cpp's llama_token_attr, so they can be compared with
// llama.cpp dumps). A token type maps to one of the first six bits; loading may add bits (e.g.
// CONTROL for a text-detected end-of-turn token, RSTRIP for Phi-3 specials).
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrNormalized = 1u << 6,
  kAttrLStrip = 1u << 7,  // eat whitespace before the token when splitting it out of text
  kAttrRStrip = 1u << 8,  // eat whitespace after it
  kAttrSingleWord = 1u << 9,
};

enum class VocabType {
  kSpm,  // SentencePiece, tokenizer.ggml.model = "llama"
  kBpe,  // BPE, tokenizer.ggml.model = "gpt2" (byte-level), "gemma4" or "whitespace"
  kWpm,  // WordPiece, tokenizer.ggml.model = "bert"
  kUgm,  // Unigram, tokenizer.ggml.model = "t5"
};

namespace detail {
class BpeTokenizer;
class UgmTokenizer;
// Hugging Face's clean_up_tokenization_spaces as llama.cpp applies it when clean_spaces() is set
// (see Vocab::detokenize), in place. Every rule is local: it removes a space that starts one of
// " ?", " !", " .", " ,", " ' " (and the space after that quote), " 's", " 'm", " 're", " 've".
// Exposed for StreamDetokenizer, which applies it chunk by chunk.
void clean_up_tokenization_spaces(std::string& text);
}  // namespace detail

// Plain-data description of a vocabulary: what from_gguf reads from the metadata, and what tests
// (or converters) can fill in directly. Optional fields that are unset take the defaults llama.cpp
// uses for the tokenizer model.
struct VocabData {
  std::string model = "llama";       // tokenizer.ggml.model
  std::string name;                  // general.name (llama.cpp keys a Phi-3 workaround on it)
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens
  std::vector<float> scores;         // tokenizer.ggml.scores; empty = all 0
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type; empty = all normal
  std::string pre;                   // tokenizer.ggml.pre (BPE); empty = "default"
  std::vector<std::string> merges;   // tokenizer.ggml.merges (BPE, required there)
  std::optional<bool> lowercase;     // tokenizer.ggml.normalizer.lowercase (WordPiece)
  std::optional<int64_t> bos, eos, eot, eom, unk, sep, pad, mask;
  std::optional<int64_t> fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
  std::optional<bool> add_bos, add_eos, add_sep, add_space_prefix;
  // Unigram: tokenizer.ggml.precompiled_charsmap (SentencePiece's normalization table, raw bytes)
  // and tokenizer.ggml.remove_extra_whitespaces.
  std::string precompiled_charsmap;
  std::optional<bool> remove_extra_whitespaces;
};

class Vocab {
 public:
  static constexpr int32_t kNoToken = -1;

  // Reads tokenizer.ggml.* (and general.name). Errors: kNotFound when there is no tokenizer,
  // kUnsupported for a tokenizer model other than "llama", "gpt2", "gemma4", "whitespace",
  // "bert" and "t5" or an unknown BPE pre-tokenizer, kCorrupt for inconsistent metadata (array
  // lengths, types, NaN scores, duplicate token texts, special ids out of range, a BPE
  // vocabulary without merges).
  static Expected<Vocab> from_gguf(const gguf::GgufFile& file);
  // The tokenizer.ggml.* values of a file (from_gguf is read_data, then from_data), for callers
  // that change some before building (the tokenizer fuzz target tries every BPE pre-tokenizer).
  static Expected<VocabData> read_data(const gguf::GgufFile& file);
  // Same validation from plain data.
  static Expected<Vocab> from_data(VocabData data);

  VocabType type() const { return type_; }
  int32_t n_tokens() const { return static_cast<int32_t>(tokens_.size()); }
  bool is_valid(int32_t id) const { return id >= 0 && id < n_tokens(); }
  // kOutOfRange naming the first id outside [0, n_tokens()) and its position; ok otherwise.
  Status check_ids(std::span<const int32_t> ids) const;

  // Per-token data; neutral values for an invalid id (see the file comment).
  std::string_view token_text(int32_t id) const;
  float token_score(int32_t id) const;
  uint32_t token_attr(int32_t id) const;  // TokenAttr bits
  bool is_normal(int32_t id) const { return token_attr(id) & kAttrNormal; }
  bool is_control(int32_t id) const { return token_attr(id) & kAttrControl; }
  bool is_byte(int32_t id) const { return token_attr(id) & kAttrByte; }
  bool is_user_defined(int32_t id) const { return token_attr(id) & kAttrUserDefined; }
  bool is_unknown(int32_t id) const { return token_attr(id) & kAttrUnknown; }
  bool is_unused(int32_t id) const { return token_attr(id) & kAttrUnused; }
  bool is_eog(int32_t id) const;

  // Id of the token with exactly this text, or kNoToken.
  int32_t text_to_token(std::string_view text) const;
  // Length in bytes of the longest token text.
  size_t max_token_length() const { return max_token_length_; }
  // The token for a raw byte: "<0xXX>", else the one-byte text itself, else kNoToken.
  int32_t byte_to_token(uint8_t byte) const { return byte_tokens_[byte]; }

  // Special ids as resolved at load (kNoToken = none).
  int32_t bos() const { return bos_; }
  int32_t eos() const { return eos_; }
  int32_t eot() const { return eot_; }
  int32_t eom() const { return eom_; }
  int32_t unk() const { return unk_; }
  int32_t sep() const { return sep_; }
  int32_t pad() const { return pad_; }
  int32_t mask() const { return mask_; }
  int32_t nl() const { return nl_; }  // the newline token (WordPiece: the pad id, as llama.cpp)
  int32_t fim_pre() const { return fim_pre_; }
  int32_t fim_suf() const { return fim_suf_; }
  int32_t fim_mid() const { return fim_mid_; }
  int32_t fim_pad() const { return fim_pad_; }
  int32_t fim_rep() const { return fim_rep_; }
  int32_t fim_sep() const { return fim_sep_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  // tokenizer.ggml.add_sep_token (true by default for WordPiece). Informational: like llama.cpp,
  // WordPiece tokenization with add_special always appends the separator.
  bool add_sep() const { return add_sep_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  // Unigram: merge runs of whitespace (tokenizer.ggml.remove_extra_whitespaces, default false).
  bool remove_extra_whitespaces() const { return remove_extra_whitespaces_; }
  // Unigram: the normalized text of one raw fragment (charsmap, whitespace), for tests; "" otherwise.
  std::string ugm_normalize(std::string_view text) const;
  // Whether detokenization removes the spaces that tokenizers put before punctuation and
  // contractions (Hugging Face's clean_up_tokenization_spaces; BPE per pre-tokenizer, WordPiece).
  bool clean_spaces() const { return clean_spaces_; }
  // The BPE pre-tokenizer name ("default" when the metadata has none); "" for other families.
  std::string_view pre_tokenizer() const;

  // llama_tokenize: add_special adds BOS/EOS as the metadata says; parse_special lets the text of
  // control (and unknown) tokens match those tokens. User-defined tokens are always split out.
  // Never fails: any byte string tokenizes (SPM: unknown bytes go to <0xXX> tokens; BPE: every
  // byte has a byte-level token; WordPiece: an uncoverable word becomes [UNK]). Invalid UTF-8 is
  // decoded as llama.cpp does (an undecodable byte becomes U+FFFD) for BPE and WordPiece.
  std::vector<int32_t> tokenize(std::string_view text, bool add_special, bool parse_special) const;

  // A reranker's input for a query and a document (each tokenized without specials), as
  // llama.cpp's server builds it for a model without a rerank template: [BOS] query [EOS] [SEP]
  // document [EOS], each special token only when add_bos / add_eos / add_sep say so and the
  // vocabulary has it (EOS falls back to SEP when there is no EOS, as there).
  std::vector<int32_t> rerank_input(std::span<const int32_t> query, std::span<const int32_t> document) const;

  // llama_token_to_piece without lstrip: "▁" becomes " " (SPM, WordPiece), a byte-level BPE text
  // its bytes, a byte token its byte, control and unknown tokens their text only when
  // `special`, user-defined tokens always their text. "" for an invalid id.
  std::string token_to_piece(int32_t id, bool special) const;

  // llama_detokenize. remove_special drops a leading BOS / trailing EOS when the vocab adds them;
  // unparse_special renders control tokens as their text. With add_space_prefix, one leading
  // space is removed from the first token's piece, even when that token renders as nothing;
  // not when remove_special has dropped a leading BOS (llama.cpp's exact rules). With
  // clean_spaces(), " ?", " !", " .", " ,", " ' " and " 's", " 'm", " 're", " 've" lose their
  // space. kOutOfRange for an invalid id. The result may be invalid UTF-8 (byte tokens can split
  // a character); see sanitize_utf8.
  Expected<std::string> detokenize(std::span<const int32_t> ids, bool remove_special, bool unparse_special) const;

 private:
  struct TokenData {
    std::string text;
    float score = 0.0f;
    uint32_t attr = kAttrNormal;
  };
  // Transparent hashing so lookups by string_view do not allocate.
  struct TextHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  Vocab() = default;
  Status init(VocabData& data);
  // init's steps, in order (vocab_load.cpp).
  Status init_type(VocabData& data);
  Status load_tokens(VocabData& data);
  void build_byte_tokens();
  void set_family_defaults(const VocabData& data);
  Status apply_metadata(const VocabData& data);
  void build_special_token_list();
  Status init_ugm(VocabData& data);
  void apply_phi3_rstrip(std::string name);
  void detect_special_tokens_by_text();
  void build_eog_set();
  void set_attr_by_text(std::string_view text, uint32_t bit, bool on);
  std::string piece_uncached(int32_t id) const;

  // One piece of the input after special-token splitting: raw text or a token.
  struct Fragment {
    int32_t token;  // kNoToken for raw text
    size_t offset;
    size_t length;
  };
  std::vector<Fragment> partition(std::string_view text, bool parse_special) const;
  void tokenize_spm(std::string_view text, const std::vector<Fragment>& fragments, bool add_special,
                    std::vector<int32_t>& out) const;
  void tokenize_bpe(std::string_view text, const std::vector<Fragment>& fragments, bool add_special,
                    std::vector<int32_t>& out) const;
  void tokenize_wpm(std::string_view text, const std::vector<Fragment>& fragments, bool add_special,
                    std::vector<int32_t>& out) const;
  void tokenize_ugm(std::string_view text, const std::vector<Fragment>& fragments, bool add_special,
                    std::vector<int32_t>& out) const;

  VocabType type_ = VocabType::kSpm;
  std::vector<TokenData> tokens_;
  std::unordered_map<std::string, int32_t, TextHash, std::equal_to<>> text_to_id_;
  std::array<int32_t, 256> byte_tokens_{};
  // Control, user-defined and unknown tokens, longest text first: the order in which their text
  // is split out of the input.
  std::vector<int32_t> special_tokens_;
  std::vector<std::string> pieces_;  // token_to_piece(id, special = true), precomputed
  std::vector<int32_t> eog_ids_;     // sorted
  size_t max_token_length_ = 0;
  // No token has U+2581 after anything but U+2581s: runs of spaces start independent pieces.
  bool spm_split_at_spaces_ = false;
  std::shared_ptr<const detail::BpeTokenizer> bpe_;  // kBpe only (immutable, shared by copies)
  std::shared_ptr<const detail::UgmTokenizer> ugm_;  // kUgm only
  bool wpm_lowercase_ = true;
  bool whitespace_model_ = false;      // tokenizer.ggml.model = "whitespace"
  bool whitespace_lowercase_ = false;  // its normalizer's lowercasing

  int32_t bos_ = kNoToken, eos_ = kNoToken, eot_ = kNoToken, eom_ = kNoToken, unk_ = kNoToken;
  int32_t sep_ = kNoToken, pad_ = kNoToken, mask_ = kNoToken, nl_ = kNoToken;
  int32_t fim_pre_ = kNoToken, fim_suf_ = kNoToken, fim_mid_ = kNoToken;
  int32_t fim_pad_ = kNoToken, fim_rep_ = kNoToken, fim_sep_ = kNoToken;
  bool add_bos_ = false;
  bool add_eos_ = false;
  bool add_sep_ = false;
  bool add_space_prefix_ = false;
  bool remove_extra_whitespaces_ = false;
  bool clean_spaces_ = false;
};

}  // namespace loom::vocab

// Re-exported: the layers above name these as loom::X (CONTRIBUTING.md, "Namespaces").
namespace loom {
using vocab::Vocab;
using vocab::VocabData;
using vocab::VocabType;
}  // namespace loom

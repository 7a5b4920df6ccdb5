// Vocab loading: the tokenizer.ggml.* metadata read from a GGUF file (read_data), then checked
// and turned into a Vocab (init): token table, byte tokens, per-family defaults, the metadata's
// special ids, special tokens found by their text, the end-of-generation set. The rules mirror
// llama.cpp's llama_vocab::load; comments note where and why loom deviates.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <utility>

#include "vocab/bpe_tokenizer.h"
#include "vocab/ugm_tokenizer.h"
#include "vocab/vocab.h"

namespace loom::vocab {

namespace {

constexpr std::string_view kSpaceEscape = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// Tokenizer families llama.cpp knows but loom does not implement yet.
std::string_view pending_family(std::string_view model) {
  if (model == "rwkv") return "RWKV";
  if (model == "plamo2") return "PLaMo-2";
  if (model == "none" || model == "no_vocab") return "no vocabulary";
  return {};
}

Status check_model(std::string_view model) {
  if (model == "llama" || model == "gpt2" || model == "gemma4" || model == "whitespace" || model == "bert" ||
      model == "t5") {
    return Status::ok();
  }
  if (std::string_view family = pending_family(model); !family.empty()) {
    return unsupported("tokenizer model '" + std::string(model) + "' (" + std::string(family) +
                       ") is not supported yet; only 'llama' (SentencePiece), 'gpt2', 'gemma4' and "
                       "'whitespace' (BPE), 'bert' (WordPiece) and 't5' (Unigram) are");
  }
  return unsupported("unknown tokenizer model '" + std::string(model) + "'");
}

uint32_t attr_of_type(int32_t type) {
  switch (static_cast<TokenType>(type)) {
    case TokenType::kNormal: return kAttrNormal;
    case TokenType::kUnknown: return kAttrUnknown;
    case TokenType::kControl: return kAttrControl;
    case TokenType::kUserDefined: return kAttrUserDefined;
    case TokenType::kUnused: return kAttrUnused;
    case TokenType::kByte: return kAttrByte;
    case TokenType::kUndefined: return kAttrUndefined;
  }
  return kAttrUndefined;  // unknown type values load as undefined, as in llama.cpp
}

// --- GGUF metadata reading ---

Expected<std::vector<std::string>> read_string_array(const gguf::GgufFile& f, std::string_view key) {
  LOOM_ASSIGN_OR_RETURN(const gguf::Array* arr, f.get_array(key));
  if (arr->elem_type != gguf::ValueType::kString || arr->strings.size() != arr->count) {
    return corrupt("metadata key '" + std::string(key) + "' is an array of " +
                   std::string(gguf::value_type_name(arr->elem_type)) + ", expected strings");
  }
  return arr->strings;
}

// A numeric array of exactly `count` elements. `integral` refuses float (and bool) elements.
Expected<const gguf::Array*> read_numeric_array(const gguf::GgufFile& f, std::string_view key, size_t count, bool integral) {
  LOOM_ASSIGN_OR_RETURN(const gguf::Array* arr, f.get_array(key));
  const gguf::ValueType t = arr->elem_type;
  const bool is_float = t == gguf::ValueType::kFloat32 || t == gguf::ValueType::kFloat64;
  if (!arr->is_numeric() || t == gguf::ValueType::kBool || (integral && is_float)) {
    return corrupt("metadata key '" + std::string(key) + "' is an array of " + std::string(gguf::value_type_name(t)) +
                   ", expected " + (integral ? "integers" : "numbers"));
  }
  if (arr->count != count) {
    return corrupt("metadata key '" + std::string(key) + "' has " + std::to_string(arr->count) +
                   " elements but tokenizer.ggml.tokens has " + std::to_string(count));
  }
  if (arr->raw.size() < count * gguf::value_type_size(t)) {
    return corrupt("metadata key '" + std::string(key) + "' is shorter than its count");
  }
  return arr;
}

Status read_optional_int(const gguf::GgufFile& f, std::string_view key, std::optional<int64_t>& out) {
  if (!f.has(key)) return Status::ok();
  LOOM_ASSIGN_OR_RETURN(out, f.get_int(key));
  return Status::ok();
}

Status read_optional_bool(const gguf::GgufFile& f, std::string_view key, std::optional<bool>& out) {
  if (!f.has(key)) return Status::ok();
  LOOM_ASSIGN_OR_RETURN(out, f.get_bool(key));
  return Status::ok();
}

// Texts by which llama.cpp recognises special tokens that the metadata does not name. For the
// single-id roles the first text present wins (llama.cpp takes whichever its hash map yields
// first; list order makes the choice deterministic and gives <|end|> over <|endoftext|> for
// Phi-3, as llama.cpp's golden does).
constexpr std::string_view kEotTexts[] = {"<|eot_id|>",
                                          "<|im_end|>",
                                          "<|end|>",
                                          "<end_of_turn>",
                                          "<|endoftext|>",
                                          "<|end_of_text|>",
                                          "<EOT>",
                                          "_<EOT>",
                                          "[EOT]",
                                          "<end_of_utterance>",
                                          "<\uFF5Cend\u2581of\u2581sentence\uFF5C>"};  // DeepSeek
constexpr std::string_view kEomTexts[] = {"<|eom_id|>"};
// "<｜fim▁begin｜>" etc.: DeepSeek's FIM markers.
constexpr std::string_view kFimPreTexts[] = {"<|fim_prefix|>",
                                             "<fim-prefix>",
                                             "<fim_prefix>",
                                             "<PRE>",
                                             "<|code_prefix|>",
                                             "<|prefix|>",
                                             "<\uFF5Cfim\u2581begin\uFF5C>"};
constexpr std::string_view kFimSufTexts[] = {"<|fim_suffix|>",
                                             "<fim-suffix>",
                                             "<fim_suffix>",
                                             "<SUF>",
                                             "<|code_suffix|>",
                                             "<|suffix|>",
                                             "<\uFF5Cfim\u2581hole\uFF5C>"};
constexpr std::string_view kFimMidTexts[] = {"<|fim_middle|>",
                                             "<fim-middle>",
                                             "<fim_middle>",
                                             "<MID>",
                                             "<|code_middle|>",
                                             "<|middle|>",
                                             "<\uFF5Cfim\u2581end\uFF5C>"};
constexpr std::string_view kFimPadTexts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
constexpr std::string_view kFimRepTexts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
constexpr std::string_view kFimSepTexts[] = {"<|file_sep|>"};
// Every token with one of these texts ends generation (and is made a control token).
constexpr std::string_view kEogTexts[] = {"<|eot_id|>",
                                          "<|im_end|>",
                                          "<|end|>",
                                          "<|return|>",
                                          "<|call|>",
                                          "<|flush|>",
                                          "<|calls|>",
                                          "<end_of_turn>",
                                          "<|endoftext|>",
                                          "</s>",
                                          "<|eom_id|>",
                                          "<EOT>",
                                          "_<EOT>",
                                          "[EOT]",
                                          "[EOS]",
                                          "<|end_of_text|>",
                                          "<end_of_utterance>",
                                          "<eos>",
                                          "<turn|>",
                                          "<|tool_response>"};

}  // namespace

namespace {

// tokenizer.ggml.scores and tokenizer.ggml.token_type, when present, sized like the tokens.
Status read_scores_and_types(const gguf::GgufFile& f, VocabData& d) {
  const size_t n = d.tokens.size();
  if (f.has("tokenizer.ggml.scores")) {
    LOOM_ASSIGN_OR_RETURN(const gguf::Array* arr, read_numeric_array(f, "tokenizer.ggml.scores", n, /*integral=*/false));
    d.scores.resize(n);
    for (size_t i = 0; i < n; ++i) d.scores[i] = static_cast<float>(arr->number_at(i));
  }
  if (f.has("tokenizer.ggml.token_type")) {
    LOOM_ASSIGN_OR_RETURN(const gguf::Array* arr, read_numeric_array(f, "tokenizer.ggml.token_type", n, /*integral=*/true));
    d.token_types.resize(n);
    for (size_t i = 0; i < n; ++i) {
      const int64_t t = arr->int_at(i);
      // Out-of-range values cannot be a known type; keep them unknown (-> undefined).
      d.token_types[i] = (t >= 0 && t <= std::numeric_limits<int32_t>::max()) ? int32_t(t) : -1;
    }
  }
  return Status::ok();
}

// The BPE families' pre-tokenizer name and merges, the lowercase flag, and T5's normalizer.
Status read_family_data(const gguf::GgufFile& f, VocabData& d) {
  if (d.model == "gpt2" || d.model == "gemma4" || d.model == "whitespace") {
    LOOM_ASSIGN_OR_RETURN(d.pre, f.get_string_or("tokenizer.ggml.pre", ""));
    if (f.has("tokenizer.ggml.merges")) {
      LOOM_ASSIGN_OR_RETURN(d.merges, read_string_array(f, "tokenizer.ggml.merges"));
    } else if (d.model == "gemma4" || d.pre != "kimi-k2") {
      // (llama.cpp's Kimi-K2 loads without merges.)
      return corrupt("BPE tokenizer without merges (metadata key 'tokenizer.ggml.merges' not found)");
    }
  }
  LOOM_RETURN_IF_ERROR(read_optional_bool(f, "tokenizer.ggml.normalizer.lowercase", d.lowercase));
  if (d.model == "t5") {
    static constexpr std::string_view kCharsmap = "tokenizer.ggml.precompiled_charsmap";
    if (f.has(kCharsmap)) {
      LOOM_ASSIGN_OR_RETURN(const gguf::Array* arr, f.get_array(kCharsmap));
      if (arr->elem_type != gguf::ValueType::kUint8 && arr->elem_type != gguf::ValueType::kInt8) {
        return corrupt(std::string(kCharsmap) + " must be an array of int8 or uint8");
      }
      d.precompiled_charsmap.assign(reinterpret_cast<const char*>(arr->raw.data()), arr->raw.size());
    }
    LOOM_RETURN_IF_ERROR(read_optional_bool(f, "tokenizer.ggml.remove_extra_whitespaces", d.remove_extra_whitespaces));
  }
  return Status::ok();
}

// The special token ids the metadata names, and the add_* flags.
Status read_special_ids(const gguf::GgufFile& f, VocabData& d) {
  const std::pair<std::string_view, std::optional<int64_t>*> ids[] = {
      {"tokenizer.ggml.bos_token_id", &d.bos},
      {"tokenizer.ggml.eos_token_id", &d.eos},
      {"tokenizer.ggml.eot_token_id", &d.eot},
      {"tokenizer.ggml.eom_token_id", &d.eom},
      {"tokenizer.ggml.unknown_token_id", &d.unk},
      {"tokenizer.ggml.seperator_token_id", &d.sep},  // sic: the GGUF key is misspelt
      {"tokenizer.ggml.padding_token_id", &d.pad},
      {"tokenizer.ggml.mask_token_id", &d.mask},
      {"tokenizer.ggml.fim_pre_token_id", &d.fim_pre},
      {"tokenizer.ggml.fim_suf_token_id", &d.fim_suf},
      {"tokenizer.ggml.fim_mid_token_id", &d.fim_mid},
      {"tokenizer.ggml.fim_pad_token_id", &d.fim_pad},
      {"tokenizer.ggml.fim_rep_token_id", &d.fim_rep},
      {"tokenizer.ggml.fim_sep_token_id", &d.fim_sep},
  };
  for (const auto& [key, out] : ids) LOOM_RETURN_IF_ERROR(read_optional_int(f, key, *out));
  // Older files name the FIM tokens with these keys.
  const std::pair<std::string_view, std::optional<int64_t>*> deprecated[] = {
      {"tokenizer.ggml.prefix_token_id", &d.fim_pre},
      {"tokenizer.ggml.suffix_token_id", &d.fim_suf},
      {"tokenizer.ggml.middle_token_id", &d.fim_mid},
  };
  for (const auto& [key, out] : deprecated) {
    if (!out->has_value()) LOOM_RETURN_IF_ERROR(read_optional_int(f, key, *out));
  }

  LOOM_RETURN_IF_ERROR(read_optional_bool(f, "tokenizer.ggml.add_bos_token", d.add_bos));
  LOOM_RETURN_IF_ERROR(read_optional_bool(f, "tokenizer.ggml.add_eos_token", d.add_eos));
  LOOM_RETURN_IF_ERROR(read_optional_bool(f, "tokenizer.ggml.add_sep_token", d.add_sep));
  LOOM_RETURN_IF_ERROR(read_optional_bool(f, "tokenizer.ggml.add_space_prefix", d.add_space_prefix));
  return Status::ok();
}

// The array sizes init relies on.
Status check_array_sizes(const VocabData& d) {
  const size_t n = d.tokens.size();
  if (n == 0) return corrupt("tokenizer.ggml.tokens is empty");
  if (n > size_t(std::numeric_limits<int32_t>::max())) {
    return corrupt("tokenizer.ggml.tokens has too many entries (" + std::to_string(n) + ")");
  }
  if (!d.scores.empty() && d.scores.size() != n) {
    return corrupt("tokenizer.ggml.scores has " + std::to_string(d.scores.size()) +
                   " elements but tokenizer.ggml.tokens has " + std::to_string(n));
  }
  if (!d.token_types.empty() && d.token_types.size() != n) {
    return corrupt("tokenizer.ggml.token_type has " + std::to_string(d.token_types.size()) +
                   " elements but tokenizer.ggml.tokens has " + std::to_string(n));
  }
  return Status::ok();
}

}  // namespace

Expected<Vocab> Vocab::from_gguf(const gguf::GgufFile& f) {
  LOOM_ASSIGN_OR_RETURN(VocabData d, read_data(f));
  return from_data(std::move(d));
}

Expected<VocabData> Vocab::read_data(const gguf::GgufFile& f) {
  static constexpr std::string_view kModelKey = "tokenizer.ggml.model";
  if (!f.has(kModelKey)) {
    return not_found("the file has no tokenizer (metadata key 'tokenizer.ggml.model' not found)");
  }
  VocabData d;
  LOOM_ASSIGN_OR_RETURN(d.model, f.get_string(kModelKey));
  // Refuse an unsupported family before reading its (possibly large) arrays.
  LOOM_RETURN_IF_ERROR(check_model(d.model));
  LOOM_ASSIGN_OR_RETURN(d.name, f.get_string_or("general.name", ""));
  LOOM_ASSIGN_OR_RETURN(d.tokens, read_string_array(f, "tokenizer.ggml.tokens"));
  LOOM_RETURN_IF_ERROR(read_scores_and_types(f, d));
  LOOM_RETURN_IF_ERROR(read_family_data(f, d));
  LOOM_RETURN_IF_ERROR(read_special_ids(f, d));
  return d;
}

Expected<Vocab> Vocab::from_data(VocabData data) {
  Vocab v;
  LOOM_RETURN_IF_ERROR(v.init(data));
  return v;
}

Status Vocab::init(VocabData& d) {
  LOOM_RETURN_IF_ERROR(check_model(d.model));
  LOOM_RETURN_IF_ERROR(init_type(d));
  LOOM_RETURN_IF_ERROR(check_array_sizes(d));
  LOOM_RETURN_IF_ERROR(load_tokens(d));
  build_byte_tokens();
  set_family_defaults(d);
  LOOM_RETURN_IF_ERROR(apply_metadata(d));
  detect_special_tokens_by_text();
  // Control tokens named "...unused..." are unused (they stay control tokens).
  for (TokenData& t : tokens_) {
    if ((t.attr & kAttrControl) && t.text.find("unused") != std::string::npos) t.attr |= kAttrUnused;
  }
  build_eog_set();
  build_special_token_list();
  pieces_.resize(tokens_.size());
  for (int32_t id = 0; id < int32_t(tokens_.size()); ++id) pieces_[id] = piece_uncached(id);
  if (type_ == VocabType::kUgm) LOOM_RETURN_IF_ERROR(init_ugm(d));
  apply_phi3_rstrip(d.name);
  return Status::ok();
}

Status Vocab::init_type(VocabData& d) {
  type_ = d.model == "gpt2" || d.model == "gemma4" || d.model == "whitespace" ? VocabType::kBpe
          : d.model == "bert"                                                 ? VocabType::kWpm
          : d.model == "t5"                                                   ? VocabType::kUgm
                                                                              : VocabType::kSpm;
  // llama.cpp's "whitespace" tokenizer model (jina-embeddings-v2-base-zh): BPE on each run of
  // non-whitespace, lowercased unless the "whitespace" pre-tokenizer or the metadata says not to.
  whitespace_model_ = d.model == "whitespace";
  whitespace_lowercase_ = d.lowercase.value_or(d.pre != "whitespace");
  // llama.cpp's "gemma4" tokenizer model is BPE with the "gemma4" pre-tokenizer, whatever
  // tokenizer.ggml.pre says.
  if (d.model == "gemma4") d.pre = "gemma4";
  if (type_ == VocabType::kBpe) {
    LOOM_ASSIGN_OR_RETURN(bpe_, detail::BpeTokenizer::create(d.pre, d.merges));
    d.merges = {};  // the ranks now live in bpe_
  }
  return Status::ok();
}

// Token texts, scores and attributes, the text -> id map, and spm_split_at_spaces_.
Status Vocab::load_tokens(VocabData& d) {
  const size_t n = d.tokens.size();
  tokens_.resize(n);
  text_to_id_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    TokenData& t = tokens_[i];
    t.text = std::move(d.tokens[i]);
    // An empty text would match everywhere when splitting out special tokens; llama.cpp renames
    // such tokens the same way.
    if (t.text.empty()) t.text = "[EMPTY_" + std::to_string(i) + "]";
    t.score = d.scores.empty() ? 0.0f : d.scores[i];
    // A NaN score would break the strict ordering the merge queue relies on.
    if (std::isnan(t.score)) return corrupt("tokenizer.ggml.scores[" + std::to_string(i) + "] is NaN");
    t.attr = d.token_types.empty() ? kAttrNormal : attr_of_type(d.token_types[i]);
    max_token_length_ = std::max(max_token_length_, t.text.size());
    auto [it, inserted] = text_to_id_.emplace(t.text, int32_t(i));
    if (!inserted) {
      // llama.cpp asserts on this (its id -> text and text -> id maps would disagree).
      return corrupt("tokenizer.ggml.tokens has a duplicate token text at ids " + std::to_string(it->second) + " and " +
                     std::to_string(i));
    }
  }

  spm_split_at_spaces_ = std::none_of(tokens_.begin(), tokens_.end(), [](const TokenData& t) {
    // Offsets of U+2581 past the leading run of U+2581s.
    size_t lead = 0;
    while (t.text.compare(lead, kSpaceEscape.size(), kSpaceEscape) == 0) lead += kSpaceEscape.size();
    return t.text.find(kSpaceEscape, lead == 0 ? 1 : lead) != std::string::npos;
  });
  return Status::ok();
}

// Byte fallback table: "<0xXX>" tokens, else a token whose text is the byte itself.
void Vocab::build_byte_tokens() {
  static constexpr char kHex[] = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    const char name[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
    int32_t id = text_to_token(std::string_view(name, 6));
    const char raw = static_cast<char>(b);
    if (id == kNoToken) id = text_to_token(std::string_view(&raw, 1));
    byte_tokens_[b] = id;
  }
}

// llama.cpp's defaults per family, kept only if the ids exist in this vocab.
void Vocab::set_family_defaults(const VocabData& d) {
  const size_t n = tokens_.size();
  auto default_id = [&](int32_t id) { return id < int32_t(n) ? id : kNoToken; };
  switch (type_) {
    case VocabType::kSpm:
      bos_ = default_id(1);
      eos_ = default_id(2);
      unk_ = default_id(0);
      add_bos_ = true;
      add_space_prefix_ = true;
      // Found before the metadata's special ids are applied, as in llama.cpp.
      nl_ = byte_tokens_['\n'];
      break;
    case VocabType::kBpe: {
      const detail::BpePreset& preset = bpe_->preset();
      // "gemma4" files name their special tokens; "gpt2" defaults to 11 (GPT-2's "," in
      // llama.cpp's defaults, kept for compatibility).
      const bool gemma4_model = d.model == "gemma4";
      bos_ = preset.no_bos || gemma4_model ? kNoToken : default_id(11);
      eos_ = gemma4_model ? kNoToken : default_id(11);
      add_bos_ = preset.force_add_bos;
      add_sep_ = preset.add_sep;
      clean_spaces_ = preset.clean_spaces;
      std::vector<int32_t> ids;
      if (!whitespace_model_) bpe_->tokenize(*this, "\n", ids);  // (which drops whitespace)
      nl_ = ids.empty() ? kNoToken : ids.front();                // (the default pad id, which is none)
      break;
    }
    case VocabType::kWpm:
      bos_ = default_id(101);  // [CLS]
      unk_ = default_id(100);
      sep_ = default_id(102);
      pad_ = default_id(0);
      mask_ = default_id(103);
      add_bos_ = true;
      add_sep_ = true;
      clean_spaces_ = true;
      nl_ = pad_;
      wpm_lowercase_ = d.lowercase.value_or(true);
      break;
    case VocabType::kUgm:
      // llama.cpp's defaults for "t5": no BOS, EOS 1 appended, <unk> 2, <pad> 0; no space prefix
      // unless the metadata says so.
      eos_ = default_id(1);
      unk_ = default_id(2);
      pad_ = default_id(0);
      add_eos_ = true;
      break;
  }
}

// The metadata's special ids and add_* flags over the family defaults.
Status Vocab::apply_metadata(const VocabData& d) {
  const size_t n = tokens_.size();
  // llama.cpp warns and keeps the default for an id outside the vocab; loom reports it.
  const std::pair<const std::optional<int64_t>*, std::pair<int32_t*, std::string_view>> ids[] = {
      {&d.bos, {&bos_, "bos_token_id"}},
      {&d.eos, {&eos_, "eos_token_id"}},
      {&d.eot, {&eot_, "eot_token_id"}},
      {&d.eom, {&eom_, "eom_token_id"}},
      {&d.unk, {&unk_, "unknown_token_id"}},
      {&d.sep, {&sep_, "seperator_token_id"}},
      {&d.pad, {&pad_, "padding_token_id"}},
      {&d.mask, {&mask_, "mask_token_id"}},
      {&d.fim_pre, {&fim_pre_, "fim_pre_token_id"}},
      {&d.fim_suf, {&fim_suf_, "fim_suf_token_id"}},
      {&d.fim_mid, {&fim_mid_, "fim_mid_token_id"}},
      {&d.fim_pad, {&fim_pad_, "fim_pad_token_id"}},
      {&d.fim_rep, {&fim_rep_, "fim_rep_token_id"}},
      {&d.fim_sep, {&fim_sep_, "fim_sep_token_id"}},
  };
  for (const auto& [value, target] : ids) {
    if (!value->has_value()) continue;
    const int64_t id = **value;
    if (id < 0 || id >= int64_t(n)) {
      return corrupt("tokenizer.ggml." + std::string(target.second) + " = " + std::to_string(id) +
                     " is outside the vocabulary of " + std::to_string(n) + " tokens");
    }
    *target.first = int32_t(id);
  }
  if (d.add_bos) add_bos_ = *d.add_bos;
  if (d.add_eos) add_eos_ = *d.add_eos;
  if (d.add_sep) add_sep_ = *d.add_sep;
  if (d.add_space_prefix) add_space_prefix_ = *d.add_space_prefix;
  if (d.remove_extra_whitespaces) remove_extra_whitespaces_ = *d.remove_extra_whitespaces;
  // llama.cpp's Gemma 4 workaround: BOS is always added.
  if (bpe_ && bpe_->preset().always_add_bos) add_bos_ = true;
  return Status::ok();
}

// Longest first, so that a special token containing another one wins. std::sort (not
// stable_sort) on ascending ids, as llama.cpp does, so ties come out in the same order.
void Vocab::build_special_token_list() {
  special_tokens_.clear();
  for (int32_t id = 0; id < int32_t(tokens_.size()); ++id) {
    if (tokens_[id].attr & (kAttrControl | kAttrUserDefined | kAttrUnknown)) special_tokens_.push_back(id);
  }
  std::sort(special_tokens_.begin(), special_tokens_.end(),
            [&](int32_t a, int32_t b) { return tokens_[a].text.size() > tokens_[b].text.size(); });
}

Status Vocab::init_ugm(VocabData& d) {
  LOOM_ASSIGN_OR_RETURN(ugm_, detail::UgmTokenizer::create(*this, std::move(d.precompiled_charsmap), add_space_prefix_,
                                                           remove_extra_whitespaces_));
  // The newline token: the first token of "\n", else the pad id (llama.cpp's rule).
  std::vector<int32_t> ids;
  ugm_->tokenize(*this, "\n", ids);
  nl_ = ids.empty() ? pad_ : ids.front();
  return Status::ok();
}

// llama.cpp's Phi-3 workaround, keyed on the model name: special tokens eat the whitespace
// after them, except <unk>, <s> and <|endoftext|>. Applied after the special-token list is
// built, as there.
void Vocab::apply_phi3_rstrip(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(),
                 [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); });
  if (name.find("phi-3") != std::string::npos || name.find("phi3") != std::string::npos) {
    for (int32_t id : special_tokens_) tokens_[id].attr |= kAttrRStrip;
    set_attr_by_text("</s>", kAttrRStrip, true);
    for (std::string_view t : {"<unk>", "<s>", "<|endoftext|>"}) set_attr_by_text(t, kAttrRStrip, false);
  }
}

void Vocab::set_attr_by_text(std::string_view text, uint32_t bit, bool on) {
  const int32_t id = text_to_token(text);
  if (id == kNoToken) return;  // llama.cpp throws here; a missing token just needs no change
  if (on) tokens_[id].attr |= bit;
  else tokens_[id].attr &= ~bit;
}

void Vocab::detect_special_tokens_by_text() {
  // A role the metadata leaves unset is taken by the first listed text present; that token
  // becomes a control token, so parse_special=false no longer splits it out.
  auto detect = [&](int32_t& role, std::span<const std::string_view> texts) {
    if (role != kNoToken) return;
    for (std::string_view text : texts) {
      const int32_t id = text_to_token(text);
      if (id == kNoToken) continue;
      role = id;
      tokens_[id].attr |= kAttrControl;
      return;
    }
  };
  detect(eot_, kEotTexts);
  detect(eom_, kEomTexts);
  detect(fim_pre_, kFimPreTexts);
  detect(fim_suf_, kFimSufTexts);
  detect(fim_mid_, kFimMidTexts);
  detect(fim_pad_, kFimPadTexts);
  detect(fim_rep_, kFimRepTexts);
  detect(fim_sep_, kFimSepTexts);
}

void Vocab::build_eog_set() {
  std::vector<int32_t> eog;
  for (int32_t id : {fim_pad_, fim_rep_, fim_sep_}) {
    if (id != kNoToken) eog.push_back(id);
  }
  for (std::string_view text : kEogTexts) {
    const int32_t id = text_to_token(text);
    if (id == kNoToken) continue;
    eog.push_back(id);
    tokens_[id].attr |= kAttrControl;
  }
  // gpt-oss: these must always be rendered, so llama.cpp makes them user-defined.
  for (std::string_view text : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"}) {
    if (int32_t id = text_to_token(text); id != kNoToken) tokens_[id].attr = kAttrUserDefined;
  }
  for (int32_t id : {eos_, eot_, eom_}) {
    if (id != kNoToken) eog.push_back(id);
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());

  auto has_text = [&](std::string_view text) {
    return std::any_of(eog.begin(), eog.end(), [&](int32_t id) { return tokens_[id].text == text; });
  };
  auto remove_text = [&](std::string_view text, uint32_t new_attr) {
    for (auto it = eog.begin(); it != eog.end(); ++it) {
      if (tokens_[*it].text == text) {
        tokens_[*it].attr = new_attr;
        eog.erase(it);
        return;
      }
    }
  };
  // o200k_harmony / solar-open: there <|end|> separates messages and must not stop generation.
  if (has_text("<|end|>") && ((has_text("<|return|>") && (has_text("<|call|>") || has_text("<|calls|>"))) ||
                              ((has_text("<|call|>") || has_text("<|calls|>")) && has_text("<|flush|>")))) {
    remove_text("<|end|>", kAttrUserDefined);
  }
  // Gemma 4 uses </s> as text.
  if (has_text("<|tool_response>") && has_text("</s>")) remove_text("</s>", kAttrNormal);
  eog_ids_ = std::move(eog);
}

}  // namespace loom::vocab

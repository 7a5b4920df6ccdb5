// Vocab: token attributes, special-token splitting, tokenization by family, detokenization
// (loading and validation are in vocab_load.cpp). The rules mirror llama.cpp's llama_vocab (load, tokenizer_st_partition, tokenize,
// token_to_piece, detokenize); comments note where and why loom deviates.
#include "vocab/vocab.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <utility>

#include "vocab/bpe_tokenizer.h"
#include "vocab/spm_tokenizer.h"
#include "vocab/ugm_tokenizer.h"
#include "vocab/unicode.h"
#include "vocab/wpm_tokenizer.h"

namespace loom::vocab {

namespace {

constexpr std::string_view kSpaceEscape = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// isspace() of the "C" locale, without its undefined behaviour for negative chars.
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out.append(to);
  }
  out.append(s, pos, std::string::npos);
  s = std::move(out);
}

// The byte of a byte token: llama.cpp parses the two characters after "<0x" as hex.
uint8_t byte_token_value(std::string_view text) {
  unsigned value = 0;
  for (size_t i = 3; i < text.size() && i < 5; ++i) {
    const char c = text[i];
    unsigned digit;
    if (c >= '0' && c <= '9') digit = unsigned(c - '0');
    else if (c >= 'a' && c <= 'f') digit = unsigned(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F') digit = unsigned(c - 'A' + 10);
    else break;
    value = value * 16 + digit;
  }
  return static_cast<uint8_t>(value);
}

}  // namespace

namespace detail {

// Hugging Face's clean_up_tokenization_spaces, in llama.cpp's three in-place passes. Each pass
// keeps text[0] and compacts text[1..]; the checks read the pass's input (positions at or after
// the read index are not yet overwritten).
void clean_up_tokenization_spaces(std::string& t) {
  // 1: " ?", " !", " .", " ," lose the space.
  size_t n = t.size(), total = n ? 1 : 0;
  for (size_t i = 1; i < n; ++i) {
    const char x = t[i];
    if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) --total;
    t[total++] = x;
  }
  t.resize(total);
  // 2: " ' " becomes "'" (the space after it is dropped by overwriting it with a NUL that later
  // checks see, as in llama.cpp).
  n = t.size();
  total = n ? 1 : 0;
  for (size_t i = 1; i < n; ++i) {
    const char x = t[i];
    if (x == '\'' && i + 1 < n && t[i - 1] == ' ' && t[i + 1] == ' ') {
      --total;
      t[++i] = '\0';
    }
    t[total++] = x;
  }
  t.resize(total);
  // 3: " 's", " 'm", " 're", " 've" lose the space (" 't", " 'd", " 'll" keep it).
  n = t.size();
  total = n ? 1 : 0;
  for (size_t i = 1; i < n; ++i) {
    const char x = t[i];
    if (t[i - 1] == ' ' && x == '\'' && i + 1 < n) {
      const char x1 = t[i + 1];
      if (x1 == 's' || x1 == 'm') {
        --total;
      } else if (x1 != 't' && x1 != 'd' && i + 2 < n) {
        const char x2 = t[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) --total;
      }
    }
    t[total++] = x;
  }
  t.resize(total);
}

}  // namespace detail

// ---------------------------------------------------------------------------------------------
// Accessors

Status Vocab::check_ids(std::span<const int32_t> ids) const {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (!is_valid(ids[i])) {
      return out_of_range("token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                          " is outside the vocabulary [0, " + std::to_string(n_tokens()) + ")");
    }
  }
  return Status::ok();
}

std::string_view Vocab::token_text(int32_t id) const {
  if (!is_valid(id)) return {};
  return tokens_[id].text;  // (a ?: with "" would make a temporary std::string and dangle)
}
float Vocab::token_score(int32_t id) const { return is_valid(id) ? tokens_[id].score : 0.0f; }
uint32_t Vocab::token_attr(int32_t id) const { return is_valid(id) ? tokens_[id].attr : kAttrUndefined; }

bool Vocab::is_eog(int32_t id) const { return std::binary_search(eog_ids_.begin(), eog_ids_.end(), id); }

int32_t Vocab::text_to_token(std::string_view text) const {
  auto it = text_to_id_.find(text);
  return it == text_to_id_.end() ? kNoToken : it->second;
}

// ---------------------------------------------------------------------------------------------
// Tokenization

std::vector<Vocab::Fragment> Vocab::partition(std::string_view text, bool parse_special) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back(Fragment{kNoToken, 0, text.size()});

  std::vector<Fragment> next;
  for (int32_t special : special_tokens_) {
    const TokenData& tok = tokens_[special];
    // Control and unknown tokens are text unless parse_special; user-defined ones never are.
    if (!parse_special && (tok.attr & (kAttrControl | kAttrUnknown))) continue;
    const std::string_view needle = tok.text;

    next.clear();
    for (const Fragment& frag : fragments) {
      if (frag.token != kNoToken) {
        next.push_back(frag);
        continue;
      }
      size_t base = frag.offset;
      size_t length = frag.length;
      while (length > 0) {
        // Matches may not run past the fragment's end.
        const size_t match = text.substr(0, base + length).find(needle, base);
        if (match == std::string_view::npos) break;
        size_t left_length = match - base;
        if (tok.attr & kAttrLStrip) {
          while (left_length > 0 && is_space(text[base + left_length - 1])) --left_length;
        }
        if (left_length > 0) next.push_back(Fragment{kNoToken, base, left_length});
        next.push_back(Fragment{special, 0, 0});

        const size_t end = base + length;
        base = match + needle.size();
        length = end - base;
        if (tok.attr & kAttrRStrip) {
          while (length > 0 && is_space(text[base])) {
            ++base;
            --length;
          }
        }
      }
      if (length > 0) next.push_back(Fragment{kNoToken, base, length});
    }
    fragments.swap(next);
  }
  return fragments;
}

std::vector<int32_t> Vocab::rerank_input(std::span<const int32_t> query, std::span<const int32_t> document) const {
  const int32_t eos = is_valid(eos_) ? eos_ : sep_;
  std::vector<int32_t> ids;
  ids.reserve(query.size() + document.size() + 4);
  if (add_bos_ && is_valid(bos_)) ids.push_back(bos_);
  ids.insert(ids.end(), query.begin(), query.end());
  if (add_eos_ && is_valid(eos)) ids.push_back(eos);
  if (add_sep_ && is_valid(sep_)) ids.push_back(sep_);
  ids.insert(ids.end(), document.begin(), document.end());
  if (add_eos_ && is_valid(eos)) ids.push_back(eos);
  return ids;
}

std::vector<int32_t> Vocab::tokenize(std::string_view text, bool add_special, bool parse_special) const {
  std::vector<int32_t> out;
  const std::vector<Fragment> fragments = partition(text, parse_special);
  switch (type_) {
    case VocabType::kSpm: tokenize_spm(text, fragments, add_special, out); break;
    case VocabType::kBpe: tokenize_bpe(text, fragments, add_special, out); break;
    case VocabType::kWpm: tokenize_wpm(text, fragments, add_special, out); break;
    case VocabType::kUgm: tokenize_ugm(text, fragments, add_special, out); break;
  }
  return out;
}

void Vocab::tokenize_bpe(std::string_view text, const std::vector<Fragment>& fragments, bool add_special,
                         std::vector<int32_t>& out) const {
  if (add_special && add_bos_ && bos_ != kNoToken) out.push_back(bos_);
  for (const Fragment& frag : fragments) {
    if (frag.token != kNoToken) {
      out.push_back(frag.token);
    } else if (!whitespace_model_) {
      bpe_->tokenize(*this, text.substr(frag.offset, frag.length), out);
    } else {
      // Whitespace separates (and is dropped); each run is tokenized on its own.
      std::string segment;
      for (uint32_t cp : unicode::decode_lenient(text.substr(frag.offset, frag.length))) {
        if (unicode::is_whitespace(cp)) {
          if (!segment.empty()) bpe_->tokenize(*this, segment, out);
          segment.clear();
        } else {
          unicode::append_utf8(segment, whitespace_lowercase_ ? unicode::to_lower(cp) : cp);
        }
      }
      if (!segment.empty()) bpe_->tokenize(*this, segment, out);
    }
  }
  if (add_special && add_eos_ && eos_ != kNoToken) out.push_back(eos_);
}

void Vocab::tokenize_wpm(std::string_view text, const std::vector<Fragment>& fragments, bool add_special,
                         std::vector<int32_t>& out) const {
  // llama.cpp always wraps WordPiece input in [CLS] ... [SEP] (the BOS and separator ids),
  // whatever add_bos/add_eos say.
  if (add_special && bos_ != kNoToken) out.push_back(bos_);
  for (const Fragment& frag : fragments) {
    if (frag.token != kNoToken) out.push_back(frag.token);
    else detail::wpm_segment(*this, text.substr(frag.offset, frag.length), wpm_lowercase_, out);
  }
  if (add_special && sep_ != kNoToken) out.push_back(sep_);
}

void Vocab::tokenize_ugm(std::string_view text, const std::vector<Fragment>& fragments, bool add_special,
                         std::vector<int32_t>& out) const {
  // Each raw fragment is normalized on its own (so each gets the space prefix), as in llama.cpp.
  if (add_special && add_bos_ && bos_ != kNoToken) out.push_back(bos_);
  for (const Fragment& frag : fragments) {
    if (frag.token != kNoToken) out.push_back(frag.token);
    else ugm_->tokenize(*this, text.substr(frag.offset, frag.length), out);
  }
  if (add_special && add_eos_ && eos_ != kNoToken) out.push_back(eos_);
}

std::string Vocab::ugm_normalize(std::string_view text) const {
  std::string out;
  if (ugm_) ugm_->normalize(text, out);
  return out;
}

std::string_view Vocab::pre_tokenizer() const { return bpe_ ? std::string_view(bpe_->pre()) : std::string_view(); }

void Vocab::tokenize_spm(std::string_view text, const std::vector<Fragment>& fragments, bool add_special,
                         std::vector<int32_t>& out) const {
  // Like SentencePiece, a space is prefixed to the text; llama.cpp also prefixes one to every
  // text fragment that follows a special token.
  bool prev_special = true;
  if (add_special && add_bos_ && bos_ != kNoToken) out.push_back(bos_);

  std::string buf;
  for (const Fragment& frag : fragments) {
    if (frag.token != kNoToken) {
      out.push_back(frag.token);
      prev_special = true;
      continue;
    }
    buf.clear();
    if (add_space_prefix_ && prev_special) buf.push_back(' ');
    buf.append(text.substr(frag.offset, frag.length));
    replace_all(buf, " ", kSpaceEscape);
    detail::spm_segment(*this, buf, spm_split_at_spaces_, out);
    prev_special = false;
  }

  if (add_special && add_eos_ && eos_ != kNoToken) out.push_back(eos_);
}

// ---------------------------------------------------------------------------------------------
// Detokenization

std::string Vocab::piece_uncached(int32_t id) const {
  const TokenData& t = tokens_[id];
  // Unsupported attribute combinations render as nothing, like control tokens (llama.cpp).
  if (t.attr & (kAttrUnknown | kAttrControl | kAttrUserDefined)) return t.text;
  if (type_ == VocabType::kBpe) {
    if (t.attr & kAttrNormal) {
      // Byte-level text decodes to bytes; SentencePiece-style text has U+2581 for spaces.
      if (!bpe_->preset().escape_whitespaces) return detail::byte_level_decode(t.text);
      std::string s = t.text;
      replace_all(s, kSpaceEscape, " ");
      return s;
    }
    // A byte token (<0xXX>, Gemma 4) is its byte.
    if (t.attr & kAttrByte) return std::string(1, static_cast<char>(byte_token_value(t.text)));
    return {};
  }
  if (t.attr & kAttrNormal) {
    std::string s = t.text;
    replace_all(s, kSpaceEscape, " ");
    return s;
  }
  if (t.attr & kAttrByte) return std::string(1, static_cast<char>(byte_token_value(t.text)));
  return {};
}

std::string Vocab::token_to_piece(int32_t id, bool special) const {
  if (!is_valid(id)) return {};
  if (!special && (tokens_[id].attr & (kAttrUnknown | kAttrControl))) return {};
  return pieces_[id];
}

Expected<std::string> Vocab::detokenize(std::span<const int32_t> ids, bool remove_special, bool unparse_special) const {
  LOOM_RETURN_IF_ERROR(check_ids(ids));
  // The space SentencePiece put in front of the text is not part of it.
  bool remove_space = add_space_prefix_;
  if (remove_special && add_bos_ && !ids.empty() && ids.front() == bos_) {
    remove_space = false;
    ids = ids.subspan(1);
  }
  if (remove_special && add_eos_ && !ids.empty() && ids.back() == eos_) ids = ids.first(ids.size() - 1);

  std::string out;
  for (int32_t id : ids) {
    if (!unparse_special && (tokens_[id].attr & (kAttrUnknown | kAttrControl))) {
      remove_space = false;  // llama.cpp consumes the strip on the first token even if it is hidden
      continue;
    }
    std::string_view piece = pieces_[id];
    if (remove_space && !piece.empty() && piece.front() == ' ') piece.remove_prefix(1);
    remove_space = false;
    out.append(piece);
  }
  if (clean_spaces_) detail::clean_up_tokenization_spaces(out);
  return out;
}

}  // namespace loom::vocab

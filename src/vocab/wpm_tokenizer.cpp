// WordPiece as llama.cpp's llm_tokenizer_wpm does it (see wpm_tokenizer.h).
#include "vocab/wpm_tokenizer.h"

#include <algorithm>

#include "vocab/unicode.h"
#include "vocab/vocab.h"

namespace loom::vocab::detail {

namespace {

// CJK ideograph blocks, as BERT's _is_chinese_char (with the range quirk of the Hugging Face
// Rust implementation that llama.cpp copies: 0x2B920 where 0x2B820 would be expected).
bool is_cjk(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

constexpr std::string_view kWordPrefix = "\xE2\x96\x81";  // U+2581

}  // namespace

std::vector<std::string> wpm_pre_tokenize(std::string_view text, bool lowercase) {
  const bool strip_accents = lowercase;
  std::vector<std::string> words(1);
  for (uint32_t cp : unicode::decode_lenient(text)) {
    cp = unicode::nfd_first(cp);
    const uint8_t f = unicode::flags(cp);
    if (f & unicode::kWhitespace) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    if (cp == 0 || cp == unicode::kReplacement || (f & unicode::kControl)) continue;
    if (strip_accents && (f & unicode::kMark)) continue;
    std::string s;
    unicode::append_utf8(s, lowercase ? unicode::to_lower(cp) : cp);
    if ((f & unicode::kPunctuation) || (cp < 0x7F && (f & unicode::kSymbol)) || is_cjk(cp)) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = std::move(s);
      words.emplace_back();
    } else {
      words.back() += s;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

void wpm_segment(const Vocab& vocab, std::string_view text, bool lowercase, std::vector<int32_t>& out) {
  const size_t max_len = vocab.max_token_length();
  std::string word;
  for (const std::string& w : wpm_pre_tokenize(text, lowercase)) {
    word.assign(kWordPrefix);
    word += w;
    const size_t n = word.size();
    const size_t start = out.size();
    for (size_t i = 0; i < n;) {
      bool matched = false;
      for (size_t j = std::min(n, i + max_len + 1); j > i; --j) {
        const int32_t id = vocab.text_to_token(std::string_view(word).substr(i, j - i));
        if (id != Vocab::kNoToken) {
          out.push_back(id);
          i = j;
          matched = true;
          break;
        }
      }
      if (!matched) {
        out.resize(start);  // the whole word is unknown
        break;
      }
    }
    if (out.size() == start && vocab.unk() != Vocab::kNoToken) out.push_back(vocab.unk());
  }
}

}  // namespace loom::vocab::detail

// StreamDetokenizer: Vocab::detokenize one token at a time. Two stages, each holding back only
// what the following bytes can still change:
//
// 1. Space cleanup (clean_spaces() vocabularies). Every rule of clean_up_tokenization_spaces
//    removes a space that starts a pattern of at most four bytes after the previous passes
//    (" ?", " ' ", " 's", " 're"), and passes only ever remove spaces. So when the three bytes
//    before a cut contain no space, no pattern of any pass can straddle the cut, and
//    clean(A + B) == clean(A) + clean(B). raw_ is cut at the last such point; the rest waits.
// 2. UTF-8 completion. sanitize_utf8 is a left-to-right decoder; where it is between sequences,
//    sanitize(A + B) == sanitize(A) + sanitize(B). utf8_ keeps the incomplete sequence at the end
//    (at most three bytes). Cleanup removes only ASCII spaces that are followed by an ASCII byte,
//    so stage 1 cannot join or split a multi-byte sequence.
#include "vocab/stream_detokenizer.h"

#include <string_view>

#include "vocab/utf8.h"

namespace loom::vocab {

namespace {

// Length of the longest prefix of `s` after which the UTF-8 decoder of sanitize_utf8 is between
// sequences: s.size(), or the start of the truncated (still completable) sequence at the end.
// Mirrors scan_utf8 in utf8.cpp: the same lead-byte ranges and narrowed second-byte ranges.
size_t complete_prefix(std::string_view s) {
  int needed = 0;
  uint8_t lower = 0x80, upper = 0xBF;
  size_t start = 0;
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t b = static_cast<uint8_t>(s[i]);
    if (needed == 0) {
      start = i;
      if (b >= 0xC2 && b <= 0xDF) {
        needed = 1;
      } else if (b >= 0xE0 && b <= 0xEF) {
        if (b == 0xE0) lower = 0xA0;
        if (b == 0xED) upper = 0x9F;
        needed = 2;
      } else if (b >= 0xF0 && b <= 0xF4) {
        if (b == 0xF0) lower = 0x90;
        if (b == 0xF4) upper = 0x8F;
        needed = 3;
      }  // else ASCII or an invalid lead byte: complete either way
      ++i;
      continue;
    }
    if (b < lower || b > upper) {
      // The sequence is cut short here; this byte starts afresh (not consumed).
      needed = 0;
      lower = 0x80;
      upper = 0xBF;
      continue;
    }
    lower = 0x80;
    upper = 0xBF;
    ++i;
    if (static_cast<int>(i - start) == needed + 1) needed = 0;
  }
  return needed == 0 ? s.size() : start;
}

// Largest cut n <= s.size() with no space among s[n-3, n) (see the file comment).
size_t clean_safe_prefix(std::string_view s) {
  size_t n = s.size();
  while (n > 0) {
    const size_t from = n >= 3 ? n - 3 : 0;
    const size_t space = s.substr(from, n - from).rfind(' ');
    if (space == std::string_view::npos) break;
    n = from + space;
  }
  return n;
}

}  // namespace

StreamDetokenizer::StreamDetokenizer(const Vocab& vocab, StreamDetokenizerOptions options)
    : vocab_(&vocab), options_(options) {
  reset();
}

void StreamDetokenizer::reset() {
  first_ = !options_.continuation;
  remove_space_ = vocab_->add_space_prefix() && !options_.continuation;
  held_eos_ = false;
  raw_.clear();
  utf8_.clear();
}

Expected<std::string> StreamDetokenizer::push(int32_t token) {
  if (!vocab_->is_valid(token)) {
    return out_of_range("token id " + std::to_string(token) + " is outside the vocabulary [0, " +
                        std::to_string(vocab_->n_tokens()) + ")");
  }
  std::string out;
  const bool first = first_;
  first_ = false;
  if (options_.remove_special) {
    // detokenize drops ids.front() when it is BOS; that also keeps the first piece's space.
    if (first && vocab_->add_bos() && token == vocab_->bos()) {
      remove_space_ = false;
      return out;
    }
    // A held EOS was not the last token after all.
    if (held_eos_) {
      held_eos_ = false;
      render(vocab_->eos(), out);
    }
    if (vocab_->add_eos() && token == vocab_->eos()) {
      held_eos_ = true;
      return out;
    }
  }
  render(token, out);
  return out;
}

std::string StreamDetokenizer::flush() {
  std::string out;
  // A held EOS is the last token: detokenize drops it.
  emit_raw(raw_.size(), /*final=*/true, out);
  reset();
  return out;
}

void StreamDetokenizer::render(int32_t token, std::string& out) {
  // token_to_piece(id, special) is exactly the piece detokenize appends (empty for a hidden
  // control or unknown token, which still consumes the leading-space strip).
  const std::string piece = vocab_->token_to_piece(token, options_.unparse_special);
  std::string_view view = piece;
  if (remove_space_ && !view.empty() && view.front() == ' ') view.remove_prefix(1);
  remove_space_ = false;
  raw_.append(view);
  emit_raw(vocab_->clean_spaces() ? clean_safe_prefix(raw_) : raw_.size(), /*final=*/false, out);
}

void StreamDetokenizer::emit_raw(size_t n, bool final, std::string& out) {
  if (n > 0) {
    std::string chunk = raw_.substr(0, n);
    raw_.erase(0, n);
    if (vocab_->clean_spaces()) detail::clean_up_tokenization_spaces(chunk);
    utf8_.append(chunk);
  }
  const size_t done = final ? utf8_.size() : complete_prefix(utf8_);
  if (done == 0) return;
  out.append(sanitize_utf8(std::string_view(utf8_).substr(0, done)));
  utf8_.erase(0, done);
}

}  // namespace loom::vocab

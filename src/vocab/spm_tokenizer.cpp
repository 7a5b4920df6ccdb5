// SentencePiece segmentation as llama.cpp's llm_tokenizer_spm does it.
//
// The text starts as one symbol per UTF-8 character (split by lead byte only, see utf8_seq_len).
// Every adjacent pair whose concatenation is a token enters a priority queue keyed by that
// token's score; the best pair (ties: leftmost) is merged and the pairs it forms with its
// neighbours are queued. Queue entries made stale by an earlier merge are recognised by their
// byte length no longer matching the two symbols and skipped. Each final symbol is a token, or is
// emitted byte by byte through the <0xXX> byte tokens. With the queue this is O(n log n).
//
// A merged symbol's text is always a token (a pair is queued only if its concatenation is one),
// so llama.cpp's fallback of re-splitting a non-token symbol into the pair that formed it never
// applies and is not needed here.
//
// Speed: one heap over a long fragment is slow (cache misses on every pop). Where no token can
// span a symbol boundary, the two sides merge independently and in the same relative order, so
// they can be segmented separately with identical results. For SentencePiece vocabularies no
// token has U+2581 after anything but other U+2581s, so the start of every run of escaped spaces
// is such a boundary: the text is segmented word by word, each with a small heap. Vocab checks
// the property at load and passes split_at_spaces only when it holds.
#include "vocab/spm_tokenizer.h"

#include <algorithm>
#include <limits>

#include "vocab/utf8.h"
#include "vocab/vocab.h"

namespace loom::vocab::detail {

namespace {

// Index is int32_t for any realistic fragment (smaller queue entries, fewer cache misses);
// int64_t only for fragments of 2 GiB and more.
template <typename Index>
struct Symbol {
  Index prev;    // previous live symbol, -1 at the start
  Index next;    // next live symbol, -1 at the end
  Index offset;  // into the text
  Index length;  // bytes; 0 once merged into its left neighbour
};

// A candidate merge of symbol `left` with its right neighbour. The neighbour is not stored: while
// both live, the pair stays adjacent, and once the neighbour has been absorbed (only `left` can
// absorb it) `left` has grown, so the size check below rejects the entry either way.
template <typename Index>
struct Bigram {
  float score;
  Index left;
  Index size;  // byte length of the pair when queued
};

// Highest score first; among equal scores the leftmost pair. At most one live entry exists per
// left symbol, so this order fixes the merge sequence whatever the heap's internal layout.
template <typename Index>
struct BigramOrder {
  bool operator()(const Bigram<Index>& a, const Bigram<Index>& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

template <typename Index>
class SpmSession {
 public:
  SpmSession(const Vocab& vocab, size_t max_token_len) : vocab_(vocab), max_token_len_(max_token_len) {}

  // Segments `text`, which must start at a symbol boundary of the enclosing fragment.
  void run(std::string_view text, std::vector<int32_t>& out) {
    text_ = text;
    symbols_.clear();
    heap_.clear();
    if (text_.empty()) return;
    split_chars();
    // Building the heap at once is linear; pushing the first pairs one by one is not.
    for (size_t i = 1; i < symbols_.size(); ++i) try_add_bigram(Index(i - 1), Index(i), /*push=*/false);
    std::make_heap(heap_.begin(), heap_.end(), BigramOrder<Index>{});

    while (!heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), BigramOrder<Index>{});
      const Bigram<Index> b = heap_.back();
      heap_.pop_back();
      Symbol<Index>& left = symbols_[b.left];
      if (left.length == 0 || left.next < 0) continue;
      Symbol<Index>& right = symbols_[left.next];
      if (right.length == 0 || left.length + right.length != b.size) continue;

      left.length += right.length;
      right.length = 0;
      left.next = right.next;
      if (left.next >= 0) symbols_[left.next].prev = b.left;

      try_add_bigram(left.prev, b.left, /*push=*/true);
      try_add_bigram(b.left, left.next, /*push=*/true);
    }

    for (Index i = 0; i != -1; i = symbols_[i].next) emit(symbols_[i], out);
  }

 private:
  void split_chars() {
    symbols_.reserve(text_.size());
    size_t offset = 0;
    while (offset < text_.size()) {
      const size_t len = std::min(utf8_seq_len(static_cast<uint8_t>(text_[offset])), text_.size() - offset);
      const Index index = Index(symbols_.size());
      const Index next = offset + len == text_.size() ? Index(-1) : Index(index + 1);
      symbols_.push_back(Symbol<Index>{Index(index - 1), next, Index(offset), Index(len)});
      offset += len;
    }
  }

  void try_add_bigram(Index left, Index right, bool push) {
    if (left < 0 || right < 0) return;
    const size_t size = size_t(symbols_[left].length) + size_t(symbols_[right].length);
    if (size > max_token_len_) return;  // no token that long: skip the lookup
    // The right symbol follows the left one in the text, so the pair is one contiguous view.
    const int32_t id = vocab_.text_to_token(text_.substr(size_t(symbols_[left].offset), size));
    if (id == Vocab::kNoToken) return;
    heap_.push_back(Bigram<Index>{vocab_.token_score(id), left, Index(size)});
    if (push) std::push_heap(heap_.begin(), heap_.end(), BigramOrder<Index>{});
  }

  void emit(const Symbol<Index>& s, std::vector<int32_t>& out) const {
    const std::string_view piece = text_.substr(size_t(s.offset), size_t(s.length));
    const int32_t id = vocab_.text_to_token(piece);
    if (id != Vocab::kNoToken) {
      out.push_back(id);
      return;
    }
    for (char c : piece) {
      int32_t byte_id = vocab_.byte_to_token(static_cast<uint8_t>(c));
      // llama.cpp throws when a vocab has no token for a byte; we fall back to <unk> (or drop
      // the byte when there is none) so that no input can make tokenization fail.
      if (byte_id == Vocab::kNoToken) byte_id = vocab_.unk();
      if (byte_id != Vocab::kNoToken) out.push_back(byte_id);
    }
  }

  const Vocab& vocab_;
  std::string_view text_;
  size_t max_token_len_;
  std::vector<Symbol<Index>> symbols_;
  std::vector<Bigram<Index>> heap_;
};

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581

// Runs a session over each piece of `text` between independent points (see the file comment).
template <typename Index>
void segment_pieces(const Vocab& vocab, std::string_view text, bool split_at_spaces, std::vector<int32_t>& out) {
  SpmSession<Index> session(vocab, vocab.max_token_length());
  if (!split_at_spaces) {
    session.run(text, out);
    return;
  }
  size_t piece_start = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    // `pos` walks the symbol boundaries the whole-fragment split would have.
    if (pos > piece_start && text.substr(pos, kSpace.size()) == kSpace &&
        text.substr(pos - std::min(pos, kSpace.size()), kSpace.size()) != kSpace) {
      session.run(text.substr(piece_start, pos - piece_start), out);
      piece_start = pos;
    }
    pos += std::min(utf8_seq_len(static_cast<uint8_t>(text[pos])), text.size() - pos);
  }
  session.run(text.substr(piece_start), out);
}

}  // namespace

void spm_segment(const Vocab& vocab, std::string_view text, bool split_at_spaces, std::vector<int32_t>& out) {
  if (text.size() < size_t(std::numeric_limits<int32_t>::max())) {
    segment_pieces<int32_t>(vocab, text, split_at_spaces, out);
  } else {
    segment_pieces<int64_t>(vocab, text, split_at_spaces, out);
  }
}

}  // namespace loom::vocab::detail

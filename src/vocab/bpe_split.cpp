// The BPE pre-tokenizer steps that llama.cpp hand-writes (its unicode.cpp) instead of running a
// regex: Kimi-K2's pattern, the AFMoE / Tiny Aya digit grouper, and the newline splitter
// (bpe_split.h).
#include "vocab/bpe_split.h"

#include "vocab/unicode.h"

namespace loom::vocab::detail {

namespace {

bool is_han(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B820 && cp <= 0x2CEAF) ||
         (cp >= 0x2CEB0 && cp <= 0x2EBEF) || (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

// Appends the pieces of one piece [ini, end) as llama.cpp's _add_token bookkeeping does.
struct PieceWriter {
  Pieces& out;
  size_t prev;
  void add(size_t end) {
    if (end > prev) out.emplace_back(prev, end);
    prev = end;
  }
};

// Kimi-K2's pattern: [\p{Han}]+ | letters without Han, with an optional leading non-letter and an
// optional contraction | \p{N}{1,3} | " ?[^\s\p{L}\p{N}]+[\r\n]*" | whitespace as in Llama-3.
// Each alternative's matcher returns whether it matched at `pos`; one that matched has moved
// `pos` past its match and added the piece.
class KimiK2Splitter {
 public:
  KimiK2Splitter(const std::vector<uint32_t>& cps, size_t ini, size_t end, Pieces& out)
      : cps_(cps), ini_(ini), end_(end), w_{out, ini} {}

  void run() {
    for (size_t pos = ini_; pos < end_;) {
      if (han_run(pos) || word(pos) || number(pos) || punctuation(pos) || whitespace(pos)) continue;
      w_.add(++pos);
    }
  }

 private:
  static constexpr uint32_t kOut = 0xFFFFFFFF;
  const std::vector<uint32_t>& cps_;
  size_t ini_, end_;
  PieceWriter w_;

  bool inside(size_t p) const { return p >= ini_ && p < end_; }
  uint32_t cpt_at(size_t p) const { return inside(p) ? cps_[p] : kOut; }
  uint8_t fl(size_t p) const { return inside(p) ? unicode::flags(cps_[p]) : 0; }
  bool letter(size_t p) const { return (fl(p) & unicode::kLetter) != 0; }
  bool non_han_letter(size_t p) const { return letter(p) && !is_han(cpt_at(p)); }

  bool han_run(size_t& pos) {
    if (!is_han(cpt_at(pos))) return false;
    while (is_han(cpt_at(pos))) pos++;
    w_.add(pos);
    return true;
  }

  // "'s", "'t", "'m", "'d", "'re", "'ve", "'ll" (any case) at pos, skipped.
  void contraction(size_t& pos) const {
    if (cpt_at(pos) != '\'' || pos + 1 >= end_) return;
    const uint32_t n1 = unicode::to_lower(cpt_at(pos + 1));
    if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') {
      pos += 2;
    } else if (pos + 2 < end_) {
      const uint32_t n2 = unicode::to_lower(cpt_at(pos + 2));
      if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) pos += 3;
    }
  }

  // Letters without Han, with an optional leading non-letter and an optional contraction.
  bool word(size_t& pos) {
    const uint32_t cpt = cpt_at(pos);
    const uint8_t flags = fl(pos);
    const bool is_letter = flags & unicode::kLetter, is_number = flags & unicode::kNumber;
    const bool lead_ok = !(cpt == '\r' || cpt == '\n' || is_letter || is_number);
    if (!((is_letter && !is_han(cpt)) || (lead_ok && non_han_letter(pos + 1)))) return false;
    bool has_leading = false;
    if (lead_ok) {
      has_leading = true;
      pos++;
    }
    bool has_letters = false;
    while (non_han_letter(pos)) {
      has_letters = true;
      pos++;
    }
    if (has_letters || (!has_leading && non_han_letter(pos))) {
      if (!has_letters) pos++;
      while (non_han_letter(pos)) pos++;
      contraction(pos);
      w_.add(pos);
      return true;
    }
    if (has_leading) pos--;
    return false;
  }

  // \p{N}{1,3}, repeated over a run of numbers.
  bool number(size_t& pos) {
    if (!(fl(pos) & unicode::kNumber)) return false;
    size_t start = pos;
    while (fl(pos) & unicode::kNumber) {
      if (++pos - start >= 3) {
        w_.add(pos);
        start = pos;
      }
    }
    w_.add(pos);
    return true;
  }

  // " ?[^\s\p{L}\p{N}]+[\r\n]*". (llama.cpp also requires as_uint() != 0, which every code
  // point inside the piece has, unassigned ones included.)
  bool punctuation(size_t& pos) {
    auto punct = [&](size_t p) {
      return inside(p) && !(fl(p) & (unicode::kWhitespace | unicode::kLetter | unicode::kNumber));
    };
    const uint32_t cpt = cpt_at(pos);
    if (!punct(cpt == ' ' ? pos + 1 : pos)) return false;
    pos += (cpt == ' ');
    while (punct(pos)) pos++;
    while (cpt_at(pos) == '\r' || cpt_at(pos) == '\n') pos++;
    w_.add(pos);
    return true;
  }

  // "\s*[\r\n]+", "\s+(?!\S)", "\s+".
  bool whitespace(size_t& pos) {
    size_t num_ws = 0, last_rn = 0;
    while (fl(pos + num_ws) & unicode::kWhitespace) {
      const uint32_t c2 = cpt_at(pos + num_ws);
      if (c2 == '\r' || c2 == '\n') last_rn = pos + num_ws + 1;
      num_ws++;
    }
    if (last_rn > 0) pos = last_rn;
    else if (num_ws > 1 && cpt_at(pos + num_ws) != kOut) pos += num_ws - 1;
    else if (num_ws > 0) pos += num_ws;
    else return false;
    w_.add(pos);
    return true;
  }
};

}  // namespace

void split_kimi_k2(const std::vector<uint32_t>& cps, size_t ini, size_t end, Pieces& out) {
  KimiK2Splitter(cps, ini, end, out).run();
}

// AFMoE's digit grouper (also Tiny Aya's "\d{1,3}(?=(?:\d{3})*\b)" there): a run of \p{N} is cut
// into a leading group of (length mod 3) and groups of three. As in llama.cpp, the text before a
// run is not cut off: it goes with the run's first group.
void split_digit_groups(const std::vector<uint32_t>& cps, size_t ini, size_t end, Pieces& out) {
  auto number = [&](size_t p) { return p >= ini && p < end && (unicode::flags(cps[p]) & unicode::kNumber); };
  PieceWriter w{out, ini};
  for (size_t pos = ini; pos < end;) {
    if (number(pos)) {
      const size_t start = pos;
      while (number(pos)) pos++;
      const size_t count = pos - start, rem = count % 3;
      size_t cur = start;
      if (rem > 0) {
        w.add(cur + rem);
        cur += rem;
      }
      while (cur < start + count) {
        w.add(cur + 3);
        cur += 3;
      }
      continue;
    }
    pos++;
  }
  if (w.prev < end) w.add(end);
}

// "[^\n]+|[\n]+": runs of newlines and runs of everything else.
void split_newlines(const std::vector<uint32_t>& cps, size_t ini, size_t end, Pieces& out) {
  for (size_t pos = ini; pos < end;) {
    const bool nl = cps[pos] == '\n';
    const size_t start = pos;
    while (pos < end && (cps[pos] == '\n') == nl) pos++;
    out.emplace_back(start, pos);
  }
}

}  // namespace loom::vocab::detail

// GBNF grammars: UTF-8 decoding with pending sequences, the incremental matcher (parse stacks,
// candidate rejection under a work budget) and the token-level sampling stage. The GBNF reader and
// writers are in grammar_parse.cpp.
#include "sample/grammar.h"

#include "base/log.h"
#include "sample/grammar_internal.h"

#include <algorithm>
#include <unordered_set>

#include "vocab/vocab.h"

namespace loom::sample {

namespace {

using ET = GrammarElemType;

using grammar_internal::is_end_of_sequence;

// The smallest code point a UTF-8 sequence of each length may encode (shorter forms are overlong).
constexpr uint32_t kMinForLen[5] = {0, 0, 0x80, 0x800, 0x10000};

bool valid_code_point(uint32_t cp, int len) {
  return len >= 1 && len <= 4 && cp >= kMinForLen[len] && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF);
}

// Whether the character class starting at elems[pos] matches c; *next = the position after it.
bool match_char(const std::vector<GrammarElem>& elems, uint32_t pos, uint32_t c, uint32_t* next) {
  const bool positive = elems[pos].type == ET::kChar || elems[pos].type == ET::kCharAny;
  bool found = false;
  do {
    if (elems[pos].type == ET::kCharAny) {
      found = true;
      pos += 1;
    } else if (elems[pos + 1].type == ET::kCharRngUpper) {
      found = found || (elems[pos].value <= c && c <= elems[pos + 1].value);
      pos += 2;
    } else {
      found = found || elems[pos].value == c;
      pos += 1;
    }
  } while (elems[pos].type == ET::kCharAlt);
  if (next) *next = pos;
  return found == positive;
}

uint32_t char_class_end(const std::vector<GrammarElem>& elems, uint32_t pos) {
  uint32_t next = pos;
  match_char(elems, pos, 0, &next);
  return next;
}

// Whether an incomplete UTF-8 sequence can complete to a character the class accepts.
bool match_partial_char(const std::vector<GrammarElem>& elems, uint32_t pos, PartialUtf8 partial) {
  const bool positive = elems[pos].type == ET::kChar || elems[pos].type == ET::kCharAny;
  const int n_remain = partial.n_remain;
  if (n_remain < 0 || partial.len < 2 || partial.len > 4) return false;
  // The code points the sequence can still complete to (no overlong forms, nothing above U+10FFFF).
  uint32_t low = partial.value << (n_remain * 6);
  uint32_t high = low | ((1u << (n_remain * 6)) - 1);
  low = std::max(low, kMinForLen[partial.len]);
  high = std::min<uint32_t>(high, 0x10FFFF);
  if (low > high || (low >= 0xD800 && high <= 0xDFFF)) return false;  // overlong, too large, surrogate
  do {
    if (elems[pos].type == ET::kCharAny) return true;
    if (elems[pos + 1].type == ET::kCharRngUpper) {
      if (elems[pos].value <= high && low <= elems[pos + 1].value) return positive;
      pos += 2;
    } else {
      if (low <= elems[pos].value && elems[pos].value <= high) return positive;
      pos += 1;
    }
  } while (elems[pos].type == ET::kCharAlt);
  return !positive;
}

// The work budget of one matcher operation (GrammarMatcher::kMaxWorkPerCall): stack expansions
// counted on this thread, reset at each public entry; past it WorkExhausted unwinds to the entry.
struct WorkExhausted {};
thread_local uint64_t t_work = 0;
inline void charge_work() {
  if (++t_work > GrammarMatcher::kMaxWorkPerCall) throw WorkExhausted{};
}

struct StackHash {
  size_t operator()(const GrammarMatcher::Stack& s) const {
    size_t h = s.size();
    for (uint32_t v : s) h ^= std::hash<uint32_t>{}(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h;
  }
};

// Expands rule references at the top of `stack` until every resulting stack has a character
// element on top (or is empty: the grammar is complete there); adds the new ones to out.
void advance_stack(const Grammar& g, GrammarMatcher::Stack stack, std::vector<GrammarMatcher::Stack>& out) {
  const auto& elems = g.elems();
  std::vector<GrammarMatcher::Stack> todo;
  std::unordered_set<GrammarMatcher::Stack, StackHash> seen;
  todo.push_back(std::move(stack));
  while (!todo.empty()) {
    GrammarMatcher::Stack s = std::move(todo.back());
    todo.pop_back();
    charge_work();
    if (!seen.insert(s).second) continue;
    if (s.empty()) {
      if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(std::move(s));
      continue;
    }
    const uint32_t pos = s.back();
    const GrammarElem& e = elems[pos];
    if (e.type == ET::kRuleRef) {
      uint32_t sub = g.rule_start(e.value);
      for (;;) {
        GrammarMatcher::Stack ns(s.begin(), s.end() - 1);
        if (!is_end_of_sequence(elems[pos + 1])) ns.push_back(pos + 1);
        if (!is_end_of_sequence(elems[sub])) ns.push_back(sub);
        todo.push_back(std::move(ns));
        while (!is_end_of_sequence(elems[sub])) ++sub;
        if (elems[sub].type == ET::kAlt) ++sub;
        else break;
      }
    } else {
      // A character element (stacks never rest on kEnd/kAlt).
      if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(std::move(s));
    }
  }
}

// The stacks after consuming code point c.
void accept_cp(const Grammar& g, const std::vector<GrammarMatcher::Stack>& stacks, uint32_t c,
               std::vector<GrammarMatcher::Stack>& out) {
  out.clear();
  for (const auto& s : stacks) {
    if (s.empty()) continue;
    uint32_t next = 0;
    if (!match_char(g.elems(), s.back(), c, &next)) continue;
    GrammarMatcher::Stack ns(s.begin(), s.end() - 1);
    if (!is_end_of_sequence(g.elems()[next])) ns.push_back(next);
    advance_stack(g, std::move(ns), out);
  }
}

// Marks accepted[c.index] for every candidate some stack can consume. Candidates are matched
// stack by stack; those whose first character fits a stack's top move on together to the stacks
// that follow it (so tokens with a common prefix share the work). pool[depth] is scratch space.
void accept_candidates(const Grammar& g, const std::vector<GrammarMatcher::Stack>& stacks, GrammarMatcher::Candidate* cands,
                       size_t n, std::vector<uint8_t>& accepted, std::vector<std::vector<GrammarMatcher::Candidate>>& pool,
                       size_t depth) {
  const auto& elems = g.elems();
  if (pool.size() <= depth) pool.resize(depth + 1);
  for (size_t si = 0; si < stacks.size() && n > 0; ++si) {
    charge_work();
    const GrammarMatcher::Stack& stack = stacks[si];
    if (stack.empty()) {
      // The grammar is complete here: only a fully consumed text fits.
      for (size_t i = 0; i < n; ++i)
        if (cands[i].cp == cands[i].end && cands[i].partial.n_remain == 0) accepted[cands[i].index] = 1;
    } else {
      const uint32_t top = stack.back();
      std::vector<GrammarMatcher::Candidate>& next = pool[depth];
      next.clear();
      for (size_t i = 0; i < n; ++i) {
        const GrammarMatcher::Candidate& c = cands[i];
        if (c.cp == c.end) {
          if (c.partial.n_remain == 0 || match_partial_char(elems, top, c.partial)) accepted[c.index] = 1;
        } else if (g.matches(top, *c.cp)) {
          next.push_back(c);
          ++next.back().cp;
        }
      }
      if (!next.empty()) {
        const uint32_t after = char_class_end(elems, top);
        GrammarMatcher::Stack ns(stack.begin(), stack.end() - 1);
        if (!is_end_of_sequence(elems[after])) ns.push_back(after);
        std::vector<GrammarMatcher::Stack> next_stacks;
        advance_stack(g, std::move(ns), next_stacks);
        // The deeper levels use pool[depth + 1...] and may reorder this level's list (they own it
        // until they return).
        accept_candidates(g, next_stacks, pool[depth].data(), pool[depth].size(), accepted, pool, depth + 1);
      }
    }
    if (si + 1 < stacks.size()) {
      // Candidates accepted through this stack need not be tried on the others.
      size_t w = 0;
      for (size_t i = 0; i < n; ++i)
        if (!accepted[cands[i].index]) cands[w++] = cands[i];
      n = w;
    }
  }
}

}  // namespace

DecodedText decode_utf8_partial(std::string_view text, PartialUtf8 start) {
  static const int kLen[] = {1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4};
  DecodedText invalid{{}, {0, -1, 0}};  // not const: each return moves it
  DecodedText out;
  out.cps.reserve(text.size());
  size_t pos = 0;
  uint32_t value = start.value;
  int n_remain = start.n_remain;
  int len = start.len;
  if (n_remain < 0) return invalid;
  while (pos < text.size() && n_remain > 0) {
    const uint8_t b = uint8_t(text[pos]);
    if ((b >> 6) != 2) return invalid;
    value = (value << 6) + (b & 0x3F);
    ++pos;
    --n_remain;
  }
  if (start.n_remain > 0 && n_remain == 0) {
    if (!valid_code_point(value, len)) return invalid;
    out.cps.push_back(value);
  }
  while (pos < text.size()) {
    const uint8_t first = uint8_t(text[pos]);
    n_remain = kLen[first >> 4] - 1;
    if (n_remain < 0 || first == 0xC0 || first == 0xC1 || first >= 0xF5) return invalid;
    len = n_remain + 1;
    const uint8_t mask = uint8_t((1 << (7 - n_remain)) - 1);
    value = first & mask;
    ++pos;
    while (pos < text.size() && n_remain > 0) {
      const uint8_t b = uint8_t(text[pos]);
      if ((b >> 6) != 2) return invalid;
      value = (value << 6) + (b & 0x3F);
      ++pos;
      --n_remain;
    }
    if (n_remain == 0) {
      if (!valid_code_point(value, len)) return invalid;
      out.cps.push_back(value);
    }
  }
  if (n_remain > 0) out.partial = {value, n_remain, len};
  return out;
}

void Grammar::build_ascii_masks() {
  mask_index_.assign(elems_.size(), UINT32_MAX);
  for (uint32_t p = 0; p < elems_.size(); ++p) {
    const ET t = elems_[p].type;
    if (t != ET::kChar && t != ET::kCharNot && t != ET::kCharAny) continue;
    std::array<uint64_t, 2> m{0, 0};
    for (uint32_t c = 0; c < 128; ++c)
      if (match_char(elems_, p, c, nullptr)) m[c >> 6] |= uint64_t(1) << (c & 63);
    mask_index_[p] = uint32_t(ascii_masks_.size());
    ascii_masks_.push_back(m);
  }
}

bool Grammar::matches(uint32_t pos, uint32_t c) const {
  if (c < 128) {
    const auto& m = ascii_masks_[mask_index_[pos]];
    return (m[c >> 6] >> (c & 63)) & 1;
  }
  return match_char(elems_, pos, c, nullptr);
}

// ---------------------------------------------------------------------------------------------
// Matcher

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) { reset(); }

void GrammarMatcher::reset() {
  stacks_.clear();
  partial_ = {};
  exhausted_ = false;
  t_work = 0;
  const auto& elems = g_->elems();
  uint32_t p = g_->rule_start(g_->root());
  try {
    for (;;) {
      Stack s;
      if (!is_end_of_sequence(elems[p])) s.push_back(p);
      advance_stack(*g_, std::move(s), stacks_);
      while (!is_end_of_sequence(elems[p])) ++p;
      if (elems[p].type == ET::kAlt) ++p;
      else break;
    }
  } catch (const WorkExhausted&) {
    stacks_.clear();  // dead: nothing can be generated
    exhausted_ = true;
  }
}

bool GrammarMatcher::accept_text(std::string_view text) {
  exhausted_ = false;
  t_work = 0;
  DecodedText d = decode_utf8_partial(text, partial_);
  if (d.partial.n_remain < 0) return false;
  std::vector<Stack> cur = stacks_, next;
  try {
    for (uint32_t cp : d.cps) {
      accept_cp(*g_, cur, cp, next);
      if (next.empty()) return false;
      cur.swap(next);
    }
  } catch (const WorkExhausted&) {
    exhausted_ = true;
    return false;
  }
  if (d.partial.n_remain > 0) {
    bool any = false;
    for (const auto& s : cur) any = any || (!s.empty() && match_partial_char(g_->elems(), s.back(), d.partial));
    if (!any) return false;
  }
  stacks_ = std::move(cur);
  partial_ = d.partial;
  return true;
}

bool GrammarMatcher::can_end() const {
  if (partial_.n_remain != 0) return false;
  for (const auto& s : stacks_)
    if (s.empty()) return true;
  return false;
}

bool GrammarMatcher::is_done() const {
  for (const auto& s : stacks_)
    if (!s.empty()) return false;
  return true;
}

void GrammarMatcher::mark_accepted(std::vector<Candidate>& cands, std::vector<uint8_t>& accepted,
                                   std::vector<std::vector<Candidate>>& scratch) const {
  exhausted_ = false;
  t_work = 0;
  try {
    accept_candidates(*g_, stacks_, cands.data(), cands.size(), accepted, scratch, 0);
  } catch (const WorkExhausted&) {
    exhausted_ = true;
  }
}

// ---------------------------------------------------------------------------------------------
// Token-level stage

GrammarVocab GrammarVocab::from_vocab(const Vocab& vocab) {
  GrammarVocab v;
  v.pieces.resize(size_t(vocab.n_tokens()));
  v.is_eog.resize(size_t(vocab.n_tokens()));
  for (int32_t i = 0; i < vocab.n_tokens(); ++i) {
    v.is_eog[size_t(i)] = vocab.is_eog(i);
    // Control and unknown tokens render as nothing in generated text: an empty piece keeps the
    // grammar from ever choosing them (llama.cpp matches their "<s>"-like text instead).
    if (!v.is_eog[size_t(i)] && (vocab.is_control(i) || vocab.is_unknown(i))) continue;
    v.pieces[size_t(i)] = vocab.token_to_piece(i, true);
  }
  return v;
}

GrammarStage::GrammarStage(std::shared_ptr<const Grammar> g, std::shared_ptr<const GrammarVocab> vocab)
    : g_(std::move(g)), vocab_(std::move(vocab)), m_(g_) {
  auto dec = std::make_shared<std::vector<DecodedText>>();
  dec->reserve(vocab_->pieces.size());
  for (const auto& p : vocab_->pieces) dec->push_back(decode_utf8_partial(p, {}));
  decoded_ = std::move(dec);
}

void GrammarStage::apply(Candidates& c) {
  if (ended_ || m_.is_dead()) {
    c.data.clear();
    c.identity = false;
    c.selected = -1;
    return;
  }
  const bool can_end = m_.can_end();
  const PartialUtf8 partial = m_.partial();
  const size_t n_vocab = vocab_->pieces.size();
  cands_.clear();
  keep_.assign(c.size(), 0);
  if (partial.n_remain != 0) scratch_.resize(c.size());
  for (size_t i = 0; i < c.size(); ++i) {
    const int32_t id = c.data[i].id;
    if (id < 0 || size_t(id) >= n_vocab) continue;
    if (vocab_->is_eog[size_t(id)]) {
      keep_[i] = can_end;
      continue;
    }
    const std::string& piece = vocab_->pieces[size_t(id)];
    if (piece.empty()) continue;
    const DecodedText* d = &(*decoded_)[size_t(id)];
    if (partial.n_remain != 0) {
      scratch_[i] = decode_utf8_partial(piece, partial);
      d = &scratch_[i];
    }
    if (d->partial.n_remain < 0) continue;
    cands_.push_back({i, d->cps.data(), d->cps.data() + d->cps.size(), d->partial});
  }
  m_.mark_accepted(cands_, keep_, pool_);
  if (m_.exhausted()) {
    // The marks so far are a biased subset: nothing is sampled, the generation ends.
    LOOM_LOG(kWarn, "grammar: matching ran past its work budget (an ambiguous grammar); generation stops");
    c.data.clear();
    c.identity = false;
    c.selected = -1;
    return;
  }
  size_t w = 0;
  for (size_t i = 0; i < c.size(); ++i)
    if (keep_[i]) c.data[w++] = c.data[i];
  if (w != c.size()) {
    c.data.resize(w);
    c.identity = false;
    c.selected = -1;
  }
}

bool GrammarStage::allows(int32_t token) const {
  if (ended_ || m_.is_dead() || token < 0 || size_t(token) >= vocab_->pieces.size()) return false;
  if (vocab_->is_eog[size_t(token)]) return m_.can_end();
  const std::string& piece = vocab_->pieces[size_t(token)];
  if (piece.empty()) return false;
  DecodedText local;
  const DecodedText* d = &(*decoded_)[size_t(token)];
  if (m_.partial().n_remain != 0) {
    local = decode_utf8_partial(piece, m_.partial());
    d = &local;
  }
  if (d->partial.n_remain < 0) return false;
  std::vector<GrammarMatcher::Candidate> one{{0, d->cps.data(), d->cps.data() + d->cps.size(), d->partial}};
  std::vector<uint8_t> ok(1, 0);
  std::vector<std::vector<GrammarMatcher::Candidate>> pool;
  m_.mark_accepted(one, ok, pool);
  return ok[0] != 0;
}

bool GrammarStage::try_accept(int32_t token) {
  if (ended_ || m_.is_dead() || token < 0 || size_t(token) >= vocab_->pieces.size()) return false;
  if (vocab_->is_eog[size_t(token)]) {
    if (!m_.can_end()) return false;
    ended_ = true;
    return true;
  }
  const std::string& piece = vocab_->pieces[size_t(token)];
  if (piece.empty()) return false;
  return m_.accept_text(piece);
}

void GrammarStage::accept(int32_t token) {
  if (!try_accept(token)) ended_ = true;  // a token the grammar cannot take ends it
}

void GrammarStage::reset() {
  m_.reset();
  ended_ = false;
}

}  // namespace loom::sample

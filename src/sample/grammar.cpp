#include "sample/grammar.h"

#include "base/log.h"
#include "vocab/unicode.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <unordered_set>

#include "vocab/vocab.h"

namespace loom {

std::string gbnf_literal(std::string_view text) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out = "\"";
  for (unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out += "\\x";
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 15]);
        } else {
          out.push_back(char(c));
        }
    }
  }
  return out + "\"";
}

namespace {

using ET = GrammarElemType;

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

bool is_end_of_sequence(const GrammarElem& e) { return e.type == ET::kEnd || e.type == ET::kAlt; }

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
  const DecodedText invalid{{}, {0, -1, 0}};
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

// ---------------------------------------------------------------------------------------------
// Parser

struct GrammarParseError {
  size_t pos;
  std::string msg;
};

class GrammarParser {
 public:
  explicit GrammarParser(std::string_view src) : src_(src) {}

  Expected<std::shared_ptr<const Grammar>> run(std::string_view root_name) {
    try {
      size_t p = parse_space(0, true);
      while (p < src_.size()) p = parse_rule(p);
      for (size_t i = 0; i < rules_.size(); ++i) {
        if (!defined_[i]) fail(first_use_[i], "undefined rule '" + names_[i] + "'");
      }
      auto it = ids_.find(std::string(root_name));
      if (it == ids_.end() || !defined_[it->second])
        fail(src_.size(), "grammar has no rule '" + std::string(root_name) + "'");
      check_left_recursion();
      auto g = std::make_shared<Grammar>();
      for (size_t i = 0; i < rules_.size(); ++i) {
        g->rule_start_.push_back(uint32_t(g->elems_.size()));
        g->elems_.insert(g->elems_.end(), rules_[i].begin(), rules_[i].end());
      }
      g->names_ = names_;
      g->root_ = it->second;
      g->build_ascii_masks();
      return std::shared_ptr<const Grammar>(std::move(g));
    } catch (const GrammarParseError& e) {
      size_t line = 1, col = 1;
      for (size_t i = 0; i < e.pos && i < src_.size(); ++i) {
        if (src_[i] == '\n') {
          ++line;
          col = 1;
        } else if ((uint8_t(src_[i]) & 0xC0) != 0x80) ++col;
      }
      return invalid_argument("grammar:" + std::to_string(line) + ":" + std::to_string(col) + ": " + e.msg);
    }
  }

 private:
  static constexpr uint32_t kMaxRepetition = 100000;
  static constexpr size_t kMaxElems = 4'000'000;
  static constexpr int kMaxGroupDepth = 256;

  [[noreturn]] void fail(size_t pos, std::string msg) { throw GrammarParseError{pos, std::move(msg)}; }
  bool eof(size_t p) const { return p >= src_.size(); }
  char at(size_t p) const { return p < src_.size() ? src_[p] : '\0'; }

  uint32_t symbol_id(const std::string& name, size_t use_pos) {
    auto [it, inserted] = ids_.emplace(name, uint32_t(rules_.size()));
    if (inserted) {
      names_.push_back(name);
      rules_.emplace_back();
      defined_.push_back(false);
      first_use_.push_back(use_pos);
      def_pos_.push_back(use_pos);
    }
    return it->second;
  }
  uint32_t generate_symbol(const std::string& base, size_t pos) {
    const uint32_t id = uint32_t(rules_.size());
    std::string name = base + "_" + std::to_string(id);
    while (ids_.count(name)) name += "_";
    ids_.emplace(name, id);
    names_.push_back(name);
    rules_.emplace_back();
    defined_.push_back(true);
    first_use_.push_back(pos);
    def_pos_.push_back(pos);
    return id;
  }
  void set_rule(uint32_t id, std::vector<GrammarElem> elems) {
    total_elems_ += elems.size();
    if (total_elems_ > kMaxElems)
      fail(0, "grammar too large (more than " + std::to_string(kMaxElems) + " elements after expanding repetitions)");
    rules_[id] = std::move(elems);
  }

  size_t parse_space(size_t p, bool newline_ok) {
    while (!eof(p)) {
      const char c = src_[p];
      if (c == ' ' || c == '\t') {
        ++p;
      } else if (c == '#') {
        while (!eof(p) && src_[p] != '\n' && src_[p] != '\r') ++p;
      } else if (newline_ok && (c == '\n' || c == '\r')) {
        ++p;
      } else {
        break;
      }
    }
    return p;
  }

  size_t parse_name(size_t p) {
    const size_t start = p;
    while (!eof(p) && is_word_char(src_[p])) ++p;
    if (p == start) fail(p, "expecting a rule name");
    return p;
  }

  size_t parse_int(size_t p, uint64_t* v) {
    const size_t start = p;
    uint64_t x = 0;
    while (!eof(p) && src_[p] >= '0' && src_[p] <= '9') {
      x = x * 10 + uint64_t(src_[p] - '0');
      if (x > kMaxRepetition) fail(start, "repetition count too large (at most " + std::to_string(kMaxRepetition) + ")");
      ++p;
    }
    if (p == start) fail(p, "expecting an integer");
    *v = x;
    return p;
  }

  // One character of a literal or class: an escape or a UTF-8 encoded code point.
  size_t parse_char(size_t p, uint32_t* cp) {
    if (eof(p)) fail(p, "unexpected end of input");
    if (src_[p] == '\\') {
      if (eof(p + 1)) fail(p, "unexpected end of input after '\\'");
      const char e = src_[p + 1];
      int n_hex = 0;
      switch (e) {
        case 'x': n_hex = 2; break;
        case 'u': n_hex = 4; break;
        case 'U': n_hex = 8; break;
        case 't': *cp = '\t'; return p + 2;
        case 'r': *cp = '\r'; return p + 2;
        case 'n': *cp = '\n'; return p + 2;
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^': *cp = uint32_t(uint8_t(e)); return p + 2;
        default: fail(p, std::string("unknown escape '\\") + e + "'");
      }
      uint32_t v = 0;
      size_t q = p + 2;
      for (int i = 0; i < n_hex; ++i, ++q) {
        const char h = at(q);
        uint32_t d;
        if (h >= '0' && h <= '9') d = uint32_t(h - '0');
        else if (h >= 'a' && h <= 'f') d = uint32_t(h - 'a' + 10);
        else if (h >= 'A' && h <= 'F') d = uint32_t(h - 'A' + 10);
        else fail(q, "expecting " + std::to_string(n_hex) + " hex digits after '\\" + e + "'");
        v = (v << 4) | d;
      }
      if (v > 0x10FFFF) fail(p, "code point out of range");
      *cp = v;
      return q;
    }
    const uint8_t b = uint8_t(src_[p]);
    const size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (len == 0 || p + len > src_.size()) fail(p, "invalid UTF-8");
    DecodedText one = decode_utf8_partial(src_.substr(p, len), {});
    if (one.cps.size() != 1 || one.partial.n_remain != 0) fail(p, "invalid UTF-8");
    *cp = one.cps[0];
    return p + len;
  }

  size_t parse_rule(size_t p) {
    const size_t name_end = parse_name(p);
    const std::string name(src_.substr(p, name_end - p));
    const uint32_t id = symbol_id(name, p);
    if (defined_[id]) fail(p, "rule '" + name + "' is defined twice");
    defined_[id] = true;
    def_pos_[id] = p;
    size_t q = parse_space(name_end, false);
    if (src_.substr(q, 3) != "::=") fail(q, "expecting '::=' after rule name '" + name + "'");
    q = parse_space(q + 3, true);
    q = parse_alternates(q, name, id, false);
    if (at(q) == '\r') q += at(q + 1) == '\n' ? 2 : 1;
    else if (at(q) == '\n') ++q;
    else if (!eof(q)) fail(q, std::string("unexpected '") + src_[q] + "' (expecting newline or end of input)");
    return parse_space(q, true);
  }

  size_t parse_alternates(size_t p, const std::string& rule_name, uint32_t rule_id, bool nested) {
    std::vector<GrammarElem> rule;
    p = parse_sequence(p, rule_name, rule, nested);
    while (at(p) == '|') {
      rule.push_back({ET::kAlt, 0});
      p = parse_space(p + 1, true);
      p = parse_sequence(p, rule_name, rule, nested);
    }
    rule.push_back({ET::kEnd, 0});
    set_rule(rule_id, std::move(rule));
    return p;
  }

  // Rewrites the last symbol (out[last_start..]) repeated min..max times (max < 0: unbounded)
  // with helper rules, as llama.cpp does: x* -> x_rep ::= x x_rep | ""; x{0,n} -> nested options.
  void handle_repetitions(std::vector<GrammarElem>& out, size_t last_start, const std::string& rule_name, uint64_t min_times,
                          int64_t max_times, size_t op_pos) {
    if (last_start == out.size()) fail(op_pos, "expecting an item before the repetition operator");
    if (max_times >= 0 && uint64_t(max_times) < min_times) fail(op_pos, "repetition maximum is below its minimum");
    const std::vector<GrammarElem> prev(out.begin() + long(last_start), out.end());
    if (prev.size() * (min_times + 1) + total_elems_ > kMaxElems)
      fail(op_pos, "grammar too large after expanding repetitions");
    if (min_times == 0) out.resize(last_start);
    else
      for (uint64_t i = 1; i < min_times; ++i) out.insert(out.end(), prev.begin(), prev.end());
    uint32_t last_rec = 0;
    const uint64_t n_opt = max_times < 0 ? 1 : uint64_t(max_times) - min_times;
    for (uint64_t i = 0; i < n_opt; ++i) {
      std::vector<GrammarElem> rec(prev);
      const uint32_t rec_id = generate_symbol(rule_name, op_pos);
      if (i > 0 || max_times < 0) rec.push_back({ET::kRuleRef, max_times < 0 ? rec_id : last_rec});
      rec.push_back({ET::kAlt, 0});
      rec.push_back({ET::kEnd, 0});
      set_rule(rec_id, std::move(rec));
      last_rec = rec_id;
    }
    if (n_opt > 0) out.push_back({ET::kRuleRef, last_rec});
  }

  size_t parse_sequence(size_t p, const std::string& rule_name, std::vector<GrammarElem>& out, bool nested) {
    size_t last_start = out.size();
    while (!eof(p)) {
      const char c = src_[p];
      if (c == '"') {
        const size_t open = p++;
        last_start = out.size();
        while (at(p) != '"' || eof(p)) {
          if (eof(p)) fail(open, "unterminated string literal");
          uint32_t cp;
          p = parse_char(p, &cp);
          out.push_back({ET::kChar, cp});
        }
        p = parse_space(p + 1, nested);
      } else if (c == '[') {
        const size_t open = p++;
        ET start_type = ET::kChar;
        if (at(p) == '^') {
          ++p;
          start_type = ET::kCharNot;
        }
        last_start = out.size();
        while (at(p) != ']' || eof(p)) {
          if (eof(p)) fail(open, "unterminated character class");
          uint32_t cp;
          p = parse_char(p, &cp);
          out.push_back({out.size() > last_start ? ET::kCharAlt : start_type, cp});
          if (at(p) == '-' && !eof(p + 1) && src_[p + 1] != ']') {
            uint32_t hi;
            const size_t range_pos = p + 1;
            p = parse_char(p + 1, &hi);
            if (hi < cp) fail(range_pos, "character range is reversed");
            out.push_back({ET::kCharRngUpper, hi});
          }
        }
        if (out.size() == last_start) fail(open, "empty character class");
        p = parse_space(p + 1, nested);
      } else if (is_word_char(c)) {
        const size_t name_end = parse_name(p);
        const uint32_t id = symbol_id(std::string(src_.substr(p, name_end - p)), p);
        last_start = out.size();
        out.push_back({ET::kRuleRef, id});
        p = parse_space(name_end, nested);
      } else if (c == '(') {
        const size_t open = p;
        // Groups are parsed recursively: bound the depth, not the stack.
        if (++group_depth_ > kMaxGroupDepth)
          fail(open, "groups nested more than " + std::to_string(kMaxGroupDepth) + " deep");
        p = parse_space(p + 1, true);
        const uint32_t sub = generate_symbol(rule_name, open);
        p = parse_alternates(p, rule_name, sub, true);
        --group_depth_;
        last_start = out.size();
        out.push_back({ET::kRuleRef, sub});
        if (at(p) != ')') fail(eof(p) ? open : p, eof(p) ? "unclosed '('" : "expecting ')'");
        p = parse_space(p + 1, nested);
      } else if (c == '.') {
        last_start = out.size();
        out.push_back({ET::kCharAny, 0});
        p = parse_space(p + 1, nested);
      } else if (c == '*' || c == '+' || c == '?') {
        handle_repetitions(out, last_start, rule_name, c == '+' ? 1 : 0, c == '?' ? 1 : -1, p);
        p = parse_space(p + 1, nested);
      } else if (c == '{') {
        const size_t open = p;
        p = parse_space(p + 1, nested);
        uint64_t min_times = 0;
        int64_t max_times = -1;
        p = parse_int(p, &min_times);
        p = parse_space(p, nested);
        if (at(p) == ',') {
          p = parse_space(p + 1, nested);
          if (at(p) >= '0' && at(p) <= '9') {
            uint64_t m;
            p = parse_int(p, &m);
            max_times = int64_t(m);
            p = parse_space(p, nested);
          }
        } else {
          max_times = int64_t(min_times);
        }
        if (at(p) != '}') fail(p, "expecting '}'");
        handle_repetitions(out, last_start, rule_name, min_times, max_times, open);
        p = parse_space(p + 1, nested);
      } else {
        break;
      }
    }
    return p;
  }

  // Nullable rules (fixpoint), then a DFS over "may start with" edges: a rule that can reach
  // itself before consuming a character is left-recursive.
  void check_left_recursion() {
    const size_t n = rules_.size();
    std::vector<char> nullable(n, 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        bool alt_nullable = true;
        for (const auto& e : rules_[r]) {
          if (is_end_of_sequence(e)) {
            if (alt_nullable) {
              nullable[r] = 1;
              changed = true;
              break;
            }
            alt_nullable = true;
          } else if (e.type == ET::kRuleRef) {
            alt_nullable = alt_nullable && nullable[e.value];
          } else if (e.type != ET::kCharRngUpper && e.type != ET::kCharAlt) {
            alt_nullable = false;
          }
        }
      }
    }
    std::vector<std::vector<uint32_t>> first(n);
    for (size_t r = 0; r < n; ++r) {
      bool leading = true;
      for (const auto& e : rules_[r]) {
        if (is_end_of_sequence(e)) {
          leading = true;
        } else if (e.type == ET::kRuleRef) {
          if (leading) first[r].push_back(e.value);
          leading = leading && nullable[e.value];
        } else if (e.type != ET::kCharRngUpper && e.type != ET::kCharAlt) {
          leading = false;
        }
      }
    }
    // Depth-first search for a cycle, with an explicit stack: a chain of a million rules that
    // each start with the next must not overflow the C++ stack.
    std::vector<char> state(n, 0);                  // 0 new, 1 in progress, 2 done
    std::vector<std::pair<uint32_t, size_t>> path;  // rule, index of the next first[] edge to follow
    for (uint32_t root = 0; root < n; ++root) {
      if (state[root] != 0) continue;
      state[root] = 1;
      path.push_back({root, 0});
      while (!path.empty()) {
        auto& [r, next] = path.back();
        if (next == first[r].size()) {
          state[r] = 2;
          path.pop_back();
          continue;
        }
        const uint32_t s = first[r][next++];
        if (state[s] == 1) fail(def_pos_[s], "left recursion in rule '" + user_name(s) + "' (not supported)");
        if (state[s] == 0) {
          state[s] = 1;
          path.push_back({s, 0});
        }
      }
    }
  }

  // Generated helper rules carry the name of the rule they were written in.
  std::string user_name(uint32_t id) const {
    const std::string& s = names_[id];
    const size_t us = s.rfind('_');
    if (us != std::string::npos && us + 1 < s.size() && s.find_first_not_of("0123456789_", us + 1) == std::string::npos) {
      auto it = ids_.find(s.substr(0, us));
      if (it != ids_.end()) return s.substr(0, us);
    }
    return s;
  }

  std::string_view src_;
  std::map<std::string, uint32_t> ids_;
  std::vector<std::string> names_;
  std::vector<std::vector<GrammarElem>> rules_;
  std::vector<char> defined_;
  std::vector<size_t> first_use_, def_pos_;
  int group_depth_ = 0;
  size_t total_elems_ = 0;
};

Expected<std::shared_ptr<const Grammar>> Grammar::parse(std::string_view gbnf, std::string_view root) {
  return GrammarParser(gbnf).run(root);
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

std::string Grammar::to_string() const {
  auto esc = [](std::string& out, uint32_t cp, bool in_class) {
    if (cp == '"' || cp == '\\' || (in_class && (cp == ']' || cp == '-' || cp == '^' || cp == '['))) {
      out += '\\';
      out += char(cp);
    } else if (cp < 0x20 || cp == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", unsigned(cp));
      out += buf;
    } else {
      unicode::append_utf8(out, cp);
    }
  };
  std::string out;
  for (uint32_t r = 0; r < n_rules(); ++r) {
    out += names_[r] + " ::=";
    for (uint32_t p = rule_start_[r]; elems_[p].type != ET::kEnd;) {
      const GrammarElem& e = elems_[p];
      switch (e.type) {
        case ET::kAlt:
          out += " |";
          ++p;
          break;
        case ET::kRuleRef:
          out += " " + names_[e.value];
          ++p;
          break;
        case ET::kCharAny:
          out += " .";
          ++p;
          break;
        case ET::kChar:
        case ET::kCharNot: {
          out += e.type == ET::kCharNot ? " [^" : " [";
          do {
            esc(out, elems_[p].value, true);
            if (elems_[p + 1].type == ET::kCharRngUpper) {
              out += '-';
              esc(out, elems_[p + 1].value, true);
              p += 2;
            } else {
              p += 1;
            }
          } while (elems_[p].type == ET::kCharAlt);
          out += ']';
          break;
        }
        default: ++p; break;
      }
    }
    out += '\n';
  }
  return out;
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

}  // namespace loom

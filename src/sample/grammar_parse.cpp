// GBNF text: the parser behind Grammar::parse (rules, literals, classes, groups, repetitions,
// left-recursion check; every error as "line:column: message") and the writers back to GBNF
// (gbnf_literal, Grammar::to_string). The matcher and the sampling stage are in grammar.cpp.
#include "sample/grammar.h"

#include "sample/grammar_internal.h"
#include "vocab/unicode.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace loom::sample {

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
using grammar_internal::is_end_of_sequence;

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

}  // namespace

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
      const bool newline = c == '\n' || c == '\r';
      if (c == ' ' || c == '\t' || (newline_ok && newline)) {
        ++p;
      } else if (c == '#') {
        while (!eof(p) && src_[p] != '\n' && src_[p] != '\r') ++p;
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

  // The items of one alternative, each appended to out; a repetition operator rewrites the item
  // before it (out[last_start..]).
  size_t parse_sequence(size_t p, const std::string& rule_name, std::vector<GrammarElem>& out, bool nested) {
    size_t last_start = out.size();
    while (!eof(p)) {
      const char c = src_[p];
      if (c == '"') {
        last_start = out.size();
        p = parse_literal(p, out);
      } else if (c == '[') {
        last_start = out.size();
        p = parse_char_class(p, out);
      } else if (is_word_char(c)) {
        last_start = out.size();
        p = parse_rule_ref(p, out);
      } else if (c == '(') {
        p = parse_group(p, rule_name, out, last_start);
      } else if (c == '.') {
        last_start = out.size();
        out.push_back({ET::kCharAny, 0});
        ++p;
      } else if (c == '*' || c == '+' || c == '?') {
        handle_repetitions(out, last_start, rule_name, c == '+' ? 1 : 0, c == '?' ? 1 : -1, p);
        ++p;
      } else if (c == '{') {
        p = parse_braced_repetition(p, rule_name, out, last_start, nested);
      } else {
        break;
      }
      p = parse_space(p, nested);
    }
    return p;
  }

  // "..." at p: one kChar per character; returns the position after the closing quote.
  size_t parse_literal(size_t p, std::vector<GrammarElem>& out) {
    const size_t open = p++;
    while (at(p) != '"' || eof(p)) {
      if (eof(p)) fail(open, "unterminated string literal");
      uint32_t cp;
      p = parse_char(p, &cp);
      out.push_back({ET::kChar, cp});
    }
    return p + 1;
  }

  // [...] or [^...] at p, with ranges; returns the position after the closing bracket.
  size_t parse_char_class(size_t p, std::vector<GrammarElem>& out) {
    const size_t open = p++;
    ET start_type = ET::kChar;
    if (at(p) == '^') {
      ++p;
      start_type = ET::kCharNot;
    }
    const size_t first = out.size();
    while (at(p) != ']' || eof(p)) {
      if (eof(p)) fail(open, "unterminated character class");
      uint32_t cp;
      p = parse_char(p, &cp);
      out.push_back({out.size() > first ? ET::kCharAlt : start_type, cp});
      if (at(p) == '-' && !eof(p + 1) && src_[p + 1] != ']') {
        uint32_t hi;
        const size_t range_pos = p + 1;
        p = parse_char(p + 1, &hi);
        if (hi < cp) fail(range_pos, "character range is reversed");
        out.push_back({ET::kCharRngUpper, hi});
      }
    }
    if (out.size() == first) fail(open, "empty character class");
    return p + 1;
  }

  // A rule name at p (defined now or later); returns the position after it.
  size_t parse_rule_ref(size_t p, std::vector<GrammarElem>& out) {
    const size_t name_end = parse_name(p);
    const uint32_t id = symbol_id(std::string(src_.substr(p, name_end - p)), p);
    out.push_back({ET::kRuleRef, id});
    return name_end;
  }

  // ( alternatives ) at p, as a generated rule; sets last_start to the reference appended to out
  // and returns the position after the closing parenthesis.
  size_t parse_group(size_t p, const std::string& rule_name, std::vector<GrammarElem>& out, size_t& last_start) {
    const size_t open = p;
    // Groups are parsed recursively: bound the depth, not the stack.
    if (++group_depth_ > kMaxGroupDepth) fail(open, "groups nested more than " + std::to_string(kMaxGroupDepth) + " deep");
    p = parse_space(p + 1, true);
    const uint32_t sub = generate_symbol(rule_name, open);
    p = parse_alternates(p, rule_name, sub, true);
    --group_depth_;
    last_start = out.size();
    out.push_back({ET::kRuleRef, sub});
    if (at(p) != ')') fail(eof(p) ? open : p, eof(p) ? "unclosed '('" : "expecting ')'");
    return p + 1;
  }

  // {m}, {m,} or {m,n} at p, applied to the item at out[last_start..]; returns the position after
  // the closing brace.
  size_t parse_braced_repetition(size_t p, const std::string& rule_name, std::vector<GrammarElem>& out, size_t last_start,
                                 bool nested) {
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
    return p + 1;
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
      vocab::unicode::append_utf8(out, cp);
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

}  // namespace loom::sample

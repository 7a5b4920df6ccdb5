// Tool-call parsing helpers: whitespace and literal scanning, where a JSON value ends and its
// prefixes so far, a call from a JSON object, reasoning split out of the text, call ids.
#include <algorithm>
#include <cctype>

#include "chat/tool_calls_internal.h"

namespace loom::chat {
using namespace detail;  // the tool-call internals (tool_calls_internal.h)

namespace {

constexpr std::string_view kWs = " \t\r\n";

// --- ids -------------------------------------------------------------------------------------

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

}  // namespace

namespace detail {

std::string_view lstrip(std::string_view s) {
  const size_t p = s.find_first_not_of(kWs);
  return p == std::string_view::npos ? std::string_view() : s.substr(p);
}

std::string_view rstrip(std::string_view s) {
  const size_t p = s.find_last_not_of(kWs);
  return p == std::string_view::npos ? std::string_view() : s.substr(0, p + 1);
}

std::string_view strip(std::string_view s) { return rstrip(lstrip(s)); }

size_t skip_ws(std::string_view s, size_t pos) {
  while (pos < s.size() && kWs.find(s[pos]) != std::string_view::npos) ++pos;
  return pos;
}

bool at(std::string_view s, size_t pos, std::string_view lit) { return pos <= s.size() && s.substr(pos).starts_with(lit); }

// Where the JSON value starting at s[pos] ends (one past it), npos when it is cut off or cannot be
// a JSON value. Only the structure is checked here; json::parse checks the rest. *cut_off (when
// given) says whether the value runs into the end of `s` unfinished, so that more text could
// complete it: an open object, array or string, nothing at all yet, or a scalar that reaches the
// end (more digits may follow; such a scalar still ends at s.size() here).
size_t json_value_end(std::string_view s, size_t pos, bool* cut_off) {
  if (cut_off) *cut_off = false;
  if (pos >= s.size()) {
    if (cut_off) *cut_off = true;
    return std::string_view::npos;
  }
  const char c0 = s[pos];
  if (c0 == '{' || c0 == '[' || c0 == '"') {
    std::vector<char> stack;
    bool in_string = false;
    for (size_t i = pos; i < s.size(); ++i) {
      const char c = s[i];
      if (in_string) {
        if (c == '\\') {
          ++i;
        } else if (c == '"') {
          in_string = false;
          if (stack.empty()) return i + 1;
        }
        continue;
      }
      switch (c) {
        case '"': in_string = true; break;
        case '{': stack.push_back('}'); break;
        case '[': stack.push_back(']'); break;
        case '}':
        case ']':
          if (stack.empty() || stack.back() != c) return std::string_view::npos;
          stack.pop_back();
          if (stack.empty()) return i + 1;
          break;
        default: break;
      }
    }
    if (cut_off) *cut_off = true;
    return std::string_view::npos;
  }
  // Scalars: up to the next delimiter.
  size_t i = pos;
  while (i < s.size() && std::string_view(",}]): \t\r\n").find(s[i]) == std::string_view::npos) ++i;
  if (cut_off) *cut_off = i == s.size();
  return i == pos ? std::string_view::npos : i;
}

// Partial parsing: whether the JSON value at s[pos] may still be completed by more text.
bool json_cut_off(std::string_view s, size_t pos) {
  bool cut = false;
  (void)json_value_end(s, pos, &cut);
  return cut;
}

// The JSON value at s[pos] and where it ends.
std::optional<json> json_at(std::string_view s, size_t pos, size_t* end) {
  const size_t e = json_value_end(s, pos);
  if (e == std::string_view::npos) return std::nullopt;
  json v = json::parse(s.substr(pos, e - pos), nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) return std::nullopt;
  *end = e;
  return v;
}

bool is_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// The text of the JSON string that starts at s[pos] == '"', as far as `s` goes: up to its closing
// quote, or up to the end of `s` without an escape that is cut off there (a \u escape, or a high
// surrogate whose low half has not come yet) or malformed. nullopt when even that is not JSON
// (a raw control character).
std::optional<std::string> json_string_prefix(std::string_view s, size_t pos) {
  size_t safe = pos + 1;  // one past the last complete character or escape
  size_t i = pos + 1;
  bool closed = false;
  while (i < s.size()) {
    const char c = s[i];
    if (c == '"') {
      closed = true;
      break;
    }
    if (c != '\\') {
      safe = ++i;
      continue;
    }
    if (i + 1 >= s.size()) break;
    if (s[i + 1] != 'u') {
      if (std::string_view("\"\\/bfnrt").find(s[i + 1]) == std::string_view::npos) break;
      i += 2;
      safe = i;
      continue;
    }
    // \uXXXX, a high surrogate only with its low half: stop before one that is cut off (or, in
    // text no grammar made, malformed: the whole parse decides about that one).
    const auto unit_at = [&](size_t k) -> long {
      if (k + 6 > s.size() || s[k] != '\\' || s[k + 1] != 'u') return -1;
      for (size_t h = k + 2; h < k + 6; ++h)
        if (!is_hex(s[h])) return -1;
      return std::stol(std::string(s.substr(k + 2, 4)), nullptr, 16);
    };
    const long unit = unit_at(i);
    if (unit < 0 || (unit >= 0xDC00 && unit <= 0xDFFF)) break;
    if (unit >= 0xD800 && unit <= 0xDBFF) {
      const long low = unit_at(i + 6);
      if (low < 0xDC00 || low > 0xDFFF) break;
      i += 12;
    } else {
      i += 6;
    }
    safe = i;
  }
  std::string quoted(s.substr(pos, (closed ? i : safe) - pos));
  quoted += '"';
  json v = json::parse(quoted, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded() || !v.is_string()) return std::nullopt;
  return v.get<std::string>();
}

// Partial parsing: the compact text json::dump gives the JSON value at s[pos], as far as `s`
// determines it: structure and complete scalars as dump writes them, a string as far as it goes
// (escaped as dump escapes it, without an escape the end of `s` cuts off), no whitespace; it stops
// before a number or literal that more text may still extend, and at text that is not JSON (the
// full parse decides about that). So for the prefixes of one value, each result is a prefix of the
// next and of the complete value's dump.
std::string json_compact_prefix(std::string_view s, size_t pos) {
  std::string out;
  int depth = 0;
  size_t i = pos;
  try {
    while (i < s.size()) {
      const char c = s[i];
      if (kWs.find(c) != std::string_view::npos) {
        ++i;
        continue;
      }
      if (c == '{' || c == '[') {
        out += c;
        ++depth;
        ++i;
        continue;
      }
      if (c == '}' || c == ']') {
        out += c;
        ++i;
        if (--depth <= 0) return out;
        continue;
      }
      if (c == ',' || c == ':') {
        if (depth == 0) return out;
        out += c;
        ++i;
        continue;
      }
      bool cut = false;
      const size_t end = json_value_end(s, i, &cut);
      if (c == '"' && cut) {
        auto prefix = json_string_prefix(s, i);
        if (!prefix) return out;
        std::string d = json(*prefix).dump();
        d.pop_back();  // its closing quote has not come yet
        return out + d;
      }
      if (cut || end == std::string_view::npos) return out;  // a scalar more text may extend
      json v = json::parse(s.substr(i, end - i), nullptr, /*allow_exceptions=*/false);
      if (v.is_discarded()) return out;
      out += v.dump();
      i = end;
      if (depth == 0) return out;
    }
  } catch (const json::exception&) {
    // A string that is not UTF-8: what came before it.
  }
  return out;
}

// Arguments as compact JSON text: an object, or a string holding one.
std::optional<std::string> arguments_text(const json& a) {
  if (a.is_object()) return a.dump();
  if (a.is_string()) {
    const std::string& s = a.get_ref<const std::string&>();
    if (strip(s).empty()) return std::string("{}");
    json v = json::parse(s, nullptr, false);
    if (!v.is_discarded() && v.is_object()) return v.dump();
  }
  return std::nullopt;
}

// {"name": ..., "arguments" | "parameters": ..., "id"?: ...}
std::optional<ToolCall> call_from_object(const json& o) {
  if (!o.is_object()) return std::nullopt;
  auto n = o.find("name");
  if (n == o.end() || !n->is_string() || n->get_ref<const std::string&>().empty()) return std::nullopt;
  ToolCall tc;
  tc.name = n->get<std::string>();
  auto a = o.find("arguments");
  if (a == o.end()) a = o.find("parameters");
  if (a == o.end()) {
    tc.arguments = "{}";
  } else {
    auto t = arguments_text(*a);
    if (!t) return std::nullopt;
    tc.arguments = std::move(*t);
  }
  auto id = o.find("id");
  if (id != o.end() && id->is_string()) tc.id = id->get<std::string>();
  return tc;
}

// Partial parsing: `s` without a tail that may be the beginning of one of `marks` (a proper,
// non-empty prefix of one), then without trailing whitespace. What is held back this way is shown
// once the text after it says what it is.
std::string_view hold_tail(std::string_view s, std::span<const std::string_view> marks) {
  size_t cut = s.size();
  for (std::string_view m : marks) {
    for (size_t n = std::min(m.size() - 1, s.size()); n > 0; --n) {
      if (s.ends_with(m.substr(0, n))) {
        cut = std::min(cut, s.size() - n);
        break;
      }
    }
  }
  return rstrip(s.substr(0, cut));
}

// Takes a leading reasoning block off `text`. partial: an unclosed block's text so far leaves out a
// tail that may be the start of its closing tag, and a message that so far is only the beginning
// of an opening tag ("<thi") is held back entirely (empty body).
ReasoningSplit split_reasoning(std::string_view text, bool forced_open, bool partial) {
  struct Tags {
    std::string_view open, close;
  };
  static constexpr Tags kTags[] = {{"<think>", "</think>"}, {"[THINK]", "[/THINK]"}, {"<|channel>thought", "<channel|>"}};
  ReasoningSplit r;
  r.body = text;
  const auto block = [&](std::string_view open, std::string_view close, std::string_view inner) {
    r.open = open;
    r.close = close;
    const size_t p = inner.find(close);
    if (p == std::string_view::npos) {
      const std::string_view marks[] = {close};
      r.reasoning = std::string(partial ? hold_tail(lstrip(inner), marks) : strip(inner));
      r.body = {};
      return;
    }
    r.reasoning = std::string(strip(inner.substr(0, p)));
    r.closed = true;
    r.body = lstrip(inner.substr(p + close.size()));
  };
  const std::string_view t = lstrip(text);
  for (const Tags& tg : kTags) {
    if (t.starts_with(tg.open)) {
      block(tg.open, tg.close, t.substr(tg.open.size()));
      return r;
    }
    if (partial && !t.empty() && tg.open.starts_with(t)) {
      r.body = {};
      return r;
    }
  }
  if (forced_open) {
    // The block the prompt opened ends at the first closing tag of any kind (Ministral 3 and Gemma 4
    // continue their own).
    const Tags* tg = nullptr;
    size_t first = std::string_view::npos;
    for (const Tags& t : kTags) {
      const size_t p = text.find(t.close);
      if (p < first) {
        first = p;
        tg = &t;
      }
    }
    if (tg) {
      block(tg->open, tg->close, text);
    } else {
      static constexpr std::string_view kCloses[] = {"</think>", "[/THINK]", "<channel|>"};
      r.open = "<think>";
      r.close = "</think>";
      r.reasoning = std::string(partial ? hold_tail(lstrip(text), kCloses) : strip(text));
      r.body = {};
    }
  }
  return r;
}

// `text`: the output up to the end of the call (Hermes: up to its start, so that the call keeps its
// id while it streams cut off), so that a call streamed by a partial parse keeps its id as the
// output grows.
std::string make_id(ToolCallFormat f, std::string_view text, size_t index, uint64_t seed) {
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  const bool mistral = f == ToolCallFormat::kMistral || f == ToolCallFormat::kMistralArgs;
  uint64_t h = splitmix64(fnv1a(text) ^ splitmix64(seed)) ^ splitmix64(uint64_t(index) + 0x632BE59BD9B4E019ull);
  std::string s = mistral ? "" : "call_";
  const size_t n = mistral ? 9 : 24;
  for (size_t i = 0; i < n; ++i) {
    h = splitmix64(h);
    s.push_back(kAlnum[h % 62]);
  }
  return s;
}

}  // namespace detail

}  // namespace loom::chat

#include "chat/tool_calls.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <span>

#include "sample/grammar.h"
#include "sample/json_schema.h"

namespace loom::chat {
namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kWs = " \t\r\n";

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
size_t json_value_end(std::string_view s, size_t pos, bool* cut_off = nullptr) {
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

// --- reasoning -----------------------------------------------------------------------------

struct ReasoningSplit {
  std::string reasoning;         // the block's text, whitespace stripped
  std::string_view open, close;  // its tags (empty: no block)
  bool closed = false;
  std::string_view body;  // the text after the block (all of it when there is none)
};

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

// --- per-format parsers ----------------------------------------------------------------------
// Each returns the calls it read from `s` (already without reasoning) with where each ends, the
// content before the first call, and `rest`: the text after the last call read (malformed calls
// included). With `partial`, a call that the end of `s` cuts off (and a bare JSON reply that may
// yet be a call) is not read: `held` is where that text begins, and everything from there is held
// back from the content until more text decides it.

struct Scan {
  std::vector<ToolCall> calls;
  std::vector<size_t> ends;    // where each call ends in s
  std::vector<size_t> starts;  // where each call starts, when its id is made from the text before it
  // Partial (Hermes): the call the end of s cuts off, once its name is known, with the beginning of
  // its arguments (json_compact_prefix), and where it starts.
  std::optional<ToolCall> pending;
  size_t pending_start = 0;
  std::string_view before;
  std::string_view rest;
  size_t held = std::string_view::npos;

  void add(ToolCall tc, size_t end, size_t start = std::string_view::npos) {
    calls.push_back(std::move(tc));
    ends.push_back(end);
    starts.push_back(start);
  }
};

// Calls written as JSON objects one after another (separated by whitespace or ';'), from pos.
// partial: *held is set where a cut-off object begins.
size_t read_json_calls(std::string_view s, size_t pos, Scan* r, bool partial) {
  for (;;) {
    const size_t p = skip_ws(s, pos);
    if (p >= s.size() || s[p] != '{') return pos;
    if (partial && json_cut_off(s, p)) {
      r->held = p;
      return pos;
    }
    size_t end = 0;
    auto v = json_at(s, p, &end);
    if (!v) return pos;
    auto tc = call_from_object(*v);
    if (!tc) return pos;
    r->add(std::move(*tc), end);
    pos = end;
    const size_t q = skip_ws(s, pos);
    if (q < s.size() && s[q] == ';') pos = q + 1;
  }
}

// Whether the text from pos to the end is a beginning (possibly empty) of `lit`.
bool prefix_of(std::string_view s, size_t pos, std::string_view lit) {
  return pos <= s.size() && lit.starts_with(s.substr(pos));
}

// A whole message that is one bare JSON call (Hermes' {"name", "arguments"}, Mistral's [{...}]):
// partial holds it (and what may still become it) back, since text after it would make it content.
// Returns whether it was handled.
template <typename Read>
bool bare_reply(std::string_view s, bool partial, char open, Scan* r, Read&& read) {
  const size_t b = skip_ws(s, 0);
  if (b >= s.size() || s[b] != open) return false;
  if (partial && json_cut_off(s, b)) {
    r->held = b;
    return true;
  }
  const std::string_view t = rstrip(s.substr(b));
  size_t end = 0;
  auto v = json_at(t, 0, &end);
  if (!v || end != t.size()) return false;
  std::vector<ToolCall> calls;
  if (!read(*v, &calls)) return false;
  if (partial) {
    r->held = b;
  } else {
    for (auto& tc : calls) r->add(std::move(tc), b + end);
  }
  return true;
}

// Partial: a Hermes call that the end of s cuts off at pos ("<tool_call>{"name": ..., "arguments":
// {..." or "<function=name>{..."), once its name is known and its arguments object has begun.
std::optional<ToolCall> pending_hermes(std::string_view s, size_t pos) {
  auto key_string = [&](size_t p, size_t end) -> std::optional<std::string> {
    json v = json::parse(s.substr(p, end - p), nullptr, /*allow_exceptions=*/false);
    if (v.is_discarded() || !v.is_string()) return std::nullopt;
    return v.get<std::string>();
  };
  if (at(s, pos, "<function=")) {
    const size_t gt = s.find('>', pos);
    if (gt == std::string_view::npos) return std::nullopt;
    const std::string name(strip(s.substr(pos + 10, gt - pos - 10)));
    const size_t p = skip_ws(s, gt + 1);
    if (name.empty() || p >= s.size() || s[p] != '{') return std::nullopt;
    return ToolCall{"", name, json_compact_prefix(s, p)};
  }
  if (!at(s, pos, "<tool_call>")) return std::nullopt;
  size_t p = skip_ws(s, pos + 11);
  if (p >= s.size() || s[p] != '{') return std::nullopt;
  ++p;
  std::string name;
  for (;;) {
    p = skip_ws(s, p);
    if (p >= s.size() || s[p] != '"') return std::nullopt;
    bool cut = false;
    const size_t kend = json_value_end(s, p, &cut);
    if (cut || kend == std::string_view::npos) return std::nullopt;
    const auto key = key_string(p, kend);
    if (!key) return std::nullopt;
    p = skip_ws(s, kend);
    if (p >= s.size() || s[p] != ':') return std::nullopt;
    p = skip_ws(s, p + 1);
    if (p >= s.size()) return std::nullopt;
    if (*key == "arguments" || *key == "parameters") {
      // Streamed only as an object after the name (a string holding JSON waits for the end).
      if (name.empty() || s[p] != '{') return std::nullopt;
      return ToolCall{"", name, json_compact_prefix(s, p)};
    }
    const size_t vend = json_value_end(s, p, &cut);
    if (cut || vend == std::string_view::npos) return std::nullopt;
    if (*key == "name") {
      const auto n = key_string(p, vend);
      if (!n || n->empty()) return std::nullopt;
      name = *n;
    }
    p = skip_ws(s, vend);
    if (p >= s.size() || s[p] != ',') return std::nullopt;
    ++p;
  }
}

Scan scan_hermes(std::string_view s, bool partial) {
  Scan r;
  const size_t a = s.find("<tool_call>"), b = s.find("<function=");
  const size_t start = std::min(a, b);
  if (start == std::string_view::npos) {
    // A bare {"name": ..., "arguments": ...} reply.
    const bool bare = bare_reply(s, partial, '{', &r, [](const json& v, std::vector<ToolCall>* out) {
      auto tc = call_from_object(v);
      if (tc) out->push_back(std::move(*tc));
      return tc.has_value();
    });
    if (!bare || r.calls.empty()) r.before = s;
    return r;
  }
  r.before = s.substr(0, start);
  size_t pos = start;
  for (;;) {
    size_t p = pos;
    std::optional<ToolCall> tc;
    bool cut = false;  // partial: the end of s cuts this call off
    if (at(s, p, "<tool_call>")) {
      p = skip_ws(s, p + 11);
      cut = partial && json_cut_off(s, p);
      size_t end = 0;
      auto v = cut ? std::nullopt : json_at(s, p, &end);
      if (v) tc = call_from_object(*v);
      if (tc) {
        p = skip_ws(s, end);
        if (at(s, p, "</tool_call>")) p += 12;
        else if (partial && prefix_of(s, p, "</tool_call>")) cut = true;
        else if (p != s.size()) tc.reset();  // the output may end where the server stopped
      }
    } else if (at(s, p, "<function=")) {
      const size_t gt = s.find('>', p);
      if (gt == std::string_view::npos) {
        cut = partial;
      } else {
        const std::string name(strip(s.substr(p + 10, gt - p - 10)));
        p = skip_ws(s, gt + 1);
        cut = partial && json_cut_off(s, p);
        size_t end = 0;
        auto v = cut ? std::nullopt : json_at(s, p, &end);
        if (!name.empty() && v && v->is_object()) {
          tc = ToolCall{"", name, v->dump()};
          p = skip_ws(s, end);
          if (at(s, p, "</function>")) p += 11;
          else if (partial && prefix_of(s, p, "</function>")) cut = true;
          else if (p != s.size()) tc.reset();
        }
      }
    }
    if (cut) {
      r.held = pos;
      r.pending = pending_hermes(s, pos);
      r.pending_start = pos;
      break;
    }
    if (!tc) break;
    r.add(std::move(*tc), p, pos);
    pos = p;
    const size_t q = skip_ws(s, pos);
    if (!at(s, q, "<tool_call>") && !at(s, q, "<function=")) break;
    pos = q;
  }
  r.rest = s.substr(pos);
  return r;
}

// --- kQwenXml ----------------------------------------------------------------------------------

// How a parameter's text becomes its value, from the function's schema (llama.cpp's rule).
enum class XmlValue { kJson, kString, kEither };

XmlValue xml_value_kind(const json& tools, const std::string& fn, const std::string& param) {
  if (!tools.is_array()) return XmlValue::kEither;
  for (const json& t : tools) {
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object()) continue;
    const json& f = t["function"];
    if (!f.contains("name") || f["name"] != fn) continue;
    const json* props = f.contains("parameters") && f["parameters"].is_object() && f["parameters"].contains("properties")
                            ? &f["parameters"]["properties"]
                            : nullptr;
    if (!props || !props->is_object() || !props->contains(param) || !(*props)[param].is_object()) return XmlValue::kEither;
    const json& s = (*props)[param];
    std::vector<std::string> types;
    if (s.contains("type") && s["type"].is_string()) types.push_back(s["type"]);
    if (s.contains("type") && s["type"].is_array())
      for (const json& x : s["type"])
        if (x.is_string()) types.push_back(x);
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!s.contains(k) || !s[k].is_array()) continue;
      for (const json& alt : s[k])
        if (alt.is_object() && alt.contains("type") && alt["type"].is_string()) types.push_back(alt["type"]);
    }
    if (s.contains("enum") && types.empty()) types.push_back("string");  // an enum of strings, usually
    if (types.empty()) return XmlValue::kEither;
    const bool str = std::find(types.begin(), types.end(), "string") != types.end();
    if (!str) return XmlValue::kJson;
    return types.size() == 1 ? XmlValue::kString : XmlValue::kEither;
  }
  return XmlValue::kEither;
}

// Compact JSON as dump writes it; text that is not UTF-8 (a raw parameter) gets U+FFFD, the same
// way in every partial parse and in the final one.
std::string compact(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

// A parameter's text as its JSON value (nullopt: kJson text that is not JSON).
std::optional<json> xml_value(std::string_view text, XmlValue kind) {
  if (kind == XmlValue::kString) return json(std::string(text));
  json v = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!v.is_discarded()) return v;
  if (kind == XmlValue::kJson) return std::nullopt;
  return json(std::string(text));
}

// One call from pos ("<tool_call>" or a bare "<function="): the call and where it ends, or, with
// `partial` and a call the end of s cuts off, *cut set and `pending` filled as far as it goes
// (name known: the arguments so far, as a prefix of their final compact JSON).
std::optional<ToolCall> read_xml_call(std::string_view s, size_t pos, const json& tools, bool partial, size_t* end,
                                      bool* cut, std::optional<ToolCall>* pending) {
  *cut = false;
  size_t p = pos;
  const bool wrapped = at(s, p, "<tool_call>");
  if (wrapped) p = skip_ws(s, p + 11);
  auto cut_here = [&](std::string_view lit) { return partial && prefix_of(s, p, lit); };
  if (!at(s, p, "<function=")) {
    *cut = cut_here("<function=");
    return std::nullopt;
  }
  const size_t gt = s.find('>', p);
  const size_t nl = s.find('\n', p);
  if (gt == std::string_view::npos || (nl != std::string_view::npos && nl < gt)) {
    *cut = partial && gt == std::string_view::npos && nl == std::string_view::npos;
    return std::nullopt;
  }
  ToolCall tc;
  tc.name = std::string(strip(s.substr(p + 10, gt - p - 10)));
  if (tc.name.empty()) return std::nullopt;
  p = skip_ws(s, gt + 1);
  json args = json::object();
  std::string streamed = "{";  // the arguments so far, compact (partial)
  bool first = true;
  for (;;) {
    if (at(s, p, "</function>")) {
      p += 11;
      break;
    }
    if (!at(s, p, "<parameter=")) {
      if (partial && (p >= s.size() || prefix_of(s, p, "</function>") || prefix_of(s, p, "<parameter="))) {
        *cut = true;
        *pending = ToolCall{"", tc.name, streamed};
      }
      return std::nullopt;
    }
    const size_t kgt = s.find('>', p);
    if (kgt == std::string_view::npos) {
      if (partial) {
        *cut = true;
        *pending = ToolCall{"", tc.name, streamed};
      }
      return std::nullopt;
    }
    const std::string key(strip(s.substr(p + 11, kgt - p - 11)));
    if (key.empty()) return std::nullopt;
    size_t v = kgt + 1;
    if (v < s.size() && s[v] == '\n') ++v;
    const size_t close = s.find("</parameter>", v);
    const XmlValue kind = xml_value_kind(tools, tc.name, key);
    if (close == std::string_view::npos) {
      if (!partial) return std::nullopt;
      *cut = true;
      // A string parameter streams its text, all but a last newline (it may precede the closing
      // tag, which drops it); other values wait for their end.
      std::string so_far = streamed;
      if (kind == XmlValue::kString && v <= s.size()) {
        std::string_view text = s.substr(std::min(v, s.size()));
        if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
        const size_t lt = text.rfind('<');
        if (lt != std::string_view::npos && std::string_view("</parameter>").starts_with(text.substr(lt)))
          text = text.substr(0, lt);
        if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
        std::string d = compact(json(std::string(text)));
        d.pop_back();
        so_far += (first ? "" : ",") + compact(json(key)) + ":" + d;
      }
      *pending = ToolCall{"", tc.name, so_far};
      return std::nullopt;
    }
    std::string_view text = s.substr(v, close - v);
    if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
    auto value = xml_value(text, kind);
    if (!value) return std::nullopt;
    streamed += (first ? "" : ",") + compact(json(key)) + ":" + compact(*value);
    first = false;
    args[key] = std::move(*value);
    p = skip_ws(s, close + 12);
  }
  if (wrapped) {
    p = skip_ws(s, p);
    if (at(s, p, "</tool_call>")) {
      p += 12;
    } else if (partial && prefix_of(s, p, "</tool_call>")) {
      *cut = true;
      *pending = ToolCall{"", tc.name, compact(args)};
      return std::nullopt;
    } else if (p != s.size()) {
      return std::nullopt;
    }
  }
  tc.arguments = compact(args);
  *end = p;
  return tc;
}

Scan scan_qwen_xml(std::string_view s, bool partial, const json& tools) {
  Scan r;
  const size_t a = s.find("<tool_call>"), b = s.find("<function=");
  const size_t start = std::min(a, b);
  if (start == std::string_view::npos) {
    r.before = s;
    return r;
  }
  r.before = s.substr(0, start);
  size_t pos = start;
  for (;;) {
    size_t end = 0;
    bool cut = false;
    std::optional<ToolCall> pending;
    auto tc = read_xml_call(s, pos, tools, partial, &end, &cut, &pending);
    if (cut) {
      r.held = pos;
      r.pending = std::move(pending);
      r.pending_start = pos;
      break;
    }
    if (!tc) break;
    r.add(std::move(*tc), end, pos);
    pos = end;
    const size_t q = skip_ws(s, pos);
    if (!at(s, q, "<tool_call>") && !at(s, q, "<function=")) break;
    pos = q;
  }
  r.rest = s.substr(pos);
  return r;
}

// --- kLfm2 -------------------------------------------------------------------------------------
// <|tool_call_start|>[name(key="value", n=1, d={"a": [1, 2]}), other()]<|tool_call_end|>: Python
// call syntax with Python or JSON literals (llama.cpp's python_style_tool_calls with
// allow_json_literals), converted to JSON arguments.

constexpr std::string_view kLfm2Start = "<|tool_call_start|>";
constexpr std::string_view kLfm2End = "<|tool_call_end|>";

// `s` without a last UTF-8 character that is cut off.
std::string_view utf8_whole(std::string_view s) {
  size_t i = s.size(), back = 0;
  while (i > 0 && back < 4 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i, ++back;
  if (i == 0) return s;
  const unsigned char lead = static_cast<unsigned char>(s[i - 1]);
  const size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  return need > back + 1 ? s.substr(0, i - 1) : s;
}

struct PyValue {
  std::optional<json> value;   // nullopt: not a literal (or cut off)
  size_t end = 0;              // one past it
  bool cut = false;            // the end of the text cuts it off (more text may complete it)
  std::string partial_string;  // cut off inside a string: its text so far (whole escapes and characters)
  bool in_string = false;      // ... and the value is that string (not one nested in a container)
};

bool py_ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// A Python (or JSON) literal at s[pos]: a string in single or double quotes, a number, True / False
// / None, true / false / null, a dict or a list of them.
PyValue py_value(std::string_view s, size_t pos, int depth = 0) {
  PyValue r;
  pos = skip_ws(s, pos);
  if (pos >= s.size()) {
    r.cut = true;
    return r;
  }
  if (depth > 64) return r;
  const char c = s[pos];
  if (c == '"' || c == '\'') {
    std::string out;
    const auto cut_string = [&] {
      r.cut = true;
      r.in_string = true;
      r.partial_string = std::string(utf8_whole(out));
      return r;
    };
    size_t i = pos + 1;
    while (i < s.size() && s[i] != c) {
      if (s[i] != '\\') {
        out.push_back(s[i++]);
        continue;
      }
      if (i + 1 >= s.size()) return cut_string();  // an escape cut off
      const char e = s[i + 1];
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case '\\':
        case '\'':
        case '"':
        case '/': out += e; break;
        case 'u': {
          const auto unit_at = [&](size_t k) -> long {
            if (k + 6 > s.size() || s[k] != '\\' || s[k + 1] != 'u') return -1;
            for (size_t h = k + 2; h < k + 6; ++h)
              if (!is_hex(s[h])) return -1;
            return std::stol(std::string(s.substr(k + 2, 4)), nullptr, 16);
          };
          long cp = unit_at(i);
          size_t len = 6;
          if (cp < 0 || (cp >= 0xDC00 && cp <= 0xDFFF)) {
            if (i + 6 > s.size()) return cut_string();  // cut off (or malformed: decided at the end)
            return r;
          }
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            const long low = unit_at(i + 6);
            if (low < 0xDC00 || low > 0xDFFF) {
              if (i + 12 > s.size()) return cut_string();
              return r;
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
            len = 12;
          }
          const uint32_t u = uint32_t(cp);
          if (u < 0x80) {
            out.push_back(char(u));
          } else if (u < 0x800) {
            out.push_back(char(0xC0 | (u >> 6)));
            out.push_back(char(0x80 | (u & 0x3F)));
          } else if (u < 0x10000) {
            out.push_back(char(0xE0 | (u >> 12)));
            out.push_back(char(0x80 | ((u >> 6) & 0x3F)));
            out.push_back(char(0x80 | (u & 0x3F)));
          } else {
            out.push_back(char(0xF0 | (u >> 18)));
            out.push_back(char(0x80 | ((u >> 12) & 0x3F)));
            out.push_back(char(0x80 | ((u >> 6) & 0x3F)));
            out.push_back(char(0x80 | (u & 0x3F)));
          }
          i += len;
          continue;
        }
        default:  // Python keeps an unknown escape as written
          out += '\\';
          out += e;
      }
      i += 2;
    }
    if (i >= s.size()) return cut_string();
    r.value = json(std::move(out));
    r.end = i + 1;
    return r;
  }
  if (c == '{' || c == '[') {
    const char close = c == '{' ? '}' : ']';
    json v = c == '{' ? json::object() : json::array();
    size_t p = skip_ws(s, pos + 1);
    for (;;) {
      if (p >= s.size()) {
        r.cut = true;
        return r;
      }
      if (s[p] == close) break;
      if (c == '{') {
        PyValue k = py_value(s, p, depth + 1);
        if (k.cut) {
          r.cut = true;
          return r;
        }
        if (!k.value || !k.value->is_string()) return r;
        p = skip_ws(s, k.end);
        if (p >= s.size()) {
          r.cut = true;
          return r;
        }
        if (s[p] != ':') return r;
        PyValue e = py_value(s, p + 1, depth + 1);
        if (e.cut) {
          r.cut = true;
          return r;
        }
        if (!e.value) return r;
        v[k.value->get<std::string>()] = std::move(*e.value);
        p = e.end;
      } else {
        PyValue e = py_value(s, p, depth + 1);
        if (e.cut) {
          r.cut = true;
          return r;
        }
        if (!e.value) return r;
        v.push_back(std::move(*e.value));
        p = e.end;
      }
      p = skip_ws(s, p);
      if (p >= s.size()) {
        r.cut = true;
        return r;
      }
      if (s[p] == ',') p = skip_ws(s, p + 1);
      else if (s[p] != close) return r;
    }
    r.value = std::move(v);
    r.end = p + 1;
    return r;
  }
  // A number or a word: up to the next delimiter.
  size_t e = pos;
  while (e < s.size() && (py_ident_char(s[e]) || s[e] == '.' || s[e] == '+' || s[e] == '-')) ++e;
  if (e == s.size()) {  // more characters may follow
    r.cut = true;
    return r;
  }
  const std::string_view w = s.substr(pos, e - pos);
  static const std::pair<std::string_view, json> kWords[] = {{"True", true}, {"False", false}, {"None", nullptr},
                                                             {"true", true}, {"false", false}, {"null", nullptr}};
  for (const auto& [word, val] : kWords) {
    if (w == word) {
      r.value = val;
      r.end = e;
      return r;
    }
  }
  if (w.empty() || !(w[0] == '-' || std::isdigit(static_cast<unsigned char>(w[0])))) return r;
  json v = json::parse(w, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded() || !v.is_number()) return r;
  r.value = std::move(v);
  r.end = e;
  return r;
}

// One call name(key=value, ...) from pos: the call and where it ends, or, with `partial` and a
// call the end of s cuts off, *cut set and `pending` filled once the name and "(" have come (the
// arguments so far, as a prefix of their final compact JSON: whole arguments, then a string
// argument's text so far).
std::optional<ToolCall> read_lfm2_call(std::string_view s, size_t pos, bool partial, size_t* end, bool* cut,
                                       std::optional<ToolCall>* pending) {
  *cut = false;
  size_t p = pos;
  while (p < s.size() && (py_ident_char(s[p]) || s[p] == '.' || s[p] == '-')) ++p;
  if (p == s.size()) {
    *cut = partial;
    return std::nullopt;
  }
  if (p == pos || s[p] != '(') return std::nullopt;
  ToolCall tc;
  tc.name = std::string(s.substr(pos, p - pos));
  json args = json::object();
  std::string streamed = "{";
  const auto cut_off = [&](const std::string& extra) {
    if (partial) {
      *cut = true;
      *pending = ToolCall{"", tc.name, streamed + extra};
    }
    return std::nullopt;
  };
  p = skip_ws(s, p + 1);
  for (;;) {
    if (p >= s.size()) return cut_off("");
    if (s[p] == ')') break;
    size_t k = p;
    while (k < s.size() && py_ident_char(s[k])) ++k;
    if (k == s.size()) return cut_off("");
    if (k == p) return std::nullopt;
    const std::string key(s.substr(p, k - p));
    if (args.contains(key)) return std::nullopt;
    p = skip_ws(s, k);
    if (p >= s.size()) return cut_off("");
    if (s[p] != '=') return std::nullopt;
    const std::string sep = args.empty() ? "" : ",";
    PyValue v = py_value(s, p + 1);
    if (v.cut) {
      if (!v.in_string) return cut_off("");
      std::string d = compact(json(v.partial_string));
      d.pop_back();  // its closing quote has not come yet
      return cut_off(sep + compact(json(key)) + ":" + d);
    }
    if (!v.value) return std::nullopt;
    streamed += sep + compact(json(key)) + ":" + compact(*v.value);
    args[key] = std::move(*v.value);
    p = skip_ws(s, v.end);
    if (p >= s.size()) return cut_off("");
    if (s[p] == ',') p = skip_ws(s, p + 1);
    else if (s[p] != ')') return std::nullopt;
  }
  tc.arguments = compact(args);
  *end = p + 1;
  return tc;
}

Scan scan_lfm2(std::string_view s, bool partial) {
  Scan r;
  const size_t start = s.find(kLfm2Start);
  if (start == std::string_view::npos) {
    r.before = s;
    return r;
  }
  r.before = s.substr(0, start);
  size_t pos = start;  // after the last call read (and its block's end, when closed)
  for (;;) {
    size_t p = skip_ws(s, pos + kLfm2Start.size());
    if (p >= s.size()) {
      if (partial) r.held = pos;
      break;
    }
    if (s[p] != '[') break;
    bool stop = false;  // the block is cut off or malformed after the calls read
    for (p = skip_ws(s, p + 1);;) {
      size_t end = 0;
      bool cut = false;
      std::optional<ToolCall> pending;
      auto tc = read_lfm2_call(s, p, partial, &end, &cut, &pending);
      if (cut) {
        r.held = pos;
        r.pending = std::move(pending);
        r.pending_start = p;
        stop = true;
        break;
      }
      if (!tc) {
        stop = true;
        break;
      }
      r.add(std::move(*tc), end, p);
      pos = end;
      p = skip_ws(s, end);
      if (p < s.size() && s[p] == ',') {
        p = skip_ws(s, p + 1);
        continue;
      }
      if (p < s.size() && s[p] == ']') {
        p = skip_ws(s, p + 1);
        if (at(s, p, kLfm2End)) pos = p + kLfm2End.size();
        else if (partial && prefix_of(s, p, kLfm2End)) r.held = pos;
        else if (p >= s.size()) pos = p;  // the output may end where the server stopped
        else stop = true;
      } else if (partial && p >= s.size()) {
        r.held = pos;
        stop = true;
      } else if (p < s.size()) {
        stop = true;
      }
      break;
    }
    if (stop || r.held != std::string_view::npos) break;
    const size_t q = skip_ws(s, pos);
    if (!at(s, q, kLfm2Start)) break;
    pos = q;
  }
  r.rest = s.substr(pos);
  return r;
}

// --- kGemma4 -----------------------------------------------------------------------------------
// <|tool_call>call:name{key:<|"|>text<|"|>,n:1,d:{a:[1,2]}}<tool_call|>: Gemma 4's own value
// syntax (llama.cpp's gemma4 parser), converted to JSON arguments.

constexpr std::string_view kGemma4Start = "<|tool_call>";
constexpr std::string_view kGemma4End = "<tool_call|>";
constexpr std::string_view kGemma4Quote = "<|\"|>";

bool g4_name_char(char c) { return py_ident_char(c) || c == '.' || c == '-'; }

// A Gemma 4 value at s[pos] (PyValue's fields: a string cut off gives its text so far, without a
// tail that may be the beginning of its closing <|"|>).
PyValue g4_value(std::string_view s, size_t pos, int depth = 0) {
  PyValue r;
  pos = skip_ws(s, pos);
  if (pos >= s.size() || (prefix_of(s, pos, kGemma4Quote) && pos + kGemma4Quote.size() > s.size())) {
    r.cut = true;
    return r;
  }
  if (depth > 64) return r;
  if (at(s, pos, kGemma4Quote)) {
    const size_t b = pos + kGemma4Quote.size();
    const size_t e = s.find(kGemma4Quote, b);
    if (e == std::string_view::npos) {
      std::string_view so_far = s.substr(b);
      for (size_t n = std::min(kGemma4Quote.size() - 1, so_far.size()); n > 0; --n) {
        if (so_far.ends_with(kGemma4Quote.substr(0, n))) {
          so_far.remove_suffix(n);
          break;
        }
      }
      r.cut = true;
      r.in_string = true;
      r.partial_string = std::string(utf8_whole(so_far));
      return r;
    }
    r.value = json(std::string(s.substr(b, e - b)));
    r.end = e + kGemma4Quote.size();
    return r;
  }
  const char c = s[pos];
  if (c == '{' || c == '[') {
    const char close = c == '{' ? '}' : ']';
    json v = c == '{' ? json::object() : json::array();
    size_t p = skip_ws(s, pos + 1);
    for (;;) {
      if (p >= s.size()) {
        r.cut = true;
        return r;
      }
      if (s[p] == close) break;
      if (c == '{') {
        // A bare key up to ':' (llama.cpp: [^:}]+); one written in <|"|> quotes is unquoted.
        size_t k = p;
        while (k < s.size() && s[k] != ':' && s[k] != '}') ++k;
        if (k >= s.size()) {
          r.cut = true;
          return r;
        }
        if (k == p || s[k] != ':') return r;
        std::string_view key = rstrip(s.substr(p, k - p));
        if (key.size() >= 2 * kGemma4Quote.size() && key.starts_with(kGemma4Quote) && key.ends_with(kGemma4Quote))
          key = key.substr(kGemma4Quote.size(), key.size() - 2 * kGemma4Quote.size());
        PyValue e = g4_value(s, k + 1, depth + 1);
        if (e.cut) {
          r.cut = true;
          return r;
        }
        if (!e.value) return r;
        v[std::string(key)] = std::move(*e.value);
        p = e.end;
      } else {
        PyValue e = g4_value(s, p, depth + 1);
        if (e.cut) {
          r.cut = true;
          return r;
        }
        if (!e.value) return r;
        v.push_back(std::move(*e.value));
        p = e.end;
      }
      p = skip_ws(s, p);
      if (p >= s.size()) {
        r.cut = true;
        return r;
      }
      if (s[p] == ',') p = skip_ws(s, p + 1);
      else if (s[p] != close) return r;
    }
    r.value = std::move(v);
    r.end = p + 1;
    return r;
  }
  // A number or a word: up to the next delimiter.
  size_t e = pos;
  while (e < s.size() && (py_ident_char(s[e]) || s[e] == '.' || s[e] == '+' || s[e] == '-')) ++e;
  if (e == s.size()) {  // more characters may follow
    r.cut = true;
    return r;
  }
  const std::string_view w = s.substr(pos, e - pos);
  static const std::pair<std::string_view, json> kWords[] = {
      {"true", true}, {"false", false}, {"null", nullptr}, {"None", nullptr}};
  for (const auto& [word, val] : kWords) {
    if (w == word) {
      r.value = val;
      r.end = e;
      return r;
    }
  }
  if (w.empty() || !(w[0] == '-' || std::isdigit(static_cast<unsigned char>(w[0])))) return r;
  json v = json::parse(w, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded() || !v.is_number()) return r;
  r.value = std::move(v);
  r.end = e;
  return r;
}

// One call name{key:value,...} from pos (after "call:"): the call and where its "}" ends, or,
// with `partial` and a call the end of s cuts off, *cut set and `pending` filled once the name
// and "{" have come (whole arguments, then a string argument's text so far).
std::optional<ToolCall> read_gemma4_call(std::string_view s, size_t pos, bool partial, size_t* end, bool* cut,
                                         std::optional<ToolCall>* pending) {
  *cut = false;
  size_t p = pos;
  while (p < s.size() && g4_name_char(s[p])) ++p;
  if (p == s.size()) {
    *cut = partial;
    return std::nullopt;
  }
  if (p == pos || s[p] != '{') return std::nullopt;
  ToolCall tc;
  tc.name = std::string(s.substr(pos, p - pos));
  json args = json::object();
  std::string streamed = "{";
  const auto cut_off = [&](const std::string& extra) {
    if (partial) {
      *cut = true;
      *pending = ToolCall{"", tc.name, streamed + extra};
    }
    return std::nullopt;
  };
  p = skip_ws(s, p + 1);
  for (;;) {
    if (p >= s.size()) return cut_off("");
    if (s[p] == '}') break;
    size_t k = p;
    while (k < s.size() && s[k] != ':' && s[k] != '}') ++k;
    if (k == s.size()) return cut_off("");
    if (k == p || s[k] != ':') return std::nullopt;
    std::string key(rstrip(s.substr(p, k - p)));
    if (key.size() >= 2 * kGemma4Quote.size() && key.starts_with(kGemma4Quote) && key.ends_with(kGemma4Quote))
      key = key.substr(kGemma4Quote.size(), key.size() - 2 * kGemma4Quote.size());
    if (key.empty() || args.contains(key)) return std::nullopt;
    const std::string sep = args.empty() ? "" : ",";
    PyValue v = g4_value(s, k + 1);
    if (v.cut) {
      if (!v.in_string) return cut_off("");
      std::string d = compact(json(v.partial_string));
      d.pop_back();  // its closing quote has not come yet
      return cut_off(sep + compact(json(key)) + ":" + d);
    }
    if (!v.value) return std::nullopt;
    streamed += sep + compact(json(key)) + ":" + compact(*v.value);
    args[key] = std::move(*v.value);
    p = skip_ws(s, v.end);
    if (p >= s.size()) return cut_off("");
    if (s[p] == ',') p = skip_ws(s, p + 1);
    else if (s[p] != '}') return std::nullopt;
  }
  tc.arguments = compact(args);
  *end = p + 1;
  return tc;
}

Scan scan_gemma4(std::string_view s, bool partial) {
  Scan r;
  const size_t start = s.find(kGemma4Start);
  if (start == std::string_view::npos) {
    r.before = s;
    return r;
  }
  r.before = s.substr(0, start);
  size_t pos = start;  // after the last call read (and its <tool_call|>)
  for (;;) {
    const size_t p = pos + kGemma4Start.size();
    if (!at(s, p, "call:")) {
      if (partial && prefix_of(s, p, "call:")) r.held = pos;
      break;
    }
    size_t end = 0;
    bool cut = false;
    std::optional<ToolCall> pending;
    auto tc = read_gemma4_call(s, p + 5, partial, &end, &cut, &pending);
    if (cut) {
      r.held = pos;
      r.pending = std::move(pending);
      r.pending_start = pos;
      break;
    }
    if (!tc) break;
    // Complete at its "}"; <tool_call|> follows (or the output ends where the server stopped).
    r.add(std::move(*tc), end, pos);
    const size_t q = skip_ws(s, end);
    pos = end;
    if (at(s, q, kGemma4End)) {
      pos = q + kGemma4End.size();
    } else if (partial && q < s.size() && prefix_of(s, q, kGemma4End)) {
      r.held = end;
      break;
    }
    const size_t n = skip_ws(s, pos);
    if (!at(s, n, kGemma4Start)) {
      if (partial && n < s.size() && prefix_of(s, n, kGemma4Start)) r.held = pos;
      break;
    }
    pos = n;
  }
  r.rest = s.substr(pos);
  return r;
}

// Gemma 4's channel markers in the content (see the header): <|channel>...<channel|> blocks are
// taken out (a thought's text added to *reasoning), the content ends at a <channel|> that closes
// no block; partial: an unclosed block is held back, and with `hold_tail` (Gemma 4's output) a tail
// that may begin a marker.
constexpr std::string_view kChannelOpen = "<|channel>";
constexpr std::string_view kChannelClose = "<channel|>";

void gemma_channels(std::string* content, std::string* reasoning, bool partial, bool hold_tail) {
  std::string& c = *content;
  if (c.find('<') == std::string::npos) return;
  size_t from = 0;
  for (;;) {
    const size_t o = c.find(kChannelOpen, from), x = c.find(kChannelClose, from);
    if (o == std::string::npos && x == std::string::npos) break;
    if (x < o) {  // closes no block
      c.resize(x);
      return;
    }
    const size_t body = o + kChannelOpen.size();
    std::string_view inner = std::string_view(c).substr(body);
    const size_t close = inner.find(kChannelClose);
    if (close != std::string_view::npos) inner = inner.substr(0, close);
    std::string_view text = inner;
    if (text.starts_with("thought")) text.remove_prefix(7);
    if (close == std::string_view::npos) {
      if (!partial) *reasoning += std::string(strip(text));
      c.resize(o);
      return;
    }
    *reasoning += std::string(strip(text));
    c.erase(o, kChannelOpen.size() + close + kChannelClose.size());
    from = o;
  }
  if (partial && hold_tail) {
    for (std::string_view m : {kChannelOpen, kChannelClose}) {
      for (size_t n = std::min(m.size() - 1, c.size()); n > 0; --n) {
        if (std::string_view(c).ends_with(m.substr(0, n))) {
          c.resize(c.size() - n);
          break;
        }
      }
    }
  }
}

// name.call(key="value", n=3): Llama 3.1's builtin tools (brave_search, wolfram_alpha).
std::optional<ToolCall> builtin_call(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_')) ++i;
  if (i == 0 || !at(s, i, ".call(")) return std::nullopt;
  ToolCall tc;
  tc.name = std::string(s.substr(0, i));
  json args = json::object();
  size_t p = skip_ws(s, i + 6);
  while (p < s.size() && s[p] != ')') {
    size_t k = p;
    while (k < s.size() && (std::isalnum(static_cast<unsigned char>(s[k])) || s[k] == '_')) ++k;
    if (k == p) return std::nullopt;
    const std::string key(s.substr(p, k - p));
    p = skip_ws(s, k);
    if (!at(s, p, "=")) return std::nullopt;
    p = skip_ws(s, p + 1);
    size_t end = 0;
    std::optional<json> v;
    if (at(s, p, "'")) {  // a single-quoted Python string
      const size_t q = s.find('\'', p + 1);
      if (q == std::string_view::npos) return std::nullopt;
      v = json(std::string(s.substr(p + 1, q - p - 1)));
      end = q + 1;
    } else {
      v = json_at(s, p, &end);
    }
    if (!v) return std::nullopt;
    args[key] = std::move(*v);
    p = skip_ws(s, end);
    if (at(s, p, ",")) p = skip_ws(s, p + 1);
    else if (!at(s, p, ")")) return std::nullopt;
  }
  if (p >= s.size() || !strip(s.substr(p + 1)).empty()) return std::nullopt;
  tc.arguments = args.dump();
  return tc;
}

Scan scan_llama31(std::string_view s, bool partial) {
  Scan r;
  // The end-of-message tokens, when the server kept them in the text.
  for (bool again = true; again;) {
    again = false;
    for (std::string_view stop : {"<|eom_id|>", "<|eot_id|>"}) {
      const std::string_view t = rstrip(s);
      if (t.ends_with(stop)) {
        s = t.substr(0, t.size() - stop.size());
        again = true;
      }
    }
  }
  const size_t tag = s.find("<|python_tag|>");
  if (tag != std::string_view::npos) {
    r.before = s.substr(0, tag);
    const size_t body = tag + 14;
    const std::string_view code = strip(s.substr(body));
    if (code.starts_with('{')) {
      const size_t end = read_json_calls(s, body, &r, partial);
      if (r.calls.empty() && r.held != std::string_view::npos) r.held = tag;
      r.rest = s.substr(r.calls.empty() ? tag : end);
      return r;
    }
    if (partial) {  // a builtin call or code: whole only at the end of the message
      r.held = tag;
      return r;
    }
    if (auto tc = builtin_call(code)) {
      r.add(std::move(*tc), s.size());
      return r;
    }
    if (!code.empty()) {
      r.add(ToolCall{"", "python", json{{"code", std::string(code)}}.dump()}, s.size());
      return r;
    }
    r.rest = s.substr(tag);
    return r;
  }
  // Without the tag the call is the whole message, starting with '{'.
  const size_t start = skip_ws(s, 0);
  if (start < s.size() && s[start] == '{') {
    const size_t end = read_json_calls(s, start, &r, partial);
    if (!r.calls.empty()) {
      r.rest = s.substr(end);
      return r;
    }
  }
  r.before = s;
  return r;
}

// [{"name", "arguments", "id"?}, ...] as calls (all of them, or false).
bool calls_from_array(const json& v, std::vector<ToolCall>* out) {
  if (!v.is_array() || v.empty()) return false;
  for (const auto& o : v) {
    auto tc = call_from_object(o);
    if (!tc) return false;
    out->push_back(std::move(*tc));
  }
  return true;
}

Scan scan_mistral(std::string_view s, bool partial) {
  Scan r;
  {
    const std::string_view t = rstrip(s);
    if (t.ends_with("</s>")) s = t.substr(0, t.size() - 4);
  }
  const size_t start = s.find("[TOOL_CALLS]");
  if (start == std::string_view::npos) {
    // Detokenized without special tokens, [TOOL_CALLS] is gone: a bare [{"name": ...}] reply.
    const size_t b = skip_ws(s, 0);
    if (partial && b + 1 == s.size() && s[b] == '[') {  // "[" may become "[{" or "[TOOL_CALLS]"
      r.held = b;
      return r;
    }
    const bool bare = b + 1 < s.size() && s[b + 1] == '{' && bare_reply(s, partial, '[', &r, calls_from_array);
    if (!bare || r.calls.empty()) r.before = s;
    return r;
  }
  r.before = s.substr(0, start);
  size_t pos = start;
  while (at(s, pos, "[TOOL_CALLS]")) {
    size_t p = skip_ws(s, pos + 12);
    std::vector<ToolCall> got;
    bool ok = false, cut = partial && p >= s.size();
    if (cut) {
      // nothing after the marker yet
    } else if (p < s.size() && s[p] == '[') {  // [{"name": ..., "arguments": ..., "id": ...}, ...]
      cut = partial && json_cut_off(s, p);
      size_t end = 0;
      auto v = cut ? std::nullopt : json_at(s, p, &end);
      if (v && calls_from_array(*v, &got)) {
        ok = true;
        p = end;
      }
    } else {  // name[ARGS]{...} or name[CALL_ID]id[ARGS]{...}
      const size_t args = s.find("[ARGS]", p);
      if (args == std::string_view::npos) {
        cut = partial;  // the name (and id) may still be coming
      } else {
        std::string_view head = s.substr(p, args - p);
        std::string id;
        const size_t cid = head.find("[CALL_ID]");
        if (cid != std::string_view::npos) {
          id = std::string(strip(head.substr(cid + 9)));
          head = head.substr(0, cid);
        }
        const std::string name(strip(head));
        const bool plain_name = !name.empty() && name.find_first_of(" \t\r\n[]{}\"") == std::string::npos;
        size_t end = 0;
        const size_t q = skip_ws(s, args + 6);
        cut = partial && plain_name && json_cut_off(s, q);
        auto v = plain_name && !cut ? json_at(s, q, &end) : std::nullopt;
        if (v) {
          if (auto a = arguments_text(*v)) {
            got.push_back(ToolCall{id, name, *a});
            ok = true;
            p = end;
          }
        }
      }
    }
    if (cut) {
      r.held = pos;
      break;
    }
    if (!ok) break;
    for (auto& tc : got) r.add(std::move(tc), p);
    pos = p;
    const size_t q = skip_ws(s, pos);
    if (!at(s, q, "[TOOL_CALLS]")) break;
    pos = q;
  }
  r.rest = s.substr(pos);
  return r;
}

// {"tool_call": {...}} / {"tool_calls": [...]} / {"response": ...}; `content` (when set) is the
// reply text. A reply that the end of the text cuts off ({"response": "Hel) is its text so far, in
// partial parsing and at the end alike, so that a streamed reply only grows.
Scan scan_generic(std::string_view s, std::optional<std::string>* content, bool partial) {
  Scan r;
  r.before = s;
  const size_t b = skip_ws(s, 0);
  if (b >= s.size() || s[b] != '{') return r;
  if (json_cut_off(s, b)) {
    size_t p = skip_ws(s, b + 1);
    if (at(s, p, "\"response\"") && (p = skip_ws(s, p + 10), at(s, p, ":")) && (p = skip_ws(s, p + 1), at(s, p, "\""))) {
      if (auto text = json_string_prefix(s, p)) {
        *content = std::move(*text);
        r.before = {};
        return r;
      }
    }
    if (partial) r.held = b;
    return r;
  }
  const std::string_view t = strip(s);
  size_t end = 0;
  auto v = json_at(t, 0, &end);
  if (!v || end != t.size() || !v->is_object()) return r;
  const json& o = *v;
  std::vector<ToolCall> calls;
  if (auto it = o.find("tool_calls"); it != o.end() && it->is_array() && !it->empty()) {
    for (const auto& c : *it) {
      auto tc = call_from_object(c);
      if (!tc) return r;
      calls.push_back(std::move(*tc));
    }
  } else if (auto one = o.find("tool_call"); one != o.end()) {
    auto tc = call_from_object(*one);
    if (!tc) return r;
    calls.push_back(std::move(*tc));
  } else if (auto resp = o.find("response"); resp != o.end()) {
    *content = resp->is_string() ? resp->get<std::string>() : resp->dump();
    r.before = {};
    return r;
  } else {
    return r;
  }
  for (auto& tc : calls) r.add(std::move(tc), b + end);
  r.before = {};
  if (auto c = o.find("content"); c != o.end() && c->is_string()) *content = c->get<std::string>();
  return r;
}

// What partial parsing holds back at the end of the content: the beginnings of a format's markers.
std::span<const std::string_view> hold_marks(ToolCallFormat f) {
  static constexpr std::string_view kHermes[] = {"<tool_call>", "<function="};
  static constexpr std::string_view kQwenXml[] = {"<tool_call>", "<function="};
  static constexpr std::string_view kLlama31[] = {"<|python_tag|>", "<|eom_id|>", "<|eot_id|>"};
  static constexpr std::string_view kMistral[] = {"[TOOL_CALLS]", "</s>"};
  static constexpr std::string_view kLfm2[] = {kLfm2Start};
  static constexpr std::string_view kGemma4[] = {kGemma4Start};
  switch (f) {
    case ToolCallFormat::kLfm2: return kLfm2;
    case ToolCallFormat::kGemma4: return kGemma4;
    case ToolCallFormat::kHermes: return kHermes;
    case ToolCallFormat::kQwenXml: return kQwenXml;
    case ToolCallFormat::kLlama31: return kLlama31;
    case ToolCallFormat::kMistral:
    case ToolCallFormat::kMistralArgs: return kMistral;
    case ToolCallFormat::kGeneric:
    case ToolCallFormat::kNone: break;
  }
  return {};
}

}  // namespace

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kNone: return "none";
    case ToolCallFormat::kGeneric: return "generic";
    case ToolCallFormat::kLlama31: return "llama3.1";
    case ToolCallFormat::kHermes: return "hermes";
    case ToolCallFormat::kMistral: return "mistral";
    case ToolCallFormat::kMistralArgs: return "mistral-args";
    case ToolCallFormat::kQwenXml: return "qwen3-coder";
    case ToolCallFormat::kLfm2: return "lfm2";
    case ToolCallFormat::kGemma4: return "gemma4";
  }
  return "?";
}

ToolCallFormat detect_tool_call_format(std::string_view src) {
  const auto has = [&](std::string_view m) { return src.find(m) != std::string_view::npos; };
  // LFM2 lists the tools between <|tool_list_start|> and <|tool_list_end|>, LFM2.5 as plain
  // "List of tools: [...]" (llama.cpp's two rules); LFM2.5-8B writes calls back in history.
  if ((has("<|tool_list_start|>") && has("<|tool_list_end|>")) || has("List of tools: [") || has("<|tool_call_start|>"))
    return ToolCallFormat::kLfm2;
  if (has("'<|tool_call>call:'")) return ToolCallFormat::kGemma4;
  if (has("<tool_call>") && has("<function=") && has("<parameter=") &&
      !has("'<tool_call><function=' ~ tool_call.name ~ '>'"))
    return ToolCallFormat::kQwenXml;
  if (has("<tool_call>")) return ToolCallFormat::kHermes;
  if (has("<|start_header_id|>ipython<|end_header_id|>")) return ToolCallFormat::kLlama31;
  if (has("[TOOL_CALLS]") && has("[ARGS]")) return ToolCallFormat::kMistralArgs;
  if (has("[TOOL_CALLS]")) return ToolCallFormat::kMistral;
  // SmolLM3 calls tools as Hermes does; the copy of its template llama.cpp ships (Unsloth's)
  // dropped the tools block, so only its system prompt names the model.
  if (has("named SmolLM")) return ToolCallFormat::kHermes;
  return ToolCallFormat::kGeneric;
}

json ParsedMessage::to_json() const {
  json m = json::object();
  m["role"] = "assistant";
  if (content.empty() && !tool_calls.empty()) m["content"] = nullptr;
  else m["content"] = content;
  if (!reasoning_content.empty()) m["reasoning_content"] = reasoning_content;
  if (!tool_calls.empty()) {
    json arr = json::array();
    for (const ToolCall& tc : tool_calls) {
      json c = json::object();
      c["id"] = tc.id;
      c["type"] = "function";
      c["function"] = json{{"name", tc.name}, {"arguments", tc.arguments}};
      arr.push_back(std::move(c));
    }
    m["tool_calls"] = std::move(arr);
  }
  return m;
}

const char* reasoning_format_name(ReasoningFormat f) {
  switch (f) {
    case ReasoningFormat::kNone: return "none";
    case ReasoningFormat::kAuto: return "auto";
    case ReasoningFormat::kDeepSeek: return "deepseek";
    case ReasoningFormat::kDeepSeekLegacy: return "deepseek-legacy";
  }
  return "?";
}

Expected<ReasoningFormat> parse_reasoning_format(std::string_view name) {
  for (ReasoningFormat f :
       {ReasoningFormat::kNone, ReasoningFormat::kAuto, ReasoningFormat::kDeepSeek, ReasoningFormat::kDeepSeekLegacy})
    if (name == reasoning_format_name(f)) return f;
  std::string shown(name.substr(0, 40));
  if (name.size() > 40) shown += "...";
  return invalid_argument("reasoning_format: expected \"none\", \"auto\", \"deepseek\" or \"deepseek-legacy\", got \"" +
                          shown + "\"");
}

namespace {

ParsedMessage parse_output(ToolCallFormat format, std::string_view text, const ParseOptions& opts) {
  ParsedMessage out;
  const bool partial = opts.partial;
  std::string_view body = text;
  std::string think;  // reasoning_in_content: the block, written back at the start of the content
  if (opts.reasoning_format != ReasoningFormat::kNone) {
    ReasoningSplit rs = split_reasoning(text, opts.thinking_forced_open, partial);
    body = rs.body;
    if (!opts.reasoning_in_content) {
      out.reasoning_content = std::move(rs.reasoning);
    } else if (!rs.reasoning.empty()) {
      think = std::string(rs.open) + rs.reasoning + (rs.closed ? std::string(rs.close) : std::string());
    }
  }
  if (!opts.tools_present || format == ToolCallFormat::kNone) {
    out.content = think + std::string(body);
    return out;
  }
  Scan scan;
  std::optional<std::string> reply;  // kGeneric: the reply's text
  switch (format) {
    case ToolCallFormat::kHermes: scan = scan_hermes(body, partial); break;
    case ToolCallFormat::kQwenXml: scan = scan_qwen_xml(body, partial, opts.tools); break;
    case ToolCallFormat::kLfm2: scan = scan_lfm2(body, partial); break;
    case ToolCallFormat::kGemma4: scan = scan_gemma4(body, partial); break;
    case ToolCallFormat::kLlama31: scan = scan_llama31(body, partial); break;
    case ToolCallFormat::kMistral:
    case ToolCallFormat::kMistralArgs: scan = scan_mistral(body, partial); break;
    case ToolCallFormat::kGeneric: scan = scan_generic(body, &reply, partial); break;
    case ToolCallFormat::kNone: break;
  }
  // Partial: what a view of `body` shows, without trailing whitespace (the full parse strips it
  // before a call). Text before held-back text, or before a stop token, is final; only a view that
  // reaches the end of the output also holds back the beginning of a marker.
  const auto shown = [&](std::string_view v) {
    if (v.empty()) return v;
    const char* end = v.data() + v.size();
    if (scan.held != std::string_view::npos && end > body.data() + scan.held) {
      const char* limit = body.data() + scan.held;
      if (v.data() >= limit) return std::string_view();
      return rstrip(v.substr(0, size_t(limit - v.data())));
    }
    return end == body.data() + body.size() ? hold_tail(v, hold_marks(format)) : rstrip(v);
  };
  const size_t base = size_t(body.data() - text.data());
  if (partial && scan.pending) {
    out.pending = std::move(scan.pending);
    out.pending->id = make_id(format, text.substr(0, base + scan.pending_start), scan.calls.size(), opts.id_seed);
  }
  if (scan.calls.empty()) {
    out.content = reply ? *reply : partial ? std::string(shown(body)) : std::string(body);
    out.content.insert(0, think);
    return out;
  }
  out.content = reply ? *reply : std::string(rstrip(scan.before));
  const std::string_view rest = partial ? shown(lstrip(scan.rest)) : strip(scan.rest);
  if (!rest.empty()) {
    if (!out.content.empty()) out.content += '\n';
    out.content += rest;
  }
  out.content.insert(0, think);
  for (size_t i = 0; i < scan.calls.size(); ++i) {
    ToolCall& tc = scan.calls[i];
    const size_t upto = scan.starts[i] != std::string_view::npos ? scan.starts[i] : scan.ends[i];
    if (tc.id.empty()) tc.id = make_id(format, text.substr(0, base + upto), i, opts.id_seed);
  }
  out.tool_calls = std::move(scan.calls);
  return out;
}

}  // namespace

ParsedMessage parse_assistant_output(ToolCallFormat format, std::string_view text, const ParseOptions& opts) {
  // Gemma 4's model turn may be written out (llama.cpp's gemma4 parser skips it).
  constexpr std::string_view kModelTurn = "<|turn>model\n";
  if (text.starts_with(kModelTurn)) text.remove_prefix(kModelTurn.size());
  ParsedMessage out = parse_output(format, text, opts);
  if (opts.reasoning_format != ReasoningFormat::kNone && !opts.reasoning_in_content) {
    // Gemma 4's output (its format, or its markers seen): hold back what may begin one of them.
    const bool gemma = format == ToolCallFormat::kGemma4 || text.find(kChannelOpen) != std::string_view::npos ||
                       text.find(kChannelClose) != std::string_view::npos;
    gemma_channels(&out.content, &out.reasoning_content, opts.partial, gemma);
  }
  return out;
}

ToolCallSyntax tool_call_syntax(ToolCallFormat format) {
  ToolCallSyntax s;
  switch (format) {
    case ToolCallFormat::kHermes:
    case ToolCallFormat::kQwenXml:
      s.triggers = {"<tool_call>", "<function="};
      s.preserved_tokens = {"<tool_call>", "</tool_call>", "<think>", "</think>"};
      break;
    case ToolCallFormat::kLlama31:
      s.stops = {"<|eom_id|>", "<|eot_id|>"};
      s.triggers = {"<|python_tag|>", "{"};
      s.preserved_tokens = {"<|python_tag|>"};
      break;
    case ToolCallFormat::kMistral:
      s.triggers = {"[TOOL_CALLS]"};
      s.preserved_tokens = {"[TOOL_CALLS]"};
      break;
    case ToolCallFormat::kMistralArgs:
      s.triggers = {"[TOOL_CALLS]"};
      s.preserved_tokens = {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]"};
      break;
    case ToolCallFormat::kGeneric: s.triggers = {"{"}; break;
    case ToolCallFormat::kLfm2:
      s.triggers = {std::string(kLfm2Start)};
      s.preserved_tokens = {std::string(kLfm2Start), std::string(kLfm2End), "<think>", "</think>"};
      break;
    case ToolCallFormat::kGemma4:
      s.triggers = {std::string(kGemma4Start)};
      s.preserved_tokens = {std::string(kGemma4Start),
                            std::string(kGemma4End),
                            std::string(kChannelOpen),
                            std::string(kChannelClose),
                            "<|turn>",
                            std::string(kGemma4Quote)};
      break;
    case ToolCallFormat::kNone: break;
  }
  return s;
}

Expected<json> normalize_tools(const json& tools) {
  if (tools.is_null()) return json(nullptr);
  if (!tools.is_array()) return invalid_argument("tools: expected an array of tools");
  if (tools.empty()) return json(nullptr);
  json out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string where = "tools[" + std::to_string(i) + "]";
    const json& t = tools[i];
    if (!t.is_object()) return invalid_argument(where + ": expected an object");
    auto type = t.find("type");
    if (type == t.end()) return invalid_argument(where + ".type: missing (expected \"function\")");
    if (!type->is_string() || *type != "function")
      return invalid_argument(where + ".type: expected \"function\", got " + type->dump());
    auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) return invalid_argument(where + ".function: expected an object");
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || name->get_ref<const std::string&>().empty())
      return invalid_argument(where + ".function.name: expected a non-empty string");
    json desc = "";
    if (auto d = fn->find("description"); d != fn->end() && !d->is_null()) {
      if (!d->is_string()) return invalid_argument(where + ".function.description: expected a string");
      desc = *d;
    }
    json params = json{{"type", "object"}, {"properties", json::object()}};
    if (auto p = fn->find("parameters"); p != fn->end() && !p->is_null()) {
      if (!p->is_object()) return invalid_argument(where + ".function.parameters: expected a JSON schema object");
      params = *p;
    }
    for (size_t j = 0; j < out.size(); ++j)
      if (out[j]["function"]["name"] == *name)
        return invalid_argument(where + ".function.name: '" + name->get<std::string>() + "' is also tools[" +
                                std::to_string(j) + "]'s name");
    json f = json::object();
    f["name"] = *name;
    f["description"] = std::move(desc);
    f["parameters"] = std::move(params);
    out.push_back(json{{"type", "function"}, {"function", std::move(f)}});
  }
  return out;
}

// --- grammars --------------------------------------------------------------------------------

std::string prefix_gbnf_rules(std::string_view g, std::string_view prefix) {
  const auto word = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
  };
  std::string out;
  out.reserve(g.size() + g.size() / 4);
  size_t i = 0;
  // Copies a delimited span (a literal, a class or a repetition count) with its escapes.
  const auto span = [&](char close) {
    out.push_back(g[i++]);
    while (i < g.size() && g[i] != close) {
      if (g[i] == '\\' && i + 1 < g.size()) out.push_back(g[i++]);
      out.push_back(g[i++]);
    }
    if (i < g.size()) out.push_back(g[i++]);
  };
  while (i < g.size()) {
    const char c = g[i];
    if (c == '#') {
      while (i < g.size() && g[i] != '\n') ++i;
    } else if (c == '"') {
      span('"');
    } else if (c == '[') {
      span(']');
    } else if (c == '{') {
      span('}');
    } else if (word(c)) {
      out += prefix;
      while (i < g.size() && word(g[i])) out.push_back(g[i++]);
    } else {
      out.push_back(g[i++]);
    }
  }
  return out;
}

namespace {

// The JSON form of a name ("\"get_weather\"") as a GBNF literal.
std::string json_string_literal(const std::string& s) { return gbnf_literal(json(s).dump()); }

constexpr const char* kSp = R"(tc-sp ::= | " " | "\n"{1,2} [ \t]{0,20})";

struct Tool {
  std::string name;
  json parameters;
  std::string args_rule;  // the root rule of its arguments' grammar
};

// kQwenXml's string parameter: any text without "\n</parameter>" (which ends it), as the states of
// a matcher of that text: rule xs<k> after k of its characters have matched. ('\n' is its only
// newline, so a match can only begin there.)
std::string xml_string_rules() {
  const std::string close = "\n</parameter>";
  std::string out;
  for (size_t k = 0; k < close.size(); ++k) {
    const auto esc = [](char c) { return c == '\n' ? std::string("\\n") : std::string(1, c); };
    std::string alts;
    const char c = close[k];
    if (k + 1 < close.size()) alts += "\"" + esc(c) + "\" xs" + std::to_string(k + 1);
    if (c != '\n') alts += std::string(alts.empty() ? "" : " | ") + "\"\\n\" xs1";
    alts += std::string(alts.empty() ? "" : " | ") + "[^" + (c == '\n' ? std::string() : esc(c)) + "\\n] xs0";
    out += "xs" + std::to_string(k) + " ::= ( " + alts + " )?\n";
  }
  return out;
}

// kGemma4's values (g4_value's syntax, compact as the template writes them): rules named from
// `name`, built into *rules (and converted JSON grammars into *sub). Strings are
// <|"|>text<|"|> with any text without <|"|> (the states of a matcher of it: g4s<k> after k of its
// characters; '<' only begins it); numbers, booleans and null are their schema's JSON; an object
// with "properties" has those keys in dictsort's order (case-insensitive), the required ones
// always, others optionally; an array has its items' values; anything else is any Gemma value.
constexpr const char* kGemma4ValueRules =
    R"(g4-string ::= "<|\"|>" g4s0 "<|\"|>")"
    "\n"
    R"(g4s0 ::= ( "<" g4s1 | [^<] g4s0 )?)"
    "\n"
    R"(g4s1 ::= ( "|" g4s2 | "<" g4s1 | [^|<] g4s0 )?)"
    "\n"
    R"(g4s2 ::= ( "\"" g4s3 | "<" g4s1 | [^"<] g4s0 )?)"
    "\n"
    R"(g4s3 ::= ( "|" g4s4 | "<" g4s1 | [^|<] g4s0 )?)"
    "\n"
    R"(g4s4 ::= ( "<" g4s1 | [^><] g4s0 )?)"
    "\n"
    R"(g4-any ::= g4-string | g4-dict | g4-list | g4-num | "true" | "false" | "null")"
    "\n"
    R"(g4-dict ::= "{" ( g4-kv ( "," g4-kv )* )? "}")"
    "\n"
    R"(g4-kv ::= [a-zA-Z0-9_.-]+ ":" g4-any)"
    "\n"
    R"(g4-list ::= "[" ( g4-any ( "," g4-any )* )? "]")"
    "\n"
    R"(g4-num ::= "-"? ( "0" | [1-9] [0-9]{0,15} ) ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?)"
    "\n";

// Jinja's dictsort order (case-insensitive, stable).
std::vector<std::string> dictsort_keys(const json& props) {
  std::vector<std::string> keys;
  for (const auto& [k, v] : props.items()) keys.push_back(k);
  const auto lower = [](std::string s) {
    for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  std::stable_sort(keys.begin(), keys.end(),
                   [&](const std::string& a, const std::string& b) { return lower(a) < lower(b); });
  return keys;
}

Expected<std::string> g4_value_rule(const json& schema, const std::string& name, std::string* rules, std::string* sub,
                                    int depth = 0) {
  if (!schema.is_object() || depth > 32) return std::string("g4-any");
  const auto literal_of = [](const json& v) {
    return v.is_string() ? gbnf_literal("<|\"|>" + v.get<std::string>() + "<|\"|>") : gbnf_literal(v.dump());
  };
  if (auto e = schema.find("enum"); e != schema.end() && e->is_array() && !e->empty()) {
    std::string alts;
    for (const json& v : *e) alts += (alts.empty() ? "" : " | ") + literal_of(v);
    *rules += name + " ::= " + alts + "\n";
    return name;
  }
  if (auto c = schema.find("const"); c != schema.end()) {
    *rules += name + " ::= " + literal_of(*c) + "\n";
    return name;
  }
  auto t = schema.find("type");
  if (t == schema.end() || !t->is_string()) return std::string("g4-any");
  const std::string type = *t;
  if (type == "string") return std::string("g4-string");
  if (type == "integer" || type == "number" || type == "boolean" || type == "null") {
    auto g = json_schema_to_grammar(schema);
    if (!g) return g.status();
    *sub += prefix_gbnf_rules(*g, name + "-j-");
    return name + "-j-root";
  }
  if (type == "array") {
    auto it = schema.find("items");
    LOOM_ASSIGN_OR_RETURN(std::string item,
                          g4_value_rule(it != schema.end() ? *it : json(), name + "-i", rules, sub, depth + 1));
    *rules += name + " ::= \"[\" ( " + item + " ( \",\" " + item + " )* )? \"]\"\n";
    return name;
  }
  if (type != "object") return std::string("g4-any");
  auto props = schema.find("properties");
  if (props == schema.end() || !props->is_object()) return std::string("g4-dict");
  const json req = schema.contains("required") && schema["required"].is_array() ? schema["required"] : json::array();
  std::vector<std::pair<std::string, bool>> items;  // (key:value rule, required)
  size_t k = 0;
  for (const std::string& key : dictsort_keys(*props)) {
    const std::string prule = name + "-p" + std::to_string(k++);
    LOOM_ASSIGN_OR_RETURN(std::string v, g4_value_rule((*props)[key], prule + "-v", rules, sub, depth + 1));
    *rules += prule + " ::= " + gbnf_literal(key + ":") + " " + v + "\n";
    items.emplace_back(prule, std::find(req.begin(), req.end(), json(key)) != req.end());
  }
  // name-a<n>-first / -rest: the members from the n-th on, without or with a leading ",".
  const auto a = [&](size_t n, bool first) { return name + "-a" + std::to_string(n) + (first ? "-first" : "-rest"); };
  *rules += a(items.size(), true) + " ::= \"\"\n" + a(items.size(), false) + " ::= \"\"\n";
  for (size_t n = items.size(); n-- > 0;) {
    const std::string& pr = items[n].first;
    *rules += a(n, true) + " ::= " + pr + " " + a(n + 1, false) + (items[n].second ? "" : " | " + a(n + 1, true)) + "\n";
    *rules +=
        a(n, false) + " ::= \",\" " + pr + " " + a(n + 1, false) + (items[n].second ? "" : " | " + a(n + 1, false)) + "\n";
  }
  *rules += name + " ::= \"{\" " + a(0, true) + " \"}\"\n";
  return name;
}

}  // namespace

Expected<std::string> tool_call_grammar(ToolCallFormat format, const json& tools, const std::string* forced_name,
                                        bool parallel, bool allow_response) {
  if (format == ToolCallFormat::kNone) return invalid_argument("tool_call_grammar: no tool-call format (kNone)");
  LOOM_ASSIGN_OR_RETURN(json norm, normalize_tools(tools));
  if (norm.is_null()) return invalid_argument("tools: no tools to call");
  std::vector<Tool> list;
  std::string sub;  // the arguments' grammars, their rules prefixed
  for (size_t i = 0; i < norm.size(); ++i) {
    const json& f = norm[i]["function"];
    const std::string name = f["name"];
    if (forced_name && name != *forced_name) continue;
    auto g = json_schema_to_grammar(f["parameters"]);
    if (!g) {
      return Status(g.status().code(), "tools[" + std::to_string(i) + "].function.parameters: " + g.status().message());
    }
    const std::string prefix = "t" + std::to_string(i) + "-";
    sub += prefix_gbnf_rules(*g, prefix);
    list.push_back(Tool{name, f["parameters"], prefix + "root"});
  }
  if (list.empty()) return invalid_argument("tool_choice: no tool named '" + *forced_name + "' in tools");

  std::string rules;
  std::string alts;  // tc-body ::= one alternative per tool
  const auto add_alt = [&](size_t i, const std::string& body) {
    const std::string rule = "tc-f" + std::to_string(i);
    rules += rule + " ::= " + body + "\n";
    alts += (alts.empty() ? "" : " | ") + rule;
  };
  const std::string kv = R"( tc-sp ":" tc-sp )";
  const std::string comma = R"( tc-sp "," tc-sp )";
  std::string root;
  switch (format) {
    case ToolCallFormat::kHermes:
      for (size_t i = 0; i < list.size(); ++i)
        add_alt(i, R"("{" tc-sp "\"name\"")" + kv + json_string_literal(list[i].name) + comma + R"("\"arguments\"")" + kv +
                       list[i].args_rule + R"( "}" tc-sp)");
      rules += R"(tc-call ::= "<tool_call>" tc-sp tc-body "</tool_call>")"
               "\n";
      root = parallel ? "tc-call ( tc-sp tc-call )*" : "tc-call";
      break;
    case ToolCallFormat::kLlama31:
      for (size_t i = 0; i < list.size(); ++i)
        add_alt(i, R"("{" tc-sp ( "\"type\"")" + kv + R"("\"function\"")" + comma + R"()? "\"name\"")" + kv +
                       json_string_literal(list[i].name) + comma + R"("\"parameters\"")" + kv + list[i].args_rule +
                       R"( "}" tc-sp)");
      root = "tc-body";  // one call: the template refuses several
      break;
    case ToolCallFormat::kMistral:
      for (size_t i = 0; i < list.size(); ++i)
        add_alt(i, R"("{" tc-sp "\"name\"")" + kv + json_string_literal(list[i].name) + comma + R"("\"arguments\"")" + kv +
                       list[i].args_rule + R"( "," tc-sp "\"id\"")" + kv + R"(tc-id tc-sp "}" tc-sp)");
      rules += R"(tc-id ::= "\"" [a-zA-Z0-9]{9} "\"")"
               "\n";
      root = parallel ? R"("[TOOL_CALLS]" "[" tc-sp tc-body ( "," tc-sp tc-body )* "]")"
                      : R"("[TOOL_CALLS]" "[" tc-sp tc-body "]")";
      break;
    case ToolCallFormat::kMistralArgs:
      for (size_t i = 0; i < list.size(); ++i) add_alt(i, gbnf_literal(list[i].name) + R"( "[ARGS]" )" + list[i].args_rule);
      rules += R"(tc-call ::= "[TOOL_CALLS]" tc-body)"
               "\n";
      root = parallel ? "tc-call+" : "tc-call";
      break;
    case ToolCallFormat::kGeneric: {
      // llama.cpp's schema for the generic format, converted as one.
      json alts_schema = json::array();
      for (const Tool& t : list) {
        json props = json::object();
        props["name"] = json{{"type", "string"}, {"const", t.name}};
        props["arguments"] = t.parameters;
        json req = json::array({"name", "arguments"});
        if (parallel) {
          props["id"] = json{{"type", "string"}, {"minLength", 4}};
          req.push_back("id");
        }
        alts_schema.push_back(json{{"type", "object"}, {"properties", std::move(props)}, {"required", std::move(req)}});
      }
      json one = alts_schema.size() == 1 ? alts_schema[0] : json{{"anyOf", alts_schema}};
      json call =
          parallel
              ? json{{"type", "object"},
                     {"properties", {{"tool_calls", {{"type", "array"}, {"items", one}, {"minItems", 1}}}}},
                     {"required", json::array({"tool_calls"})}}
              : json{{"type", "object"}, {"properties", {{"tool_call", one}}}, {"required", json::array({"tool_call"})}};
      json schema = allow_response
                        ? json{{"anyOf", json::array({call, json{{"type", "object"},
                                                                 {"properties", {{"response", {{"type", "string"}}}}},
                                                                 {"required", json::array({"response"})}}})}}
                        : call;
      auto g = json_schema_to_grammar(schema);
      if (!g) return Status(g.status().code(), "tools: " + g.status().message());
      return std::move(*g);
    }
    case ToolCallFormat::kQwenXml: {
      // <tool_call>\n<function=f>\n then its parameters (the required ones in the schema's order,
      // then any optional ones), each <parameter=k>\nVALUE\n</parameter>\n: a string parameter's
      // VALUE is any text without "\n</parameter>" (xs0), another's its schema's JSON.
      bool strings = false;
      for (size_t i = 0; i < list.size(); ++i) {
        const json& ps = list[i].parameters;
        const json props =
            ps.is_object() && ps.contains("properties") && ps["properties"].is_object() ? ps["properties"] : json::object();
        const json req =
            ps.is_object() && ps.contains("required") && ps["required"].is_array() ? ps["required"] : json::array();
        std::string required, optional;
        size_t k = 0;
        for (const auto& [key, schema] : props.items()) {
          const std::string prule = "tc-f" + std::to_string(i) + "-p" + std::to_string(k++);
          std::string value;
          const XmlValue kind = xml_value_kind(
              json::array({json{{"function", json{{"name", list[i].name}, {"parameters", ps}}}}}), list[i].name, key);
          if (kind == XmlValue::kJson) {
            auto g = json_schema_to_grammar(schema);
            if (!g) return Status(g.status().code(), "tools: " + list[i].name + "." + key + ": " + g.status().message());
            sub += prefix_gbnf_rules(*g, prule + "-v-");
            value = prule + "-v-root";
          } else {
            strings = true;
            value = "xs0";
          }
          rules += prule + " ::= " + gbnf_literal("<parameter=" + key + ">\n") + " " + value + " " +
                   gbnf_literal("\n</parameter>\n") + "\n";
          const bool is_req = std::find(req.begin(), req.end(), json(key)) != req.end();
          (is_req ? required : optional) += (is_req ? " " : optional.empty() ? "" : " | ") + prule;
        }
        std::string body = gbnf_literal("<function=" + list[i].name + ">\n") + required;
        if (!optional.empty()) body += " ( " + optional + " )*";
        add_alt(i, body + " " + gbnf_literal("</function>\n"));
      }
      if (strings) rules += xml_string_rules();
      rules += R"(tc-call ::= "<tool_call>\n" tc-body "</tool_call>")"
               "\n";
      root = parallel ? "tc-call ( tc-sp tc-call )*" : "tc-call";
      break;
    }
    case ToolCallFormat::kLfm2: {
      // name(k1=V1, k2=V2): the parameters in the schema's order, the optional ones may be left
      // out; each VALUE is its schema's JSON (JSON strings, numbers, true / false / null are
      // Python literals LFM2's parser reads as well). Rules tc-f<i>-a<k>-first / -rest: the
      // arguments from the k-th on, with or without a leading ", ".
      for (size_t i = 0; i < list.size(); ++i) {
        const json& ps = list[i].parameters;
        const json props =
            ps.is_object() && ps.contains("properties") && ps["properties"].is_object() ? ps["properties"] : json::object();
        const json req =
            ps.is_object() && ps.contains("required") && ps["required"].is_array() ? ps["required"] : json::array();
        const std::string fi = "tc-f" + std::to_string(i);
        std::vector<std::pair<std::string, bool>> items;  // (argument rule, required)
        size_t k = 0;
        for (const auto& [key, schema] : props.items()) {
          const std::string prule = fi + "-p" + std::to_string(k++);
          auto g = json_schema_to_grammar(schema);
          if (!g) return Status(g.status().code(), "tools: " + list[i].name + "." + key + ": " + g.status().message());
          sub += prefix_gbnf_rules(*g, prule + "-v-");
          rules += prule + " ::= " + gbnf_literal(key + "=") + " " + prule + "-v-root\n";
          items.emplace_back(prule, std::find(req.begin(), req.end(), json(key)) != req.end());
        }
        const auto a = [&](size_t n, bool first) { return fi + "-a" + std::to_string(n) + (first ? "-first" : "-rest"); };
        rules += a(items.size(), true) + " ::= \"\"\n" + a(items.size(), false) + " ::= \"\"\n";
        for (size_t n = items.size(); n-- > 0;) {
          const std::string& pr = items[n].first;
          const std::string take_first = pr + " " + a(n + 1, false), take_rest = "tc-comma " + pr + " " + a(n + 1, false);
          rules += a(n, true) + " ::= " + take_first + (items[n].second ? "" : " | " + a(n + 1, true)) + "\n";
          rules += a(n, false) + " ::= " + take_rest + (items[n].second ? "" : " | " + a(n + 1, false)) + "\n";
        }
        add_alt(i, gbnf_literal(list[i].name + "(") + " " + a(0, true) + " \")\"");
      }
      rules += "tc-comma ::= \",\" \" \"?\n";
      root = parallel ? R"("<|tool_call_start|>[" tc-body ( tc-comma tc-body )* "]<|tool_call_end|>")"
                      : R"("<|tool_call_start|>[" tc-body "]<|tool_call_end|>")";
      break;
    }
    case ToolCallFormat::kGemma4: {
      // <|tool_call>call:name{k:V,...}<tool_call|>, the arguments as g4_value_rule writes them.
      for (size_t i = 0; i < list.size(); ++i) {
        const std::string fi = "tc-f" + std::to_string(i) + "-args";
        auto r = g4_value_rule(list[i].parameters, fi, &rules, &sub);
        if (!r) return Status(r.status().code(), "tools: " + list[i].name + ": " + r.status().message());
        const std::string args = *r == "g4-any" ? "g4-dict" : *r;
        add_alt(i, gbnf_literal(list[i].name) + " " + args);
      }
      rules += kGemma4ValueRules;
      rules += R"(tc-call ::= "<|tool_call>call:" tc-body "<tool_call|>")"
               "\n";
      root = parallel ? "tc-call+" : "tc-call";
      break;
    }
    case ToolCallFormat::kNone: break;
  }
  std::string out = "root ::= " + root + "\n";
  out += "tc-body ::= " + alts + "\n";
  out += rules;
  out += kSp;
  out += "\n";
  out += sub;
  return out;
}

Expected<std::string> response_format_grammar(const json& rf) {
  if (rf.is_null()) return std::string();
  if (!rf.is_object()) return invalid_argument("response_format: expected an object");
  auto type = rf.find("type");
  if (type == rf.end() || !type->is_string())
    return invalid_argument("response_format.type: expected \"text\", \"json_object\" or \"json_schema\"");
  const std::string t = *type;
  const auto convert = [](const json& schema, const std::string& where) -> Expected<std::string> {
    if (!schema.is_object() && !schema.is_boolean()) return invalid_argument(where + ": expected a JSON schema object");
    auto g = json_schema_to_grammar(schema);
    if (!g) return Status(g.status().code(), where + ": " + g.status().message());
    return std::move(*g);
  };
  if (t == "text") return std::string();
  if (t == "json_object") {
    if (auto s = rf.find("schema"); s != rf.end() && !s->is_null()) return convert(*s, "response_format.schema");
    return convert(json{{"type", "object"}}, "response_format");
  }
  if (t == "json_schema") {
    auto js = rf.find("json_schema");
    if (js == rf.end() || !js->is_object()) return invalid_argument("response_format.json_schema: expected an object");
    auto s = js->find("schema");
    if (s == js->end()) return invalid_argument("response_format.json_schema.schema: missing");
    return convert(*s, "response_format.json_schema.schema");
  }
  return invalid_argument("response_format.type: unknown type \"" + t +
                          "\" (expected \"text\", \"json_object\" or \"json_schema\")");
}

}  // namespace loom::chat

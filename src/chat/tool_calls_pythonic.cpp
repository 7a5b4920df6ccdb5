// The tool-call scanners with Python-like call syntax: LFM2's name(key=value) calls with Python or
// JSON literals, Gemma 4's call:name{key:value} with its own value syntax, and Gemma's channels.
#include <algorithm>
#include <cctype>

#include "chat/tool_calls_internal.h"

namespace loom::chat {
using namespace detail;  // the tool-call internals (tool_calls_internal.h)

namespace {

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

PyValue cut_value() {
  PyValue r;
  r.cut = true;
  return r;
}

// The UTF-8 of code point u, appended.
void append_utf8(std::string& out, uint32_t u) {
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
}

// What py_unicode_escape found.
enum class Escape { kRead, kCut, kMalformed };

// The \uXXXX escape at s[i] (a high surrogate with its low half), appended to `out` as UTF-8 and
// *len set to its length; kCut when the end of s cuts it off (or it is malformed: decided at the end).
Escape py_unicode_escape(std::string_view s, size_t i, std::string& out, size_t* len) {
  const auto unit_at = [&](size_t k) -> long {
    if (k + 6 > s.size() || s[k] != '\\' || s[k + 1] != 'u') return -1;
    for (size_t h = k + 2; h < k + 6; ++h)
      if (!is_hex(s[h])) return -1;
    return std::stol(std::string(s.substr(k + 2, 4)), nullptr, 16);
  };
  long cp = unit_at(i);
  *len = 6;
  if (cp < 0 || (cp >= 0xDC00 && cp <= 0xDFFF)) return i + 6 > s.size() ? Escape::kCut : Escape::kMalformed;
  if (cp >= 0xD800 && cp <= 0xDBFF) {
    const long low = unit_at(i + 6);
    if (low < 0xDC00 || low > 0xDFFF) return i + 12 > s.size() ? Escape::kCut : Escape::kMalformed;
    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    *len = 12;
  }
  append_utf8(out, uint32_t(cp));
  return Escape::kRead;
}

// A string in single or double quotes at s[pos], with Python's (and JSON's) escapes.
PyValue py_string(std::string_view s, size_t pos) {
  PyValue r;
  const char c = s[pos];
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
        size_t len = 0;
        const Escape got = py_unicode_escape(s, i, out, &len);
        if (got == Escape::kCut) return cut_string();
        if (got == Escape::kMalformed) return r;
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

// A dict key read: the key and where its value begins; neither when the text is not a key (or,
// with `cut`, is cut off).
struct DictKey {
  std::optional<std::string> key;
  size_t value_pos = 0;
  bool cut = false;
};

// A dict or a list at s[pos] ('{' or '['): each dict key read by read_key(p) (p at the key), each
// value by read_value(p) (p at or before the value).
template <typename ReadKey, typename ReadValue>
PyValue read_container(std::string_view s, size_t pos, ReadKey&& read_key, ReadValue&& read_value) {
  PyValue r;
  const bool dict = s[pos] == '{';
  const char close = dict ? '}' : ']';
  json v = dict ? json::object() : json::array();
  size_t p = skip_ws(s, pos + 1);
  for (;;) {
    if (p >= s.size()) return cut_value();
    if (s[p] == close) break;
    DictKey k;
    if (dict) {
      k = read_key(p);
      if (k.cut) return cut_value();
      if (!k.key) return r;
    }
    PyValue e = read_value(dict ? k.value_pos : p);
    if (e.cut) return cut_value();
    if (!e.value) return r;
    if (dict) v[*k.key] = std::move(*e.value);
    else v.push_back(std::move(*e.value));
    p = skip_ws(s, e.end);
    if (p >= s.size()) return cut_value();
    if (s[p] == ',') p = skip_ws(s, p + 1);
    else if (s[p] != close) return r;
  }
  r.value = std::move(v);
  r.end = p + 1;
  return r;
}

// A number or one of `words` at s[pos], up to the next delimiter.
PyValue literal_word(std::string_view s, size_t pos, std::span<const std::pair<std::string_view, json>> words) {
  PyValue r;
  size_t e = pos;
  while (e < s.size() && (py_ident_char(s[e]) || s[e] == '.' || s[e] == '+' || s[e] == '-')) ++e;
  if (e == s.size()) return cut_value();  // more characters may follow
  const std::string_view w = s.substr(pos, e - pos);
  for (const auto& [word, val] : words) {
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

PyValue py_value(std::string_view s, size_t pos, int depth = 0);

// A Python dict key (a string literal) at s[p] and its ':'.
DictKey py_dict_key(std::string_view s, size_t p, int depth) {
  DictKey d;
  PyValue k = py_value(s, p, depth + 1);
  d.cut = k.cut;
  if (k.cut || !k.value || !k.value->is_string()) return d;
  p = skip_ws(s, k.end);
  if (p >= s.size()) {
    d.cut = true;
    return d;
  }
  if (s[p] != ':') return d;
  d.key = k.value->get<std::string>();
  d.value_pos = p + 1;
  return d;
}

// A Python (or JSON) literal at s[pos]: a string in single or double quotes, a number, True / False
// / None, true / false / null, a dict or a list of them.
PyValue py_value(std::string_view s, size_t pos, int depth) {
  pos = skip_ws(s, pos);
  if (pos >= s.size()) return cut_value();
  if (depth > 64) return PyValue{};
  const char c = s[pos];
  if (c == '"' || c == '\'') return py_string(s, pos);
  if (c == '{' || c == '[') {
    return read_container(
        s, pos, [&](size_t p) { return py_dict_key(s, p, depth); }, [&](size_t p) { return py_value(s, p, depth + 1); });
  }
  static const std::pair<std::string_view, json> kWords[] = {{"True", true}, {"False", false}, {"None", nullptr},
                                                             {"true", true}, {"false", false}, {"null", nullptr}};
  return literal_word(s, pos, kWords);
}

// The two keyword-call syntaxes: LFM2's name(key=value, ...) and Gemma 4's name{key:value,...}.
struct CallSyntax {
  char open, close;
  bool (*name_char)(char);
  DictKey (*key)(std::string_view s, size_t p);      // p at the key; DictKey::key unset: not a call
  PyValue (*value)(std::string_view s, size_t pos);  // pos at (or before) the value
};

// One call from pos: the call and where its closing character ends, or, with `partial` and a call
// the end of s cuts off, *cut set and `pending` filled once the name and the opening character
// have come (the arguments so far, as a prefix of their final compact JSON: whole arguments, then
// a string argument's text so far).
std::optional<ToolCall> read_keyword_call(const CallSyntax& syn, std::string_view s, size_t pos, bool partial, size_t* end,
                                          bool* cut, std::optional<ToolCall>* pending) {
  *cut = false;
  size_t p = pos;
  while (p < s.size() && syn.name_char(s[p])) ++p;
  if (p == s.size()) {
    *cut = partial;
    return std::nullopt;
  }
  if (p == pos || s[p] != syn.open) return std::nullopt;
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
    if (s[p] == syn.close) break;
    DictKey dk = syn.key(s, p);
    if (dk.cut) return cut_off("");
    if (!dk.key || dk.key->empty() || args.contains(*dk.key)) return std::nullopt;
    const std::string& key = *dk.key;
    const std::string sep = args.empty() ? "" : ",";
    PyValue v = syn.value(s, dk.value_pos);
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
    else if (s[p] != syn.close) return std::nullopt;
  }
  tc.arguments = compact(args);
  *end = p + 1;
  return tc;
}

// A called function's name: an identifier that may hold '.' and '-' (both syntaxes).
bool call_name_char(char c) { return py_ident_char(c) || c == '.' || c == '-'; }

// An identifier, then '=' (spaces around it allowed).
DictKey lfm2_key(std::string_view s, size_t p) {
  DictKey d;
  size_t k = p;
  while (k < s.size() && py_ident_char(s[k])) ++k;
  const size_t eq = skip_ws(s, k);
  if (k == s.size() || eq >= s.size()) {
    d.cut = true;
    return d;
  }
  if (k == p || s[eq] != '=') return d;
  d.key = std::string(s.substr(p, k - p));
  d.value_pos = eq + 1;
  return d;
}

const CallSyntax kLfm2Call{'(', ')', call_name_char, lfm2_key,
                           [](std::string_view s, size_t pos) { return py_value(s, pos); }};

// A Gemma 4 string cut off at b (after its opening <|"|>): its text so far, without a tail that may
// be the beginning of its closing <|"|>.
PyValue g4_cut_string(std::string_view s, size_t b) {
  PyValue r;
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

// A bare key up to ':' (llama.cpp: [^:}]+); one written in <|"|> quotes is unquoted.
DictKey g4_dict_key(std::string_view s, size_t p) {
  DictKey d;
  size_t k = p;
  while (k < s.size() && s[k] != ':' && s[k] != '}') ++k;
  if (k >= s.size()) {
    d.cut = true;
    return d;
  }
  if (k == p || s[k] != ':') return d;
  std::string_view key = rstrip(s.substr(p, k - p));
  if (key.size() >= 2 * kGemma4Quote.size() && key.starts_with(kGemma4Quote) && key.ends_with(kGemma4Quote))
    key = key.substr(kGemma4Quote.size(), key.size() - 2 * kGemma4Quote.size());
  d.key = std::string(key);
  d.value_pos = k + 1;
  return d;
}

// A Gemma 4 value at s[pos] (PyValue's fields: a string cut off gives its text so far, without a
// tail that may be the beginning of its closing <|"|>).
PyValue g4_value(std::string_view s, size_t pos, int depth = 0) {
  pos = skip_ws(s, pos);
  if (pos >= s.size() || (prefix_of(s, pos, kGemma4Quote) && pos + kGemma4Quote.size() > s.size())) return cut_value();
  if (depth > 64) return PyValue{};
  if (at(s, pos, kGemma4Quote)) {
    const size_t b = pos + kGemma4Quote.size();
    const size_t e = s.find(kGemma4Quote, b);
    if (e == std::string_view::npos) return g4_cut_string(s, b);
    PyValue r;
    r.value = json(std::string(s.substr(b, e - b)));
    r.end = e + kGemma4Quote.size();
    return r;
  }
  const char c = s[pos];
  if (c == '{' || c == '[') {
    return read_container(
        s, pos, [&](size_t p) { return g4_dict_key(s, p); }, [&](size_t p) { return g4_value(s, p, depth + 1); });
  }
  static const std::pair<std::string_view, json> kWords[] = {
      {"true", true}, {"false", false}, {"null", nullptr}, {"None", nullptr}};
  return literal_word(s, pos, kWords);
}

// Gemma 4's calls, name{key:value,...} after "call:".
const CallSyntax kGemma4Call{'{', '}', call_name_char, g4_dict_key,
                             [](std::string_view s, size_t pos) { return g4_value(s, pos); }};

}  // namespace

namespace detail {

Scan scan_lfm2(std::string_view s, bool partial) {
  Scan r;
  const size_t start = r.open_at(s, s.find(kLfm2Start));
  if (start == std::string_view::npos) return r;
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
      auto tc = read_keyword_call(kLfm2Call, s, p, partial, &end, &cut, &pending);
      if (cut) {
        r.hold(pos, std::move(pending), p);
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

Scan scan_gemma4(std::string_view s, bool partial) {
  Scan r;
  const size_t start = r.open_at(s, s.find(kGemma4Start));
  if (start == std::string_view::npos) return r;
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
    auto tc = read_keyword_call(kGemma4Call, s, p + 5, partial, &end, &cut, &pending);
    if (cut) {
      r.hold(pos, std::move(pending), pos);
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

}  // namespace detail

}  // namespace loom::chat

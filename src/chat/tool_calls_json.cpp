// The scanners of the tool-call formats written as JSON: Hermes (and <function=name>{...}), Llama 3.1
// (JSON and builtin name.call(...)), Mistral ([TOOL_CALLS]) and the generic {"tool_call(s)"} reply.
#include <algorithm>
#include <cctype>

#include "chat/tool_calls_internal.h"

namespace loom::chat {
using namespace detail;  // the tool-call internals (tool_calls_internal.h)

namespace {

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

}  // namespace

namespace detail {

// Whether the text from pos to the end is a beginning (possibly empty) of `lit`.
bool prefix_of(std::string_view s, size_t pos, std::string_view lit) {
  return pos <= s.size() && lit.starts_with(s.substr(pos));
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
      r.hold(pos, pending_hermes(s, pos), pos);
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

}  // namespace detail

}  // namespace loom::chat

// The Qwen3-Coder / Qwen3.5 XML tool-call scanner: <function=name><parameter=key>value</parameter>,
// each value read as its schema says.
#include <algorithm>

#include "chat/tool_calls_internal.h"

namespace loom::chat {
using namespace detail;  // the tool-call internals (tool_calls_internal.h)

namespace {

// A parameter's text as its JSON value (nullopt: kJson text that is not JSON).
std::optional<json> xml_value(std::string_view text, XmlValue kind) {
  if (kind == XmlValue::kString) return json(std::string(text));
  json v = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!v.is_discarded()) return v;
  if (kind == XmlValue::kJson) return std::nullopt;
  return json(std::string(text));
}

// The arguments streamed when the end of s cuts off the value of `key` that begins at v: a string
// parameter streams its text, all but a last newline (it may precede the closing tag, which drops
// it); other values wait for their end.
std::string cut_off_param(std::string_view s, size_t v, const std::string& key, XmlValue kind, const std::string& streamed,
                          bool first) {
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
    if (!first) so_far += ',';
    so_far += compact(json(key)) + ":" + d;
  }
  return so_far;
}

// A call's parameters read so far.
struct XmlArgs {
  json args = json::object();
  std::string streamed = "{";  // the arguments so far, compact (partial)
  bool first = true;
};

// The <parameter=key>value</parameter> elements of function `name` from *p up to and past its
// </function>: true when it was reached; false for a malformed call or, with *cut set and `pending`
// filled, one that the end of s cuts off.
bool read_xml_params(std::string_view s, size_t* p, const json& tools, bool partial, const std::string& name, XmlArgs& a,
                     bool* cut, std::optional<ToolCall>* pending) {
  for (;;) {
    if (at(s, *p, "</function>")) {
      *p += 11;
      return true;
    }
    if (!at(s, *p, "<parameter=")) {
      if (partial && (*p >= s.size() || prefix_of(s, *p, "</function>") || prefix_of(s, *p, "<parameter="))) {
        *cut = true;
        *pending = ToolCall{"", name, a.streamed};
      }
      return false;
    }
    const size_t kgt = s.find('>', *p);
    if (kgt == std::string_view::npos) {
      if (partial) {
        *cut = true;
        *pending = ToolCall{"", name, a.streamed};
      }
      return false;
    }
    const std::string key(strip(s.substr(*p + 11, kgt - *p - 11)));
    if (key.empty()) return false;
    size_t v = kgt + 1;
    if (v < s.size() && s[v] == '\n') ++v;
    const size_t close = s.find("</parameter>", v);
    const XmlValue kind = xml_value_kind(tools, name, key);
    if (close == std::string_view::npos) {
      if (!partial) return false;
      *cut = true;
      *pending = ToolCall{"", name, cut_off_param(s, v, key, kind, a.streamed, a.first)};
      return false;
    }
    std::string_view text = s.substr(v, close - v);
    if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
    auto value = xml_value(text, kind);
    if (!value) return false;
    if (!a.first) a.streamed += ',';
    a.streamed += compact(json(key)) + ":" + compact(*value);
    a.first = false;
    a.args[key] = std::move(*value);
    *p = skip_ws(s, close + 12);
  }
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
  XmlArgs a;
  if (!read_xml_params(s, &p, tools, partial, tc.name, a, cut, pending)) return std::nullopt;
  if (wrapped) {
    p = skip_ws(s, p);
    if (at(s, p, "</tool_call>")) {
      p += 12;
    } else if (partial && prefix_of(s, p, "</tool_call>")) {
      *cut = true;
      *pending = ToolCall{"", tc.name, compact(a.args)};
      return std::nullopt;
    } else if (p != s.size()) {
      return std::nullopt;
    }
  }
  tc.arguments = compact(a.args);
  *end = p;
  return tc;
}

}  // namespace

namespace detail {

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

Scan scan_qwen_xml(std::string_view s, bool partial, const json& tools) {
  Scan r;
  const size_t a = s.find("<tool_call>"), b = s.find("<function=");
  const size_t start = r.open_at(s, std::min(a, b));
  if (start == std::string_view::npos) return r;
  size_t pos = start;
  for (;;) {
    size_t end = 0;
    bool cut = false;
    std::optional<ToolCall> pending;
    auto tc = read_xml_call(s, pos, tools, partial, &end, &cut, &pending);
    if (cut) {
      r.hold(pos, std::move(pending), pos);
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

}  // namespace detail

}  // namespace loom::chat

// Tool calls written as text in a tool-call format's syntax, for templates that cannot render
// them (calls_as_text), and the example call shown with tools such templates do not list.
#include <algorithm>
#include <cctype>

#include "chat/chat_messages.h"

namespace loom::chat {
using namespace detail;  // ChatTemplate::render's internals (chat_messages.h)

namespace {

// Gemma 4's value syntax, as its template's format_argument writes arguments (keys in dictsort's
// order; null as JSON's null, which its parser reads, where the template would print None).
void gemma4_value_text(const json& v, std::string* out) {
  if (v.is_string()) {
    *out += "<|\"|>" + v.get<std::string>() + "<|\"|>";
  } else if (v.is_object()) {
    std::vector<std::string> keys;
    for (auto it = v.begin(); it != v.end(); ++it) keys.push_back(it.key());
    const auto lower = [](std::string s) {
      for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
      return s;
    };
    std::stable_sort(keys.begin(), keys.end(),
                     [&](const std::string& a, const std::string& b) { return lower(a) < lower(b); });
    *out += '{';
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i) *out += ',';
      *out += keys[i] + ":";
      gemma4_value_text(v[keys[i]], out);
    }
    *out += '}';
  } else if (v.is_array()) {
    *out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) *out += ',';
      gemma4_value_text(v[i], out);
    }
    *out += ']';
  } else {
    *out += v.dump();
  }
}

std::string args_for_text(const Call& c) { return c.args_object.is_object() ? dump_spaced(c.args_object) : c.args_text; }

std::string hermes_text(const std::vector<Call>& calls) {
  std::string s;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i) s += '\n';
    s += "<tool_call>\n{\"name\": " + json(calls[i].name).dump() + ", \"arguments\": " + args_for_text(calls[i]) +
         "}\n</tool_call>";
  }
  return s;
}

std::string qwen_xml_text(const std::vector<Call>& calls) {
  std::string s;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i) s += '\n';
    s += "<tool_call>\n<function=" + calls[i].name + ">\n";
    if (calls[i].args_object.is_object()) {
      for (const auto& [k, v] : calls[i].args_object.items())
        s += "<parameter=" + k + ">\n" + (v.is_string() ? v.get<std::string>() : v.dump()) + "\n</parameter>\n";
    }
    s += "</function>\n</tool_call>";
  }
  return s;
}

std::string llama31_text(const std::vector<Call>& calls) {
  std::string s;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i) s += "; ";
    s += "{\"name\": " + json(calls[i].name).dump() + ", \"parameters\": " + args_for_text(calls[i]) + "}";
  }
  return s;
}

std::string mistral_text(const std::vector<Call>& calls) {
  std::string s = "[TOOL_CALLS][";
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i) s += ", ";
    s += "{\"name\": " + json(calls[i].name).dump() + ", \"arguments\": " + args_for_text(calls[i]);
    if (calls[i].id) s += ", \"id\": " + json(*calls[i].id).dump();
    s += "}";
  }
  return s + "]";
}

// name(key=JSON value, ...); arguments that are not an object are left out.
std::string lfm2_text(const std::vector<Call>& calls) {
  std::string s = "<|tool_call_start|>[";
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i) s += ", ";
    s += calls[i].name + "(";
    if (calls[i].args_object.is_object()) {
      bool first = true;
      for (const auto& [k, v] : calls[i].args_object.items()) {
        s += (first ? "" : ", ") + k + "=" + v.dump();
        first = false;
      }
    }
    s += ")";
  }
  return s + "]<|tool_call_end|>";
}

std::string gemma4_text(const std::vector<Call>& calls) {
  std::string s;
  for (const Call& c : calls) {
    s += "<|tool_call>call:" + c.name;
    gemma4_value_text(c.args_object.is_object() ? c.args_object : json::object(), &s);
    s += "<tool_call|>";
  }
  return s;
}

// {"tool_call": {...}} for one call, {"tool_calls": [...]} (with ids) for several.
std::string generic_text(const std::vector<Call>& calls) {
  const auto one = [](const Call& c, bool with_id) {
    json o = json::object();
    o["name"] = c.name;
    o["arguments"] = c.args_object.is_object() ? c.args_object : json(c.args_text);
    if (with_id && c.id) o["id"] = *c.id;
    return o;
  };
  json o = json::object();
  if (calls.size() == 1) {
    o["tool_call"] = one(calls[0], false);
  } else {
    json arr = json::array();
    for (const Call& c : calls) arr.push_back(one(c, true));
    o["tool_calls"] = std::move(arr);
  }
  return o.dump(2);
}

}  // namespace

namespace detail {

std::string calls_as_text(ToolCallFormat f, const std::vector<Call>& calls) {
  switch (f) {
    case ToolCallFormat::kHermes: return hermes_text(calls);
    case ToolCallFormat::kQwenXml: return qwen_xml_text(calls);
    case ToolCallFormat::kLlama31: return llama31_text(calls);
    case ToolCallFormat::kMistral: return mistral_text(calls);
    case ToolCallFormat::kMistralArgs: {
      std::string s;
      for (const Call& c : calls) s += "[TOOL_CALLS]" + c.name + "[ARGS]" + args_for_text(c);
      return s;
    }
    case ToolCallFormat::kLfm2: return lfm2_text(calls);
    case ToolCallFormat::kGemma4: return gemma4_text(calls);
    case ToolCallFormat::kGeneric:
    case ToolCallFormat::kNone: return generic_text(calls);
  }
  return std::string();
}

std::string example_call(ToolCallFormat f) {
  Call c;
  c.id = "call00001";
  c.name = "tool_name";
  c.args_object = json{{"arg1", "some_value"}};
  return calls_as_text(f, {c});
}

}  // namespace detail

}  // namespace loom::chat

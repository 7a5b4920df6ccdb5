// A chat request's messages: checked and read (parse_messages), and the rewrites templates need:
// Mistral's tool-call ids, a system message added or folded into the user turn, Gemma 4's tool
// responses folded into the calling message.
#include <algorithm>
#include <cctype>

#include "chat/chat_messages.h"

namespace loom::chat {
using namespace detail;  // ChatTemplate::render's internals (chat_messages.h)

namespace {

bool is_media_part(const std::string& type) {
  return type == "image_url" || type == "image" || type == "input_image" || type == "input_audio" || type == "audio" ||
         type == "file" || type == "input_file" || type == "video" || type == "video_url";
}

Status parse_optional_string(const json& m, const char* key, const std::string& where, std::optional<std::string>* out) {
  auto it = m.find(key);
  if (it == m.end() || it->is_null()) return Status::ok();
  if (!it->is_string()) return invalid_argument(where + "." + key + ": expected a string");
  *out = it->get<std::string>();
  return Status::ok();
}

Status parse_tool_calls(const json& tcs, const std::string& where, std::vector<Call>* out) {
  if (!tcs.is_array()) return invalid_argument(where + ": expected an array of tool calls");
  for (size_t j = 0; j < tcs.size(); ++j) {
    const std::string w = where + "[" + std::to_string(j) + "]";
    const json& tc = tcs[j];
    if (!tc.is_object()) return invalid_argument(w + ": expected an object");
    if (auto t = tc.find("type"); t != tc.end() && !(t->is_string() && *t == "function"))
      return invalid_argument(w + ".type: expected \"function\", got " + t->dump());
    Call c;
    LOOM_RETURN_IF_ERROR(parse_optional_string(tc, "id", w, &c.id));
    auto fn = tc.find("function");
    if (fn == tc.end() || !fn->is_object()) return invalid_argument(w + ".function: expected an object");
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || name->get_ref<const std::string&>().empty())
      return invalid_argument(w + ".function.name: expected a non-empty string");
    c.name = name->get<std::string>();
    auto args = fn->find("arguments");
    if (args == fn->end() || args->is_null()) {
      c.args_object = json::object();
      c.args_text = "{}";
    } else if (args->is_string()) {
      c.args_text = args->get<std::string>();
      if (c.args_text.find_first_not_of(" \t\r\n") == std::string::npos) {
        c.args_object = json::object();
      } else {
        json v = json::parse(c.args_text, nullptr, /*allow_exceptions=*/false);
        if (!v.is_discarded() && v.is_object()) c.args_object = std::move(v);
      }
    } else if (args->is_object()) {
      c.args_object = *args;
      c.args_text = dump_spaced(*args);
    } else {
      return invalid_argument(w + ".function.arguments: expected a JSON string or an object, got " + args->dump());
    }
    out->push_back(std::move(c));
  }
  return Status::ok();
}

// Mistral's templates require tool-call ids of 9 alphanumerics: others map to one derived from them.
bool is_mistral_id(const std::string& id) {
  return id.size() == 9 && std::all_of(id.begin(), id.end(), [](char c) { return std::isalnum((unsigned char)c); });
}

}  // namespace

namespace detail {

// JSON text as Python's json.dumps writes it (", " and ": " separators, non-ASCII kept): how
// templates print arguments, so how models saw them.
void dump_spaced(const json& v, std::string* out) {
  if (v.is_object()) {
    if (v.empty()) {
      *out += "{}";
      return;
    }
    *out += '{';
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) *out += ", ";
      first = false;
      *out += json(it.key()).dump();
      *out += ": ";
      dump_spaced(it.value(), out);
    }
    *out += '}';
  } else if (v.is_array()) {
    if (v.empty()) {
      *out += "[]";
      return;
    }
    *out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) *out += ", ";
      dump_spaced(v[i], out);
    }
    *out += ']';
  } else {
    *out += v.dump();
  }
}

std::string dump_spaced(const json& v) {
  std::string s;
  dump_spaced(v, &s);
  return s;
}

Expected<std::vector<Msg>> parse_messages(const json& messages) {
  if (!messages.is_array()) return invalid_argument("messages: expected an array of messages");
  std::vector<Msg> out;
  out.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    const json& m = messages[i];
    if (!m.is_object()) return invalid_argument(where + ": expected an object");
    Msg msg;
    auto role = m.find("role");
    if (role == m.end()) return invalid_argument(where + ".role: missing");
    if (!role->is_string()) return invalid_argument(where + ".role: expected a string, got " + role->dump());
    msg.role = role->get<std::string>();
    if (msg.role.empty()) return invalid_argument(where + ".role: empty");
    if (msg.role == "developer") msg.role = "system";
    const bool assistant = msg.role == "assistant";

    if (auto tcs = m.find("tool_calls"); tcs != m.end() && !tcs->is_null()) {
      if (!assistant) return invalid_argument(where + ".tool_calls: only assistant messages carry tool calls");
      LOOM_RETURN_IF_ERROR(parse_tool_calls(*tcs, where + ".tool_calls", &msg.calls));
      msg.has_calls = !msg.calls.empty();
    }

    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      if (!assistant)
        return invalid_argument(where + ".content: " + (content == m.end() ? "missing" : "null") +
                                " (only assistant messages may omit it)");
      msg.content = msg.has_calls ? json(nullptr) : json("");
    } else if (content->is_string()) {
      msg.content = *content;
    } else if (content->is_array()) {
      // llama.cpp's concatenation: text parts joined with "\n".
      std::string text;
      for (size_t j = 0; j < content->size(); ++j) {
        const std::string w = where + ".content[" + std::to_string(j) + "]";
        const json& part = (*content)[j];
        if (!part.is_object()) return invalid_argument(w + ": expected a content part object");
        auto type = part.find("type");
        if (type == part.end() || !type->is_string()) return invalid_argument(w + ".type: expected a string");
        const std::string t = *type;
        if (t == "text") {
          auto tx = part.find("text");
          if (tx == part.end() || !tx->is_string()) return invalid_argument(w + ".text: expected a string");
          if (!text.empty()) text += '\n';
          text += tx->get_ref<const std::string&>();
        } else if (is_media_part(t)) {
          return invalid_argument(w + ": \"" + t + "\" parts are not supported (loom renders text only)");
        } else {
          return invalid_argument(w + ".type: unknown content part type \"" + t + "\"");
        }
      }
      msg.content = std::move(text);
    } else {
      return invalid_argument(where + ".content: expected a string, an array of content parts or null, got " +
                              content->dump());
    }

    LOOM_RETURN_IF_ERROR(parse_optional_string(m, "tool_call_id", where, &msg.tool_call_id));
    LOOM_RETURN_IF_ERROR(parse_optional_string(m, "name", where, &msg.name));
    if (auto rc = m.find("reasoning_content"); rc != m.end()) {
      if (!rc->is_null() && !rc->is_string())
        return invalid_argument(where + ".reasoning_content: expected a string or null");
      msg.reasoning_content = *rc;
    }
    out.push_back(std::move(msg));
  }
  return out;
}

std::string mistral_id(const std::string& id) {
  if (is_mistral_id(id)) return id;
  static constexpr char kAlnum[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : id) h = (h ^ c) * 0x100000001B3ull;
  std::string s;
  for (int i = 0; i < 9; ++i) {
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    s.push_back(kAlnum[h % 62]);
  }
  return s;
}

void add_system(json& messages, const std::string& text) {
  if (!messages.empty() && messages[0]["role"] == "system" && messages[0]["content"].is_string()) {
    std::string c = messages[0]["content"];
    messages[0]["content"] = c.empty() ? text : c + "\n\n" + text;
    return;
  }
  json m = json::object();
  m["role"] = "system";
  m["content"] = text;
  messages.insert(messages.begin(), std::move(m));
}

// minja's system-role polyfill: system messages are folded into the user message that follows
// (or kept as a user message when none follows).
json fold_system_messages(const json& messages) {
  json out = json::array();
  std::string pending;
  for (const json& m : messages) {
    if (m["role"] == "system") {
      if (!pending.empty()) pending += '\n';
      if (m["content"].is_string()) pending += m["content"].get<std::string>();
      continue;
    }
    out.push_back(m);
    if (!pending.empty() && m["role"] == "user" && m["content"].is_string()) {
      const std::string c = m["content"];
      out.back()["content"] = c.empty() ? pending : pending + "\n" + c;
      pending.clear();
    }
  }
  if (!pending.empty()) out.push_back(json{{"role", "user"}, {"content", pending}});
  return out;
}

// llama.cpp's workaround for Gemma 4 templates older than the one that reads role "tool" messages
// (no "OpenAI Chat Completions" branch: google-gemma-4-31B-it-interleaved): an assistant message
// with tool calls, the tool results after it and a final assistant answer (without calls) become
// one assistant message {tool_calls, tool_responses: [{name, response}], content,
// reasoning_content}. A result's response is its content parsed as JSON when it parses, else the
// text; its name is the call's at the same index, else its tool_call_id.
json gemma4_tool_responses(const json& messages) {
  const auto has_calls = [](const json& m) {
    return m.contains("tool_calls") && m["tool_calls"].is_array() && !m["tool_calls"].empty();
  };
  json out = json::array();
  size_t i = 0;
  while (i < messages.size()) {
    const json& msg = messages[i];
    if (msg.value("role", "") != "assistant" || !has_calls(msg)) {
      out.push_back(msg);
      ++i;
      continue;
    }
    json calls = msg["tool_calls"], responses = json::array(), content, reasoning;
    if (msg.contains("reasoning_content") && msg["reasoning_content"].is_string()) reasoning = msg["reasoning_content"];
    ++i;
    while (i < messages.size() && messages[i].value("role", "") == "tool") {
      const json& t = messages[i];
      json response;
      if (t.contains("content")) {
        response = t["content"];
        if (response.is_string()) {
          json v = json::parse(response.get<std::string>(), nullptr, /*allow_exceptions=*/false);
          if (!v.is_discarded()) response = std::move(v);
        }
      }
      std::string name;
      if (responses.size() < calls.size()) {
        const json& tc = calls[responses.size()];
        if (tc.contains("function") && tc["function"].is_object()) name = tc["function"].value("name", "");
      }
      if (name.empty() && t.contains("tool_call_id") && t["tool_call_id"].is_string()) name = t["tool_call_id"];
      responses.push_back(json{{"name", name}, {"response", std::move(response)}});
      ++i;
    }
    if (i < messages.size() && messages[i].value("role", "") == "assistant" && !has_calls(messages[i])) {
      const json& c = messages[i].contains("content") ? messages[i]["content"] : json();
      if ((c.is_string() && !c.get_ref<const std::string&>().empty()) || (c.is_array() && !c.empty())) {
        content = c;
        ++i;
      }
    }
    json m = json::object();
    m["role"] = "assistant";
    m["tool_calls"] = std::move(calls);
    if (!responses.empty()) m["tool_responses"] = std::move(responses);
    if (!content.is_null()) m["content"] = std::move(content);
    if (!reasoning.is_null()) m["reasoning_content"] = std::move(reasoning);
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace detail

}  // namespace loom::chat

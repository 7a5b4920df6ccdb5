// OpenAI's Responses API: request translation and response / stream writing (responses.h).
#include "api/json_check.h"
#include "api/responses.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <new>
#include <utility>
#include <vector>

namespace loom::api {
namespace {

const std::string& required_string(const json& o, const char* key, const std::string& path) {
  const json* v = get(o, key);
  if (!v) bad(path + "." + key, "required");
  return as_string(*v, path + "." + key);
}

json text_part(const std::string& text) { return json{{"type", "text"}, {"text", text}}; }

// ---- request translation ----

// A message item's content parts: text parts (user/system/developer) or, for an assistant, the
// texts to join.
json message_parts(const json& content, const std::string& cp, bool assistant) {
  json parts = json::array();
  for (size_t k = 0; k < content.size(); ++k) {
    const std::string pp = at(cp, k);
    const json& p = as_object(content[k], pp);
    const std::string& type = required_string(p, "type", pp);
    if (type == "input_text" || type == "output_text") {
      parts.push_back(text_part(required_string(p, "text", pp)));
    } else if (type == "refusal" && assistant) {
      parts.push_back(text_part(required_string(p, "refusal", pp)));
    } else if (type == "input_image" || type == "input_file" || type == "input_audio") {
      bad(pp + ".type", "'" + type + "' content is not supported");
    } else {
      bad(pp + ".type", "unknown content part type '" + type + "'");
    }
  }
  return parts;
}

std::string join_texts(const json& parts) {
  std::string s;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) s += '\n';
    s += parts[i]["text"].get_ref<const std::string&>();
  }
  return s;
}

class InputBuilder {
 public:
  json messages = json::array();

  void add(const json& item, const std::string& ip) {
    as_object(item, ip);
    std::string type = "message";
    if (const json* t = get(item, "type")) {
      type = as_string(*t, ip + ".type");
    } else if (!get(item, "role")) {
      bad(ip + ".type", "required (an item with neither type nor role)");
    }
    if (type == "message") {
      add_message(item, ip);
    } else if (type == "function_call") {
      const std::string& call_id = required_string(item, "call_id", ip);
      const std::string& name = required_string(item, "name", ip);
      const std::string& arguments = required_string(item, "arguments", ip);
      json& m = assistant();
      if (!m.contains("tool_calls")) m["tool_calls"] = json::array();
      m["tool_calls"].push_back(
          json{{"id", call_id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}});
    } else if (type == "function_call_output") {
      const std::string& call_id = required_string(item, "call_id", ip);
      const json* o = get(item, "output");
      if (!o) bad(ip + ".output", "required");
      json content;
      if (o->is_string()) {
        content = *o;
      } else if (o->is_array()) {
        content = json::array();
        for (size_t k = 0; k < o->size(); ++k) {
          const std::string pp = at(ip + ".output", k);
          const json& p = as_object((*o)[k], pp);
          const std::string& pt = required_string(p, "type", pp);
          if (pt == "input_text" || pt == "output_text") {
            content.push_back(text_part(required_string(p, "text", pp)));
          } else if (pt == "input_image" || pt == "input_file") {
            bad(pp + ".type", "'" + pt + "' content is not supported");
          } else {
            bad(pp + ".type", "unknown content part type '" + pt + "'");
          }
        }
      } else {
        bad_type(ip + ".output", "a string or an array of content parts", *o);
      }
      messages.push_back(json{{"role", "tool"}, {"tool_call_id", call_id}, {"content", std::move(content)}});
    } else if (type == "reasoning") {
      std::string text = reasoning_text(item, ip);
      if (text.empty()) return;
      json& m = assistant();
      if (m.contains("reasoning_content")) m["reasoning_content"] = m["reasoning_content"].get<std::string>() + "\n" + text;
      else m["reasoning_content"] = text;
    } else if (type == "item_reference") {
      bad(ip + ".type", "item references are not supported: loom keeps no items; send the item itself");
    } else {
      bad(ip + ".type", "input item type '" + type + "' is not supported");
    }
  }

 private:
  // The assistant message consecutive assistant items join: the last message when it is one.
  json& assistant() {
    if (messages.empty() || messages.back()["role"] != "assistant")
      messages.push_back(json{{"role", "assistant"}, {"content", ""}});
    return messages.back();
  }

  void add_message(const json& item, const std::string& ip) {
    const json* r = get(item, "role");
    if (!r) bad(ip + ".role", "required");
    const std::string& role = as_string(*r, ip + ".role");
    if (role != "user" && role != "assistant" && role != "system" && role != "developer")
      bad(ip + ".role", "must be 'user', 'assistant', 'system' or 'developer', got '" + role + "'");
    const bool is_assistant = role == "assistant";
    const json* c = get(item, "content");
    const std::string cp = ip + ".content";
    if (!c) bad(cp, "required");
    if (!c->is_string() && !c->is_array()) bad_type(cp, "a string or an array of content parts", *c);
    if (!is_assistant) {
      messages.push_back(json{{"role", role}, {"content", c->is_string() ? *c : message_parts(*c, cp, false)}});
      return;
    }
    std::string text = c->is_string() ? c->get<std::string>() : join_texts(message_parts(*c, cp, true));
    json& m = assistant();
    std::string& have = m["content"].get_ref<std::string&>();
    if (!have.empty() && !text.empty()) have += '\n';
    have += text;
  }

  static std::string reasoning_text(const json& item, const std::string& ip) {
    auto texts = [&](const char* key) {
      std::string s;
      const json* a = get(item, key);
      if (!a) return s;
      const std::string ap = ip + "." + key;
      as_array(*a, ap);
      for (size_t k = 0; k < a->size(); ++k) {
        const std::string pp = at(ap, k);
        const json& p = as_object((*a)[k], pp);
        if (const json* t = get(p, "type")) as_string(*t, pp + ".type");
        const std::string& text = required_string(p, "text", pp);
        if (text.empty()) continue;
        if (!s.empty()) s += '\n';
        s += text;
      }
      return s;
    };
    std::string summary = texts("summary");
    std::string content = texts("content");
    if (const json* e = get(item, "encrypted_content")) as_string(*e, ip + ".encrypted_content");
    return content.empty() ? summary : content;
  }
};

json convert_tools(const json& tools) {
  as_array(tools, "tools");
  json out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string tp = at("tools", i);
    const json& t = as_object(tools[i], tp);
    const std::string& type = required_string(t, "type", tp);
    // Hosted tools (web_search, file_search, custom ...) are the vendor's to run: skipped, as
    // llama-server skips them, so that agents that always send them (Codex) still work.
    if (type != "function") continue;
    const std::string& name = required_string(t, "name", tp);
    if (name.empty()) bad(tp + ".name", "must not be empty");
    json fn{{"name", name}};
    if (const json* d = get(t, "description")) fn["description"] = as_string(*d, tp + ".description");
    if (const json* p = get(t, "parameters")) fn["parameters"] = as_object(*p, tp + ".parameters");
    bool strict = true;
    if (const json* s = get(t, "strict")) strict = as_bool(*s, tp + ".strict");
    fn["strict"] = strict;
    out.push_back(json{{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

json convert_tool_choice(const json& tc) {
  if (tc.is_string()) {
    const std::string& s = tc.get_ref<const std::string&>();
    if (s != "auto" && s != "none" && s != "required")
      bad("tool_choice", "must be 'auto', 'none', 'required' or a function, got '" + s + "'");
    return tc;
  }
  if (!tc.is_object()) bad_type("tool_choice", "a string or an object", tc);
  const std::string& type = required_string(tc, "type", "tool_choice");
  if (type != "function") bad("tool_choice.type", "tool choice '" + type + "' is not supported (only 'function')");
  return json{{"type", "function"}, {"function", {{"name", required_string(tc, "name", "tool_choice")}}}};
}

json convert_text_format(const json& text) {
  as_object(text, "text");
  const json* f = get(text, "format");
  if (!f) return nullptr;
  as_object(*f, "text.format");
  const std::string& type = required_string(*f, "type", "text.format");
  if (type == "text") return nullptr;
  if (type == "json_object") return json{{"type", "json_object"}};
  if (type != "json_schema") bad("text.format.type", "must be 'text', 'json_object' or 'json_schema', got '" + type + "'");
  json js = json::object();
  if (const json* n = get(*f, "name")) js["name"] = as_string(*n, "text.format.name");
  if (const json* d = get(*f, "description")) js["description"] = as_string(*d, "text.format.description");
  const json* schema = get(*f, "schema");
  if (!schema) bad("text.format.schema", "required");
  js["schema"] = as_object(*schema, "text.format.schema");
  if (const json* s = get(*f, "strict")) js["strict"] = as_bool(*s, "text.format.strict");
  return json{{"type", "json_schema"}, {"json_schema", std::move(js)}};
}

bool is_responses_field(const std::string& k) {
  static const char* const kFields[] = {"model",
                                        "input",
                                        "instructions",
                                        "tools",
                                        "tool_choice",
                                        "max_output_tokens",
                                        "temperature",
                                        "top_p",
                                        "stream",
                                        "parallel_tool_calls",
                                        "reasoning",
                                        "text",
                                        "previous_response_id",
                                        "conversation",
                                        "background",
                                        "store",
                                        "metadata",
                                        "include",
                                        "truncation",
                                        "service_tier",
                                        "prompt_cache_key",
                                        "safety_identifier",
                                        "max_tool_calls",
                                        "top_logprobs",
                                        "stream_options",
                                        "user",
                                        "prompt"};
  return std::find(std::begin(kFields), std::end(kFields), k) != std::end(kFields);
}

json translate(const json& body) {
  if (!body.is_object()) bad_type("request body", "a JSON object", body);
  check_depth(body);
  if (const json* p = get(body, "previous_response_id")) {
    if (!as_string(*p, "previous_response_id").empty())
      bad("previous_response_id", "not supported: loom does not store responses; send the whole conversation in input");
  }
  if (const json* c = get(body, "conversation"))
    bad("conversation", std::string("not supported: loom does not store conversations (got ") + kind_of(*c) +
                            "); send the whole conversation in input");
  if (const json* b = get(body, "background")) {
    if (as_bool(*b, "background")) bad("background", "background responses are not supported");
  }
  if (get(body, "prompt")) bad("prompt", "stored prompt templates are not supported");

  json out = json::object();
  if (const json* m = get(body, "model")) out["model"] = as_string(*m, "model");

  InputBuilder b;
  if (const json* ins = get(body, "instructions"))
    b.messages.push_back(json{{"role", "system"}, {"content", as_string(*ins, "instructions")}});
  const json* input = get(body, "input");
  if (!input) bad("input", "required");
  if (input->is_string()) {
    b.messages.push_back(json{{"role", "user"}, {"content", *input}});
  } else if (input->is_array()) {
    if (input->empty()) bad("input", "must not be empty");
    for (size_t i = 0; i < input->size(); ++i) b.add((*input)[i], at("input", i));
  } else {
    bad_type("input", "a string or an array of input items", *input);
  }
  out["messages"] = std::move(b.messages);

  if (const json* t = get(body, "tools")) {
    json tools = convert_tools(*t);
    if (!tools.empty()) out["tools"] = std::move(tools);
  }
  if (const json* tc = get(body, "tool_choice")) out["tool_choice"] = convert_tool_choice(*tc);
  if (const json* v = get(body, "parallel_tool_calls")) out["parallel_tool_calls"] = as_bool(*v, "parallel_tool_calls");
  if (const json* v = get(body, "max_output_tokens")) {
    int64_t n = as_int(*v, "max_output_tokens");
    if (n < 1) bad("max_output_tokens", "must be at least 1");
    out["max_tokens"] = n;
  }
  if (const json* v = get(body, "temperature")) {
    if (as_number(*v, "temperature") < 0) bad("temperature", "must not be negative");
    out["temperature"] = *v;
  }
  if (const json* v = get(body, "top_p")) {
    as_number(*v, "top_p");
    out["top_p"] = *v;
  }
  if (const json* v = get(body, "stream")) out["stream"] = as_bool(*v, "stream");
  if (const json* r = get(body, "reasoning")) {
    as_object(*r, "reasoning");
    if (const json* e = get(*r, "effort")) out["reasoning_effort"] = as_string(*e, "reasoning.effort");
  }
  if (const json* t = get(body, "text")) {
    json rf = convert_text_format(*t);
    if (!rf.is_null()) out["response_format"] = std::move(rf);
  }
  if (const json* u = get(body, "user")) out["user"] = as_string(*u, "user");
  if (const json* md = get(body, "metadata")) as_object(*md, "metadata");
  if (const json* st = get(body, "store")) as_bool(*st, "store");

  for (auto it = body.begin(); it != body.end(); ++it) {
    if (is_responses_field(it.key()) || out.contains(it.key())) continue;
    out[it.key()] = it.value();  // llama.cpp's extensions, as llama-server passes them
  }
  return out;
}

// ---- response writing ----

const std::string* string_at(const json& o, const char* key) {
  if (!o.is_object()) return nullptr;
  auto it = o.find(key);
  if (it == o.end() || !it->is_string()) return nullptr;
  return &it->get_ref<const std::string&>();
}

std::string id_base(const std::string& id) {
  static const std::string kPrefix = "resp_";
  return id.compare(0, kPrefix.size(), kPrefix) == 0 ? id.substr(kPrefix.size()) : id;
}
std::string nth_id(const char* prefix, const std::string& base, int n) {
  std::string s(prefix);
  s += base;
  if (n > 0) {
    s += '_';
    s += std::to_string(n);
  }
  return s;
}
std::string call_item_id(const std::string& call_id, const std::string& base, size_t k) {
  static const std::string kCall = "call_";
  if (call_id.empty()) {
    std::string s = "fc_";
    s += base;
    s += '_';
    s += std::to_string(k);
    return s;
  }
  return "fc_" + (call_id.compare(0, kCall.size(), kCall) == 0 ? call_id.substr(kCall.size()) : call_id);
}

json text_output_part(const std::string& text) {
  return json{{"type", "output_text"}, {"annotations", json::array()}, {"logprobs", json::array()}, {"text", text}};
}
json reasoning_item(const std::string& id, const std::string& text, const char* status) {
  json content = json::array();
  if (std::string(status) == "completed") content.push_back(json{{"type", "reasoning_text"}, {"text", text}});
  return json{{"id", id},
              {"type", "reasoning"},
              {"summary", json::array()},
              {"content", std::move(content)},
              {"encrypted_content", ""},
              {"status", status}};
}
json message_item(const std::string& id, json content, const char* status) {
  return json{{"id", id}, {"type", "message"}, {"status", status}, {"role", "assistant"}, {"content", std::move(content)}};
}
json call_item(const std::string& id, const std::string& call_id, const std::string& name, const std::string& args,
               const char* status) {
  return json{{"id", id},          {"type", "function_call"}, {"status", status},
              {"arguments", args}, {"call_id", call_id},      {"name", name}};
}

json usage_of(const ChatResult& r) {
  return json{{"input_tokens", r.prompt_tokens},
              {"output_tokens", r.completion_tokens},
              {"total_tokens", r.prompt_tokens + r.completion_tokens},
              {"input_tokens_details", {{"cached_tokens", r.cached_tokens}}}};
}

json final_response(const std::string& id, const std::string& model, int64_t created_at, json output, const ChatResult& r) {
  const bool incomplete = r.finish_reason == "length";
  json res{{"id", id},
           {"object", "response"},
           {"created_at", created_at},
           {"completed_at", std::max<int64_t>(created_at, static_cast<int64_t>(std::time(nullptr)))},
           {"status", incomplete ? "incomplete" : "completed"}};
  if (incomplete) res["incomplete_details"] = json{{"reason", "max_output_tokens"}};
  res["model"] = model;
  res["output"] = std::move(output);
  res["usage"] = usage_of(r);
  return res;
}

}  // namespace

json responses_to_chat(const json& body) { return only_api_errors(translate, body); }

json responses_response(const ChatResult& r) {
  const std::string base = id_base(r.id);
  json output = json::array();
  if (const std::string* rc = string_at(r.message, "reasoning_content"); rc && !rc->empty())
    output.push_back(reasoning_item(nth_id("rs_", base, 0), *rc, "completed"));
  if (const std::string* c = string_at(r.message, "content"); c && !c->empty())
    output.push_back(message_item(nth_id("msg_", base, 0), json::array({text_output_part(*c)}), "completed"));
  if (r.message.is_object()) {
    auto it = r.message.find("tool_calls");
    if (it != r.message.end() && it->is_array()) {
      for (size_t k = 0; k < it->size(); ++k) {
        const json& tc = (*it)[k];
        const json empty = json::object();
        const json& fn = tc.is_object() && tc.contains("function") ? tc["function"] : empty;
        const std::string* id = string_at(tc, "id");
        const std::string* name = string_at(fn, "name");
        const std::string* args = string_at(fn, "arguments");
        std::string call_id = id ? *id : "";
        output.push_back(
            call_item(call_item_id(call_id, base, k), call_id, name ? *name : "", args ? *args : "", "completed"));
      }
    }
  }
  return final_response(r.id, r.model, r.created, std::move(output), r);
}

json responses_input_tokens_response(int64_t input_tokens) {
  return json{{"object", "response.input_tokens"}, {"input_tokens", input_tokens}};
}

// ---- streaming ----

ResponsesStream::ResponsesStream(std::string id, std::string model, int64_t created_at)
    : id_(std::move(id)), model_(std::move(model)), created_at_(created_at) {}

SseEvent ResponsesStream::make(const char* name, json fields) {
  json d{{"type", name}, {"sequence_number", seq_++}};
  for (auto& [k, v] : fields.items()) d[k] = std::move(v);
  return SseEvent{name, std::move(d)};
}

json ResponsesStream::response_object(const char* status) const {
  return json{{"id", id_},        {"object", "response"}, {"created_at", created_at_},
              {"status", status}, {"model", model_},      {"output", json::array()}};
}

std::vector<SseEvent> ResponsesStream::begin() {
  std::vector<SseEvent> out;
  out.push_back(make("response.created", json{{"response", response_object("in_progress")}}));
  out.push_back(make("response.in_progress", json{{"response", response_object("in_progress")}}));
  return out;
}

void ResponsesStream::open_item(std::vector<SseEvent>& out, Kind kind, json item) {
  close_item(out);
  open_ = kind;
  item_ = std::move(item);
  text_.clear();
  out.push_back(make("response.output_item.added", json{{"output_index", output_.size()}, {"item", item_}}));
  if (kind == Kind::kMessage)
    out.push_back(make("response.content_part.added", json{{"item_id", item_["id"]},
                                                           {"output_index", output_.size()},
                                                           {"content_index", 0},
                                                           {"part", text_output_part("")}}));
}

void ResponsesStream::close_item(std::vector<SseEvent>& out) {
  if (open_ == Kind::kNone) return;
  const size_t index = output_.size();
  const std::string id = item_["id"].get<std::string>();
  json done;
  if (open_ == Kind::kMessage) {
    out.push_back(make(
        "response.output_text.done",
        json{{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"text", text_}, {"logprobs", json::array()}}));
    out.push_back(
        make("response.content_part.done",
             json{{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"part", text_output_part(text_)}}));
    done = message_item(id, json::array({text_output_part(text_)}), "completed");
  } else if (open_ == Kind::kReasoning) {
    out.push_back(make("response.reasoning_text.done",
                       json{{"item_id", id}, {"output_index", index}, {"content_index", 0}, {"text", text_}}));
    done = reasoning_item(id, text_, "completed");
  } else {
    Call& c = calls_[open_tool_];
    c.closed = true;
    out.push_back(make("response.function_call_arguments.done",
                       json{{"item_id", id}, {"output_index", index}, {"name", c.name}, {"arguments", c.arguments}}));
    done = call_item(id, c.id, c.name, c.arguments, "completed");
  }
  out.push_back(make("response.output_item.done", json{{"output_index", index}, {"item", done}}));
  output_.push_back(std::move(done));
  open_ = Kind::kNone;
  open_tool_ = -1;
  text_.clear();
}

void ResponsesStream::on_reasoning(std::vector<SseEvent>& out, const std::string& text) {
  if (text.empty()) return;
  if (open_ != Kind::kReasoning)
    open_item(out, Kind::kReasoning, reasoning_item(nth_id("rs_", id_base(id_), n_reasoning_++), "", "in_progress"));
  text_ += text;
  reasoning_ += text;
  out.push_back(
      make("response.reasoning_text.delta",
           json{{"item_id", item_["id"]}, {"output_index", output_.size()}, {"content_index", 0}, {"delta", text}}));
}

void ResponsesStream::on_text(std::vector<SseEvent>& out, const std::string& text) {
  if (text.empty()) return;
  if (open_ != Kind::kMessage)
    open_item(out, Kind::kMessage, message_item(nth_id("msg_", id_base(id_), n_messages_++), json::array(), "in_progress"));
  text_ += text;
  content_ += text;
  out.push_back(make("response.output_text.delta", json{{"item_id", item_["id"]},
                                                        {"output_index", output_.size()},
                                                        {"content_index", 0},
                                                        {"delta", text},
                                                        {"logprobs", json::array()}}));
}

void ResponsesStream::on_tool_call(std::vector<SseEvent>& out, const json& call) {
  if (!call.is_object()) return;
  int64_t index = 0;
  if (auto it = call.find("index"); it != call.end() && it->is_number_integer()) index = it->get<int64_t>();
  const json* fn = nullptr;
  if (auto it = call.find("function"); it != call.end() && it->is_object()) fn = &*it;
  const std::string* args = fn ? string_at(*fn, "arguments") : nullptr;
  auto found = calls_.find(index);
  if (found == calls_.end()) {
    Call c;
    if (const std::string* id = string_at(call, "id")) c.id = *id;
    if (const std::string* name = fn ? string_at(*fn, "name") : nullptr) c.name = *name;
    const std::string item_id = call_item_id(c.id, id_base(id_), static_cast<size_t>(index));
    json item = call_item(item_id, c.id, c.name, "", "in_progress");
    found = calls_.emplace(index, std::move(c)).first;
    open_item(out, Kind::kCall, std::move(item));
    open_tool_ = index;
  }
  if (!args || args->empty()) return;
  if (found->second.closed) return;  // its item is done (deltas never do this): nothing to add it to
  found->second.arguments += *args;
  out.push_back(make("response.function_call_arguments.delta",
                     json{{"item_id", item_["id"]}, {"output_index", output_.size()}, {"delta", *args}}));
}

std::vector<SseEvent> ResponsesStream::delta(const json& d) { return route(d); }

std::vector<SseEvent> ResponsesStream::end(const ChatResult& r) {
  std::vector<SseEvent> out;
  if (ended_) return out;
  route_rest(out, r);  // what the result has beyond what was streamed
  if (r.message.is_object()) {
    auto it = r.message.find("tool_calls");
    if (it != r.message.end() && it->is_array()) {
      for (size_t i = 0; i < it->size(); ++i) {
        const json& tc = (*it)[i];
        if (!tc.is_object()) continue;
        const json empty = json::object();
        const json& fn = tc.contains("function") && tc["function"].is_object() ? tc["function"] : empty;
        const std::string* args = string_at(fn, "arguments");
        auto found = calls_.find(static_cast<int64_t>(i));
        if (found == calls_.end()) {
          const std::string* id = string_at(tc, "id");
          const std::string* name = string_at(fn, "name");
          on_tool_call(out, json{{"index", i},
                                 {"id", id ? *id : ""},
                                 {"type", "function"},
                                 {"function", {{"name", name ? *name : ""}, {"arguments", args ? *args : ""}}}});
        } else if (args) {
          std::string more = rest(*args, found->second.arguments);
          if (!more.empty()) on_tool_call(out, json{{"index", i}, {"function", {{"arguments", more}}}});
        }
      }
    }
  }
  close_item(out);
  ended_ = true;
  out.push_back(make("response.completed", json{{"response", final_response(id_, model_, created_at_, output_, r)}}));
  return out;
}

}  // namespace loom::api

// Anthropic's Messages API: request translation and response / stream writing (anthropic.h).
#include "api/anthropic.h"
#include "api/json_check.h"

#include <cmath>
#include <new>
#include <optional>
#include <utility>
#include <vector>

namespace loom::api {
namespace {

std::string dot(const std::string& path, const char* key) { return path.empty() ? key : path + "." + key; }

std::string dump_json(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

// Claude Code's first system line carries a per-request "cch=XXXXX;" stamp; replacing it with a
// constant keeps the prompt prefix identical between requests (llama-server does the same).
void normalize_billing_header(std::string& text) {
  static const std::string kPrefix = "x-anthropic-billing-header:";
  if (text.compare(0, kPrefix.size(), kPrefix) != 0) return;
  size_t p = text.find("cch=", kPrefix.size());
  if (p == std::string::npos) return;
  size_t start = p + 4;
  constexpr size_t kLen = 5;
  if (start + kLen < text.size() && text[start + kLen] == ';') text.replace(start, kLen, std::string(kLen, 'f'));
}

json text_part(const std::string& text) { return json{{"type", "text"}, {"text", text}}; }

// ---- request translation ----

std::string system_text(const json& sys) {
  const std::string path = "system";
  if (sys.is_string()) {
    std::string s = sys.get<std::string>();
    normalize_billing_header(s);
    return s;
  }
  if (!sys.is_array()) bad_type(path, "a string or an array of text blocks", sys);
  std::string out;
  for (size_t i = 0; i < sys.size(); ++i) {
    const std::string bp = at(path, i);
    const json& b = as_object(sys[i], bp);
    const json* t = get(b, "type");
    if (!t) bad(dot(bp, "type"), "required");
    const std::string& type = as_string(*t, dot(bp, "type"));
    if (type != "text") bad(dot(bp, "type"), "system blocks must be text blocks, got '" + type + "'");
    const json* tx = get(b, "text");
    if (!tx) bad(dot(bp, "text"), "required");
    std::string s = as_string(*tx, dot(bp, "text"));
    normalize_billing_header(s);
    out += s;
  }
  return out;
}

// A tool_result block's content as one string.
std::string tool_result_text(const json& block, const std::string& bp) {
  std::string text;
  if (const json* c = get(block, "content")) {
    const std::string cp = dot(bp, "content");
    if (c->is_string()) {
      text = c->get<std::string>();
    } else if (c->is_array()) {
      for (size_t k = 0; k < c->size(); ++k) {
        const std::string ip = at(cp, k);
        const json& item = as_object((*c)[k], ip);
        const json* t = get(item, "type");
        if (!t) bad(dot(ip, "type"), "required");
        const std::string& type = as_string(*t, dot(ip, "type"));
        if (type == "text") {
          const json* tx = get(item, "text");
          if (!tx) bad(dot(ip, "text"), "required");
          text += as_string(*tx, dot(ip, "text"));
        } else if (type == "image") {
          bad(dot(ip, "type"), "image content is not supported");
        } else if (type == "document") {
          bad(dot(ip, "type"), "document content is not supported");
        } else {
          bad(dot(ip, "type"), "unknown tool result content type '" + type + "'");
        }
      }
    } else {
      bad_type(cp, "a string or an array of content blocks", *c);
    }
  }
  if (const json* e = get(block, "is_error")) {
    if (as_bool(*e, dot(bp, "is_error"))) text = text.empty() ? "Error" : "Error: " + text;
  }
  return text;
}

// What an array-content message's blocks have gathered so far.
struct MessageBlocks {
  MessageBlocks(const std::string& r, bool a) : role(r), assistant(a) {}
  const std::string& role;
  bool assistant;
  json parts = json::array();       // text parts not yet emitted
  json tool_calls = json::array();  // assistant
  std::string reasoning;            // assistant
  bool has_reasoning = false;
};

// Emits the text parts gathered so far as one message of the block's role.
void flush_text_parts(MessageBlocks& m, json& out) {
  if (m.parts.empty()) return;
  out.push_back(json{{"role", m.role}, {"content", std::move(m.parts)}});
  m.parts = json::array();
}

json tool_use_call(const json& b, const std::string& bp) {
  const json* id = get(b, "id");
  if (!id) bad(dot(bp, "id"), "required");
  const json* name = get(b, "name");
  if (!name) bad(dot(bp, "name"), "required");
  std::string arguments = "{}";
  if (const json* in = get(b, "input")) arguments = dump_json(as_object(*in, dot(bp, "input")));
  return json{{"id", as_string(*id, dot(bp, "id"))},
              {"type", "function"},
              {"function", {{"name", as_string(*name, dot(bp, "name"))}, {"arguments", arguments}}}};
}

void convert_tool_result(const json& b, const std::string& bp, MessageBlocks& m, json& out) {
  const json* id = get(b, "tool_use_id");
  if (!id) bad(dot(bp, "tool_use_id"), "required");
  const std::string& call_id = as_string(*id, dot(bp, "tool_use_id"));
  std::string text = tool_result_text(b, bp);
  flush_text_parts(m, out);
  out.push_back(json{{"role", "tool"}, {"tool_call_id", call_id}, {"content", std::move(text)}});
}

void convert_block(const json& b, const std::string& bp, MessageBlocks& m, json& out) {
  const json* t = get(b, "type");
  const std::string tp = dot(bp, "type");
  if (!t) bad(tp, "required");
  const std::string& type = as_string(*t, tp);
  auto only_assistant = [&] {
    if (!m.assistant) bad(tp, "'" + type + "' blocks are only allowed in assistant messages");
  };
  if (type == "text") {
    const json* tx = get(b, "text");
    if (!tx) bad(dot(bp, "text"), "required");
    m.parts.push_back(text_part(as_string(*tx, dot(bp, "text"))));
  } else if (type == "image") {
    bad(tp, "image content is not supported");
  } else if (type == "document") {
    bad(tp, "document content is not supported");
  } else if (type == "tool_use") {
    only_assistant();
    m.tool_calls.push_back(tool_use_call(b, bp));
  } else if (type == "tool_result") {
    if (m.assistant) bad(tp, "'tool_result' blocks are only allowed in user messages");
    convert_tool_result(b, bp, m, out);
  } else if (type == "thinking") {
    only_assistant();
    const json* th = get(b, "thinking");
    if (!th) bad(dot(bp, "thinking"), "required");
    m.reasoning += as_string(*th, dot(bp, "thinking"));
    m.has_reasoning = true;
    if (const json* s = get(b, "signature")) as_string(*s, dot(bp, "signature"));
  } else if (type == "redacted_thinking") {
    only_assistant();  // encrypted; nothing a local model can read
  } else {
    bad(tp, "unknown content block type '" + type + "'");
  }
}

// The assistant message the blocks make, if any is left (llama-server drops empty ones).
void emit_assistant(MessageBlocks& m, json& out) {
  if (m.parts.empty() && m.tool_calls.empty() && !m.has_reasoning) return;  // nothing left (llama-server)
  json msg{{"role", "assistant"}};
  if (!m.parts.empty()) msg["content"] = std::move(m.parts);
  else msg["content"] = "";
  if (!m.tool_calls.empty()) msg["tool_calls"] = std::move(m.tool_calls);
  if (m.has_reasoning) msg["reasoning_content"] = m.reasoning;
  out.push_back(std::move(msg));
}

void convert_message(const json& msg, const std::string& mp, json& out) {
  as_object(msg, mp);
  const json* r = get(msg, "role");
  if (!r) bad(dot(mp, "role"), "required");
  const std::string& role = as_string(*r, dot(mp, "role"));
  if (role != "user" && role != "assistant") bad(dot(mp, "role"), "must be 'user' or 'assistant', got '" + role + "'");
  const json* c = get(msg, "content");
  const std::string cp = dot(mp, "content");
  if (!c) bad(cp, "required");
  if (c->is_string()) {
    out.push_back(json{{"role", role}, {"content", *c}});
    return;
  }
  if (!c->is_array()) bad_type(cp, "a string or an array of content blocks", *c);

  MessageBlocks m{role, role == "assistant"};
  for (size_t j = 0; j < c->size(); ++j) {
    const std::string bp = at(cp, j);
    convert_block(as_object((*c)[j], bp), bp, m, out);
  }
  if (m.assistant) emit_assistant(m, out);
  else flush_text_parts(m, out);
}

json convert_tools(const json& tools) {
  as_array(tools, "tools");
  json out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string tp = at("tools", i);
    const json& t = as_object(tools[i], tp);
    if (const json* ty = get(t, "type")) {
      const std::string& type = as_string(*ty, dot(tp, "type"));
      // Server tools (web_search_..., bash_..., text_editor_...) run at the vendor: skipped, as
      // llama-server skips them, so that clients that always send them still work.
      if (type != "custom") continue;
    }
    const json* name = get(t, "name");
    if (!name) bad(dot(tp, "name"), "required");
    const std::string& n = as_string(*name, dot(tp, "name"));
    if (n.empty()) bad(dot(tp, "name"), "must not be empty");
    std::string description;
    if (const json* d = get(t, "description")) description = as_string(*d, dot(tp, "description"));
    const json* schema = get(t, "input_schema");
    if (!schema) bad(dot(tp, "input_schema"), "required");
    as_object(*schema, dot(tp, "input_schema"));
    out.push_back(
        json{{"type", "function"}, {"function", {{"name", n}, {"description", description}, {"parameters", *schema}}}});
  }
  return out;
}

json translate_messages(const json& body) {
  json messages = json::array();
  if (const json* sys = get(body, "system")) messages.push_back(json{{"role", "system"}, {"content", system_text(*sys)}});
  const json* msgs = get(body, "messages");
  if (!msgs) bad("messages", "required");
  as_array(*msgs, "messages");
  if (msgs->empty()) bad("messages", "must not be empty");
  for (size_t i = 0; i < msgs->size(); ++i) convert_message((*msgs)[i], at("messages", i), messages);
  return messages;
}

void translate_tool_choice(const json& tc, json& out) {
  as_object(tc, "tool_choice");
  const json* ty = get(tc, "type");
  if (!ty) bad("tool_choice.type", "required");
  const std::string& type = as_string(*ty, "tool_choice.type");
  if (type == "auto") {
    out["tool_choice"] = "auto";
  } else if (type == "any") {
    out["tool_choice"] = "required";
  } else if (type == "none") {
    out["tool_choice"] = "none";
  } else if (type == "tool") {
    const json* name = get(tc, "name");
    if (!name) bad("tool_choice.name", "required when type is 'tool'");
    out["tool_choice"] = json{{"type", "function"}, {"function", {{"name", as_string(*name, "tool_choice.name")}}}};
  } else {
    bad("tool_choice.type", "must be 'auto', 'any', 'tool' or 'none', got '" + type + "'");
  }
  if (const json* dp = get(tc, "disable_parallel_tool_use")) {
    if (as_bool(*dp, "tool_choice.disable_parallel_tool_use")) out["parallel_tool_calls"] = false;
  }
}

// stop_sequences, max_tokens, temperature, top_p, top_k and stream.
void translate_sampling(const json& body, json& out) {
  if (const json* s = get(body, "stop_sequences")) {
    as_array(*s, "stop_sequences");
    for (size_t i = 0; i < s->size(); ++i) as_string((*s)[i], at("stop_sequences", i));
    out["stop"] = *s;
  }
  if (const json* mt = get(body, "max_tokens")) {
    int64_t n = as_int(*mt, "max_tokens");
    if (n < 1) bad("max_tokens", "must be at least 1");
    out["max_tokens"] = n;
  } else {
    out["max_tokens"] = 4096;
  }
  if (const json* v = get(body, "temperature")) {
    if (as_number(*v, "temperature") < 0) bad("temperature", "must not be negative");
    out["temperature"] = *v;
  }
  if (const json* v = get(body, "top_p")) {
    as_number(*v, "top_p");
    out["top_p"] = *v;
  }
  if (const json* v = get(body, "top_k")) {
    int64_t k = as_int(*v, "top_k");
    if (k < 0) bad("top_k", "must not be negative");
    out["top_k"] = k;
  }
  if (const json* v = get(body, "stream")) out["stream"] = as_bool(*v, "stream");
}

// thinking -> chat_template_kwargs.enable_thinking (unless given) and thinking_budget_tokens.
void translate_thinking(const json& body, json& out) {
  json kwargs = json::object();
  if (const json* k = get(body, "chat_template_kwargs")) kwargs = as_object(*k, "chat_template_kwargs");
  std::optional<int64_t> budget;
  if (const json* th = get(body, "thinking")) {
    as_object(*th, "thinking");
    const json* ty = get(*th, "type");
    if (!ty) bad("thinking.type", "required");
    const std::string& type = as_string(*ty, "thinking.type");
    bool enable = true;
    if (type == "enabled") {
      int64_t b = 10000;
      if (const json* bt = get(*th, "budget_tokens")) {
        b = as_int(*bt, "thinking.budget_tokens");
        if (b < 0) bad("thinking.budget_tokens", "must not be negative");
      }
      budget = b;
    } else if (type == "disabled") {
      enable = false;
    } else if (type != "adaptive") {
      bad("thinking.type", "must be 'enabled', 'disabled' or 'adaptive', got '" + type + "'");
    }
    if (!kwargs.contains("enable_thinking")) kwargs["enable_thinking"] = enable;
  }
  if (!kwargs.empty() || get(body, "chat_template_kwargs")) out["chat_template_kwargs"] = std::move(kwargs);
  if (budget) out["thinking_budget_tokens"] = *budget;
}

// llama.cpp's own request fields (grammar, json_schema, seed, min_p, n_probs, ...) pass on, as
// they do on /v1/responses; Anthropic's other fields stay behind.
void pass_other_fields(const json& body, json& out) {
  static const char* const kAnthropicFields[] = {"model",
                                                 "messages",
                                                 "system",
                                                 "max_tokens",
                                                 "metadata",
                                                 "stop_sequences",
                                                 "stream",
                                                 "temperature",
                                                 "top_k",
                                                 "top_p",
                                                 "tools",
                                                 "tool_choice",
                                                 "thinking",
                                                 "service_tier",
                                                 "container",
                                                 "mcp_servers",
                                                 "context_management",
                                                 "chat_template_kwargs",
                                                 "betas",
                                                 "output_format"};
  for (auto it = body.begin(); it != body.end(); ++it) {
    bool known = out.contains(it.key());
    for (const char* f : kAnthropicFields) known = known || it.key() == f;
    if (!known) out[it.key()] = it.value();
  }
}

json translate(const json& body) {
  if (!body.is_object()) bad_type("request body", "a JSON object", body);
  check_depth(body);
  json out = json::object();
  if (const json* m = get(body, "model")) out["model"] = as_string(*m, "model");
  out["messages"] = translate_messages(body);
  if (const json* tools = get(body, "tools")) {
    json t = convert_tools(*tools);
    if (!t.empty()) out["tools"] = std::move(t);
  }
  if (const json* tc = get(body, "tool_choice")) translate_tool_choice(*tc, out);
  translate_sampling(body, out);
  translate_thinking(body, out);
  if (const json* md = get(body, "metadata")) as_object(*md, "metadata");
  pass_other_fields(body, out);
  return out;
}

// ---- response writing ----

SseEvent event(const char* name, json data) {
  json d{{"type", name}};
  for (auto& [k, v] : data.items()) d[k] = std::move(v);
  return SseEvent{name, std::move(d)};
}

const std::string* string_at(const json& o, const char* key) {
  if (!o.is_object()) return nullptr;
  auto it = o.find(key);
  if (it == o.end() || !it->is_string()) return nullptr;
  return &it->get_ref<const std::string&>();
}

json parse_input(const std::string& arguments) {
  json v = json::parse(arguments, nullptr, false);
  if (v.is_discarded() || !v.is_object()) return json::object();
  return v;
}

bool has_tool_calls(const ChatResult& r) {
  if (!r.message.is_object()) return false;
  auto it = r.message.find("tool_calls");
  return it != r.message.end() && it->is_array() && !it->empty();
}

json usage_of(int64_t prompt, int64_t cached, int64_t output) {
  return json{{"cache_read_input_tokens", cached}, {"input_tokens", prompt - cached}, {"output_tokens", output}};
}

}  // namespace

json anthropic_to_chat(const json& body) { return only_api_errors(translate, body); }

std::string anthropic_stop_reason(const ChatResult& r) {
  if (r.finish_reason == "length") return "max_tokens";
  if (r.finish_reason == "tool_calls" || has_tool_calls(r)) return "tool_use";
  if (!r.stop_word.empty()) return "stop_sequence";
  return "end_turn";
}

json anthropic_response(const ChatResult& r) {
  json content = json::array();
  if (const std::string* rc = string_at(r.message, "reasoning_content"); rc && !rc->empty())
    content.push_back(json{{"type", "thinking"}, {"thinking", *rc}, {"signature", ""}});
  if (const std::string* c = string_at(r.message, "content"); c && !c->empty())
    content.push_back(json{{"type", "text"}, {"text", *c}});
  if (has_tool_calls(r)) {
    for (const json& tc : r.message["tool_calls"]) {
      const json& fn = tc.is_object() && tc.contains("function") ? tc["function"] : json::object();
      const std::string* id = string_at(tc, "id");
      const std::string* name = string_at(fn, "name");
      const std::string* args = string_at(fn, "arguments");
      content.push_back(json{{"type", "tool_use"},
                             {"id", id ? *id : ""},
                             {"name", name ? *name : ""},
                             {"input", args ? parse_input(*args) : json::object()}});
    }
  }
  return json{{"id", r.id},
              {"type", "message"},
              {"role", "assistant"},
              {"content", std::move(content)},
              {"model", r.model},
              {"stop_reason", anthropic_stop_reason(r)},
              {"stop_sequence", r.stop_word.empty() ? json(nullptr) : json(r.stop_word)},
              {"usage", usage_of(r.prompt_tokens, r.cached_tokens, r.completion_tokens)}};
}

json anthropic_count_tokens_response(int64_t input_tokens) { return json{{"input_tokens", input_tokens}}; }

std::string anthropic_error_type(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 402: return "billing_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503:
    case 529: return "overloaded_error";
    case 504: return "timeout_error";
    case 501: return "invalid_request_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

json anthropic_error(int status, const std::string& message) {
  return json{{"type", "error"}, {"error", {{"type", anthropic_error_type(status)}, {"message", message}}}};
}

json anthropic_error(const ApiError& e) {
  json j = anthropic_error(e.status, e.message);
  if (!e.type.empty()) j["error"]["type"] = e.type;
  return j;
}

// ---- streaming ----

AnthropicStream::AnthropicStream(std::string id, std::string model, int64_t input_tokens, int64_t cached_tokens)
    : id_(std::move(id)), model_(std::move(model)), input_tokens_(input_tokens), cached_tokens_(cached_tokens) {}

std::vector<SseEvent> AnthropicStream::begin() {
  std::vector<SseEvent> out;
  out.push_back(event("message_start", json{{"message",
                                             {{"id", id_},
                                              {"type", "message"},
                                              {"role", "assistant"},
                                              {"content", json::array()},
                                              {"model", model_},
                                              {"stop_reason", nullptr},
                                              {"stop_sequence", nullptr},
                                              {"usage", usage_of(input_tokens_, cached_tokens_, 0)}}}}));
  return out;
}

void AnthropicStream::open_block(std::vector<SseEvent>& out, Kind kind, json content_block) {
  close_block(out);
  open_ = kind;
  open_index_ = next_index_++;
  out.push_back(event("content_block_start", json{{"index", open_index_}, {"content_block", std::move(content_block)}}));
}

void AnthropicStream::close_block(std::vector<SseEvent>& out) {
  if (open_ == Kind::kNone) return;
  if (open_ == Kind::kThinking)
    out.push_back(event("content_block_delta",
                        json{{"index", open_index_}, {"delta", {{"type", "signature_delta"}, {"signature", ""}}}}));
  out.push_back(event("content_block_stop", json{{"index", open_index_}}));
  open_ = Kind::kNone;
  open_index_ = -1;
  open_tool_ = -1;
}

void AnthropicStream::on_reasoning(std::vector<SseEvent>& out, const std::string& text) {
  if (text.empty()) return;
  if (open_ != Kind::kThinking) open_block(out, Kind::kThinking, json{{"type", "thinking"}, {"thinking", ""}});
  reasoning_ += text;
  out.push_back(event("content_block_delta",
                      json{{"index", open_index_}, {"delta", {{"type", "thinking_delta"}, {"thinking", text}}}}));
}

void AnthropicStream::on_text(std::vector<SseEvent>& out, const std::string& text) {
  if (text.empty()) return;
  if (open_ != Kind::kText) open_block(out, Kind::kText, json{{"type", "text"}, {"text", ""}});
  content_ += text;
  out.push_back(
      event("content_block_delta", json{{"index", open_index_}, {"delta", {{"type", "text_delta"}, {"text", text}}}}));
}

void AnthropicStream::on_tool_call(std::vector<SseEvent>& out, const json& call) {
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
    open_block(out, Kind::kTool, json{{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", json::object()}});
    open_tool_ = index;
    c.block = open_index_;
    found = calls_.emplace(index, std::move(c)).first;
  } else if (!(open_ == Kind::kTool && open_tool_ == index)) {
    // More arguments for a call whose block was closed (deltas do not do this): still sent on the
    // call's own index, where clients accumulate it.
  }
  if (args && !args->empty()) {
    found->second.arguments += *args;
    out.push_back(event("content_block_delta", json{{"index", found->second.block},
                                                    {"delta", {{"type", "input_json_delta"}, {"partial_json", *args}}}}));
  }
}

std::vector<SseEvent> AnthropicStream::delta(const json& d) { return route(d); }

std::vector<SseEvent> AnthropicStream::end(const ChatResult& r) {
  std::vector<SseEvent> out;
  if (ended_) return out;
  route_rest(out, r);  // what the result has beyond what was streamed
  if (has_tool_calls(r)) {
    const json& calls = r.message["tool_calls"];
    for (size_t i = 0; i < calls.size(); ++i) {
      const json& tc = calls[i];
      if (!tc.is_object()) continue;
      const json& fn = tc.contains("function") && tc["function"].is_object() ? tc["function"] : json::object();
      const std::string* args = string_at(fn, "arguments");
      auto it = calls_.find(static_cast<int64_t>(i));
      if (it == calls_.end()) {
        const std::string* id = string_at(tc, "id");
        const std::string* name = string_at(fn, "name");
        json d{{"index", i},
               {"id", id ? *id : ""},
               {"type", "function"},
               {"function", {{"name", name ? *name : ""}, {"arguments", args ? *args : ""}}}};
        on_tool_call(out, d);
      } else if (args) {
        std::string more = rest(*args, it->second.arguments);
        if (!more.empty()) on_tool_call(out, json{{"index", i}, {"function", {{"arguments", more}}}});
      }
    }
  }
  close_block(out);
  ended_ = true;
  out.push_back(event("message_delta", json{{"delta",
                                             {{"stop_reason", anthropic_stop_reason(r)},
                                              {"stop_sequence", r.stop_word.empty() ? json(nullptr) : json(r.stop_word)}}},
                                            {"usage", {{"output_tokens", r.completion_tokens}}}}));
  out.push_back(event("message_stop", json::object()));
  return out;
}

}  // namespace loom::api

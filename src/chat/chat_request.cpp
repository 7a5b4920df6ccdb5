// ChatTemplate: a chat template parsed and probed for what it can render, and rendered on a
// request's messages and tools (their checks and rewrites are in chat_messages.cpp); loom's ChatML
// template; tool_choice and the prepared chat prompt of a request.
#include "chat/chat_request.h"

#include <algorithm>
#include <cctype>
#include <mutex>

#include "chat/chat_messages.h"
#include "chat/chat_prompt.h"
#include "chat/named_templates.h"
#include "sample/grammar.h"

namespace loom::chat {
using namespace detail;  // ChatTemplate::render's internals (chat_messages.h)

namespace {

// llama.cpp passes the special tokens' pieces (token_to_piece with special = true).
std::string special_text(const Vocab& vocab, int32_t id) {
  return vocab.is_valid(id) ? vocab.token_to_piece(id, /*special=*/true) : std::string();
}

// --- loom's ChatML template ------------------------------------------------------------------

const char* const kChatMlTemplate = R"JINJA({%- if tools -%}
{{- '<|im_start|>system\n' -}}
{%- if messages and messages[0].role == 'system' -%}{{- messages[0].content + '\n\n' -}}{%- endif -%}
{{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
{%- for tool in tools -%}{{- '\n' + (tool | tojson) -}}{%- endfor -%}
{{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
{%- if tools and loop.first and message.role == 'system' -%}
{%- elif message.role == 'assistant' and message.tool_calls -%}
{{- '<|im_start|>assistant' -}}
{%- if message.content -%}{{- '\n' + message.content -}}{%- endif -%}
{%- for tool_call in message.tool_calls -%}
{{- '\n<tool_call>\n{"name": "' + tool_call.function.name + '", "arguments": ' + (tool_call.function.arguments | tojson) + '}\n</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>\n' -}}
{%- elif message.role == 'tool' -%}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
{{- '\n<tool_response>\n' + message.content + '\n</tool_response>' -}}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
{%- else -%}
{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%})JINJA";

json probe_user() { return json{{"role", "user"}, {"content", "loom probe question"}}; }

json probe_call(const std::string& name, const std::string& id, bool object_args) {
  json args = json{{"argument_needle", "loom_probe"}};
  json tc = json::object();
  tc["id"] = id;
  tc["type"] = "function";
  tc["function"] = json{{"name", name}, {"arguments", object_args ? args : json(dump_spaced(args))}};
  return tc;
}

json probe_assistant(bool null_content, bool object_args, int n_calls) {
  json m = json::object();
  m["role"] = "assistant";
  m["content"] = null_content ? json(nullptr) : json("");
  json calls = json::array();
  calls.push_back(probe_call(n_calls == 1 ? "loom_probe_fn" : "loom_probe_a", "call00001", object_args));
  if (n_calls == 2) calls.push_back(probe_call("loom_probe_b", "call00002", object_args));
  m["tool_calls"] = std::move(calls);
  return m;
}

// The prompt of a conversation whose final assistant message is continued: the template renders
// it with a marker in place of the text being continued, and the prompt ends where the marker
// starts, followed by the text (so whatever the template writes after a message, its end of turn,
// is left out). Reasoning that the template does not show (most drop past reasoning) is written
// after the generation prompt inside <think>, as llama.cpp does.
Expected<std::string> render_continuation(const ChatTemplate& tmpl, ChatInputs in, const RenderOptions& render,
                                          bool* continues_reasoning) {
  if (!in.messages.is_array() || in.messages.empty() || !in.messages.back().is_object()) {
    return invalid_argument("continue_final_message: there is no final message to continue");
  }
  json last = in.messages.back();
  if (!last.contains("role") || last["role"] != "assistant") {
    return invalid_argument("continue_final_message: the final message is not an assistant message");
  }
  const auto text_of = [&](const char* k) -> std::string {
    if (!last.contains(k) || last[k].is_null()) return {};
    if (last[k].is_string()) return last[k].get<std::string>();
    if (last[k].is_array()) {  // content parts: joined as the renderer joins them
      std::string t;
      for (const json& part : last[k]) {
        if (part.is_object() && part.contains("text") && part["text"].is_string())
          t += (t.empty() ? "" : "\n") + part["text"].get<std::string>();
      }
      return t;
    }
    return {};
  };
  const std::string content = text_of("content"), reasoning = text_of("reasoning_content");
  ChatInputs::Continue mode = in.continue_final;
  if (mode == ChatInputs::Continue::kAuto) {
    mode = content.empty() && !reasoning.empty() ? ChatInputs::Continue::kReasoning : ChatInputs::Continue::kContent;
  }
  *continues_reasoning = mode == ChatInputs::Continue::kReasoning;
  const std::string& text = *continues_reasoning ? reasoning : content;
  static const std::string kMarker = "\x1e\x1dLOOM-CONTINUE\x1d\x1e";
  json marked = last;
  if (*continues_reasoning) {
    marked["reasoning_content"] = kMarker;
    marked["content"] = "";
  } else {
    marked["content"] = kMarker;
  }
  in.messages.back() = marked;
  in.add_generation_prompt = false;
  const bool gemma4 = tmpl.tool_call_format() == ToolCallFormat::kGemma4;
  // (Gemma 4 trims the content, marker included, and shows no reasoning without calls: it is
  // continued as llama.cpp does, below.)
  auto rendered = gemma4 ? Expected<std::string>(std::string()) : tmpl.render(in, render);
  if (rendered) {
    const size_t at = rendered->find(kMarker);
    if (at != std::string::npos) return rendered->substr(0, at) + text;
  }
  // The template does not show the marked text (or fails on it): the conversation before the
  // message, the generation prompt, and the text.
  in.messages.erase(in.messages.size() - 1);
  in.add_generation_prompt = true;
  LOOM_ASSIGN_OR_RETURN(std::string prompt, tmpl.render(in, render));
  if (gemma4) {
    // llama.cpp: the model's turn, its thinking channel with the reasoning (closed, then the text,
    // when the content is continued), in place of the empty thought the template may have closed.
    constexpr std::string_view kEmptyThought = "<|channel>thought\n<channel|>";
    if (prompt.ends_with(kEmptyThought)) prompt.resize(prompt.size() - kEmptyThought.size());
    prompt += "<|channel>thought\n" + reasoning;
    return *continues_reasoning ? prompt : prompt + "<channel|>" + text;
  }
  if (!*continues_reasoning) {
    if (!content.empty() && reasoning.empty()) return prompt + text;
    return invalid_argument("continue_final_message: the chat template does not show the final message's content");
  }
  if (prompt.ends_with("<think>\n") || prompt.ends_with("<think>")) return prompt + text;
  if (tmpl.source().find("[THINK]") != std::string::npos) return prompt + "[THINK]" + text;
  return prompt + "<think>\n" + text;
}

}  // namespace

const std::string& chatml_template_source() {
  static const std::string s = kChatMlTemplate;
  return s;
}

// --- ChatTemplate ------------------------------------------------------------------------------

struct ChatTemplate::State {
  std::string source, bos, eos;
  jinja::Template tmpl;
  ToolCallFormat format = ToolCallFormat::kGeneric;
  // Gemma 4's older template, which needs tool results folded into the calling message.
  bool fold_tool_responses = false;
  // Ministral 3 (llama.cpp's rule, and the template renders thinking blocks): reasoning_content is
  // passed as a {"type": "thinking"} content block before the text.
  bool thinking_blocks = false;
  std::once_flag probed;
  TemplateCaps caps;

  json context(json messages, const json& tools) const {
    json ctx = json::object();
    ctx["messages"] = std::move(messages);
    if (!tools.is_null()) ctx["tools"] = tools;
    ctx["add_generation_prompt"] = false;
    ctx["bos_token"] = bos;
    ctx["eos_token"] = eos;
    return ctx;
  }
  bool renders(const json& ctx, std::string_view needle) const {
    RenderOptions o;
    o.now_unix = 1753531200;
    auto r = tmpl.render(ctx, o);
    return r && r->find(needle) != std::string::npos;
  }
  bool renders_args(const json& ctx) const {
    RenderOptions o;
    o.now_unix = 1753531200;
    auto r = tmpl.render(ctx, o);
    // Gemma 4 writes text arguments as they are, inside its own braces: only objects render its syntax.
    if (format == ToolCallFormat::kGemma4)
      return r && r->find("argument_needle:<|\"|>loom_probe<|\"|>") != std::string::npos;
    // JSON / Python dicts, Python keyword arguments (LFM2), XML parameters (Qwen3-Coder, Qwen3.5).
    return r &&
           (r->find("\"argument_needle\":") != std::string::npos || r->find("'argument_needle':") != std::string::npos ||
            r->find("argument_needle='loom_probe'") != std::string::npos ||
            r->find("argument_needle=\"loom_probe\"") != std::string::npos ||
            r->find("<parameter=argument_needle>") != std::string::npos);
  }
  void probe();
  // The template rendered on the messages (retried with system messages folded into the user turn
  // when it refuses them).
  Expected<std::string> render_prompt(const json& messages, const json& tools, const ChatInputs& inputs,
                                      const RenderOptions& opts) const;
};

void ChatTemplate::State::probe() {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "loom_probe_tool",
      "description": "A probe.", "parameters": {"type": "object", "properties": {"arg": {"type": "string",
      "description": "An argument."}}, "required": ["arg"]}}}])");
  caps.supports_tools = renders(context(json::array({probe_user()}), tools), "loom_probe_tool");

  // Tool calls: content "" before null, arguments as text before an object.
  struct Variant {
    bool null_content, object_args;
  };
  static constexpr Variant kVariants[] = {{false, false}, {false, true}, {true, false}, {true, true}};
  std::optional<Variant> ok;
  for (const Variant& v : kVariants) {
    if (renders_args(context(json::array({probe_user(), probe_assistant(v.null_content, v.object_args, 1)}), nullptr))) {
      ok = v;
      break;
    }
  }
  json assistant = json{{"role", "assistant"}, {"content", "loom probe answer"}};
  if (ok) {
    caps.supports_tool_calls = true;
    caps.requires_null_content = ok->null_content;
    caps.requires_object_arguments = ok->object_args;
    assistant = probe_assistant(ok->null_content, ok->object_args, 1);
    const json two = probe_assistant(ok->null_content, ok->object_args, 2);
    RenderOptions o;
    o.now_unix = 1753531200;
    auto r = tmpl.render(context(json::array({probe_user(), two}), nullptr), o);
    caps.supports_parallel_tool_calls =
        r && r->find("loom_probe_a") != std::string::npos && r->find("loom_probe_b") != std::string::npos;
  }
  json tool = json::object();
  tool["role"] = "tool";
  tool["tool_call_id"] = "call00001";
  tool["name"] = "loom_probe_fn";
  tool["content"] = "loom_probe_result";
  caps.supports_tool_responses =
      renders(context(json::array({probe_user(), assistant, tool}), nullptr), "loom_probe_result");
}

Expected<ChatTemplate> ChatTemplate::parse(std::string_view source, std::string bos_text, std::string eos_text) {
  auto t = jinja::Template::parse(source);
  if (!t) return Status(t.status().code(), "chat template: " + t.status().message());
  ChatTemplate ct;
  ct.s_ = std::make_shared<State>();
  ct.s_->source = std::string(source);
  ct.s_->bos = std::move(bos_text);
  ct.s_->eos = std::move(eos_text);
  ct.s_->tmpl = std::move(*t);
  ct.s_->format = detect_tool_call_format(source);
  const auto has = [&](std::string_view m) { return source.find(m) != std::string_view::npos; };
  ct.s_->fold_tool_responses = ct.s_->format == ToolCallFormat::kGemma4 && !has("{#- OpenAI Chat Completions:");
  ct.s_->thinking_blocks = ct.s_->format == ToolCallFormat::kMistralArgs && has("[SYSTEM_PROMPT]") && !has("[CALL_ID]") &&
                           has("[THINK]") && has("'thinking'");
  return ct;
}

Expected<ChatTemplate> ChatTemplate::from_model(const Model& model, const std::string* template_override) {
  std::string source;
  if (template_override) {
    // Jinja source, or one of llama.cpp's built-in names ("llama3", ...).
    LOOM_ASSIGN_OR_RETURN(source, resolve_chat_template(*template_override));
  } else if (has_chat_template(model)) {
    auto s = model.file().get_string(kChatTemplateKey);
    if (!s) return corrupt(std::string(kChatTemplateKey) + ": " + s.status().message());
    source = std::move(*s);
  } else {
    source = chatml_template_source();
  }
  const Vocab& v = model.vocab();
  return parse(source, special_text(v, v.bos()), special_text(v, v.eos()));
}

const std::string& ChatTemplate::source() const { return s_->source; }
const std::string& ChatTemplate::bos_text() const { return s_->bos; }
const std::string& ChatTemplate::eos_text() const { return s_->eos; }
ToolCallFormat ChatTemplate::tool_call_format() const { return s_->format; }

const TemplateCaps& ChatTemplate::caps() const {
  State* s = s_.get();
  std::call_once(s->probed, [s] { s->probe(); });
  return s->caps;
}

namespace {

Status check_template_kwargs(const json& extra) {
  if (!extra.is_null() && !extra.is_object()) return invalid_argument("chat_template_kwargs: expected an object");
  for (const char* reserved : {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})
    if (extra.is_object() && extra.contains(reserved))
      return invalid_argument(std::string("chat_template_kwargs.") + reserved + ": set by the request, not here");
  return Status::ok();
}

// "m<i>c<j>": the id of call j of message i when it has none.
std::string place_id(size_t i, size_t j) {
  std::string s = "m";
  s += std::to_string(i);
  s += 'c';
  s += std::to_string(j);
  return s;
}

// Mistral's templates need ids of 9 alphanumerics; a call without an id gets one from its place.
void assign_mistral_ids(std::vector<Msg>& msgs) {
  for (size_t i = 0; i < msgs.size(); ++i) {
    Msg& m = msgs[i];
    for (size_t j = 0; j < m.calls.size(); ++j) m.calls[j].id = mistral_id(m.calls[j].id ? *m.calls[j].id : place_id(i, j));
    if (m.tool_call_id) m.tool_call_id = mistral_id(*m.tool_call_id);
  }
}

// A message's content as the template gets it: with its calls written into it in the format's
// syntax when the template cannot render calls; null only where the template requires it.
json template_content(const Msg& m, const TemplateCaps& caps, ToolCallFormat format) {
  json content = m.content;
  if (m.has_calls && !caps.supports_tool_calls) {
    std::string text = content.is_string() ? content.get<std::string>() : std::string();
    if (!text.empty()) text += '\n';
    text += calls_as_text(format, m.calls);
    content = std::move(text);
  } else if (content.is_null() && !(m.has_calls && caps.requires_null_content)) {
    content = "";
  }
  return content;
}

// A tool result as a user message, for templates that cannot render tool responses.
json tool_response_as_user(const Msg& m, const json& content) {
  json r = json::object();
  if (m.name) r["tool"] = *m.name;
  r["content"] = content;
  if (m.tool_call_id) r["tool_call_id"] = *m.tool_call_id;
  json jm = json::object();
  jm["role"] = "user";
  jm["content"] = json{{"tool_response", std::move(r)}}.dump(2);
  return jm;
}

json template_tool_calls(const Msg& m, const TemplateCaps& caps) {
  json calls = json::array();
  for (const Call& c : m.calls) {
    json tc = json::object();
    if (c.id) tc["id"] = *c.id;
    tc["type"] = "function";
    json args = caps.requires_object_arguments && c.args_object.is_object() ? c.args_object : json(c.args_text);
    tc["function"] = json{{"name", c.name}, {"arguments", std::move(args)}};
    calls.push_back(std::move(tc));
  }
  return calls;
}

// One message as the template gets it.
json template_message(const Msg& m, const TemplateCaps& caps, ToolCallFormat format, bool thinking_blocks) {
  json content = template_content(m, caps, format);
  if (m.role == "tool" && !caps.supports_tool_responses) return tool_response_as_user(m, content);
  json jm = json::object();
  jm["role"] = m.role;
  jm["content"] = std::move(content);
  if (m.has_calls && caps.supports_tool_calls) jm["tool_calls"] = template_tool_calls(m, caps);
  if (m.tool_call_id) jm["tool_call_id"] = *m.tool_call_id;
  if (m.name) jm["name"] = *m.name;
  if (thinking_blocks && (m.role == "assistant" || m.role == "system") && m.reasoning_content &&
      m.reasoning_content->is_string()) {
    // llama.cpp's Ministral 3 handler: [thinking, text] blocks.
    json blocks = json::array({json{{"type", "thinking"}, {"thinking", *m.reasoning_content}}});
    if (jm["content"].is_string()) blocks.push_back(json{{"type", "text"}, {"text", jm["content"]}});
    jm["content"] = std::move(blocks);
  } else if (m.reasoning_content) {
    jm["reasoning_content"] = *m.reasoning_content;
  }
  return jm;
}

// The tools described in a system message for templates that do not list them, and the generic
// format's instruction.
void add_tool_instructions(json& messages, const json& tools, const TemplateCaps& caps, ToolCallFormat format) {
  if (!caps.supports_tools) {
    add_system(messages, "You can call any of the following tools to satisfy the user's requests: " + tools.dump(2) +
                             "\n\nExample tool call syntax:\n\n" + example_call(format));
  }
  if (format == ToolCallFormat::kGeneric) add_system(messages, kGenericInstruction);
}

}  // namespace

Expected<std::string> ChatTemplate::State::render_prompt(const json& messages, const json& tools, const ChatInputs& inputs,
                                                         const RenderOptions& opts) const {
  const auto context = [&](json msgs_json) {
    json ctx = json::object();
    ctx["messages"] = std::move(msgs_json);
    if (!tools.is_null()) ctx["tools"] = tools;
    ctx["add_generation_prompt"] = inputs.add_generation_prompt;
    ctx["bos_token"] = bos;
    ctx["eos_token"] = eos;
    if (inputs.extra.is_object())
      for (auto it = inputs.extra.begin(); it != inputs.extra.end(); ++it) ctx[it.key()] = it.value();
    return ctx;
  };
  // Gemma 4's template ends on "<turn|>\n" after a message with text, calls and their results,
  // without opening the model's turn: llama.cpp opens it.
  const auto finish = [&](std::string prompt) {
    if (format == ToolCallFormat::kGemma4 && inputs.add_generation_prompt && prompt.ends_with("<turn|>\n"))
      prompt += "<|turn>model\n";
    return prompt;
  };
  auto out = tmpl.render(context(messages), opts);
  if (out) return finish(std::move(*out));
  // Templates without a system role (Gemma) raise on one: retry with it folded into the user turn.
  bool has_system = false;
  for (const json& m : messages) has_system = has_system || m["role"] == "system";
  if (has_system) {
    auto again = tmpl.render(context(fold_system_messages(messages)), opts);
    if (again) return finish(std::move(*again));
  }
  return Status(out.status().code(), "chat template: " + out.status().message());
}

Expected<std::string> ChatTemplate::render(const ChatInputs& inputs, const RenderOptions& opts) const {
  LOOM_ASSIGN_OR_RETURN(std::vector<Msg> msgs, parse_messages(inputs.messages));
  LOOM_ASSIGN_OR_RETURN(json tools, normalize_tools(inputs.tools));
  LOOM_RETURN_IF_ERROR(check_template_kwargs(inputs.extra));

  bool needs_caps = !tools.is_null();
  for (const Msg& m : msgs) needs_caps = needs_caps || m.has_calls || m.role == "tool";
  const TemplateCaps caps = needs_caps ? this->caps() : TemplateCaps{};
  const ToolCallFormat format = s_->format;
  if (format == ToolCallFormat::kMistral || format == ToolCallFormat::kMistralArgs) assign_mistral_ids(msgs);

  json messages = json::array();
  for (const Msg& m : msgs) messages.push_back(template_message(m, caps, format, s_->thinking_blocks));
  if (s_->fold_tool_responses) messages = gemma4_tool_responses(messages);
  if (!tools.is_null()) add_tool_instructions(messages, tools, caps, format);
  return s_->render_prompt(messages, tools, inputs, opts);
}

Expected<std::string> render_chat(const Model& model, const ChatInputs& inputs, const std::string* template_override) {
  LOOM_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::from_model(model, template_override));
  return t.render(inputs);
}

Expected<std::string> render_chat(std::string_view template_source, const ChatInputs& inputs, std::string bos_text,
                                  std::string eos_text, const RenderOptions& opts) {
  LOOM_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::parse(template_source, std::move(bos_text), std::move(eos_text)));
  return t.render(inputs, opts);
}

// --- requests ----------------------------------------------------------------------------------

Expected<ToolChoice> parse_tool_choice(const json& v) {
  ToolChoice c;
  if (v.is_null()) return c;
  if (v.is_string()) {
    const std::string s = v;
    if (s == "auto") return c;
    if (s == "none") c.mode = ToolChoice::kNone;
    else if (s == "required") c.mode = ToolChoice::kRequired;
    else return invalid_argument("tool_choice: expected \"auto\", \"none\", \"required\" or a function, got \"" + s + "\"");
    return c;
  }
  if (v.is_object()) {
    auto t = v.find("type");
    if (t == v.end() || *t != "function") return invalid_argument("tool_choice.type: expected \"function\"");
    auto f = v.find("function");
    if (f == v.end() || !f->is_object()) return invalid_argument("tool_choice.function: expected an object");
    auto n = f->find("name");
    if (n == f->end() || !n->is_string() || n->get_ref<const std::string&>().empty())
      return invalid_argument("tool_choice.function.name: expected a non-empty string");
    c.mode = ToolChoice::kFunction;
    c.function_name = *n;
    return c;
  }
  return invalid_argument("tool_choice: expected a string or an object, got " + v.dump());
}

Expected<PreparedChat> prepare_chat(const ChatTemplate& tmpl, const ChatInputs& inputs, const ChatRequestOptions& opts) {
  LOOM_ASSIGN_OR_RETURN(json tools, normalize_tools(inputs.tools));
  const ToolChoice& choice = opts.tool_choice;
  PreparedChat p;
  p.tools_present = !tools.is_null() && choice.mode != ToolChoice::kNone;
  if ((choice.mode == ToolChoice::kRequired || choice.mode == ToolChoice::kFunction) && !p.tools_present)
    return invalid_argument("tool_choice: a tool call is required but the request has no tools");
  // {"type": "text"} asks for nothing. (Not json::value("type", ""): it throws when "type" is there
  // but not a string, which the chat_template fuzzer found: a request must get an error, not an
  // exception.)
  const json& rf = opts.response_format;
  const bool text_format = rf.is_object() && rf.contains("type") && rf["type"].is_string() && rf["type"] == "text";
  const bool has_response_format = !rf.is_null() && !text_format;
  if (has_response_format && p.tools_present)
    return invalid_argument("response_format: cannot be combined with tools (use tool_choice \"none\")");

  ChatInputs in = inputs;
  in.tools = p.tools_present ? tools : json(nullptr);
  bool continues_reasoning = false;
  if (in.continue_final != ChatInputs::Continue::kNone) {
    LOOM_ASSIGN_OR_RETURN(p.prompt, render_continuation(tmpl, in, opts.render, &continues_reasoning));
  } else {
    LOOM_ASSIGN_OR_RETURN(p.prompt, tmpl.render(in, opts.render));
  }
  p.format = p.tools_present ? tmpl.tool_call_format() : ToolCallFormat::kNone;
  if (p.tools_present) p.tools = tools;
  p.thinking_forced_open = continues_reasoning || p.prompt.ends_with("<think>\n") || p.prompt.ends_with("<think>");
  p.parallel_tool_calls = p.tools_present && opts.parallel_tool_calls && tmpl.caps().supports_parallel_tool_calls;

  if (p.tools_present) {
    if (choice.mode == ToolChoice::kRequired || choice.mode == ToolChoice::kFunction) {
      const std::string* forced = choice.mode == ToolChoice::kFunction ? &choice.function_name : nullptr;
      LOOM_ASSIGN_OR_RETURN(p.grammar, tool_call_grammar(p.format, tools, forced, p.parallel_tool_calls));
    } else if (p.format == ToolCallFormat::kGeneric) {
      LOOM_ASSIGN_OR_RETURN(p.grammar, tool_call_grammar(p.format, tools, nullptr, p.parallel_tool_calls,
                                                         /*allow_response=*/true));
    }
  } else if (has_response_format) {
    LOOM_ASSIGN_OR_RETURN(p.grammar, response_format_grammar(opts.response_format));
  }
  if (p.thinking_forced_open && !p.grammar.empty()) {
    // Any reasoning text up to its closing tag (</think>; Gemma 4's <channel|>, Ministral 3's
    // [/THINK] when their reasoning is continued), then the constrained part.
    const std::string close = tmpl.tool_call_format() == ToolCallFormat::kGemma4   ? "<channel|>"
                              : tmpl.source().find("[THINK]") != std::string::npos ? "[/THINK]"
                                                                                   : "</think>";
    p.grammar = "root ::= think-text " + sample::gbnf_literal(close) + " [ \\t\\r\\n]{0,8} g-root\nthink-text ::= .*\n" +
                prefix_gbnf_rules(p.grammar, "g-");
  } else if (!p.grammar.empty()) {
    // Models that may think first, in their own markers (as llama.cpp's grammars for them allow):
    // Gemma 4 when the prompt did not close an empty thought (enable_thinking), Ministral 3.
    std::string open, close;
    if (p.format == ToolCallFormat::kGemma4 && !p.prompt.ends_with("<channel|>")) {
      open = "<|channel>thought";
      close = "<channel|>";
    } else if (p.format == ToolCallFormat::kMistralArgs && tmpl.source().find("[THINK]") != std::string::npos) {
      open = "[THINK]";
      close = "[/THINK]";
    }
    if (!open.empty()) {
      p.grammar = "root ::= ( " + sample::gbnf_literal(open) + " think-text " + sample::gbnf_literal(close) +
                  " )? g-root\nthink-text ::= .*\n" + prefix_gbnf_rules(p.grammar, "g-");
    }
  }
  const ToolCallSyntax syntax = tool_call_syntax(p.format);
  p.stops = syntax.stops;
  p.preserved_tokens = syntax.preserved_tokens;
  if (!p.tools_present) {
    // Thinking markers that are control tokens must reach the parser without tools too (as
    // llama.cpp keeps them for these families): Gemma 4's channels, Ministral 3's [THINK].
    if (tmpl.tool_call_format() == ToolCallFormat::kGemma4) {
      p.preserved_tokens = {"<|channel>", "<channel|>"};
    } else if (tmpl.tool_call_format() == ToolCallFormat::kMistralArgs &&
               tmpl.source().find("[THINK]") != std::string::npos) {
      p.preserved_tokens = {"[THINK]", "[/THINK]"};
    }
  }
  return p;
}

}  // namespace loom::chat

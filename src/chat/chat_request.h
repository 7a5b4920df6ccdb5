// OpenAI-style chat requests rendered with a model's chat template: full messages (content parts,
// assistant tool_calls, tool results), tools, chat_template_kwargs; then, with prepare_chat, the
// grammar, stops and output format a server or a binding needs to run the request.
//
//   auto tmpl = *ChatTemplate::from_model(*model);               // parse once, reuse per request
//   ChatInputs in;
//   in.messages = json::parse(R"([{"role": "user", "content": "Weather in Paris?"}])");
//   in.tools = request["tools"];
//   std::string prompt = *tmpl.render(in);
//   // or everything at once:
//   ChatRequestOptions o;
//   o.tool_choice = *parse_tool_choice(request["tool_choice"]);
//   PreparedChat p = *prepare_chat(tmpl, in, o);    // p.prompt, p.grammar, p.stops, p.format
//   ... generate ...
//   ParsedMessage reply = parse_assistant_output(p.format, text, p.parse_options());
//
// Messages (an array of objects; each field is checked, errors are kInvalidArgument naming it,
// e.g. "messages[2].content: expected a string, an array of content parts or null"):
//   role               a non-empty string. "developer" is rendered as "system"; system, user,
//                      assistant and tool have the meanings below; other roles (ipython, ...) are
//                      passed to the template as they are.
//   content            a string; an array of parts, of which {"type": "text", "text": ...} are
//                      joined with "\n" (llama.cpp's concatenation) and image / audio / file parts
//                      are refused; or null / absent on assistant messages that carry tool_calls
//                      (null elsewhere on assistant messages renders as "").
//   tool_calls         (assistant) [{"id"?, "type": "function" (may be omitted), "function": {"name",
//                      "arguments"}}]; arguments is JSON text (OpenAI's wire format) or an object.
//   tool_call_id, name (tool) strings, passed on.
//   reasoning_content  a string or null, passed on (Qwen3 renders it).
// Tools: normalize_tools (tool_calls.h). chat_template_kwargs (`extra`): an object whose keys become
// template variables (enable_thinking, builtin_tools, ...); messages, tools, add_generation_prompt,
// bos_token and eos_token cannot be replaced through it.
//
// What the template receives, as llama.cpp (minja) passes it: messages with string content (null
// only where the template needs it), tool calls as {id, type, function: {name, arguments}},
// `tools` only when there are tools (absent otherwise, so `tools is defined` is false),
// add_generation_prompt, bos_token, eos_token, then the extra variables. What each template can
// render is found once per template by rendering probe conversations (TemplateCaps), and adapted:
//   - arguments: parsed into an object for templates that print `arguments | tojson` (Llama 3.1,
//     Qwen 2.5, Mistral, Command-R), left as JSON text for templates that concatenate it
//     (Functionary, DeepSeek R1) or test `is string` (Hermes 3, Qwen3); an object argument is
//     written as JSON text ({"a": 1}) for templates that need text;
//   - content of tool-call messages: "" unless only null renders the calls (DeepSeek R1 tests
//     `content is none`), since most templates fail or print "None" on null (Qwen3, Granite);
//   - tool calls the template does not render (SmolLM3, Granite, Gemma) are written into the
//     content in the format's own syntax (<tool_call>...</tool_call> for Hermes, the generic JSON
//     otherwise), tool results it does not render become user messages
//     {"tool_response": {"tool", "content", "tool_call_id"}} (minja's polyfill), and tools it does
//     not describe are listed in the system message with an example call;
//   - kGeneric templates with tools get llama.cpp's instruction appended to the system message:
//     "Respond in JSON format, either with `tool_call` (a request to call tools) or with
//     `response` reply to the user's request";
//   - a template that raises on a system message (Gemma 2) is rendered again with system messages
//     folded into the next user message (as apply_chat_template does);
//   - Gemma 4 (kGemma4) gets arguments as objects (its template writes text arguments as they are
//     inside its own braces); its older template (no role "tool" branch: the -interleaved one) gets
//     llama.cpp's workaround: a message's calls, their results and the answer after them become one
//     assistant message with `tool_responses`; a prompt that ends on "<turn|>\n" after calls and
//     results gets the model's turn opened ("<|turn>model\n"), as llama.cpp does;
//   - Ministral 3 (a Mistral template that renders "thinking" blocks, no [CALL_ID]) gets an
//     assistant's (or system's) reasoning_content as a {"type": "thinking"} block before its text,
//     as llama.cpp passes it, so past reasoning is rendered in [THINK]...[/THINK];
//   - Mistral templates (kMistral, kMistralArgs) refuse tool-call ids that are not 9 alphanumerics:
//     other ids (OpenAI's "call_..."), in tool_calls and in the tool messages' tool_call_id alike,
//     are replaced by 9 alphanumerics derived from them, and missing call ids are made up.
//
// No template (has_chat_template false): loom's ChatML template (chatml_template_source()), which
// renders plain conversations exactly as before (<|im_start|>role\ncontent<|im_end|>\n) and,
// with tools, a Qwen 2.5-style tools block in the system message, <tool_call> blocks in assistant
// turns and <tool_response> blocks in user turns: the kHermes format, so any model can call tools.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "chat/tool_calls.h"
#include "jinja/template.h"
#include "model/model.h"

namespace loom::chat {

// Chat templates render with the template engine's options (src/jinja).
using jinja::RenderOptions;

struct ChatInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null or an OpenAI tools array
  bool add_generation_prompt = true;
  nlohmann::ordered_json extra;  // null or an object: chat_template_kwargs
  // The final (assistant) message is continued rather than closed (llama.cpp's
  // continue_final_message, and a trailing assistant message in llama-server): the prompt ends
  // where that message's content (kContent) or reasoning (kReasoning) ends; kAuto picks reasoning
  // when the message has reasoning_content and no content. add_generation_prompt must be false.
  // Gemma 4 continues as llama.cpp does: the model's turn, "<|channel>thought\n" and the
  // reasoning, then (content) "<channel|>" and the text; Ministral 3 inside "[THINK]".
  enum class Continue : uint8_t { kNone, kAuto, kContent, kReasoning };
  Continue continue_final = Continue::kNone;
};

// What a template renders, found by rendering probe conversations (as minja's chat_template does).
struct TemplateCaps {
  bool supports_tools = false;                // the tools list appears in the prompt
  bool supports_tool_calls = false;           // an assistant message's tool_calls appear
  bool supports_tool_responses = false;       // a tool message's content appears
  bool supports_parallel_tool_calls = false;  // two tool calls in one message appear
  bool requires_object_arguments = false;     // arguments must be an object (it prints | tojson)
  bool requires_null_content = false;         // tool-call messages must have content null
};

// A parsed chat template with its tool-call format and (lazily probed) capabilities. Cheap to copy,
// safe to use from several threads.
class ChatTemplate {
 public:
  // bos_text / eos_text: the values of bos_token / eos_token.
  static Expected<ChatTemplate> parse(std::string_view source, std::string bos_text, std::string eos_text);
  // The model's tokenizer.chat_template (or template_override: Jinja source or one of llama.cpp's
  // built-in names, resolve_chat_template in named_templates.h), with the vocab's BOS / EOS texts;
  // loom's ChatML template when the model has none.
  static Expected<ChatTemplate> from_model(const Model& model, const std::string* template_override = nullptr);

  const std::string& source() const;
  const std::string& bos_text() const;
  const std::string& eos_text() const;
  // detect_tool_call_format(source()).
  ToolCallFormat tool_call_format() const;
  // Probed on the first call.
  const TemplateCaps& caps() const;

  // Errors: kInvalidArgument for malformed inputs (naming the field); the template's own errors
  // ("chat template: ..."), e.g. a raise_exception for roles that do not alternate.
  Expected<std::string> render(const ChatInputs& inputs, const RenderOptions& opts = {}) const;

 private:
  ChatTemplate() = default;
  struct State;
  std::shared_ptr<State> s_;
};

// loom's ChatML template with tools (used for models without a template).
const std::string& chatml_template_source();

// One-shot rendering (parses the template, and probes it if the conversation needs it).
Expected<std::string> render_chat(const Model& model, const ChatInputs& inputs,
                                  const std::string* template_override = nullptr);
Expected<std::string> render_chat(std::string_view template_source, const ChatInputs& inputs, std::string bos_text,
                                  std::string eos_text, const RenderOptions& opts = {});

// OpenAI tool_choice.
struct ToolChoice {
  enum Mode { kAuto, kNone, kRequired, kFunction };
  Mode mode = kAuto;
  std::string function_name;  // kFunction
};
// null / "auto" / "none" / "required" / {"type": "function", "function": {"name": "f"}};
// kInvalidArgument otherwise.
Expected<ToolChoice> parse_tool_choice(const nlohmann::ordered_json& tool_choice);

struct ChatRequestOptions {
  ToolChoice tool_choice;
  bool parallel_tool_calls = false;
  nlohmann::ordered_json response_format;  // null or OpenAI response_format
  RenderOptions render;                    // strftime_now's instant, limits
};

struct PreparedChat {
  std::string prompt;
  // How to parse the output: the template's format when tools are in play, else kNone.
  ToolCallFormat format = ToolCallFormat::kNone;
  // GBNF for SamplerParams::grammar; "" when unconstrained. tool_choice required / a function: the
  // format's tool call(s); kGeneric with tool_choice auto: a call or {"response": ...} (as
  // llama.cpp); response_format: that JSON. After a forced-open <think>, the grammar first accepts
  // any text up to "</think>"; Gemma 4 (when the prompt did not close an empty thought) and
  // Ministral 3 may first write one reasoning block in their markers (<|channel>thought ...
  // <channel|>, [THINK] ... [/THINK]), as llama.cpp's grammars for them allow.
  std::string grammar;
  std::vector<std::string> stops;  // tool_call_syntax(format).stops
  // Detokenize these with special = true: the format's tokens; without tools, Gemma 4's channel
  // markers and Ministral 3's [THINK] / [/THINK] (control tokens carrying the reasoning).
  std::vector<std::string> preserved_tokens;
  bool thinking_forced_open = false;  // the prompt ends inside <think>
  bool parallel_tool_calls = false;   // as requested, unless the template cannot render them
  bool tools_present = false;
  nlohmann::ordered_json tools;  // normalize_tools' form when tools_present (kQwenXml types values by them)

  ParseOptions parse_options(uint64_t id_seed = 0) const {
    ParseOptions o;
    o.tools_present = tools_present;
    o.tools = tools;
    o.thinking_forced_open = thinking_forced_open;
    o.id_seed = id_seed;
    return o;
  }
};

// Renders the request and derives what generation needs. tool_choice none renders without tools.
// Errors: those of render; kInvalidArgument for a tool_choice function that is not in tools,
// tool_choice required without tools, or response_format together with tools; the grammar's.
Expected<PreparedChat> prepare_chat(const ChatTemplate& tmpl, const ChatInputs& inputs, const ChatRequestOptions& opts);

}  // namespace loom::chat

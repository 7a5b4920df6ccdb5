// Internals of ChatTemplate::render (chat_request.cpp): a request's messages checked, tool calls
// written as text for templates that cannot render them, and the rewrites some templates need.
// Not a public header.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "chat/chat_request.h"

namespace loom::chat::detail {

using json = nlohmann::ordered_json;

// ---- messages (chat_messages.cpp) ----

// JSON text as Python's json.dumps writes it (", " and ": " separators, non-ASCII kept): how
// templates print arguments, so how models saw them.
void dump_spaced(const json& v, std::string* out);
std::string dump_spaced(const json& v);

// --- messages, checked -----------------------------------------------------------------------

struct Call {
  std::optional<std::string> id;
  std::string name;
  json args_object;       // the arguments as an object; null when the text is not a JSON object
  std::string args_text;  // the arguments as JSON text
};

struct Msg {
  std::string role;
  json content;  // a string, or null (assistant messages with tool calls)
  std::vector<Call> calls;
  bool has_calls = false;
  std::optional<std::string> tool_call_id, name;
  std::optional<json> reasoning_content;  // a string or null
};

// A request's messages checked and read ("developer" is "system"; content parts joined with "\n").
Expected<std::vector<Msg>> parse_messages(const json& messages);

// Mistral's templates require tool-call ids of 9 alphanumerics: `id` itself, or one derived from it.
std::string mistral_id(const std::string& id);

inline constexpr const char* kGenericInstruction =
    "Respond in JSON format, either with `tool_call` (a request to call tools) or with `response` reply to the "
    "user's request";

// `text` added to the leading system message, or as one.
void add_system(json& messages, const std::string& text);

// minja's system-role polyfill: system messages are folded into the user message that follows
// (or kept as a user message when none follows).
json fold_system_messages(const json& messages);

// llama.cpp's workaround for Gemma 4 templates older than the one that reads role "tool" messages
// (no "OpenAI Chat Completions" branch: google-gemma-4-31B-it-interleaved): an assistant message
// with tool calls, the tool results after it and a final assistant answer (without calls) become
// one assistant message {tool_calls, tool_responses: [{name, response}], content,
// reasoning_content}. A result's response is its content parsed as JSON when it parses, else the
// text; its name is the call's at the same index, else its tool_call_id.
json gemma4_tool_responses(const json& messages);

// ---- tool calls as text (chat_calls_text.cpp) ----

// The calls written in the syntax of format `f`, for templates that cannot render tool calls.
std::string calls_as_text(ToolCallFormat f, const std::vector<Call>& calls);

// One example call in format `f`'s syntax.
std::string example_call(ToolCallFormat f);

}  // namespace loom::chat::detail

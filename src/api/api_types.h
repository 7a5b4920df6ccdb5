// Shared vocabulary of the API dialects (src/api): what a generation request became and produced,
// in dialect-neutral form, and the errors and stream events each dialect writer gives back.
//
// src/api knows JSON and the shapes of the HTTP APIs people talk to llama-server with (OpenAI chat
// and completions, llama.cpp's native /completion, Anthropic's /v1/messages, OpenAI's
// /v1/responses); it knows neither HTTP nor the engine. Each dialect is two pure pieces:
//   - a request translator: the dialect's body -> an OpenAI chat completion body (the one request
//     shape the engine's C API reads: messages, tools, tool_choice, sampling fields,
//     chat_template_kwargs, ...), with a 4xx ApiError naming the field for anything malformed;
//   - a response writer: the neutral ChatResult (and, streaming, the neutral deltas below) -> the
//     dialect's response object or its stream events.
// The HTTP server routes bodies to these and writes what they return; the C API and loom-node use
// the same neutral deltas (chat_stream.h), so every frontend sees the same parsed content.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace loom::api {

using json = nlohmann::ordered_json;

// A request that cannot be served as given. status: an HTTP status (400 for malformed input,
// 404, 501 for what loom cannot do); type: the dialect's error type name ("" = from the status).
struct ApiError {
  int status = 400;
  std::string message;
  std::string type;
};
[[noreturn]] inline void api_error(std::string message, int status = 400) { throw ApiError{status, std::move(message), {}}; }

// One server-sent event: "event: <event>\ndata: <data>\n\n" ("data: <data>\n\n" when event is "").
struct SseEvent {
  std::string event;
  json data;
};

// A neutral streaming delta, OpenAI's chat delta shape, exactly one of:
//   {"reasoning_content": "..."}                    more reasoning text
//   {"content": "..."}                              more answer text
//   {"tool_calls": [{"index": i, "id": "...", "type": "function",
//                    "function": {"name": "...", "arguments": "..."}}]}
//     a tool call: the first delta of call i carries id, type and name (arguments may be ""); later
//     deltas of the same index carry only {"index", "function": {"arguments": more}}.
// Deltas of one choice arrive in generation order; reasoning comes before content and tool calls.

// What one choice of a chat request produced, when it is done.
struct ChatResult {
  std::string id;       // the response id the server chose ("chatcmpl-...", "msg_...", "resp_...")
  std::string model;    // the model alias
  int64_t created = 0;  // unix seconds
  // OpenAI's assistant message: {"role": "assistant", "content": string|null,
  // "reasoning_content"?: string, "tool_calls"?: [{"id", "type": "function", "function": {"name",
  // "arguments": JSON text}}]}.
  json message;
  // "stop" (end of generation or a stop string), "length" (the token limit or the context),
  // "tool_calls"; stop_word is the stop string that ended it ("" otherwise).
  std::string finish_reason;
  std::string stop_word;
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

}  // namespace loom::api

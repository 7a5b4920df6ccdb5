// Anthropic's Messages API (POST /v1/messages and /v1/messages/count_tokens) as llama-server
// speaks it: the request translated into an OpenAI chat completion body, and the neutral result
// and streaming deltas (api_types.h) written back as Anthropic's message object and SSE events.
// Pure JSON: no HTTP, no engine, no clock.
//
// Request mapping (anthropic_to_chat):
//   system                 a string or an array of {"type": "text", "text"} blocks (joined without
//                          a separator, as llama-server does) -> one leading system message.
//                          Claude Code's "x-anthropic-billing-header: ...; cch=XXXXX;" line has its
//                          per-request cch stamp replaced by "fffff" (llama-server does this so the
//                          prompt prefix stays cacheable).
//   messages               a non-empty array of {"role": "user"|"assistant", "content"}; content a
//                          string (passed as is) or an array of blocks:
//     text                 -> a {"type": "text", "text"} content part;
//     image, document      -> 400 (loom has no vision or document input);
//     tool_use             (assistant) -> tool_calls [{"id", "type": "function", "function":
//                          {"name", "arguments": input as JSON text}}];
//     tool_result          (user) -> a {"role": "tool", "tool_call_id", "content"} message; content
//                          a string or text blocks (concatenated, as llama-server does); is_error
//                          true prefixes the text with "Error: ". Text blocks and tool results of
//                          one user message become user and tool messages in their order;
//     thinking             (assistant) -> reasoning_content (several blocks concatenated);
//     redacted_thinking    (assistant) accepted and dropped (its data is encrypted, not text).
//                          An assistant message becomes {"role", "content" (parts, or "" when it
//                          only has tool calls / thinking), "tool_calls"?, "reasoning_content"?};
//                          a message with no blocks left is dropped (llama-server).
//   tools                  [{"name", "description"?, "input_schema"}] (type absent or "custom") ->
//                          [{"type": "function", "function": {"name", "description" ("" when
//                          absent), "parameters": input_schema}}]; Anthropic's server and
//                          schema-less tools (web_search_..., bash_..., text_editor_...) -> 400.
//   tool_choice            {"type": "auto"|"any"|"tool"|"none", "name" (tool),
//                          "disable_parallel_tool_use"?} -> "auto" | "required" |
//                          {"type": "function", "function": {"name"}} | "none";
//                          disable_parallel_tool_use -> "parallel_tool_calls": !value.
//   max_tokens             a positive integer -> max_tokens; absent -> 4096 (llama-server is
//                          permissive here, and count_tokens bodies have none).
//   temperature, top_p     numbers; top_k a non-negative integer; stream a boolean: passed on.
//   stop_sequences         an array of strings -> stop.
//   thinking               {"type": "enabled", "budget_tokens"?} -> chat_template_kwargs
//                          .enable_thinking = true and thinking_budget_tokens = budget_tokens
//                          (10000 when absent, as llama-server); {"type": "disabled"} ->
//                          enable_thinking = false; {"type": "adaptive"} -> enable_thinking = true.
//                          An enable_thinking the caller set in chat_template_kwargs wins.
//   chat_template_kwargs   (llama.cpp's extension) an object, passed on.
//   model                  a string, passed on. metadata (an object), service_tier, container,
//                          mcp_servers, context_management, betas, output_format: accepted and
//                          ignored. Any other field (llama.cpp's grammar, json_schema, seed,
//                          min_p, n_probs, ...) is passed on as it is, as on /v1/responses.
//   tools of a server type (web_search_..., bash_..., anything but "custom" or no type): skipped,
//                          as llama-server skips them.
// Anything malformed throws ApiError 400 whose message starts with the field's path, e.g.
// "messages[2].content[0].type: unknown content block type 'x'". Only ApiError ever escapes.
//
// Response writing follows llama-server's shapes (server-task.cpp, to_json_anthropic*), with the
// vendor's details where they make the official SDK's stream helpers work (see each function).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "api/api_types.h"
#include "api/delta_stream.h"

namespace loom::api {

// An Anthropic Messages request body -> an OpenAI chat completion body (rules above).
json anthropic_to_chat(const json& body);

// The finished message: {"id", "type": "message", "role": "assistant", "content": [
//   {"type": "thinking", "thinking", "signature": ""} when there is reasoning,
//   {"type": "text", "text"} when the content is not empty,
//   {"type": "tool_use", "id", "name", "input"} per tool call (input: the parsed arguments; {} when
//   they are not a JSON object)],
//  "model", "stop_reason", "stop_sequence", "usage": {"cache_read_input_tokens": cached,
//  "input_tokens": prompt - cached, "output_tokens": completion}}.
// stop_reason: "max_tokens" for finish "length"; "tool_use" when the reply has tool calls (or the
// finish is "tool_calls"); "stop_sequence" when a stop string ended it (stop_sequence names it;
// llama-server says "end_turn" there, Anthropic "stop_sequence"); "end_turn" otherwise.
json anthropic_response(const ChatResult& r);

// The Anthropic stop_reason for a result (the rules of anthropic_response).
std::string anthropic_stop_reason(const ChatResult& r);

// /v1/messages/count_tokens' answer: {"input_tokens": n}.
json anthropic_count_tokens_response(int64_t input_tokens);

// Anthropic's error body: {"type": "error", "error": {"type", "message"}}. The type from the
// status: 400 (and other 4xx, 501) invalid_request_error, 401 authentication_error, 402
// billing_error, 403 permission_error, 404 not_found_error, 413 request_too_large, 429
// rate_limit_error, 503 and 529 overloaded_error, 504 timeout_error, other 5xx api_error.
json anthropic_error(int status, const std::string& message);
// The same for an ApiError: its own type when it has one.
json anthropic_error(const ApiError& e);
std::string anthropic_error_type(int status);

// One streamed message: call begin() once, delta() for each neutral delta in order, end() once;
// send the events each returns in order ("event: <event>\ndata: <data>"; data.type == event).
//
//   message_start        {"message": {"id", "type": "message", "role": "assistant", "content": [],
//                         "model", "stop_reason": null, "stop_sequence": null, "usage":
//                         {"cache_read_input_tokens", "input_tokens", "output_tokens": 0}}}
//   content_block_start  {"index", "content_block": {"type": "thinking", "thinking": ""} |
//                         {"type": "text", "text": ""} | {"type": "tool_use", "id", "name",
//                         "input": {}}}
//   content_block_delta  {"index", "delta": {"type": "thinking_delta", "thinking"} |
//                         {"type": "text_delta", "text"} | {"type": "input_json_delta",
//                         "partial_json"} | {"type": "signature_delta", "signature": ""}}
//   content_block_stop   {"index"}
//   message_delta        {"delta": {"stop_reason", "stop_sequence"}, "usage": {"output_tokens"}}
//   message_stop         {}
// Blocks are numbered from 0 in the order they start, and one block is open at a time: a delta of
// another kind (reasoning, content, another tool call) closes the open block first, as Anthropic
// streams (llama-server keeps every block open until the end; clients index by "index" either
// way). A thinking block is closed by an empty signature_delta, then content_block_stop, as
// llama-server does. end() first sends what the result has beyond the deltas seen (reasoning or
// content that extends what was streamed, tool calls not streamed), so a stream fed no deltas still
// carries the whole reply.
class AnthropicStream : private DeltaStream {
 public:
  // input_tokens: the prompt's tokens, cached ones included; cached_tokens of them came from the
  // cache (usage reports input_tokens - cached_tokens and cache_read_input_tokens, as llama-server).
  AnthropicStream(std::string id, std::string model, int64_t input_tokens, int64_t cached_tokens = 0);

  std::vector<SseEvent> begin();
  std::vector<SseEvent> delta(const json& d);
  std::vector<SseEvent> end(const ChatResult& r);

 private:
  enum class Kind { kNone, kThinking, kText, kTool };
  void open_block(std::vector<SseEvent>& out, Kind kind, json content_block);
  void close_block(std::vector<SseEvent>& out);
  void on_reasoning(std::vector<SseEvent>& out, const std::string& text) override;
  void on_text(std::vector<SseEvent>& out, const std::string& text) override;
  void on_tool_call(std::vector<SseEvent>& out, const json& call) override;

  std::string id_, model_;
  int64_t input_tokens_ = 0, cached_tokens_ = 0;
  Kind open_ = Kind::kNone;
  int64_t open_index_ = -1;  // the open block's index
  int64_t open_tool_ = -1;   // the open tool_use block's tool-call index
  int64_t next_index_ = 0;
  struct Call {
    int64_t block = 0;
    std::string id, name, arguments;
  };
  std::map<int64_t, Call> calls_;  // by tool-call index
};

}  // namespace loom::api

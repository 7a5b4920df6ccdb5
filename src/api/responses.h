// OpenAI's Responses API (POST /v1/responses and /v1/responses/input_tokens) as llama-server speaks
// it: the request translated into an OpenAI chat completion body, and the neutral result and
// streaming deltas (api_types.h) written back as a response object and its SSE events. Pure JSON:
// no HTTP, no engine. loom keeps no responses, so nothing refers to an earlier one.
//
// Request mapping (responses_to_chat):
//   instructions        a string -> a leading system message.
//   input               required: a string -> one user message; or an array of items:
//     message           {"type"?: "message", "role": "user"|"system"|"developer"|"assistant",
//                       "content": a string | [{"type": "input_text"|"output_text", "text"} |
//                       {"type": "refusal", "refusal"}]} -> a message with that role (content a
//                       string, or text parts; an assistant's content joined with "\n" into a
//                       string, which is how the chat layer joins parts anyway);
//                       input_image / input_file / input_audio parts -> 400 (no vision here).
//     function_call     {"call_id", "name", "arguments"} -> a tool call {"id": call_id, "type":
//                       "function", "function": {"name", "arguments"}} of an assistant message;
//     reasoning         {"summary": [{"text"}], "content"?: [{"text"}]} -> reasoning_content
//                       (content's texts, else the summary's, joined with "\n");
//                       Consecutive assistant items (reasoning, message, function_call, as one
//                       response's output lists them) join one assistant message, as llama-server.
//     function_call_output {"call_id", "output": a string | [input_text parts]} -> {"role":
//                       "tool", "tool_call_id", "content"}.
//     any other item type (item_reference, web_search_call, ...) -> 400 naming it.
//   tools               [{"type": "function", "name", "description"?, "parameters"?, "strict"?}] ->
//                       [{"type": "function", "function": {"name", "description"?, "parameters"?,
//                       "strict"}}] (strict true when absent, as llama-server); tools of any
//                       other type (web_search, file_search, custom, ...: the vendor's to run)
//                       are skipped, as llama-server skips them (Codex always sends some).
//   tool_choice         "auto"|"none"|"required" or {"type": "function", "name"} -> the chat form.
//   max_output_tokens   a positive integer -> max_tokens.
//   temperature, top_p  numbers; stream, parallel_tool_calls booleans: passed on.
//   reasoning           {"effort"?} -> reasoning_effort (other members ignored).
//   text.format         {"type": "text"} nothing; {"type": "json_object"} -> response_format
//                       {"type": "json_object"}; {"type": "json_schema", "name", "schema",
//                       "strict"?, "description"?} -> response_format {"type": "json_schema",
//                       "json_schema": {"name", "schema", "strict"?, "description"?}}.
//   previous_response_id, conversation -> 400 (loom does not keep responses or conversations);
//                       background: true -> 400.
//   store, metadata, include, truncation, service_tier, prompt_cache_key, safety_identifier,
//                       max_tool_calls, top_logprobs, stream_options, user: accepted and ignored
//                       (user passed on).
//   Any other field (llama.cpp's extensions: top_k, min_p, seed, chat_template_kwargs,
//                       timings_per_token, ...) is passed on unchanged, as llama-server does.
// Anything malformed throws ApiError 400 whose message starts with the field's path, e.g.
// "input[3].content[0].type: unknown content part type 'x'". Only ApiError ever escapes.
//
// Output ids come from the response id: for "resp_X", the message item is "msg_X", the reasoning
// item "rs_X" (a second item of a kind gets "_1", ...); a function call item is "fc_" + its call id
// without a leading "call_", and its call_id is the tool call's id.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "api/api_types.h"
#include "api/delta_stream.h"

namespace loom::api {

// An OpenAI Responses request body -> an OpenAI chat completion body (rules above).
json responses_to_chat(const json& body);

// The finished response (llama-server's shape): {"id", "object": "response", "created_at",
// "completed_at", "status": "completed" | "incomplete", "incomplete_details"?: {"reason":
// "max_output_tokens"} (finish "length"), "model", "output": [
//   {"id", "type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text"}],
//    "encrypted_content": "", "status": "completed"} when there is reasoning,
//   {"id", "type": "message", "status": "completed", "role": "assistant", "content":
//    [{"type": "output_text", "annotations": [], "logprobs": [], "text"}]} when there is content,
//   {"id", "type": "function_call", "status": "completed", "arguments", "call_id", "name"} per call],
//  "usage": {"input_tokens", "output_tokens", "total_tokens", "input_tokens_details":
//  {"cached_tokens"}}}.
// No "output_text": the SDKs compute it from output, and llama-server does not send it.
// completed_at is the clock's time (never before created_at = r.created).
json responses_response(const ChatResult& r);

// /v1/responses/input_tokens' answer: {"object": "response.input_tokens", "input_tokens": n}.
json responses_input_tokens_response(int64_t input_tokens);

// One streamed response: begin() once, delta() for each neutral delta in order, end() once; send
// the events in order ("event: <event>\ndata: <data>"). Every data object has "type" (the event
// name) and "sequence_number" (0, 1, ... over the stream), and the item events carry OpenAI's
// "output_index" / "content_index" besides llama-server's "item_id" (the openai SDK's stream
// helper indexes its snapshot by them):
//   response.created, response.in_progress   {"response": {"id", "object", "created_at", "status":
//                                            "in_progress", "model", "output": []}}
//   response.output_item.added               {"output_index", "item": the item, in progress, empty}
//   response.content_part.added              {"item_id", "output_index", "content_index": 0,
//                                            "part": {"type": "output_text", "annotations": [],
//                                            "logprobs": [], "text": ""}}          (message)
//   response.output_text.delta               {"item_id", "output_index", "content_index", "delta",
//                                            "logprobs": []}
//   response.reasoning_text.delta            {"item_id", "output_index", "content_index", "delta"}
//   response.function_call_arguments.delta   {"item_id", "output_index", "delta"}
//   closing an item: response.output_text.done {"text"} + response.content_part.done {"part"}
//     (message), response.reasoning_text.done {"text"} (reasoning),
//     response.function_call_arguments.done {"name", "arguments"} (function call); then
//     response.output_item.done {"output_index", "item": the complete item}
//   response.completed                       {"response": the responses_response object of what
//                                            was streamed}
// One item is open at a time; a delta of another kind closes it (OpenAI's order; llama-server
// closes all at the end). For finish "length" the last event is still response.completed (what
// llama-server sends, and what the SDK helpers wait for), its response marked "incomplete" with
// incomplete_details as in responses_response. end() first sends what the result has beyond the
// deltas seen, as AnthropicStream::end does.
class ResponsesStream : private DeltaStream {
 public:
  // created_at: unix seconds.
  ResponsesStream(std::string id, std::string model, int64_t created_at);

  std::vector<SseEvent> begin();
  std::vector<SseEvent> delta(const json& d);
  std::vector<SseEvent> end(const ChatResult& r);

 private:
  enum class Kind { kNone, kReasoning, kMessage, kCall };
  SseEvent make(const char* name, json fields);
  json response_object(const char* status) const;
  void open_item(std::vector<SseEvent>& out, Kind kind, json item);
  void close_item(std::vector<SseEvent>& out);
  void on_reasoning(std::vector<SseEvent>& out, const std::string& text) override;
  void on_text(std::vector<SseEvent>& out, const std::string& text) override;
  void on_tool_call(std::vector<SseEvent>& out, const json& call) override;

  std::string id_, model_;
  int64_t created_at_ = 0;
  int64_t seq_ = 0;
  json output_ = json::array();  // the items closed so far, complete
  Kind open_ = Kind::kNone;
  json item_;         // the open item (as output_item.added sent it)
  std::string text_;  // the open item's text or arguments so far
  int64_t open_tool_ = -1;
  int n_messages_ = 0, n_reasoning_ = 0;
  struct Call {
    std::string id, name, arguments;
    bool closed = false;
  };
  std::map<int64_t, Call> calls_;
};

}  // namespace loom::api

// loom's in-process serving API for C++ frontends: loom_serve.h's generation and embedding
// requests given as JSON *values* and their events delivered as typed structs, so that a frontend
// that already holds a parsed request (loom serve) hands it to the engine without writing it out
// as text, and reads tokens, log-probabilities, parsed replies and timings as fields instead of
// parsing a JSON string per token. Same checks, same meaning, same order of events as
// loom_scheduler_submit_ext and loom_scheduler_embed (loom_serve.h), which are built on the same
// code: a request means one thing for `loom serve`, the Node binding and a C program.
//
// Not part of the C ABI: C++ only, for programs linking loom statically (libloom.a, the
// loom::loom_static CMake target) and compiled with nlohmann-json (Debian: nlohmann-json3-dev).
// libloom.so exports the C API alone.
#ifndef LOOM_LOOM_SERVE_HPP
#define LOOM_LOOM_SERVE_HPP

#include <nlohmann/json.hpp>

#include "loom/loom.hpp"

namespace loom::api {

// What a frontend sets for every request (loom_scheduler_submit_ext's options_json).
struct GenerationOptions {
  enum class Endpoint { kAny, kChat, kCompletion };
  int32_t n_predict = -1;  // max tokens of a request that gives none (-1: as many as fit)
  Endpoint endpoint = Endpoint::kAny;
};

// What a request became once checked (loom_scheduler_submit_ext's info_buf, typed).
struct GenerationInfo {
  int64_t prompt_tokens = 0;
  int32_t n = 1;  // choices
  int32_t max_tokens = -1;
  uint64_t seed = 0;  // the one drawn when the request gave none
  bool logprobs = false;
  int32_t top_logprobs = 0;
  bool chat = false;
  std::string tool_call_format;
  std::vector<std::string> grammar_triggers;  // text that starts a tool call
  std::string reasoning_format;
  bool stream_parse = false;
};

struct TokenLogprob {
  Token id = -1;
  std::string piece;
  double logprob = 0;
};

// One event (loom_event_kind): the fields of its kind are set, the others stay empty.
struct GenerationEvent {
  int32_t kind = LOOM_EVENT_TOKEN;
  uint64_t request_id = 0;
  int32_t choice = 0;
  int32_t token = -1;  // TOKEN: the token; ERROR: the status (LOOM_ERR_*)
  std::string text;    // TOKEN: the text that became final with it; FINISH: the rest; ERROR: the message

  // TOKEN, when the request asked for logprobs.
  bool has_logprob = false;
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // most likely first

  // Chat requests: TOKEN with stream_parse, and FINISH: the reply parsed from the choice's text so
  // far (loom_serve.h: held back while it may still become a tool call), and the neutral OpenAI
  // chat deltas this event adds ({"reasoning_content"}, {"content"} or {"tool_calls": [...]}).
  bool has_message = false;
  std::string content, reasoning_content;
  nlohmann::ordered_json tool_calls =
      nlohmann::ordered_json::array();  // [{"id", "type", "function": {"name", "arguments"}}]
  std::vector<nlohmann::ordered_json> deltas;

  // FINISH
  std::string reason;         // "stop" | "length" | "cancelled"
  std::string stop_word;      // the stop string that matched ("" otherwise)
  std::string all_text;       // the choice's whole text
  std::vector<Token> tokens;  // the choice's generated tokens

  // DONE: usage and llama-server's timings (milliseconds).
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  int64_t prompt_n = 0, predicted_n = 0, cache_n = 0;
  double prompt_ms = 0, predicted_ms = 0, queue_ms = 0, ttft_ms = 0;
  std::vector<Token> prompt_ids;
};
using OnGenerationEvent = std::function<void(const GenerationEvent&)>;

// Validates and queues a generation request (the JSON of loom_serve.h, as a value) on the
// scheduler's handle (Scheduler::handle()). on_event runs on the scheduler's thread, possibly
// before this returns; *info (if given) is filled before the request is queued.
Expected<uint64_t> submit_generation(loom_scheduler* sched, const nlohmann::ordered_json& request,
                                     const GenerationOptions& options, OnGenerationEvent on_event,
                                     GenerationInfo* info = nullptr);

// loom_scheduler_embed with the request as a value; done gets the embeddings or the failure.
Expected<uint64_t> submit_embedding(loom_scheduler* sched, const nlohmann::ordered_json& request, Scheduler::OnEmbed done);

}  // namespace loom::api

#endif  // LOOM_LOOM_SERVE_HPP

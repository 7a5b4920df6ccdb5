// Internals of the C API's serving part shared by its files (loom_serve_c.cpp: schedulers and
// requests, loom_serve_events_c.cpp: events, loom_serve_slots_c.cpp: sessions, slots and other
// exclusive operations): the scheduler handle, JSON helpers, the generation state. Not installed.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "api/chat_stream.h"
#include "capi/capi_internal.h"
#include "chat/chat_request.h"
#include "chat/tool_calls.h"
#include "loom/loom_serve.h"
#include "loom/loom_serve.hpp"
#include "serve/request_json.h"
#include "serve/scheduler.h"

struct loom_scheduler {
  std::shared_ptr<const loom::Model> model;
  std::unique_ptr<loom::serve::Scheduler> s;
  std::optional<loom::chat::ChatTemplate> tmpl;  // for "messages" (parsed once)
  std::string tmpl_error;                        // why tmpl is empty
  std::atomic<uint64_t> counter{0};
  std::mutex lora_mu;
  std::vector<std::pair<std::shared_ptr<const loom::LoraAdapter>, float>> loras;
};

namespace loom::capi {

using json = loom::serve::json;

inline std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

inline int32_t copy_json(const char* fn, const json& j, char* buf, size_t buf_size) {
  const std::string s = dump(j);
  if (s.size() >= size_t(INT32_MAX)) {
    set_error(fn, "result does not fit int32_t");
    return LOOM_SIZE_ERROR;
  }
  if (!buf || buf_size <= s.size()) return -int32_t(s.size() + 1);
  std::memcpy(buf, s.data(), s.size());
  buf[s.size()] = '\0';
  return int32_t(s.size());
}

// JSON-taking functions: RequestError -> its status, recorded.
template <typename F>
int32_t guarded_request(const char* fn, F&& f) noexcept {
  return guarded_status(fn, [&]() -> int32_t {
    try {
      return f();
    } catch (const loom::serve::RequestError& e) {
      return fail(fn, e.status());
    }
  });
}

inline json parse_request(const char* request_json) {
  if (!request_json) loom::serve::request_error("request_json is NULL");
  return loom::serve::parse_body(request_json);
}

// One generation request's state, owned by its event callback: the scheduler's events become
// typed GenerationEvents (loom_serve.hpp: pieces, the chat reply parsed as it streams) and go to
// the sink — the in-process frontend's callback, or deliver_c for the C callback.
struct GenState {
  using Sink = std::function<void(const loom::api::GenerationEvent&)>;
  Sink sink;
  const loom::Vocab* vocab = nullptr;
  bool chat = false;
  loom::chat::ToolCallFormat format = loom::chat::ToolCallFormat::kNone;
  loom::chat::ParseOptions parse_options;
  // "stream_parse": every kToken event of a chat request carries the parse of its choice's text so
  // far (parse_assistant_output with partial = true), as llama.node's token callback does, and the
  // deltas it adds (src/api/chat_stream.h); the FINISH event the last deltas.
  bool stream_parse = false;
  std::vector<int32_t> prompt;    // the request's prompt ids (reported with kDone)
  std::vector<std::string> text;  // per choice
  // Per chat choice: the reply parsed as it streams (src/api/chat_stream.h).
  std::vector<std::unique_ptr<loom::api::ChatStream>> streams;

  static void set_message(const loom::chat::ParsedMessage& m, loom::api::GenerationEvent& g);
  loom::api::ChatStream& stream(size_t choice);
  void on_event(const loom::serve::Event& e);
};

// A typed event as the C API's loom_event: the details of its kind as JSON (loom_serve.h).
void deliver_c(const loom::api::GenerationEvent& g, bool stream_parse, loom_event_callback cb, void* user);

}  // namespace loom::capi

// The start of a C entry point that needs its loom_scheduler* `sched`: NULL records an error and
// returns `ret`.
#define LOOM_NEED_SCHED(ret)                    \
  do {                                          \
    if (!sched) {                               \
      set_error(__func__, "scheduler is NULL"); \
      return ret;                               \
    }                                           \
  } while (0)

// What the stream writers of the chat dialects (AnthropicStream, ResponsesStream) share: routing a
// neutral delta (api_types.h) to the writer's reasoning, text and tool-call handlers, and at the
// end, what the final result has beyond what was streamed (so a stream fed no deltas still carries
// the whole reply).
#pragma once

#include <string>
#include <vector>

#include "api/api_types.h"

namespace loom::api {

class DeltaStream {
 public:
  virtual ~DeltaStream() = default;

 protected:
  virtual void on_reasoning(std::vector<SseEvent>& out, const std::string& text) = 0;
  virtual void on_text(std::vector<SseEvent>& out, const std::string& text) = 0;
  virtual void on_tool_call(std::vector<SseEvent>& out, const json& call) = 0;

  // A delta's events (none once ended, or for a delta that is not an object).
  std::vector<SseEvent> route(const json& d);
  // The result's reasoning and content beyond reasoning_ / content_ (what was streamed).
  void route_rest(std::vector<SseEvent>& out, const ChatResult& r);
  // What `full` has beyond `sent`, when it extends it ("" otherwise).
  static std::string rest(const std::string& full, const std::string& sent);

  std::string reasoning_, content_;  // what was streamed; the handlers keep them
  bool ended_ = false;
};

}  // namespace loom::api

#include "api/delta_stream.h"

namespace loom::api {

namespace {

const std::string* string_at(const json& o, const char* key) {
  if (!o.is_object()) return nullptr;
  auto it = o.find(key);
  if (it == o.end() || !it->is_string()) return nullptr;
  return &it->get_ref<const std::string&>();
}

}  // namespace

std::string DeltaStream::rest(const std::string& full, const std::string& sent) {
  if (full.size() > sent.size() && full.compare(0, sent.size(), sent) == 0) return full.substr(sent.size());
  return {};
}

std::vector<SseEvent> DeltaStream::route(const json& d) {
  std::vector<SseEvent> out;
  if (!d.is_object() || ended_) return out;
  if (const std::string* r = string_at(d, "reasoning_content")) on_reasoning(out, *r);
  if (const std::string* c = string_at(d, "content")) on_text(out, *c);
  if (auto it = d.find("tool_calls"); it != d.end() && it->is_array()) {
    for (const json& call : *it) on_tool_call(out, call);
  }
  return out;
}

void DeltaStream::route_rest(std::vector<SseEvent>& out, const ChatResult& r) {
  if (const std::string* rc = string_at(r.message, "reasoning_content")) on_reasoning(out, rest(*rc, reasoning_));
  if (const std::string* c = string_at(r.message, "content")) on_text(out, rest(*c, content_));
}

}  // namespace loom::api

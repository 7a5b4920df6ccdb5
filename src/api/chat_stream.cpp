#include "api/chat_stream.h"

#include <utility>

namespace loom::api {

namespace {

bool extends(const std::string& now, const std::string& sent) {
  return now.size() >= sent.size() && now.compare(0, sent.size(), sent) == 0;
}

}  // namespace

ChatStream::ChatStream(chat::ToolCallFormat format, chat::ParseOptions options)
    : format_(format), options_(std::move(options)) {}

std::vector<json> ChatStream::add(std::string_view text) {
  text_.append(text);
  chat::ParseOptions o = options_;
  o.partial = true;
  last_ = chat::parse_assistant_output(format_, text_, o);
  return diff(last_);
}

std::vector<json> ChatStream::finish(std::string_view text) {
  text_.append(text);
  chat::ParseOptions o = options_;
  o.partial = false;
  last_ = chat::parse_assistant_output(format_, text_, o);
  return diff(last_);
}

std::vector<json> ChatStream::diff(const chat::ParsedMessage& now) {
  std::vector<json> out;
  // Reasoning first: it comes before the answer in every format.
  if (now.reasoning_content.size() > sent_reasoning_.size() && extends(now.reasoning_content, sent_reasoning_)) {
    out.push_back({{"reasoning_content", now.reasoning_content.substr(sent_reasoning_.size())}});
    sent_reasoning_ = now.reasoning_content;
  }
  if (now.content.size() > sent_content_.size() && extends(now.content, sent_content_)) {
    out.push_back({{"content", now.content.substr(sent_content_.size())}});
    sent_content_ = now.content;
  }
  // Complete calls, then the one still being written (its name and the arguments so far): a call
  // starts with a delta that has its id, type and name, and more arguments follow on its index.
  auto send = [&](size_t i, const chat::ToolCall& c) {
    if (i < sent_calls_.size()) {
      chat::ToolCall& s = sent_calls_[i];
      if (c.name == s.name && c.arguments.size() > s.arguments.size() && extends(c.arguments, s.arguments)) {
        out.push_back(
            {{"tool_calls",
              json::array({{{"index", i}, {"function", {{"arguments", c.arguments.substr(s.arguments.size())}}}}})}});
        s.arguments = c.arguments;
      }
      return;
    }
    out.push_back({{"tool_calls", json::array({{{"index", i},
                                                {"id", c.id},
                                                {"type", "function"},
                                                {"function", {{"name", c.name}, {"arguments", c.arguments}}}}})}});
    sent_calls_.push_back(c);
  };
  for (size_t i = 0; i < now.tool_calls.size(); ++i) send(i, now.tool_calls[i]);
  if (now.pending && sent_calls_.size() >= now.tool_calls.size()) send(now.tool_calls.size(), *now.pending);
  return out;
}

}  // namespace loom::api

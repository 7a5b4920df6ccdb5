// A chat reply as it streams: the generated text of one choice, parsed after each piece into
// reasoning, content and tool calls (chat::parse_assistant_output, partial), and turned into the
// neutral deltas of api_types.h — what became visible since the last piece. Every frontend that
// streams a chat reply (loom serve's dialects through the C API's TOKEN events, loom-node) takes
// its deltas from here, so reasoning is split and tool-call text is held back the same way
// everywhere: text that may still become a tool call is never sent as content, a call is sent once
// it is complete (its id, name and arguments), reasoning streams as it comes.
//
//   ChatStream s(format, parse_options);
//   for (piece : generation) for (json d : s.add(piece)) send(d);
//   for (json d : s.finish()) send(d);        // what the full parse adds; s.message() is the reply
//
// The deltas only ever extend what was sent: when a later parse disagrees with an earlier one
// (a kGeneric reply that turns out not to be JSON), what was sent stays and only what extends it
// is sent; the final message (message()) is the full parse all the same.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "api/api_types.h"
#include "chat/tool_calls.h"

namespace loom::api {

class ChatStream {
 public:
  ChatStream(chat::ToolCallFormat format, chat::ParseOptions options);

  // Appends generated text; the deltas it makes visible (none while text is held back).
  std::vector<json> add(std::string_view text);
  // The generation ended (with any last text): the full parse's remaining deltas.
  std::vector<json> finish(std::string_view text = {});

  const std::string& text() const { return text_; }
  // The reply so far: the last parse (the full parse after finish()).
  const chat::ParsedMessage& message() const { return last_; }

 private:
  std::vector<json> diff(const chat::ParsedMessage& now);

  chat::ToolCallFormat format_;
  chat::ParseOptions options_;
  std::string text_;
  chat::ParsedMessage last_;  // the latest parse
  // What the deltas have sent so far.
  std::string sent_reasoning_, sent_content_;
  std::vector<chat::ToolCall> sent_calls_;
};

}  // namespace loom::api

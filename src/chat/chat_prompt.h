// Chat prompts: a conversation rendered with the model's chat template, ready to tokenize.
//
//   std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "Hi"}};
//   std::string text = *apply_chat_template(*model, msgs, /*add_generation_prompt=*/true);
//   std::vector<int32_t> ids = tokenize_chat_prompt(model->vocab(), text);
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "model/model.h"

namespace loom::chat {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ...
  std::string content;
};

// The GGUF metadata key holding the model's Jinja chat template.
inline constexpr std::string_view kChatTemplateKey = "tokenizer.chat_template";

// Renders `messages` with the template (template_override when given, else the model's
// `tokenizer.chat_template`): render_chat (chat_request.h) for plain {role, content} messages
// (full OpenAI messages, tools and kwargs go through render_chat). Passes the variables
// `messages` ([{role, content}]; a "developer" role is rendered as "system"),
// `add_generation_prompt`, `bos_token` and `eos_token` (the texts of the vocab's BOS / EOS tokens,
// "" when the vocab has none), as llama.cpp does.
//
// A model without a template gets ChatML, llama.cpp's fallback (chatml_template_source()):
//   <|im_start|>{role}\n{content}<|im_end|>\n ... and, with add_generation_prompt,
//   <|im_start|>assistant\n
//
// A template that fails on a conversation with system messages (Gemma raises "System role not
// supported") is rendered again with each system message folded into the user message after it
// ("SYSTEM\nUSER"), minja's polyfill in llama.cpp; the first error is returned if that fails too.
//
// The result is the template's output as is: it may begin with the BOS text (many templates
// print bos_token); tokenize_chat_prompt takes care not to add a second BOS.
// Errors: the template's parse or render error (kInvalidArgument etc.), kInvalidArgument for an
// empty role, kCorrupt when the metadata value is not a string.
Expected<std::string> apply_chat_template(const Model& model, std::span<const ChatMessage> messages,
                                          bool add_generation_prompt, const std::string* template_override = nullptr);

// True when the model's metadata carries a chat template (otherwise ChatML is used).
bool has_chat_template(const Model& model);

// Tokenizes a rendered conversation: special-token texts become their tokens (the template's
// markers are meant as control tokens) and BOS is added as the vocab says, except when the
// rendering already starts with the BOS text (llama.cpp strips that copy instead, same result).
std::vector<int32_t> tokenize_chat_prompt(const Vocab& vocab, std::string_view rendered);

}  // namespace loom::chat

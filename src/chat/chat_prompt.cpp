#include "chat/chat_prompt.h"

#include <nlohmann/json.hpp>

#include "chat/chat_request.h"

namespace loom::chat {
namespace {

// llama.cpp passes the special tokens' pieces (token_to_piece with special = true).
std::string special_text(const Vocab& vocab, int32_t id) {
  return vocab.is_valid(id) ? vocab.token_to_piece(id, /*special=*/true) : std::string();
}

}  // namespace

bool has_chat_template(const Model& model) { return model.file().has(kChatTemplateKey); }

Expected<std::string> apply_chat_template(const Model& model, std::span<const ChatMessage> messages,
                                          bool add_generation_prompt, const std::string* template_override) {
  ChatInputs in;
  for (const ChatMessage& m : messages)
    in.messages.push_back(nlohmann::ordered_json{{"role", m.role}, {"content", m.content}});
  in.add_generation_prompt = add_generation_prompt;
  return render_chat(model, in, template_override);
}

std::vector<int32_t> tokenize_chat_prompt(const Vocab& vocab, std::string_view rendered) {
  // As llama.cpp's common_chat_templates_apply: drop the template's own BOS / EOS text when the
  // tokenizer adds those tokens anyway.
  if (vocab.add_bos() && vocab.is_valid(vocab.bos())) {
    const std::string bos = special_text(vocab, vocab.bos());
    if (!bos.empty() && rendered.starts_with(bos)) rendered.remove_prefix(bos.size());
  }
  if (vocab.add_eos() && vocab.is_valid(vocab.eos())) {
    const std::string eos = special_text(vocab, vocab.eos());
    if (!eos.empty() && rendered.ends_with(eos)) rendered.remove_suffix(eos.size());
  }
  return vocab.tokenize(rendered, /*add_special=*/true, /*parse_special=*/true);
}

}  // namespace loom::chat

#include "chat/chat_prompt.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "chat/template.h"

namespace loom::chat {
namespace {

// llama.cpp passes the special tokens' pieces (token_to_piece with special = true).
std::string special_text(const Vocab& vocab, int32_t id) {
  return vocab.is_valid(id) ? vocab.token_to_piece(id, /*special=*/true) : std::string();
}

std::string render_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt) {
  std::string out;
  for (const ChatMessage& m : messages) {
    out += "<|im_start|>";
    out += m.role;
    out += '\n';
    out += m.content;
    out += "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

// minja's system-role polyfill: system messages are folded into the user message that follows
// (or kept as a user message when none follows).
std::vector<ChatMessage> fold_system_messages(std::span<const ChatMessage> messages) {
  std::vector<ChatMessage> out;
  std::string pending;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      if (!pending.empty()) pending += '\n';
      pending += m.content;
      continue;
    }
    out.push_back(m);
    if (!pending.empty() && m.role == "user") {
      out.back().content = m.content.empty() ? pending : pending + "\n" + m.content;
      pending.clear();
    }
  }
  if (!pending.empty()) out.push_back({"user", pending});
  return out;
}

nlohmann::ordered_json make_context(const Vocab& vocab, std::span<const ChatMessage> messages,
                                    bool add_generation_prompt) {
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array();
  for (const ChatMessage& m : messages) {
    nlohmann::ordered_json jm = nlohmann::ordered_json::object();
    jm["role"] = m.role;
    jm["content"] = m.content;
    msgs.push_back(std::move(jm));
  }
  ctx["messages"] = std::move(msgs);
  ctx["add_generation_prompt"] = add_generation_prompt;
  ctx["bos_token"] = special_text(vocab, vocab.bos());
  ctx["eos_token"] = special_text(vocab, vocab.eos());
  return ctx;
}

}  // namespace

bool has_chat_template(const Model& model) { return model.file().has(kChatTemplateKey); }

Expected<std::string> apply_chat_template(const Model& model, std::span<const ChatMessage> messages,
                                          bool add_generation_prompt, const std::string* template_override) {
  std::string source;
  if (template_override) {
    source = *template_override;
  } else if (has_chat_template(model)) {
    auto s = model.file().get_string(kChatTemplateKey);
    if (!s) return corrupt(std::string(kChatTemplateKey) + ": " + s.status().message());
    source = std::move(*s);
  } else {
    return render_chatml(messages, add_generation_prompt);
  }
  auto tmpl = Template::parse(source);
  if (!tmpl) return Status(tmpl.status().code(), "chat template: " + tmpl.status().message());

  auto out = tmpl->render(make_context(model.vocab(), messages, add_generation_prompt));
  if (out) return std::move(*out);
  // Templates without a system role (Gemma) raise on one: retry with it folded into the user turn.
  const bool has_system = std::any_of(messages.begin(), messages.end(),
                                      [](const ChatMessage& m) { return m.role == "system"; });
  if (has_system) {
    const std::vector<ChatMessage> folded = fold_system_messages(messages);
    auto again = tmpl->render(make_context(model.vocab(), folded, add_generation_prompt));
    if (again) return std::move(*again);
  }
  return Status(out.status().code(), "chat template: " + out.status().message());
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

// apply_chat_template: the model's tokenizer.chat_template rendered with the conversation and the
// vocab's BOS / EOS texts; ChatML when the model has none. Models are stories260K copies made in
// memory with a template added.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "chat/chat_prompt.h"
#include "gguf/gguf_writer.h"
#include "model/model.h"
#include "test_util.h"

namespace loom::test {
namespace {

using chat::ChatMessage;

// stories260K, with `tokenizer.chat_template` = tmpl when given.
std::shared_ptr<const Model> load_model(const std::string* tmpl) {
  auto src = gguf::GgufFile::open(shared_path("models/stories260K.gguf"));
  EXPECT_TRUE(src.has_value()) << src.status().message();
  if (!src) return nullptr;
  auto w = gguf::GgufWriter::from_file(*src);
  EXPECT_TRUE(w.has_value()) << w.status().message();
  if (!w) return nullptr;
  w->remove(chat::kChatTemplateKey);
  if (tmpl) {
    Status st = w->set_string(std::string(chat::kChatTemplateKey), *tmpl);
    EXPECT_TRUE(st.is_ok()) << st.message();
  }
  const std::vector<uint8_t> bytes = w->to_bytes();
  auto f = gguf::GgufFile::from_bytes(bytes);
  EXPECT_TRUE(f.has_value()) << f.status().message();
  if (!f) return nullptr;
  auto m = Model::from_gguf(std::move(*f));
  EXPECT_TRUE(m.has_value()) << m.status().message();
  return m ? *m : nullptr;
}

std::shared_ptr<const Model> load_with_template_file(const std::string& name) {
  const std::string src = read_text_file(shared_path("golden/chat-templates/" + name));
  return load_model(&src);
}

const std::vector<ChatMessage> kConversation = {
    {"system", "You are brief."}, {"user", "Hi!"}, {"assistant", "Hello."}, {"user", "Tell me a story."}};

TEST(ChatPrompt, RendersTheModelsTemplate) {
  auto model = load_with_template_file("Qwen-Qwen2.5-7B-Instruct.jinja");
  ASSERT_TRUE(model);
  EXPECT_TRUE(chat::has_chat_template(*model));
  auto out = chat::apply_chat_template(*model, kConversation, true);
  ASSERT_TRUE(out.has_value()) << out.status().message();
  EXPECT_EQ(*out,
            "<|im_start|>system\nYou are brief.<|im_end|>\n"
            "<|im_start|>user\nHi!<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n"
            "<|im_start|>user\nTell me a story.<|im_end|>\n"
            "<|im_start|>assistant\n");
  auto no_gen = chat::apply_chat_template(*model, kConversation, false);
  ASSERT_TRUE(no_gen.has_value()) << no_gen.status().message();
  EXPECT_EQ(*no_gen + "<|im_start|>assistant\n", *out);
}

TEST(ChatPrompt, PassesBosAndEosTokenTexts) {
  auto model = load_with_template_file("google-gemma-2-2b-it.jinja");
  ASSERT_TRUE(model);
  const std::string bos = model->vocab().token_to_piece(model->vocab().bos(), true);
  ASSERT_FALSE(bos.empty());
  const std::vector<ChatMessage> msgs = {{"user", "Hi!"}, {"assistant", "Hello."}, {"user", "More"}};
  auto out = chat::apply_chat_template(*model, msgs, true);
  ASSERT_TRUE(out.has_value()) << out.status().message();
  EXPECT_EQ(*out, bos +
                      "<start_of_turn>user\nHi!<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n"
                      "<start_of_turn>user\nMore<end_of_turn>\n<start_of_turn>model\n");

  const std::string probe =
      "{{ bos_token }}|{{ eos_token }}|{{ add_generation_prompt }}|{{ messages | length }}|"
      "{{ messages[1].role }}:{{ messages[1].content }}";
  auto p = chat::apply_chat_template(*model, msgs, false, &probe);
  ASSERT_TRUE(p.has_value()) << p.status().message();
  const std::string eos = model->vocab().token_to_piece(model->vocab().eos(), true);
  EXPECT_EQ(*p, bos + "|" + eos + "|False|3|assistant:Hello.");
}

TEST(ChatPrompt, FoldsTheSystemMessageWhenTheTemplateRefusesIt) {
  auto model = load_with_template_file("google-gemma-2-2b-it.jinja");
  ASSERT_TRUE(model);
  const std::string bos = model->vocab().token_to_piece(model->vocab().bos(), true);
  const std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "Hi!"}};
  auto out = chat::apply_chat_template(*model, msgs, true);
  ASSERT_TRUE(out.has_value()) << out.status().message();
  EXPECT_EQ(*out, bos + "<start_of_turn>user\nBe brief.\nHi!<end_of_turn>\n<start_of_turn>model\n");
}

TEST(ChatPrompt, TemplateErrorsAreStatuses) {
  auto model = load_with_template_file("google-gemma-2-2b-it.jinja");
  ASSERT_TRUE(model);
  // Roles that do not alternate: the template raises, folding the system message does not help.
  const std::vector<ChatMessage> msgs = {{"user", "a"}, {"user", "b"}};
  auto out = chat::apply_chat_template(*model, msgs, true);
  ASSERT_FALSE(out.has_value());
  EXPECT_NE(out.status().message().find("alternate"), std::string::npos) << out.status().message();

  const std::string broken = "{% for m in messages %}{{ m.content }";
  auto b = chat::apply_chat_template(*model, msgs, true, &broken);
  ASSERT_FALSE(b.has_value());
  EXPECT_NE(b.status().message().find("chat template"), std::string::npos) << b.status().message();

  auto bad_model = load_model(&broken);
  ASSERT_TRUE(bad_model);
  EXPECT_FALSE(chat::apply_chat_template(*bad_model, msgs, true).has_value());
}

TEST(ChatPrompt, FallsBackToChatMlWithoutATemplate) {
  auto model = load_model(nullptr);
  ASSERT_TRUE(model);
  EXPECT_FALSE(chat::has_chat_template(*model));
  auto out = chat::apply_chat_template(*model, kConversation, true);
  ASSERT_TRUE(out.has_value()) << out.status().message();
  EXPECT_EQ(*out,
            "<|im_start|>system\nYou are brief.<|im_end|>\n"
            "<|im_start|>user\nHi!<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n"
            "<|im_start|>user\nTell me a story.<|im_end|>\n"
            "<|im_start|>assistant\n");
  auto no_gen = chat::apply_chat_template(*model, std::span(kConversation).first(2), false);
  ASSERT_TRUE(no_gen.has_value());
  EXPECT_EQ(*no_gen, "<|im_start|>system\nYou are brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n");
  auto empty = chat::apply_chat_template(*model, {}, true);
  ASSERT_TRUE(empty.has_value());
  EXPECT_EQ(*empty, "<|im_start|>assistant\n");

  // An override is used even when the model has no template.
  const std::string tmpl = "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}";
  auto o = chat::apply_chat_template(*model, std::span(kConversation).first(2), false, &tmpl);
  ASSERT_TRUE(o.has_value()) << o.status().message();
  EXPECT_EQ(*o, "[system]You are brief.[user]Hi!");
}

TEST(ChatPrompt, TokenizingDoesNotDoubleTheBos) {
  auto model = load_model(nullptr);
  ASSERT_TRUE(model);
  const Vocab& vocab = model->vocab();
  ASSERT_TRUE(vocab.add_bos());
  const std::string bos = vocab.token_to_piece(vocab.bos(), true);
  const auto plain = chat::tokenize_chat_prompt(vocab, "Once upon a time");
  const auto with_bos = chat::tokenize_chat_prompt(vocab, bos + "Once upon a time");
  ASSERT_FALSE(plain.empty());
  EXPECT_EQ(plain.front(), vocab.bos());
  EXPECT_EQ(plain, with_bos);
  EXPECT_EQ(plain, vocab.tokenize("Once upon a time", true, true));
}

}  // namespace
}  // namespace loom::test

// The thinking budget (src/sample/reasoning_budget.h) in a Sampler over a real vocabulary: logits
// that always favour one letter keep a reply thinking forever; the budget closes the block after
// N generated tokens with the message and the closing tag, and the reply then goes on.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/model.h"
#include "sample/sampler.h"
#include "test_util.h"
#include "vocab/vocab.h"

namespace loom::sample {
namespace {

struct Gen {
  std::string text;  // generated
  int thinking_tokens = 0;
};

// Greedy generation of n tokens whose logits favour `favour` (a token id), after `prompt`.
Gen generate(const Vocab& vocab, const std::string& prompt, int budget, const std::string& message, int n, int32_t favour) {
  SamplerParams p;
  p.temp = 0.0f;
  p.reasoning_budget = budget;
  p.reasoning_budget_message = message;
  auto s = Sampler::create(p, &vocab);
  EXPECT_TRUE(s) << s.status().message();
  for (int32_t t : vocab.tokenize(prompt, true, true)) s->accept(t, /*accept_grammar=*/false);
  std::vector<float> logits(size_t(vocab.n_tokens()), 0.0f);
  logits[size_t(favour)] = 10.0f;
  Gen r;
  for (int i = 0; i < n; ++i) {
    const int32_t tok = s->sample(logits);
    s->accept(tok);
    r.text += vocab.token_to_piece(tok, true);
  }
  return r;
}

class ReasoningBudgetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = Model::load(test::shared_path("models/stories260K.gguf"), {.vocab_only = true, .repack = true, .progress = {}});
    ASSERT_TRUE(m) << m.status().message();
    model_ = std::move(*m);
    const auto a = vocab().tokenize("a", false, false);
    ASSERT_FALSE(a.empty());
    a_ = a.back();
  }
  const Vocab& vocab() const { return model_->vocab(); }
  std::shared_ptr<const Model> model_;
  int32_t a_ = 0;
};

TEST_F(ReasoningBudgetTest, ClosesABlockOpenedByThePromptAfterTheBudget) {
  const std::string piece = vocab().token_to_piece(a_, true);
  // The prompt ends inside <think>: 5 tokens of thinking, then the end, then the answer goes on.
  Gen r = generate(vocab(), "Question<think>\n", 5, "", 40, a_);
  const size_t end = r.text.find("</think>");
  ASSERT_NE(end, std::string::npos) << r.text;
  // (SentencePiece gives the tag a leading space, as llama.cpp's tokenization of it does.)
  std::string before = r.text.substr(0, end);
  while (!before.empty() && before.back() == ' ') before.pop_back();
  EXPECT_EQ(before.size(), 5 * piece.size()) << r.text;
  EXPECT_GT(r.text.size(), end + 8) << "the reply goes on after the block";
  EXPECT_EQ(r.text.find("</think>", end + 1), std::string::npos);
  // Without a budget the block never closes.
  Gen free = generate(vocab(), "Question<think>\n", -1, "", 40, a_);
  EXPECT_EQ(free.text.find("</think>"), std::string::npos);
}

TEST_F(ReasoningBudgetTest, MessageBeforeTheTagAndZeroClosesAtOnce) {
  Gen r = generate(vocab(), "Q<think>", 3, " out of time.", 30, a_);
  const size_t msg = r.text.find(" out of time.</think>");
  ASSERT_NE(msg, std::string::npos) << r.text;
  Gen zero = generate(vocab(), "Q<think>", 0, "", 10, a_);
  EXPECT_EQ(zero.text.find_first_not_of(' '), zero.text.find("</think>")) << zero.text;
}

TEST_F(ReasoningBudgetTest, ABlockTheReplyOpensIsCountedAndAClosedOneIsNot) {
  // The favoured token opens a block itself: "<think>" as the reply's first tokens.
  const auto open = vocab().tokenize("<think>", false, true);
  SamplerParams p;
  p.temp = 0.0f;
  p.reasoning_budget = 4;
  auto s = Sampler::create(p, &vocab());
  ASSERT_TRUE(s);
  // A prompt with a finished block from an earlier turn: nothing is counted or forced.
  for (int32_t t : vocab().tokenize("old<think>x</think>answer", true, true)) s->accept(t, false);
  std::vector<float> logits(size_t(vocab().n_tokens()), 0.0f);
  std::string text;
  auto step = [&](int32_t want) {
    std::fill(logits.begin(), logits.end(), 0.0f);
    logits[size_t(want)] = 10.0f;
    const int32_t tok = s->sample(logits);
    s->accept(tok);
    text += vocab().token_to_piece(tok, true);
  };
  for (int i = 0; i < 6; ++i) step(a_);
  EXPECT_EQ(text.find("</think>"), std::string::npos) << text;
  for (int32_t t : open) step(t);
  for (int i = 0; i < 12; ++i) step(a_);
  const size_t start = text.find("<think>");
  const size_t end = text.find("</think>");
  ASSERT_NE(end, std::string::npos) << text;
  size_t inside = end - start - 7;
  while (inside > 0 && text[start + 7 + inside - 1] == ' ') --inside;
  EXPECT_EQ(inside, 4 * vocab().token_to_piece(a_, true).size()) << text;
  // A copy keeps its state (per-choice samplers are copies).
  Sampler copy = *s;
  EXPECT_EQ(copy.sample(logits), s->sample(logits));
}

// llama-server's reasoning_control: no budget, the block stays open until end_reasoning(), which
// closes it at once (message, then the tag); outside a block it does nothing.
TEST_F(ReasoningBudgetTest, ReasoningControlClosesTheBlockOnDemand) {
  SamplerParams p;
  p.temp = 0.0f;
  p.reasoning_control = true;
  p.reasoning_budget_message = " stop.";
  auto s = Sampler::create(p, &vocab());
  ASSERT_TRUE(s) << s.status().message();
  EXPECT_FALSE(s->end_reasoning()) << "nothing to end before a block opens";
  for (int32_t t : vocab().tokenize("Q<think>\n", true, true)) s->accept(t, false);
  std::vector<float> logits(size_t(vocab().n_tokens()), 0.0f);
  logits[size_t(a_)] = 10.0f;
  std::string text;
  auto step = [&] {
    const int32_t tok = s->sample(logits);
    s->accept(tok);
    text += vocab().token_to_piece(tok, true);
  };
  for (int i = 0; i < 30; ++i) step();
  EXPECT_EQ(text.find("</think>"), std::string::npos) << "no budget: the block stays open";
  const size_t before = text.size();
  EXPECT_TRUE(s->end_reasoning());
  EXPECT_FALSE(s->end_reasoning()) << "already closing";
  for (int i = 0; i < 12; ++i) step();
  const std::string after = text.substr(before);
  // At once: the message and the tag are the very next tokens (SentencePiece may add a space).
  const size_t at = after.find("stop.</think>");
  ASSERT_NE(at, std::string::npos) << after;
  EXPECT_EQ(after.find_first_not_of(' '), at) << after;
  EXPECT_FALSE(s->end_reasoning()) << "the block is closed";
  // Without reasoning_control or a budget, there is nothing to force.
  SamplerParams plain;
  plain.temp = 0.0f;
  auto q = Sampler::create(plain, &vocab());
  ASSERT_TRUE(q);
  for (int32_t t : vocab().tokenize("Q<think>\n", true, true)) q->accept(t, false);
  EXPECT_FALSE(q->end_reasoning());
}

}  // namespace
}  // namespace loom::sample

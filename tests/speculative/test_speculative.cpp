// Speculative decoding: drafters, the vocabulary check, and the promise that a verification round
// gives exactly plain decoding's tokens (greedy and sampled) and leaves the cache as plain
// decoding would, whatever the draft.
#include <gtest/gtest.h>

#include <random>

#include "model/model_test_util.h"
#include "sample/sampler.h"
#include "speculative/speculative.h"

namespace loom::speculative {
namespace {

using test::load_shared_model;
using test::make_context;

std::shared_ptr<const Model> target() {
  static auto m = load_shared_model("models/synth-llama-tiny-f32.gguf");
  return m;
}
std::shared_ptr<const Model> draft_q4() {
  static auto m = load_shared_model("models/synth-llama-tiny-q4_0.gguf");
  return m;
}

TEST(LookupDrafter, ProposesWhatFollowedTheLatestLongestNgram) {
  speculative::LookupDrafter d(3, 1);
  // "1 2 3 9 ... 1 2 3" -> 9; the latest occurrence wins over an earlier one.
  std::vector<int32_t> h = {1, 2, 3, 9, 8, 7, 1, 2, 3, 5, 6, 4, 1, 2, 3};
  auto got = d.draft(h, 2);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, (std::vector<int32_t>{5, 6}));
  // A 3-gram match is preferred to a later 1-gram match.
  h = {4, 5, 6, 10, 11, 6, 12, 4, 5, 6};
  got = d.draft(h, 3);
  EXPECT_EQ(*got, (std::vector<int32_t>{10, 11, 6}));
  // Without a 3- or 2-gram, a 1-gram; the draft stops at the history's end.
  h = {7, 1, 8, 9, 1};
  got = d.draft(h, 10);
  EXPECT_EQ(*got, (std::vector<int32_t>{8, 9, 1}));
  // No match, too short, n_max 0: nothing.
  EXPECT_TRUE(d.draft(std::vector<int32_t>{1, 2, 3}, 4)->empty());
  EXPECT_TRUE(d.draft(std::vector<int32_t>{1}, 4)->empty());
  EXPECT_TRUE(d.draft(h, 0)->empty());
  speculative::LookupDrafter strict(3, 2);
  EXPECT_TRUE(strict.draft(std::vector<int32_t>{7, 1, 8, 9, 1}, 4)->empty());  // only a 1-gram repeats
}

TEST(ModelDrafter, RefusesAnotherVocabulary) {
  auto stories = load_shared_model("models/stories260K.gguf");
  Status st = speculative::check_same_vocab(*stories, *target());
  ASSERT_FALSE(st.is_ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("vocabularies must be the same"), std::string::npos) << st.message();
  EXPECT_TRUE(speculative::check_same_vocab(*draft_q4(), *target()).is_ok());
  ContextParams p;
  p.n_ctx = 256;
  EXPECT_FALSE(ModelDrafter::create(stories, *target(), p, 0.0f).has_value());
  EXPECT_FALSE(ModelDrafter::create(draft_q4(), *target(), p, 1.5f).has_value());
}

// Draws random token ids: drafts that are almost always wrong.
class RandomDrafter final : public Drafter {
 public:
  Expected<std::vector<int32_t>> draft(std::span<const int32_t>, int n_max) override {
    std::uniform_int_distribution<int32_t> id(3, 31999);
    std::vector<int32_t> out(size_t(std::uniform_int_distribution<int>(0, n_max)(g_)));
    for (auto& t : out) t = id(g_);
    return out;
  }
  std::string describe() const override { return "random"; }

 private:
  std::mt19937 g_{5};
};

struct Run {
  std::vector<int32_t> ids;
  std::vector<float> next_logits;  // after decoding the last token: the cache's content, checked
  speculative::SpecStats stats;
};

// `loom generate`'s loop: plain when drafter is null, else speculative rounds.
Run generate(const SamplerParams& sp, Drafter* drafter, int n_predict, int draft_max) {
  auto ctx = make_context(target(), 256, 2);
  auto sampler = Sampler::create(sp, &target()->vocab());
  EXPECT_TRUE(sampler.has_value());
  const Vocab& vocab = target()->vocab();
  std::vector<int32_t> history = vocab.tokenize("Once upon a time there was", true, false);
  EXPECT_TRUE(ctx->decode(Batch::from_tokens(history, 0)).is_ok());
  Run run;
  bool pending = false;
  while (int(run.ids.size()) < n_predict) {
    if (pending && drafter) {
      const int left = n_predict - int(run.ids.size()) - 1;
      auto d = drafter->draft(history, std::min(draft_max, left));
      EXPECT_TRUE(d.has_value());
      int picked = 0;
      auto r = speculative::speculative_round(*ctx, 0, history, *d, [&](std::span<const float> l) -> Expected<SpecPick> {
        const int32_t tok = sampler->sample(l);
        if (vocab.is_eog(tok)) return SpecPick{tok, false, true};
        sampler->accept(tok);
        ++picked;
        return SpecPick{tok, true, int(run.ids.size()) + picked >= n_predict};
      });
      EXPECT_TRUE(r.has_value()) << r.status().message();
      if (!r) break;
      run.stats.add(*r);
      for (int32_t t : r->tokens) run.ids.push_back(t), history.push_back(t);
      pending = !r->tokens.empty();
      // The cache holds everything but the pending token.
      EXPECT_EQ(ctx->kv().used(), int(history.size()) - (pending ? 1 : 0));
      if (r->stopped) break;
      continue;
    }
    if (pending) {
      const int32_t one[1] = {history.back()};
      EXPECT_TRUE(ctx->decode(Batch::from_tokens(one, int32_t(history.size() - 1))).is_ok());
      pending = false;
    }
    const int32_t tok = sampler->sample(*ctx->logits(-1));
    if (vocab.is_eog(tok)) break;
    sampler->accept(tok);
    run.ids.push_back(tok);
    history.push_back(tok);
    pending = true;
  }
  if (pending) {
    const int32_t one[1] = {history.back()};
    EXPECT_TRUE(ctx->decode(Batch::from_tokens(one, int32_t(history.size() - 1))).is_ok());
  }
  auto l = ctx->logits(-1);
  if (l) run.next_logits.assign(l->begin(), l->end());
  return run;
}

void expect_same_as_plain(const SamplerParams& sp, const char* what) {
  const Run plain = generate(sp, nullptr, 32, 0);
  ASSERT_EQ(plain.ids.size(), 32u) << what;
  ContextParams dp;
  dp.n_ctx = 512;
  dp.n_threads = 2;
  auto model_drafter = ModelDrafter::create(draft_q4(), *target(), dp, 0.0f);
  ASSERT_TRUE(model_drafter.has_value()) << model_drafter.status().message();
  speculative::LookupDrafter lookup(3, 1);
  RandomDrafter random;
  Drafter* drafters[] = {model_drafter->get(), &lookup, &random};
  for (Drafter* d : drafters) {
    for (int k : {2, 7}) {
      const Run spec = generate(sp, d, 32, k);
      EXPECT_EQ(spec.ids, plain.ids) << what << ", " << d->describe() << ", draft_max " << k;
      EXPECT_EQ(spec.next_logits, plain.next_logits) << what << ", " << d->describe() << ", draft_max " << k;
      EXPECT_EQ(spec.stats.emitted, int64_t(spec.ids.size()) - 1) << "every token but the first comes from a round";
      if (d == model_drafter->get() && sp.temp == 0.0f) {
        // A 4-bit copy of the target agrees often but not always: both paths are exercised.
        // (Sampling at temperature 1.2 over 32000 tokens rarely meets a greedy draft.)
        EXPECT_GT(spec.stats.accepted, 0) << what << ", draft_max " << k;
      }
    }
  }
}

TEST(Speculative, GreedyOutputIsPlainDecodingsWhateverTheDraft) {
  SamplerParams sp;
  sp.temp = 0.0f;
  expect_same_as_plain(sp, "greedy");
}

TEST(Speculative, SeededSamplingIsPlainDecodingsWhateverTheDraft) {
  SamplerParams sp;
  sp.temp = 1.2f;
  sp.top_k = 0;
  sp.top_p = 1.0f;
  sp.min_p = 0.0f;
  sp.seed = 7;
  sp.penalty_repeat = 1.1f;  // a stage with state: it must see the same history in the same order
  expect_same_as_plain(sp, "sampled");
}

TEST(Speculative, ARoundThatCannotRunChangesNothing) {
  auto ctx = make_context(target(), 32, 1);
  std::vector<int32_t> h = target()->vocab().tokenize("Once upon", true, false);
  ASSERT_TRUE(ctx->decode(Batch::from_tokens(std::span(h).first(h.size() - 1), 0)).is_ok());
  const int used = ctx->kv().used();
  const std::vector<int32_t> too_long(40, 5);
  auto pick = [](std::span<const float>) -> Expected<SpecPick> { return SpecPick{5, true, false}; };
  auto r = speculative::speculative_round(*ctx, 0, h, too_long, pick);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ctx->kv().used(), used);
  EXPECT_FALSE(speculative::speculative_round(*ctx, 0, {}, {}, pick).has_value());
  // A pick that fails: its error, and the cache as before the round (history.back() pending).
  auto bad = [](std::span<const float>) -> Expected<SpecPick> { return invalid_argument("no token fits"); };
  const std::vector<int32_t> draft = {7, 8, 9};
  r = speculative::speculative_round(*ctx, 0, h, draft, bad);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().message(), "no token fits");
  EXPECT_EQ(ctx->kv().used(), used);
  EXPECT_EQ(ctx->kv().seq_pos_max(0), int(h.size()) - 2);
}

}  // namespace
}  // namespace loom::speculative

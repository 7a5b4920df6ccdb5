// The header-only C++ layer (include/loom/loom.hpp) over the C API: every wrapper once, on the
// golden story, and its error paths (Status / Expected / Error).
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>

#include "../model/model_test_util.h"
#include "loom/loom.hpp"
#include "test_util.h"

namespace {

using namespace loom::api;
using loom::test::shared_path;

TEST(CppApi, ModelContextSamplerGiveTheGoldenStory) {
  auto model = Model::load(shared_path("models/stories260K.gguf"));
  ASSERT_TRUE(model) << model.status().message();
  EXPECT_EQ(model->arch(), "llama");
  EXPECT_EQ(model->meta("general.architecture").value_or(""), "llama");
  EXPECT_FALSE(model->meta("no.such.key").has_value());
  const auto g = loom::test::load_json(shared_path("golden/stories260K.json"));
  const auto& r = g["runs"][0];
  auto ids = model->tokenize(r["prompt"].get<std::string>()).value();
  EXPECT_EQ(ids, r["prompt_ids"].get<std::vector<Token>>());
  ContextParams cp;
  cp.p.n_ctx = 256;
  cp.p.n_threads = 1;
  Context ctx = Context::create(*model, cp).value();
  Sampler greedy = Sampler::create(*model, R"({"temperature": 0})").value();
  Batch batch(256);
  int pos = 0;
  for (Token t : ids) ASSERT_TRUE(batch.add(t, pos++));
  batch.set_logits_last();
  std::vector<Token> out;
  for (size_t i = 0; i < r["greedy_ids"].size(); ++i) {
    ASSERT_TRUE(ctx.decode(batch)) << "step " << i;
    const Token t = greedy.sample(ctx);
    out.push_back(t);
    batch.clear();
    batch.add(t, pos++, {0}, true);
  }
  EXPECT_EQ(out, r["greedy_ids"].get<std::vector<Token>>());
  EXPECT_EQ(model->detokenize(out).value(), r["greedy_text"].get<std::string>());
  // KV edits and chat formatting.
  EXPECT_TRUE(ctx.seq_rm(0, 4, -1));
  const auto prompt = model->apply_chat_template(R"([{"role": "user", "content": "Hi \"there\""}])").value();
  EXPECT_NE(prompt.find("Hi \"there\""), std::string::npos) << prompt;
}

TEST(CppApi, ErrorsAreStatusesUntilValueIsAsked) {
  auto missing = Model::load("/nonexistent.gguf");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find("nonexistent"), std::string::npos);
  EXPECT_THROW(missing.value(), Error);
  auto model = Model::load(shared_path("models/stories260K.gguf")).value();
  auto bad = Sampler::create(model, R"({"top_k": "x"})");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.status().code(), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(bad.status().message().find("top_k"), std::string::npos);
  Context ctx = Context::create(model, {}).value();
  std::vector<Token> bad_ids = {1, 1 << 20};
  Status st = ctx.decode(bad_ids);
  EXPECT_FALSE(st);
  EXPECT_EQ(st.code(), LOOM_ERR_INVALID_ARGUMENT);
}

TEST(CppApi, SchedulerStreamsEvents) {
  auto model = Model::load(shared_path("models/stories260K.gguf")).value();
  SchedulerParams sp;
  sp.p.n_slots = 2;
  sp.p.context.n_ctx = 512;
  sp.p.context.n_threads = 1;
  Scheduler s = Scheduler::create(model, sp).value();
  std::mutex mu;
  std::condition_variable cv;
  std::string text;
  bool done = false;
  auto id = s.submit(R"({"prompt": "Once upon a time", "n_predict": 16, "temperature": 0})", [&](const Event& e) {
    std::lock_guard<std::mutex> l(mu);
    if (e.kind == LOOM_EVENT_TOKEN || e.kind == LOOM_EVENT_FINISH) text += e.text;
    if (e.kind == LOOM_EVENT_DONE || e.kind == LOOM_EVENT_ERROR) done = true;
    cv.notify_all();
  });
  ASSERT_TRUE(id) << id.status().message();
  std::unique_lock<std::mutex> l(mu);
  ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(30), [&] { return done; }));
  EXPECT_EQ(text, ", there was a little girl named Lily. She loved to play");
  auto refused = s.submit("{\"prompt\": 5}", [](const Event&) {});
  EXPECT_FALSE(refused);
  EXPECT_TRUE(s.stats().value().find("\"slots\":2") != std::string::npos);
}

}  // namespace

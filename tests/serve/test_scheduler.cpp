// The scheduler against the golden story and against itself: a request's tokens never depend on
// what else runs, the prefix cache is hit and stays consistent, admission never over-commits,
// cancellation frees the slot, stop strings are never emitted, the cache dir survives a restart.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <future>
#include <thread>

#include "model/model_test_util.h"
#include "serve/prefix_cache.h"
#include "serve/serve_test_util.h"
#include "serve/stop_matcher.h"

namespace loom::test {
namespace {

using serve::Event;
using serve::FinishReason;
using serve::GenerateRequest;
using serve::Scheduler;
using serve::SchedulerParams;

std::shared_ptr<const Model> stories() {
  static std::shared_ptr<const Model> m = load_shared_model("models/stories260K.gguf");
  return m;
}

SchedulerParams small_params(int n_ctx = 1024, int slots = 4) {
  SchedulerParams p;
  p.context.n_ctx = n_ctx;
  p.context.n_ubatch = 64;
  p.context.n_threads = 2;
  p.n_slots = slots;
  p.step_tokens = 64;
  return p;
}

std::unique_ptr<Scheduler> make_sched(std::shared_ptr<const Model> m, const SchedulerParams& p) {
  auto s = Scheduler::create(std::move(m), p);
  EXPECT_TRUE(s.has_value()) << s.status().message();
  return s ? std::move(*s) : nullptr;
}

std::unique_ptr<Context> make_ctx(std::shared_ptr<const Model> m, const ContextParams& p) {
  auto c = Context::create(std::move(m), p);
  EXPECT_TRUE(c.has_value()) << c.status().message();
  return c ? std::move(*c) : nullptr;
}

GenerateRequest greedy(std::vector<int32_t> prompt, int max_tokens) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temp = 0.0f;
  return r;
}

// Runs one request to completion.
std::unique_ptr<Collected> run(Scheduler& s, GenerateRequest r) {
  auto c = std::make_unique<Collected>();
  auto id = s.submit(std::move(r), c->callback());
  EXPECT_TRUE(id.has_value()) << id.status().message();
  if (id) {
    EXPECT_TRUE(c->wait()) << "request did not finish";
  }
  return c;
}

std::vector<int32_t> tokenize(const std::string& text) { return stories()->vocab().tokenize(text, true, false); }

nlohmann::json golden() { return load_json(shared_path("golden/stories260K.json")); }

// A prompt of about n tokens of story text (stories260K's vocabulary), BOS first.
std::vector<int32_t> long_prompt(int n) {
  std::string text = "Once upon a time";
  const std::vector<std::string> words = {" the", " little", " girl", " saw", " a",   " big",   " red", " ball",
                                          " in",  " park",   " and",  " she", " was", " happy", "."};
  std::vector<int32_t> ids = tokenize(text);
  for (size_t i = 0; int(ids.size()) < n; ++i) {
    text += words[i % words.size()];
    ids = tokenize(text);
  }
  ids.resize(size_t(n));
  return ids;
}

TEST(StopMatcher, HoldsBackPrefixesAndCutsAtTheStop) {
  serve::StopMatcher m({"END", "\n\n"});
  EXPECT_EQ(m.push("hello E"), "hello ");
  EXPECT_EQ(m.held_bytes(), 1u);
  EXPECT_EQ(m.push("N"), "");
  EXPECT_EQ(m.push("x"), "ENx");  // not a stop after all
  EXPECT_EQ(m.push("a\n"), "a");
  EXPECT_EQ(m.push("\nrest"), "");
  EXPECT_TRUE(m.matched());
  EXPECT_EQ(m.stop_word(), "\n\n");
  EXPECT_EQ(m.push("more"), "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, EarliestStopWinsAndFlushReleases) {
  serve::StopMatcher m({"bc", "abcd"});
  EXPECT_EQ(m.push("xab"), "x");
  EXPECT_EQ(m.push("c"), "a");  // "bc" completes first
  EXPECT_EQ(m.stop_word(), "bc");
  serve::StopMatcher f({"zz"});
  EXPECT_EQ(f.push("az"), "a");
  EXPECT_EQ(f.flush(), "z");
  serve::StopMatcher none(std::vector<std::string>{});
  EXPECT_EQ(none.push("abc"), "abc");
}

TEST(StopMatcher, RandomTextMatchesAFindOnTheWhole) {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 300; ++iter) {
    std::string text;
    for (int i = 0; i < 40; ++i) text += char('a' + rng() % 3);
    std::vector<std::string> stops = {std::string(1 + rng() % 3, 'a'), "bca"};
    serve::StopMatcher m(stops);
    std::string out;
    size_t i = 0;
    while (i < text.size() && !m.matched()) {
      const size_t n = 1 + rng() % 4;
      out += m.push(text.substr(i, n));
      i += n;
    }
    out += m.flush();
    size_t cut = std::string::npos;
    for (const auto& s : stops) cut = std::min(cut, text.find(s));
    EXPECT_EQ(out, cut == std::string::npos ? text : text.substr(0, cut)) << text;
  }
}

// ---- prefix cache on a real context ----

TEST(PrefixCache, RandomOperationsKeepTheTreeConsistent) {
  ContextParams cp;
  cp.n_ctx = 512;
  cp.n_seq_max = 4 + 12;
  cp.n_threads = 1;
  auto ctx = make_ctx(stories(), cp);
  serve::PrefixCache cache(*ctx, 4, 12);
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> corpus;
  for (int i = 0; i < 6; ++i) {
    std::vector<int32_t> t = {1};
    for (int k = 0; k < 20 + int(rng() % 40); ++k) t.push_back(int32_t(3 + rng() % 20));  // few symbols: shared prefixes
    corpus.push_back(t);
  }
  for (int iter = 0; iter < 120; ++iter) {
    // A "request" in slot 0: match, share, compute the rest, insert, release.
    std::vector<int32_t> toks = corpus[rng() % corpus.size()];
    toks.resize(std::min<size_t>(toks.size(), 5 + rng() % toks.size()));
    if (rng() % 3 == 0) toks.push_back(int32_t(3 + rng() % 20));
    auto m = cache.match(toks, int(toks.size()) - 1);
    ASSERT_TRUE(cache.share(m, 0).is_ok());
    cache.lock(m.node);
    const int rest = int(toks.size()) - m.len;
    if (ctx->kv().size() - ctx->kv().used() < rest) cache.evict(rest - (ctx->kv().size() - ctx->kv().used()));
    std::vector<int32_t> tail(toks.begin() + m.len, toks.end());
    ASSERT_TRUE(ctx->decode(Batch::from_tokens(tail, m.len, 0)).is_ok());
    auto* n = cache.insert(toks, 0);
    if (n) cache.lock(n);
    cache.unlock(m.node);
    ASSERT_TRUE(ctx->seq_rm(0, -1, -1).is_ok());
    if (n) cache.unlock(n);
    if (rng() % 10 == 0) cache.evict(int(rng() % 100));
    Status st = cache.check_invariants();
    ASSERT_TRUE(st.is_ok()) << "iteration " << iter << ": " << st.message();
    // A matched prefix gives the same logits as computing the prompt from scratch.
    if (iter % 20 == 19) {
      auto mm = cache.match(toks, int(toks.size()) - 1);
      ASSERT_TRUE(cache.share(mm, 1).is_ok());
      std::vector<int32_t> t2(toks.begin() + mm.len, toks.end());
      ASSERT_TRUE(ctx->decode(Batch::from_tokens(t2, mm.len, 1)).is_ok());
      std::vector<float> a(ctx->logits(-1)->begin(), ctx->logits(-1)->end());
      ASSERT_TRUE(ctx->seq_rm(1, -1, -1).is_ok());
      ContextParams cp2 = cp;
      cp2.n_seq_max = 1;
      auto fresh = make_ctx(stories(), cp2);
      ASSERT_TRUE(fresh->decode(Batch::from_tokens(toks, 0, 0)).is_ok());
      std::vector<float> b(fresh->logits(-1)->begin(), fresh->logits(-1)->end());
      // Batch invariance (docs/design.md): a shared prefix gives the very bits of a fresh prefill.
      EXPECT_EQ(max_abs_diff(a, b), 0.0f) << "cached prefix of " << mm.len << " tokens";
    }
  }
  cache.clear_unlocked();
  EXPECT_EQ(cache.n_cached_tokens(), 0);
  EXPECT_EQ(ctx->kv().used(), 0);
  ASSERT_TRUE(cache.check_invariants().is_ok());
}

// ---- scheduler ----

TEST(Scheduler, GreedyRequestGivesTheGoldenStory) {
  auto s = make_sched(stories(), small_params());
  auto g = golden();
  for (const auto& run_j : g["runs"]) {
    auto want = run_j["greedy_ids"].get<std::vector<int32_t>>();
    auto c = run(*s, greedy(run_j["prompt_ids"].get<std::vector<int32_t>>(), int(want.size())));
    EXPECT_EQ(c->tokens(), want) << run_j["prompt"];
    const Event* done = c->find(Event::Kind::kDone);
    ASSERT_TRUE(done);
    EXPECT_EQ(done->usage.prompt_tokens, int(run_j["prompt_ids"].size()));
    EXPECT_EQ(done->usage.completion_tokens, int(want.size()));
  }
  // The text is the golden text (streamed pieces concatenated).
  auto c = run(*s, greedy(g["runs"][0]["prompt_ids"].get<std::vector<int32_t>>(), 64));
  EXPECT_EQ(c->text(), g["runs"][0]["greedy_text"].get<std::string>());
}

TEST(Scheduler, ConcurrentRequestsEqualTheirSingleResults) {
  const std::vector<std::string> prompts = {"Once upon a time",
                                            "The cat",
                                            "Lily and Tom went to the park",
                                            "One day, a big dog",
                                            "Tim had a red ball",
                                            "The sun was hot",
                                            "Mom said",
                                            "A little bird"};
  std::vector<std::vector<int32_t>> alone;
  {
    auto s = make_sched(stories(), small_params(2048, 1));
    for (const auto& p : prompts) alone.push_back(run(*s, greedy(tokenize(p), 48))->tokens());
  }
  auto s = make_sched(stories(), small_params(2048, 8));
  std::vector<std::unique_ptr<Collected>> cs;
  for (const auto& p : prompts) {
    cs.push_back(std::make_unique<Collected>());
    ASSERT_TRUE(s->submit(greedy(tokenize(p), 48), cs.back()->callback()).has_value());
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_TRUE(cs[i]->wait());
    EXPECT_EQ(cs[i]->tokens(), alone[i]) << prompts[i];
  }
}

// Prompt-lookup speculation changes nothing but speed: the same tokens and text, greedy and
// seeded, alone and among other streams, with several choices and stop strings; drafts are
// verified and some accepted (stories260K repeats itself); afterwards the cache holds exactly
// what the requests left (a follow-up still hits the prefix) and no cell leaks.
// A draft model in the scheduler (the target drafting for itself, so most drafts are accepted,
// and a p_min of 0 so that it always drafts): greedy and seeded output are plain decoding's, alone
// and with requests running at once; lookup requests and n_max 0 still work; a draft model with
// another vocabulary is refused at create.
TEST(Scheduler, DraftModelSpeculationGivesThePlainTokens) {
  const std::vector<std::string> prompts = {"Once upon a time", "The cat", "Lily and Tom went to the park"};
  auto make = [&](const std::string& p, bool sampled) {
    GenerateRequest r = greedy(tokenize(p), 32);
    if (sampled) {
      r.sampling.temp = 0.9f;
      r.sampling.seed = 5;
      r.n = 2;
    }
    return r;
  };
  for (bool sampled : {false, true}) {
    std::vector<std::vector<int32_t>> plain0, plain1;
    {
      auto s = make_sched(stories(), small_params(2048, 8));
      for (const auto& p : prompts) {
        auto c = run(*s, make(p, sampled));
        plain0.push_back(c->tokens(0));
        plain1.push_back(c->tokens(1));
      }
    }
    SchedulerParams sp = small_params(2048, 8);
    sp.draft_model = stories();
    sp.draft_max = 5;
    sp.draft_p_min = 0.0f;
    sp.draft_context.n_threads = 1;
    auto s = make_sched(stories(), sp);
    for (size_t i = 0; i < prompts.size(); ++i) {
      auto c = run(*s, make(prompts[i], sampled));
      EXPECT_EQ(c->tokens(0), plain0[i]) << prompts[i] << " sampled " << sampled;
      EXPECT_EQ(c->tokens(1), plain1[i]) << prompts[i];
    }
    std::vector<std::unique_ptr<Collected>> cs;
    for (const auto& p : prompts) {
      cs.push_back(std::make_unique<Collected>());
      ASSERT_TRUE(s->submit(make(p, sampled), cs.back()->callback()).has_value());
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_TRUE(cs[i]->wait());
      EXPECT_EQ(cs[i]->tokens(0), plain0[i]) << prompts[i] << " (concurrent)";
      EXPECT_EQ(cs[i]->tokens(1), plain1[i]) << prompts[i] << " (concurrent)";
    }
    const auto st = s->stats();
    EXPECT_GT(st.metrics.draft_tokens, 0u);
    if (!sampled) {
      EXPECT_GT(st.metrics.draft_accepted, st.metrics.draft_tokens / 2) << "the model drafting for itself";
    }
    EXPECT_EQ(st.kv_used, st.cached_tokens) << "only the prefix cache holds cells when idle";
    // Per request: n_max 0 turns drafting off; lookup takes precedence over the draft model.
    const uint64_t drafted = st.metrics.draft_tokens;
    GenerateRequest off = make(prompts[0], sampled);
    off.draft_max = 0;
    EXPECT_EQ(run(*s, off)->tokens(0), plain0[0]);
    EXPECT_EQ(s->stats().metrics.draft_tokens, drafted);
    GenerateRequest lk = make(prompts[2], sampled);
    lk.lookup = 2;
    EXPECT_EQ(run(*s, lk)->tokens(0), plain0[2]);
  }
  SchedulerParams bad = small_params(2048, 2);
  bad.draft_model = load_shared_model("models/synth-bert-tiny-f32.gguf");
  auto refused = Scheduler::create(stories(), bad);
  ASSERT_FALSE(refused.has_value());
  EXPECT_NE(refused.status().message().find("differs"), std::string::npos) << refused.status().message();
  bad.draft_model = stories();
  bad.draft_max = 0;
  EXPECT_FALSE(Scheduler::create(stories(), bad).has_value());
}

TEST(Scheduler, LookupSpeculationGivesThePlainTokens) {
  const std::vector<std::string> prompts = {"Once upon a time", "The cat", "Lily and Tom went to the park"};
  auto make = [&](const std::string& p, bool sampled, int lookup) {
    GenerateRequest r = greedy(tokenize(p), 40);
    if (sampled) {
      r.sampling.temp = 0.9f;
      r.sampling.seed = 11;
      r.sampling.penalty_repeat = 1.1f;
      r.n = 2;
    }
    r.stop = {"Tom."};
    r.lookup = lookup;
    r.draft_max = 6;
    return r;
  };
  for (bool sampled : {false, true}) {
    std::vector<std::vector<int32_t>> plain0, plain1;
    std::vector<std::string> plain_text;
    {
      auto s = make_sched(stories(), small_params(2048, 8));
      for (const auto& p : prompts) {
        auto c = run(*s, make(p, sampled, 0));
        plain0.push_back(c->tokens(0));
        plain1.push_back(c->tokens(1));
        plain_text.push_back(c->text(0));
      }
    }
    for (int lookup : {1, 3}) {
      auto s = make_sched(stories(), small_params(2048, 8));
      // Alone, one after the other.
      for (size_t i = 0; i < prompts.size(); ++i) {
        auto c = run(*s, make(prompts[i], sampled, lookup));
        EXPECT_EQ(c->tokens(0), plain0[i]) << prompts[i] << " lookup " << lookup << " sampled " << sampled;
        EXPECT_EQ(c->tokens(1), plain1[i]) << prompts[i];
        EXPECT_EQ(c->text(0), plain_text[i]) << prompts[i];
      }
      // All at once.
      std::vector<std::unique_ptr<Collected>> cs;
      for (const auto& p : prompts) {
        cs.push_back(std::make_unique<Collected>());
        ASSERT_TRUE(s->submit(make(p, sampled, lookup), cs.back()->callback()).has_value());
      }
      for (size_t i = 0; i < prompts.size(); ++i) {
        ASSERT_TRUE(cs[i]->wait());
        EXPECT_EQ(cs[i]->tokens(0), plain0[i]) << prompts[i] << " (concurrent) lookup " << lookup;
        EXPECT_EQ(cs[i]->tokens(1), plain1[i]) << prompts[i] << " (concurrent)";
      }
      const auto st = s->stats();
      EXPECT_GT(st.metrics.draft_tokens, 0u);
      if (!sampled) {
        EXPECT_GT(st.metrics.draft_accepted, 0u);
      }
      EXPECT_LE(st.metrics.draft_accepted, st.metrics.draft_tokens);
      EXPECT_EQ(st.kv_used, st.cached_tokens) << "only the prefix cache holds cells when idle";
      auto again = run(*s, make(prompts[0], sampled, lookup));
      EXPECT_EQ(again->tokens(0), plain0[0]);
      EXPECT_GT(again->find(Event::Kind::kDone)->usage.cached_tokens, 0);
    }
  }
}

TEST(Scheduler, SharedPrefixIsHitAndGivesTheSameTokens) {
  auto s = make_sched(stories(), small_params());
  const std::string system = "Once upon a time, there was a little girl named Lily. She loved to play outside.";
  auto first = run(*s, greedy(tokenize(system + " One day"), 24));
  auto second = run(*s, greedy(tokenize(system + " The cat"), 24));
  const Event* d1 = first->find(Event::Kind::kDone);
  const Event* d2 = second->find(Event::Kind::kDone);
  ASSERT_TRUE(d1 && d2);
  EXPECT_EQ(d1->usage.cached_tokens, 0);
  EXPECT_GT(d2->usage.cached_tokens, 10);
  EXPECT_EQ(d2->timings.cache_n + d2->timings.prompt_n, d2->usage.prompt_tokens);
  // Without the cache the same request gives the same tokens.
  SchedulerParams np = small_params();
  np.prefix_cache = false;
  auto s2 = make_sched(stories(), np);
  EXPECT_EQ(run(*s2, greedy(tokenize(system + " The cat"), 24))->tokens(), second->tokens());
  // The whole prompt again: everything but its last token comes from the cache.
  auto third = run(*s, greedy(tokenize(system + " The cat"), 24));
  EXPECT_EQ(third->find(Event::Kind::kDone)->usage.cached_tokens, int(tokenize(system + " The cat").size()) - 1);
  EXPECT_EQ(third->tokens(), second->tokens());
  const auto st = s->stats();
  EXPECT_GT(st.metrics.prefix_hit_tokens, 0u);
  EXPECT_GT(st.cached_tokens, 0);
  // The context's perf counts the same reused tokens (loom_perf_data::n_reused).
  int64_t reused = -1;
  ASSERT_TRUE(s->run_exclusive([&](Context& ctx, serve::PrefixCache*) {
                 reused = ctx.perf().n_reused;
                 return Status::ok();
               }).is_ok());
  EXPECT_EQ(reused, int64_t(st.metrics.prefix_hit_tokens));
}

TEST(Scheduler, ConcurrentSamePrefixIsComputedOnce) {
  auto s = make_sched(stories(), small_params(2048, 4));
  std::string system;
  for (int i = 0; i < 12; ++i) system += "Once upon a time, there was a little girl. ";
  std::vector<std::unique_ptr<Collected>> cs;
  for (const char* q : {" She", " He", " They", " It"}) {
    cs.push_back(std::make_unique<Collected>());
    ASSERT_TRUE(s->submit(greedy(tokenize(system + q), 8), cs.back()->callback()).has_value());
  }
  int computed = 0, cached = 0;
  for (auto& c : cs) {
    ASSERT_TRUE(c->wait());
    computed += c->find(Event::Kind::kDone)->timings.prompt_n;
    cached += c->find(Event::Kind::kDone)->usage.cached_tokens;
  }
  const int len = int(tokenize(system).size());
  EXPECT_LT(computed, 2 * len) << "the shared prefix was computed more than once";
  EXPECT_GT(cached, 2 * len);
  // Prefixes shared at admission and while computing (rematch) count as reused in the context's perf.
  int64_t reused = -1;
  ASSERT_TRUE(s->run_exclusive([&](Context& ctx, serve::PrefixCache*) {
                 reused = ctx.perf().n_reused;
                 return Status::ok();
               }).is_ok());
  EXPECT_EQ(reused, cached);
}

TEST(Scheduler, EvictionPressureKeepsResultsExact) {
  // A cache of 256 cells for many distinct prompts: the tree is evicted again and again.
  auto s = make_sched(stories(), small_params(256, 2));
  auto ref = make_sched(stories(), [] {
    auto p = small_params(256, 1);
    p.prefix_cache = false;
    return p;
  }());
  std::mt19937 rng(11);
  const std::vector<std::string> words = {"Once", " upon", " a", " time", " the", " cat", " dog", " sat", " ran", " park"};
  for (int i = 0; i < 24; ++i) {
    std::string text = "Once upon a time";
    const int n = 5 + int(rng() % 25);
    for (int k = 0; k < n; ++k) text += words[rng() % words.size()];
    auto a = run(*s, greedy(tokenize(text), 16));
    auto b = run(*ref, greedy(tokenize(text), 16));
    EXPECT_EQ(a->tokens(), b->tokens()) << text;
  }
  EXPECT_LE(s->stats().kv_used, 256);
}

TEST(Scheduler, AdmissionWaitsForCellsInsteadOfFailing) {
  // Two requests whose prompt + max_tokens together exceed the cache: the second waits.
  auto s = make_sched(stories(), small_params(160, 4));
  GenerateRequest a = greedy(tokenize("Once upon a time"), 120);
  a.sampling.temp = 0;
  GenerateRequest b = greedy(tokenize("The cat"), 100);
  Collected ca, cb;
  ASSERT_TRUE(s->submit(a, ca.callback()).has_value());
  ASSERT_TRUE(s->submit(b, cb.callback()).has_value());
  ASSERT_TRUE(ca.wait());
  ASSERT_TRUE(cb.wait());
  EXPECT_EQ(ca.find(Event::Kind::kFinish)->reason, FinishReason::kLength);
  EXPECT_EQ(ca.tokens().size(), 120u);
  EXPECT_EQ(cb.tokens().size(), 100u);
  EXPECT_GT(cb.find(Event::Kind::kDone)->timings.queue_ms, 0.0);
  // Each equals its result alone.
  auto s1 = make_sched(stories(), small_params(160, 1));
  EXPECT_EQ(run(*s1, greedy(tokenize("The cat"), 100))->tokens(), cb.tokens());
}

TEST(Scheduler, MaxTokensIsCappedByTheContext) {
  auto s = make_sched(stories(), small_params(64, 2));
  auto c = run(*s, greedy(tokenize("Once upon a time"), 1000));
  EXPECT_EQ(c->find(Event::Kind::kFinish)->reason, FinishReason::kLength);
  EXPECT_EQ(int(c->tokens().size()), 64 - 5);
  // Without max_tokens too.
  auto d = run(*s, greedy(tokenize("Once upon a time"), -1));
  EXPECT_EQ(int(d->tokens().size()), 64 - 5);
}

TEST(Scheduler, BadRequestsAreRefusedWithClearErrors) {
  auto s = make_sched(stories(), small_params(64, 2));
  auto noop = [](const Event&) {};
  auto e1 = s->submit(greedy({}, 4), noop);
  ASSERT_FALSE(e1.has_value());
  EXPECT_EQ(e1.status().code(), StatusCode::kInvalidArgument);
  auto e2 = s->submit(greedy({1, 99999}, 4), noop);
  ASSERT_FALSE(e2.has_value());
  std::vector<int32_t> long_prompt(100, 300);
  auto e3 = s->submit(greedy(long_prompt, 4), noop);
  ASSERT_FALSE(e3.has_value());
  EXPECT_NE(e3.status().message().find("n_ctx"), std::string::npos) << e3.status().message();
  GenerateRequest bad_grammar = greedy({1, 400}, 4);
  bad_grammar.sampling.grammar = "root ::= (";
  EXPECT_FALSE(s->submit(bad_grammar, noop).has_value());
  GenerateRequest too_many = greedy({1, 400}, 4);
  too_many.n = 3;
  EXPECT_FALSE(s->submit(too_many, noop).has_value());
  GenerateRequest bias = greedy({1, 400}, 4);
  bias.sampling.logit_bias = {{-5, 1.0f}};
  EXPECT_FALSE(s->submit(bias, noop).has_value());
  auto emb = s->submit_embed({{{1, 2}}}, [](Expected<serve::EmbedResult>) {});
  EXPECT_EQ(emb.status().code(), StatusCode::kUnsupported);
  // The scheduler still works.
  EXPECT_EQ(run(*s, greedy(tokenize("Once upon a time"), 8))->tokens().size(), 8u);
}

// Encoder-decoder models need an encode step per request and a decoder history of their own:
// refused with a clear status (the CLI's generate serves them).
// ---- models whose memory keeps end-only parts: recurrent states, sliding windows ----

std::shared_ptr<const Model> data_model(const std::string& name) {
  auto m = Model::load(data_dir() + "/" + name);
  EXPECT_TRUE(m.has_value()) << m.status().message();
  return m ? *m : nullptr;
}

// The greedy tokens of one request on a fresh context without any cache (the reference output).
std::vector<int32_t> alone(std::shared_ptr<const Model> m, const std::vector<int32_t>& prompt, int n) {
  SchedulerParams p = small_params(1024, 1);
  p.prefix_cache = false;
  auto s = make_sched(std::move(m), p);
  GenerateRequest r = greedy(prompt, n);
  r.ignore_eos = true;
  return run(*s, r)->tokens();
}

// A chat whose every turn resends the history: turn k's prompt is turn k-1's prompt, its reply and
// a new message. Each turn resumes from the previous turn's checkpoint (cache_n at least the
// previous prompt) and gives exactly the tokens of a fresh run of its whole prompt.
void chat_resumes_from_checkpoints(std::shared_ptr<const Model> m, const char* what) {
  SchedulerParams p = small_params(1024, 2);
  auto s = make_sched(m, p);
  ASSERT_TRUE(s);
  std::vector<int32_t> history = long_prompt(40);
  int prev_prompt = 0;
  for (int turn = 1; turn <= 4; ++turn) {
    GenerateRequest r = greedy(history, 12);
    r.ignore_eos = true;
    auto c = run(*s, r);
    ASSERT_TRUE(c->done) << what;
    const auto* done = c->find(Event::Kind::kDone);
    if (turn > 1) {
      EXPECT_GE(done->timings.cache_n, prev_prompt) << what << " turn " << turn;
      EXPECT_EQ(done->timings.prompt_n + done->timings.cache_n, int(history.size())) << what;
    }
    EXPECT_EQ(c->tokens(), alone(m, history, 12)) << what << " turn " << turn;
    prev_prompt = int(history.size());
    const auto reply = c->tokens();
    history.insert(history.end(), reply.begin(), reply.end());
    for (int k = 0; k < 7; ++k) history.push_back(int32_t(20 + 13 * turn + k));
  }
  const auto st = s->stats();
  EXPECT_GT(st.cache_checkpoints, 0) << what;
  EXPECT_GT(st.cache_checkpoint_bytes, 0) << what;
  Status inv = s->run_exclusive([](Context&, serve::PrefixCache* c) { return c ? c->check_invariants() : Status::ok(); });
  EXPECT_TRUE(inv.is_ok()) << what << ": " << inv.message();
}

TEST(Scheduler, RecurrentModelsResumeFromCheckpoints) {
  for (const char* name : {"synth-mamba-tiny-f32.gguf", "synth-mamba2-tiny-f32.gguf"}) {
    auto m = data_model(name);
    ASSERT_TRUE(m);
    chat_resumes_from_checkpoints(m, name);
  }
}

// A long chat on a small per-path budget: checkpoints moved by a leaf's in-place extension keep
// their age (the newest ones survive, so every turn resumes at least the previous prompt), and the
// shallowest one (the system prompt's end, named by the request) survives however long the path
// grows, so a new conversation with the same system prompt resumes from it.
TEST(Scheduler, ALongChatKeepsTheNewestAndTheSystemPromptCheckpoints) {
  auto m = data_model("synth-mamba-tiny-f32.gguf");
  ASSERT_TRUE(m);
  SchedulerParams p = small_params(1024, 2);
  p.ctx_checkpoints = 4;
  auto s = make_sched(m, p);
  ASSERT_TRUE(s);
  const std::vector<int32_t> system = long_prompt(24);
  std::vector<int32_t> history = system;
  int prev_prompt = 0;
  for (int turn = 1; turn <= 8; ++turn) {
    for (int k = 0; k < 9; ++k) history.push_back(int32_t(30 + 11 * turn + k));
    GenerateRequest r = greedy(history, 10);
    r.ignore_eos = true;
    r.prompt_checkpoints = {int(system.size())};
    auto c = run(*s, r);
    ASSERT_TRUE(c->done);
    const auto* done = c->find(Event::Kind::kDone);
    if (turn > 1) {
      EXPECT_GE(done->timings.cache_n, prev_prompt) << "turn " << turn;
    }
    prev_prompt = int(history.size());
    const auto reply = c->tokens();
    history.insert(history.end(), reply.begin(), reply.end());
    // Every path holds at most 4 checkpoints.
    Status inv = s->run_exclusive([](Context&, serve::PrefixCache* pc) { return pc->check_invariants(); });
    EXPECT_TRUE(inv.is_ok()) << inv.message();
  }
  std::vector<int32_t> other = system;
  for (int k = 0; k < 9; ++k) other.push_back(int32_t(300 + k));
  GenerateRequest r = greedy(other, 4);
  r.ignore_eos = true;
  auto c = run(*s, r);
  EXPECT_EQ(c->find(Event::Kind::kDone)->timings.cache_n, int(system.size()));
  EXPECT_EQ(c->tokens(), alone(m, other, 4));
}

TEST(Scheduler, ACheckpointBudgetOfZeroServesWithoutReuse) {
  auto m = data_model("synth-mamba-tiny-f32.gguf");
  ASSERT_TRUE(m);
  for (auto [per_path, ram] : {std::pair{0, int64_t(8192)}, std::pair{8, int64_t(0)}}) {
    SchedulerParams p = small_params(1024, 2);
    p.ctx_checkpoints = per_path;
    p.cache_ram_mib = ram;
    auto s = make_sched(m, p);
    ASSERT_TRUE(s);
    const auto prompt = long_prompt(30);
    for (int i = 0; i < 2; ++i) {
      GenerateRequest r = greedy(prompt, 6);
      r.ignore_eos = true;
      auto c = run(*s, r);
      EXPECT_EQ(c->find(Event::Kind::kDone)->timings.cache_n, 0);
      EXPECT_EQ(c->tokens(), alone(m, prompt, 6));
    }
    EXPECT_EQ(s->stats().cache_checkpoints, 0);
  }
  SchedulerParams bad = small_params(1024, 2);
  bad.ctx_checkpoints = -1;
  auto r = Scheduler::create(m, bad);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

TEST(Scheduler, SlidingWindowModelsResumeFromCheckpointsWithAWindowCache) {
  auto m = load_shared_model("models/synth-gemma2-tiny-f32.gguf");  // a window of 16 on even layers
  ASSERT_TRUE(m);
  chat_resumes_from_checkpoints(m, "gemma2");
  // The window layers' cache is sized for the slots, not for the prefix cache's sequences.
  auto s = make_sched(m, small_params(1024, 2));
  Status st = s->run_exclusive([](Context& ctx, serve::PrefixCache*) {
    const MemoryBreakdown b = ctx.memory().breakdown();
    if (b.kv_swa_cells != kv::swa_cache_cells(1024, 16, 2, 64) || b.kv_swa_cells >= 1024) {
      return internal_error("window cache of " + std::to_string(b.kv_swa_cells) + " cells");
    }
    return Status::ok();
  });
  EXPECT_TRUE(st.is_ok()) << st.message();
}

TEST(Scheduler, ConcurrentRecurrentStreamsEqualTheirSingleOutputs) {
  auto m = data_model("synth-mamba-tiny-f32.gguf");
  ASSERT_TRUE(m);
  auto s = make_sched(m, small_params(1024, 8));
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::unique_ptr<Collected>> cs;
  for (int i = 0; i < 8; ++i) {
    prompts.push_back(long_prompt(10 + 9 * i));
    GenerateRequest r = greedy(prompts.back(), 24);
    r.ignore_eos = true;
    cs.push_back(std::make_unique<Collected>());
    ASSERT_TRUE(s->submit(r, cs.back()->callback()).has_value());
  }
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(cs[size_t(i)]->wait());
    EXPECT_EQ(cs[size_t(i)]->tokens(), alone(m, prompts[size_t(i)], 24)) << "stream " << i;
  }
  // Several choices fork one prompt's state; context shift cannot drop a state's tokens: the
  // choice ends with "length" at the context's end.
  GenerateRequest two = greedy(prompts[0], 8);
  two.n = 2;
  two.sampling.temp = 0.9f;
  auto c2 = run(*s, two);
  EXPECT_EQ(c2->tokens(0).size(), 8u);
  EXPECT_EQ(c2->tokens(1).size(), 8u);
}

// Encoder-decoder (T5): each request's prompt goes through the encoder, its decoder starts from the
// start token; requests at once each decode against their own encoder output and give the tokens
// of a plain encode + greedy decode loop on a context.
TEST(Scheduler, EncoderDecoderRequestsEqualAPlainEncodeAndDecode) {
  for (const char* name : {"synth-t5-tiny-f32.gguf", "synth-flan-t5-tiny-f32.gguf"}) {
    auto m = data_model(name);
    ASSERT_TRUE(m);
    const std::vector<std::vector<int32_t>> prompts = {m->vocab().tokenize("Once upon a time", true, false),
                                                       m->vocab().tokenize("The quick brown fox jumps", true, false),
                                                       m->vocab().tokenize("a b c", true, false)};
    // The reference: one context, encode, then greedy decode from the start token.
    auto plain = [&](const std::vector<int32_t>& prompt, int n) {
      ContextParams cp;
      cp.n_ctx = 256;
      cp.n_threads = 2;
      auto ctx = make_ctx(m, cp);
      std::vector<int32_t> out;
      if (!ctx || !ctx->encode(Batch::from_tokens(prompt, 0)).is_ok()) return out;
      int32_t tok = ctx->decoder_start_token();
      for (int k = 0; k < n; ++k) {
        if (!ctx->decode(Batch::from_tokens(std::vector<int32_t>{tok}, k)).is_ok()) break;
        auto l = ctx->logits(-1);
        tok = int32_t(std::max_element(l->begin(), l->end()) - l->begin());
        out.push_back(tok);
      }
      return out;
    };
    SchedulerParams p = small_params(256, 3);
    auto s = make_sched(m, p);
    ASSERT_TRUE(s);
    std::vector<std::unique_ptr<Collected>> cs;
    for (const auto& pr : prompts) {
      GenerateRequest r = greedy(pr, 10);
      r.ignore_eos = true;
      cs.push_back(std::make_unique<Collected>());
      ASSERT_TRUE(s->submit(r, cs.back()->callback()).has_value());
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_TRUE(cs[i]->wait());
      EXPECT_EQ(cs[i]->tokens(), plain(prompts[i], 10)) << name << " request " << i;
      const auto* done = cs[i]->find(Event::Kind::kDone);
      EXPECT_EQ(done->usage.prompt_tokens, int(prompts[i].size()));
    }
    // Again, one at a time: the same tokens (nothing of the earlier requests is left behind).
    for (size_t i = 0; i < prompts.size(); ++i) {
      GenerateRequest r = greedy(prompts[i], 10);
      r.ignore_eos = true;
      EXPECT_EQ(run(*s, r)->tokens(), cs[i]->tokens()) << name << " request " << i << " again";
    }
    Status st = s->run_exclusive([](Context& ctx, serve::PrefixCache*) {
      return ctx.n_encoded() == 0 ? Status::ok() : internal_error("encoder rows left: " + std::to_string(ctx.n_encoded()));
    });
    EXPECT_TRUE(st.is_ok()) << st.message();
  }
}

TEST(Scheduler, QueueLimitRefusesWithUnavailable) {
  SchedulerParams p = small_params(256, 1);
  p.max_queue = 2;
  auto s = make_sched(stories(), p);
  std::vector<std::unique_ptr<Collected>> cs;
  int refused = 0;
  for (int i = 0; i < 8; ++i) {
    cs.push_back(std::make_unique<Collected>());
    auto id = s->submit(greedy(tokenize("Once upon a time"), 200), cs.back()->callback());
    if (!id) {
      EXPECT_EQ(id.status().code(), StatusCode::kUnavailable);
      ++refused;
      cs.pop_back();
    }
  }
  EXPECT_GE(refused, 5);
  for (auto& c : cs) ASSERT_TRUE(c->wait());
  EXPECT_GE(s->stats().metrics.requests_rejected, 5u);
}

// An exclusive task (a LoRA swap, clearing the cache) runs after the requests submitted before it
// and before those submitted after it, even when they still wait for admission.
TEST(Scheduler, ExclusiveTasksKeepArrivalOrderWithWaitingRequests) {
  auto s = make_sched(stories(), small_params(1024, 2));
  // A first task holds the loop while the rest arrives: request A, task T, request B.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::thread hold([&] {
    (void)s->run_exclusive([released](Context&, serve::PrefixCache*) {
      released.wait();
      return Status::ok();
    });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Collected a, b;
  ASSERT_TRUE(s->submit(greedy(tokenize("Once upon a time"), 8), a.callback()).has_value());
  std::atomic<int> seen{-1};  // 1: A had finished when T ran; 0 + B untouched: the order holds
  std::atomic<bool> b_started_before_t{false};
  std::thread t([&] {
    Status st = s->run_exclusive([&](Context&, serve::PrefixCache*) {
      {
        std::lock_guard<std::mutex> l(a.mu);
        seen = a.done ? 1 : 0;
      }
      std::lock_guard<std::mutex> l(b.mu);
      b_started_before_t = !b.events.empty();
      return Status::ok();
    });
    EXPECT_TRUE(st.is_ok()) << st.message();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(s->submit(greedy(tokenize("The cat"), 8), b.callback()).has_value());
  release.set_value();
  hold.join();
  t.join();
  ASSERT_TRUE(a.wait());
  ASSERT_TRUE(b.wait());
  EXPECT_EQ(seen.load(), 1) << "the task ran before the request submitted ahead of it";
  EXPECT_FALSE(b_started_before_t.load()) << "a request submitted after the task started before it";
  EXPECT_EQ(a.tokens().size(), 8u);
  EXPECT_EQ(b.tokens().size(), 8u);
}

TEST(Scheduler, CancelFreesTheSlotAtTheNextStep) {
  auto s = make_sched(stories(), small_params(4096, 1));
  Collected c;
  std::atomic<int> n_tokens{0};
  auto cb = c.callback();
  auto id = s->submit(greedy(tokenize("Once upon a time"), -1), [&](const Event& e) {
    if (e.kind == Event::Kind::kToken) ++n_tokens;
    cb(e);
  });
  ASSERT_TRUE(id.has_value());
  while (n_tokens < 5) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  s->cancel(*id);
  ASSERT_TRUE(c.wait());
  EXPECT_EQ(c.find(Event::Kind::kFinish)->reason, FinishReason::kCancelled);
  EXPECT_LT(c.tokens().size(), 4000u);
  // The only slot is free again: the next request runs.
  EXPECT_EQ(run(*s, greedy(tokenize("The cat"), 4))->tokens().size(), 4u);
  EXPECT_EQ(s->stats().slots_busy, 0);
  EXPECT_EQ(s->stats().metrics.requests_cancelled, 1u);
  s->cancel(987654);  // unknown: ignored
}

TEST(Scheduler, StopStringsAreNeverEmitted) {
  auto s = make_sched(stories(), small_params());
  auto g = golden();
  const std::string full = g["runs"][0]["greedy_text"];  // ", there was a little girl named Lily. ..."
  GenerateRequest r = greedy(g["runs"][0]["prompt_ids"].get<std::vector<int32_t>>(), 64);
  r.stop = {"Lily", "zzz"};
  auto c = run(*s, r);
  EXPECT_EQ(c->text(), full.substr(0, full.find("Lily")));
  const Event* f = c->find(Event::Kind::kFinish);
  EXPECT_EQ(f->reason, FinishReason::kStop);
  EXPECT_EQ(f->stop_word, "Lily");
}

TEST(Scheduler, ChoicesForkFromOnePrompt) {
  auto s = make_sched(stories(), small_params(1024, 4));
  GenerateRequest r = greedy(tokenize("Once upon a time"), 20);
  r.n = 3;
  auto c = run(*s, r);
  EXPECT_EQ(c->tokens(0), c->tokens(1));
  EXPECT_EQ(c->tokens(0), c->tokens(2));
  EXPECT_EQ(c->find(Event::Kind::kDone)->usage.completion_tokens, 60);
  GenerateRequest sampled = r;
  sampled.sampling.temp = 1.5f;
  sampled.sampling.top_k = 0;
  sampled.sampling.top_p = 1.0f;
  sampled.sampling.min_p = 0.0f;
  sampled.sampling.seed = 42;
  auto d = run(*s, sampled);
  EXPECT_NE(d->tokens(0), d->tokens(1));
  // Same seed, same tokens.
  auto e = run(*s, sampled);
  EXPECT_EQ(d->tokens(1), e->tokens(1));
}

TEST(Scheduler, LogprobsAreTheModelsDistribution) {
  auto s = make_sched(stories(), small_params());
  GenerateRequest r = greedy(tokenize("Once upon a time"), 6);
  r.logprobs = true;
  r.top_logprobs = 5;
  auto c = run(*s, r);
  for (const Event& e : c->events) {
    if (e.kind != Event::Kind::kToken) continue;
    ASSERT_TRUE(e.has_logprob);
    ASSERT_EQ(e.top.size(), 5u);
    EXPECT_EQ(e.top[0].token, e.token);  // greedy picks the most likely
    EXPECT_FLOAT_EQ(e.top[0].logprob, e.logprob.logprob);
    EXPECT_LE(e.logprob.logprob, 0.0f);
    double mass = 0;
    for (const auto& t : e.top) mass += std::exp(double(t.logprob));
    EXPECT_LE(mass, 1.0 + 1e-5);
    for (size_t i = 1; i < e.top.size(); ++i) EXPECT_LE(e.top[i].logprob, e.top[i - 1].logprob);
  }
}

TEST(Scheduler, GrammarConstrainsEveryChoice) {
  auto s = make_sched(stories(), small_params());
  GenerateRequest r = greedy(tokenize("Once upon a time"), 30);
  r.sampling.grammar = R"(root ::= "yes" | "no")";
  r.n = 2;
  auto c = run(*s, r);
  for (int i = 0; i < 2; ++i) {
    const std::string t = c->text(i);
    EXPECT_TRUE(t == "yes" || t == "no") << t;
  }
}

TEST(Scheduler, ContextShiftKeepsGenerating) {
  SchedulerParams p = small_params(64, 1);
  p.context_shift = true;
  auto s = make_sched(stories(), p);
  GenerateRequest r = greedy(tokenize("Once upon a time"), 150);
  r.n_keep = 2;
  auto c = run(*s, r);
  EXPECT_EQ(c->tokens().size(), 150u);
  // The first tokens are the golden story's.
  auto want = golden()["runs"][0]["greedy_ids"].get<std::vector<int32_t>>();
  auto got = c->tokens();
  EXPECT_TRUE(std::equal(want.begin(), want.begin() + 40, got.begin()));
  EXPECT_LE(s->stats().kv_used, 64);
}

// Issue 24's livelock, scaled down: a prompt of more than half the context, more tokens than fit
// beside it, context shift on, n_keep 0. The prompt's cells were pinned by the prefix cache's lock
// after the shift had dropped them from the sequence, the re-decode found no cells and waited for
// ever while the loop spun. It must finish, with every requested token (the shift makes room).
TEST(Scheduler, ContextShiftWithALongPromptFinishes) {
  for (int n_keep : {0, 4, -1}) {
    SchedulerParams p = small_params(256, 1);
    p.context_shift = true;
    auto s = make_sched(stories(), p);
    GenerateRequest r = greedy(long_prompt(190), 400);
    r.n_keep = n_keep;
    r.ignore_eos = true;
    auto c = run(*s, r);
    ASSERT_TRUE(c->done) << "n_keep " << n_keep;
    EXPECT_EQ(c->find(Event::Kind::kFinish)->reason, FinishReason::kLength) << "n_keep " << n_keep;
    EXPECT_EQ(c->tokens().size(), 400u) << "n_keep " << n_keep;
    EXPECT_EQ(s->stats().metrics.stalls, 0u);
    EXPECT_LE(s->stats().kv_used, 256);
  }
}

// The same with several slots and requests at once, some with and some without max_tokens: every
// request ends (done, never error), each with the tokens it streamed.
TEST(Scheduler, ContextShiftUnderPressureNeverStallsOrFails) {
  SchedulerParams p = small_params(256, 3);
  p.context_shift = true;
  auto s = make_sched(stories(), p);
  std::vector<std::unique_ptr<Collected>> cs;
  for (int i = 0; i < 6; ++i) {
    GenerateRequest r = greedy(long_prompt(40 + 30 * i), i % 2 ? 300 : -1);
    r.ignore_eos = true;
    r.n_keep = i % 3 == 0 ? -1 : 0;
    cs.push_back(std::make_unique<Collected>());
    ASSERT_TRUE(s->submit(r, cs.back()->callback()).has_value());
  }
  for (size_t i = 0; i < cs.size(); ++i) {
    ASSERT_TRUE(cs[i]->wait(std::chrono::seconds(120))) << "request " << i << " never finished";
    const auto* f = cs[i]->find(Event::Kind::kFinish);
    EXPECT_NE(f->reason, FinishReason::kCancelled);
    EXPECT_EQ(f->tokens, cs[i]->tokens()) << "request " << i;
    EXPECT_GT(cs[i]->tokens().size(), 0u) << "request " << i;
  }
}

// Issue 24's lost answer: a long turn, then the same prompt again with more tokens than fit
// ("regenerate"). The previous turn's cells in the prefix cache must be evicted for it; it ends
// with "length" (no context shift) or the requested count (shift), never with an error.
TEST(Scheduler, RegenerateAfterALongTurnNeverLosesTheAnswer) {
  for (bool shift : {false, true}) {
    SchedulerParams p = small_params(256, 1);
    p.context_shift = shift;
    auto s = make_sched(stories(), p);
    const std::vector<int32_t> prompt = long_prompt(30);
    GenerateRequest first = greedy(prompt, 200);
    first.ignore_eos = true;
    auto a = run(*s, first);
    ASSERT_EQ(a->find(Event::Kind::kFinish)->reason, FinishReason::kLength);
    GenerateRequest again = greedy(prompt, 400);
    again.ignore_eos = true;
    auto b = run(*s, again);
    ASSERT_TRUE(b->done);
    const auto* f = b->find(Event::Kind::kFinish);
    EXPECT_EQ(f->reason, FinishReason::kLength) << "shift " << shift;
    if (shift) {
      EXPECT_EQ(b->tokens().size(), 400u);
    } else {
      EXPECT_EQ(int(b->tokens().size()), 256 - 30);
    }
    // The first 150 tokens equal the first turn's (same prompt, greedy).
    auto ta = a->tokens(), tb = b->tokens();
    EXPECT_TRUE(std::equal(ta.begin(), ta.begin() + 150, tb.begin())) << "shift " << shift;
  }
}

// Random traffic on a small context: prompts up to most of it, with and without max_tokens, several
// choices, n_keep, lookup drafts, cancels, context shift on and off. Every request ends with its
// final events (never an error: each prompt fits), every choice's finish event carries exactly the
// tokens it streamed, no step ever finds the cache without room (stalls 0), and the prefix cache
// stays consistent with the KV cells.
TEST(Scheduler, RandomTrafficNeverStallsLosesOrErrs) {
  for (bool shift : {true, false}) {
    SchedulerParams p = small_params(192, 3);
    p.context_shift = shift;
    auto s = make_sched(stories(), p);
    std::mt19937 rng(shift ? 24 : 25);
    std::vector<std::unique_ptr<Collected>> cs;
    std::vector<serve::RequestId> ids;
    for (int i = 0; i < 40; ++i) {
      const int len = 2 + int(rng() % 150);
      GenerateRequest r = greedy(long_prompt(len), int(rng() % 5) == 0 ? -1 : int(rng() % 300));
      r.ignore_eos = rng() % 2;
      r.n = 1 + int(rng() % 3 == 0) * int(1 + rng() % 2);
      if (len + r.n > 192) r.n = 1;
      r.n_keep = int(rng() % 4) - 1;
      if (rng() % 4 == 0) r.lookup = 3;
      if (rng() % 3 == 0) r.sampling.temp = 0.8f, r.sampling.seed = rng();
      cs.push_back(std::make_unique<Collected>());
      auto id = s->submit(r, cs.back()->callback());
      ASSERT_TRUE(id.has_value()) << id.status().message();
      ids.push_back(*id);
      if (rng() % 6 == 0) s->cancel(ids[rng() % ids.size()]);
      if (rng() % 5 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 20));
    }
    for (size_t i = 0; i < cs.size(); ++i) {
      ASSERT_TRUE(cs[i]->wait(std::chrono::seconds(120))) << "request " << i << " never finished";
      std::lock_guard<std::mutex> l(cs[i]->mu);
      int finishes = 0;
      for (const auto& e : cs[i]->events) {
        ASSERT_NE(e.kind, Event::Kind::kError) << "request " << i << ": " << e.error.message();
        if (e.kind == Event::Kind::kFinish) {
          ++finishes;
          std::vector<int32_t> streamed;
          for (const auto& t : cs[i]->events) {
            if (t.kind == Event::Kind::kToken && t.choice == e.choice) streamed.push_back(t.token);
          }
          EXPECT_EQ(e.tokens, streamed) << "request " << i << " choice " << e.choice;
        }
      }
      EXPECT_GE(finishes, 1) << "request " << i;
      EXPECT_EQ(cs[i]->events.back().kind, Event::Kind::kDone) << "request " << i;
    }
    const auto st = s->stats();
    EXPECT_EQ(st.metrics.stalls, 0u) << "shift " << shift;
    EXPECT_EQ(st.metrics.requests_error, 0u);
    EXPECT_EQ(st.slots_busy, 0);
    Status inv = s->run_exclusive([](Context&, serve::PrefixCache* c) { return c ? c->check_invariants() : Status::ok(); });
    EXPECT_TRUE(inv.is_ok()) << inv.message();
  }
}

TEST(Scheduler, CacheDirSurvivesARestart) {
  const std::string dir = std::string(LOOM_BINARY_DIR) + "/sched_cache_dir_test";
  std::filesystem::remove_all(dir);
  const std::string text =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park "
      "with her friends every day.";
  std::vector<int32_t> want;
  {
    SchedulerParams p = small_params();
    p.cache_dir = dir;
    p.cache_dir_min_tokens = 8;
    auto s = make_sched(stories(), p);
    want = run(*s, greedy(tokenize(text), 12))->tokens();
    s->shutdown(std::chrono::seconds(1));  // idle prefixes are written
  }
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.path().extension() == ".loomkv";
  ASSERT_GE(files, 1);
  // A corrupt file and a file of another model are skipped with a warning.
  { std::ofstream(dir + "/0000000000000bad.loomkv") << "garbage"; }
  {
    SchedulerParams p = small_params();
    p.cache_dir = dir;
    p.cache_dir_min_tokens = 8;
    auto s = make_sched(stories(), p);
    auto c = run(*s, greedy(tokenize(text), 12));
    EXPECT_EQ(c->tokens(), want);
    EXPECT_GT(c->find(Event::Kind::kDone)->usage.cached_tokens, 20);
    EXPECT_EQ(s->stats().metrics.disk_loads, 1u);
  }
  {
    auto other = load_shared_model("models/llama-2-tiny-random.gguf");
    SchedulerParams p = small_params();
    p.cache_dir = dir;
    auto s = Scheduler::create(other, p);
    ASSERT_TRUE(s.has_value()) << s.status().message();
    auto c = run(**s, greedy(other->vocab().tokenize(text, true, false), 4));
    EXPECT_EQ(c->find(Event::Kind::kDone)->usage.cached_tokens, 0);
  }
  std::filesystem::remove_all(dir);
}

TEST(Scheduler, ShutdownFinishesStreamsWithAFinalEvent) {
  auto s = make_sched(stories(), small_params(4096, 2));
  Collected a, b;
  ASSERT_TRUE(s->submit(greedy(tokenize("Once upon a time"), -1), a.callback()).has_value());
  ASSERT_TRUE(s->submit(greedy(tokenize("The cat"), -1), b.callback()).has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  s->shutdown(std::chrono::milliseconds(100));
  EXPECT_TRUE(a.done && b.done);
  EXPECT_TRUE(a.find(Event::Kind::kDone));
  EXPECT_EQ(s->submit(greedy(tokenize("x"), 2), [](const Event&) {}).status().code(), StatusCode::kUnavailable);
}

TEST(Scheduler, ManyThreadsSubmitAndCancel) {
  // Races between submitters, cancellers and the loop (also run under ThreadSanitizer).
  auto s = make_sched(stories(), small_params(1024, 4));
  std::vector<std::thread> ts;
  std::atomic<int> finished{0};
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&, t] {
      for (int i = 0; i < 6; ++i) {
        Collected c;
        auto id = s->submit(greedy(tokenize(i % 2 ? "The cat" : "Once upon a time"), 10 + t), c.callback());
        if (!id) continue;
        if (i % 3 == 0) s->cancel(*id);
        if (c.wait()) ++finished;
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(finished.load(), 24);
  EXPECT_EQ(s->stats().slots_busy, 0);
}

TEST(Scheduler, EmbeddingsMatchTheGolden) {
  auto m = load_shared_model("models/synth-bert-tiny-f32.gguf");
  auto g = load_json(shared_path("golden/synth-bert-tiny-f32.json"));
  SchedulerParams p;
  p.context.embeddings = true;
  p.context.n_ctx = 512;
  auto s = Scheduler::create(m, p);
  ASSERT_TRUE(s.has_value()) << s.status().message();
  serve::EmbedRequest r;
  for (const auto& run_j : g["runs"]) r.inputs.push_back(run_j["prompt_ids"].get<std::vector<int32_t>>());
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Expected<serve::EmbedResult>> got;
  ASSERT_TRUE((*s)->submit_embed(r,
                                 [&](Expected<serve::EmbedResult> res) {
                                   std::lock_guard<std::mutex> l(mu);
                                   got.emplace(std::move(res));
                                   cv.notify_all();
                                 })
                  .has_value());
  std::unique_lock<std::mutex> l(mu);
  ASSERT_TRUE(cv.wait_for(l, std::chrono::seconds(30), [&] { return got.has_value(); }));
  ASSERT_TRUE(got->has_value()) << got->status().message();
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    auto want = read_f32_file(shared_path("golden/" + g["runs"][i]["embedding_file"].get<std::string>()));
    EXPECT_GE(cosine((**got).embeddings[i], want), 0.9999) << i;
  }
  EXPECT_EQ((*s)->submit(greedy({1}, 1), [](const Event&) {}).status().code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace loom::test

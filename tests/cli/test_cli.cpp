// End-to-end tests of the `loom` binary: outputs against llama.cpp's goldens, JSON shapes, and
// clean failures (one line on stderr, exit 1 or 2) on bad input.
#include <cmath>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <set>
#include <string>

#include "test_util.h"

namespace loom::test {
namespace {

std::string model(const char* name) { return quote(shared_path(std::string("models/") + name)); }

TEST(Cli, GenerateGreedyPrintsTheGoldenStory) {
  auto g = nlohmann::json::parse(read_text_file(shared_path("golden/stories260K.json")));
  const std::string want = g["runs"][0]["greedy_text"];
  auto r = run_loom("generate -m " + model("stories260K.gguf") + " -p 'Once upon a time' -n 64 --temp 0");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.substr(0, want.size()), want);
}

TEST(Cli, GenerateJsonHasIdsTextAndTimings) {
  auto g = nlohmann::json::parse(read_text_file(shared_path("golden/stories260K.json")));
  auto r = run_loom("generate -m " + model("stories260K.gguf") + " -p 'Once upon a time' -n 16 --temp 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_ids"], g["runs"][0]["prompt_ids"]);
  auto want_ids = g["runs"][0]["greedy_ids"].get<std::vector<int>>();
  want_ids.resize(16);
  EXPECT_EQ(j["ids"].get<std::vector<int>>(), want_ids);
  EXPECT_TRUE(j["text"].is_string());
  EXPECT_TRUE(j["timings"]["prompt_tps"].is_number());
  EXPECT_TRUE(j["timings"]["gen_tps"].is_number());
  EXPECT_GT(j["timings"]["gen_wall_tps"].get<double>(), 0.0);
}

// Speculative decoding never changes the output: the golden greedy ids with a draft model (the
// same model: every draft token accepted) and with prompt lookup; seeded sampling as without.
TEST(Cli, SpeculativeDecodingKeepsTheGoldenIds) {
  auto g = nlohmann::json::parse(read_text_file(shared_path("golden/stories260K.json")));
  auto want = g["runs"][0]["greedy_ids"].get<std::vector<int>>();
  want.resize(48);
  const std::string base = "generate -m " + model("stories260K.gguf") + " -p 'Once upon a time' -n 48 --json ";
  for (const std::string& extra : {"--draft-model " + model("stories260K.gguf") + " --draft-p-min 0 --draft-max 5",
                                   std::string("--lookup 3"), std::string("--lookup 1 --draft-min 2")}) {
    auto r = run_loom(base + "--temp 0 " + extra);
    ASSERT_EQ(r.exit_code, 0) << extra << ": " << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["ids"].get<std::vector<int>>(), want) << extra;
    ASSERT_TRUE(j.contains("speculative")) << extra;
    EXPECT_GT(j["speculative"]["rounds"].get<int>(), 0) << extra;
    if (extra.find("draft-model") != std::string::npos) {
      EXPECT_EQ(j["speculative"]["acceptance"].get<double>(), 1.0);
    }
  }
  const std::string sampled = base + "--temp 0.9 --seed 3 --repeat-penalty 1.2 ";
  auto a = run_loom(sampled), b = run_loom(sampled + "--lookup 2");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(nlohmann::json::parse(a.out)["ids"], nlohmann::json::parse(b.out)["ids"]);
}

TEST(Cli, SpeculativeDecodingRefusesAnotherVocabularyAndParallel) {
  auto r = run_loom("generate -m " + model("synth-llama-tiny-f32.gguf") + " --draft-model " + model("stories260K.gguf") +
                    " -p 'Once' -n 4 --temp 0");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("vocabularies must be the same"), std::string::npos) << r.err;
  r = run_loom("generate -m " + model("stories260K.gguf") + " --lookup 2 --parallel 2 -p 'Once' -n 4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--parallel cannot be combined"), std::string::npos) << r.err;
}

TEST(Cli, SeededSamplingIsReproducible) {
  const std::string args = "generate -m " + model("stories260K.gguf") + " -p 'Once upon a time' -n 24 --temp 0.9 --seed 42";
  auto a = run_loom(args), b = run_loom(args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_FALSE(a.out.empty());
}

TEST(Cli, TokenizeJsonMatchesGolden) {
  auto g = nlohmann::json::parse(read_text_file(shared_path("golden/llama-2-tiny-random.json")));
  for (const auto& c : g["tokenize"]) {
    const std::string text = c["text"];
    if (text.find('\n') != std::string::npos || text.empty()) continue;  // keep the shell quoting simple
    auto r = run_loom("tokenize -m " + model("llama-2-tiny-random.gguf") + " -p " + quote(text) + " --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["ids"], c["ids_add_special"]) << text;
    EXPECT_EQ(j["pieces"].size(), j["ids"].size());
    auto plain = run_loom("tokenize -m " + model("llama-2-tiny-random.gguf") + " -p " + quote(text) + " --no-bos --json");
    EXPECT_EQ(nlohmann::json::parse(plain.out)["ids"], c["ids_plain"]) << text;
  }
}

TEST(Cli, LogitsJsonMatchesGolden) {
  auto r = run_loom("logits -m " + model("stories260K.gguf") + " -p 'Once upon a time' --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["n_vocab"], 512);
  auto got = j["logits"].get<std::vector<float>>();
  auto want = read_f32_file(shared_path("golden/stories260K.0.logits.f32"));
  EXPECT_LE(max_abs_diff(got, want), 5e-3f * max_abs(want));
}

TEST(Cli, SlidingWindowFlagOfLogitsAndGenerate) {
  // stories260K (llama) attends fully by default; a window shorter than the prompt changes the
  // logits, one covering it does not.
  const std::string base = "logits -m " + model("stories260K.gguf") +
                           " -p 'Once upon a time there was a little girl named Lily who loved to play' --json";
  auto logits_of = [](const RunResult& r) { return nlohmann::json::parse(r.out)["logits"].get<std::vector<float>>(); };
  auto full = run_loom(base), wide = run_loom(base + " --sliding-window 1000"), off = run_loom(base + " --sliding-window 0"),
       narrow = run_loom(base + " --sliding-window 4");
  for (const RunResult* r : {&full, &wide, &off, &narrow}) ASSERT_EQ(r->exit_code, 0) << r->err;
  EXPECT_EQ(logits_of(wide), logits_of(full));
  EXPECT_EQ(logits_of(off), logits_of(full));
  EXPECT_GT(max_abs_diff(logits_of(narrow), logits_of(full)), 1e-3f);
  auto gen = run_loom("generate -m " + model("stories260K.gguf") +
                      " -p 'Once upon a time' -n 8 --temp 0 --sliding-window 3 --json");
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  EXPECT_TRUE(nlohmann::json::parse(gen.out).contains("ids"));
  EXPECT_EQ(run_loom(base + " --sliding-window -2").exit_code, 2);
  EXPECT_EQ(run_loom(base + " --sliding-window x").exit_code, 2);
}

TEST(Cli, InfoJsonListsMetadataAndTensors) {
  auto r = run_loom("info -m " + model("stories260K.gguf") + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["metadata"]["llama.block_count"], 5);
  bool found = false;
  for (const auto& t : j["tensors"]) {
    if (t["name"] == "token_embd.weight") {
      found = true;
      EXPECT_EQ(t["type"], "f32");
      EXPECT_EQ(t["shape"], nlohmann::json::array({64, 512}));
      EXPECT_EQ(t["bytes"], 64 * 512 * 4);
    }
  }
  EXPECT_TRUE(found);
  auto text = run_loom("info -m " + model("stories260K.gguf"));
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_NE(text.out.find("blk.0.attn_q.weight"), std::string::npos);
}

TEST(Cli, EmbedJsonHasPooledOrPerTokenEmbeddings) {
  auto r = run_loom("embed -m " + model("stories260K.gguf") + " -p 'Once upon a time' --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["n_embd"], 64);
  EXPECT_EQ(j["embedding"].size(), 64u);
  auto rows = run_loom("embed -m " + model("stories260K.gguf") + " -p 'Once upon a time' --pooling none --json");
  ASSERT_EQ(rows.exit_code, 0) << rows.err;
  EXPECT_EQ(nlohmann::json::parse(rows.out)["embeddings"].size(), 5u);  // BOS + 4 tokens
  auto norm = run_loom("embed -m " + model("stories260K.gguf") + " -p 'Once upon a time' --normalize --json");
  double s = 0;
  const auto nj = nlohmann::json::parse(norm.out);
  for (double x : nj["embedding"]) s += x * x;
  EXPECT_NEAR(s, 1.0, 1e-4);
  EXPECT_EQ(run_loom("embed -m " + model("stories260K.gguf") + " -p hi --pooling bogus").exit_code, 2);
}

TEST(Cli, EmbedRankPrintsTheRerankScores) {
  // QUERY<tab>DOCUMENT is scored as /v1/rerank scores it (tests/data's reranker and its golden).
  const std::string m = quote(data_dir() + "/synth-bert-rank-tiny-f32.gguf");
  auto g = nlohmann::json::parse(read_text_file(data_dir() + "/synth-bert-rank-tiny-f32.json"));
  const std::string prompt = quote(g["query"].get<std::string>() + "\t" + g["runs"][4]["document"].get<std::string>());
  auto r = run_loom("embed -m " + m + " -p " + prompt + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["n_cls_out"], 1);
  EXPECT_EQ(j["labels"], nlohmann::json::array({"LABEL_0"}));
  ASSERT_EQ(j["scores"].size(), 1u);
  const double want = g["runs"][4]["score_raw"][0];
  EXPECT_NEAR(j["scores"][0].get<double>(), want, 5e-4);  // F16 K/V (the default) vs llama.cpp's F32 attention
  auto text = run_loom("embed -m " + m + " -p " + prompt + " --pooling rank");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NEAR(std::stod(text.out), want, 5e-4);
  auto headless = run_loom("embed -m " + model("stories260K.gguf") + " -p hi --pooling rank");
  EXPECT_EQ(headless.exit_code, 1);
  EXPECT_NE(headless.err.find("classification head"), std::string::npos) << headless.err;
}

TEST(Cli, ParallelSharesThePromptAndSamplesEachSequence) {
  auto g = nlohmann::json::parse(read_text_file(shared_path("golden/stories260K.json")));
  auto want = g["runs"][0]["greedy_ids"].get<std::vector<int>>();
  want.resize(12);
  auto r =
      run_loom("generate -m " + model("stories260K.gguf") + " -p 'Once upon a time' -n 12 --temp 0 --parallel 3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["sequences"].size(), 3u);
  for (const auto& s : j["sequences"]) EXPECT_EQ(s["ids"].get<std::vector<int>>(), want);  // greedy: all equal the golden
  EXPECT_GT(j["timings"]["aggregate_tps"].get<double>(), 0.0);
  auto sampled = run_loom("generate -m " + model("stories260K.gguf") +
                          " -p 'Once upon a time' -n 24 --temp 1 --seed 3 --parallel 4 --json");
  ASSERT_EQ(sampled.exit_code, 0) << sampled.err;
  auto sj = nlohmann::json::parse(sampled.out);
  std::set<std::vector<int>> distinct;
  for (const auto& s : sj["sequences"]) distinct.insert(s["ids"].get<std::vector<int>>());
  EXPECT_GT(distinct.size(), 1u);  // independent samplers diverge
  auto text = run_loom("generate -m " + model("stories260K.gguf") + " -p 'Once upon a time' -n 8 --temp 0 --parallel 2");
  EXPECT_NE(text.out.find("[sequence 1]"), std::string::npos);
  EXPECT_NE(text.err.find("aggregate"), std::string::npos);
}

TEST(Cli, ContextShiftKeepsGeneratingPastTheContext) {
  auto r = run_loom("generate -m " + model("stories260K.gguf") +
                    " -p 'Once upon a time' -n 100 -c 32 --temp 0 --context-shift --keep 4 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ids"].size(), 100u);
  // The first tokens are unaffected by the shift: they equal the golden story's start.
  auto g = nlohmann::json::parse(read_text_file(shared_path("golden/stories260K.json")));
  auto want = g["runs"][0]["greedy_ids"].get<std::vector<int>>();
  auto got = j["ids"].get<std::vector<int>>();
  EXPECT_TRUE(std::equal(want.begin(), want.begin() + 20, got.begin()));
}

TEST(Cli, SaveAndLoadStateResumeAGeneration) {
  const std::string state = std::string(LOOM_BINARY_DIR) + "/cli_test_state.bin";
  const std::string base = "generate -m " + model("stories260K.gguf") + " -p 'Once upon a time' --temp 0 --json ";
  auto whole = nlohmann::json::parse(run_loom(base + "-n 16").out)["ids"].get<std::vector<int>>();
  auto first = run_loom(base + "-n 8 --save-state " + quote(state));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  auto second = run_loom(base + "-n 8 --load-state " + quote(state));
  ASSERT_EQ(second.exit_code, 0) << second.err;
  auto a = nlohmann::json::parse(first.out)["ids"].get<std::vector<int>>();
  auto sj = nlohmann::json::parse(second.out);
  auto b = sj["ids"].get<std::vector<int>>();
  EXPECT_EQ(sj["reused_tokens"], 13);  // 5 prompt tokens + 8 generated: nothing re-processed
  a.insert(a.end(), b.begin(), b.end());
  EXPECT_EQ(a, whole);
  // Without -p the saved tokens are resumed as they are.
  auto resumed = run_loom("generate -m " + model("stories260K.gguf") + " -n 8 --temp 0 --json --load-state " + quote(state));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(nlohmann::json::parse(resumed.out)["ids"].get<std::vector<int>>(), b);
  // Neither -p nor --load-state: a usage error.
  EXPECT_EQ(run_loom("generate -m " + model("stories260K.gguf") + " -n 2").exit_code, 2);
  // A different prompt reuses the common prefix only.
  auto other = run_loom("generate -m " + model("stories260K.gguf") +
                        " -p 'Once upon a dog' -n 4 --temp 0 --json --load-state " + quote(state));
  ASSERT_EQ(other.exit_code, 0) << other.err;
  EXPECT_EQ(nlohmann::json::parse(other.out)["reused_tokens"], 4);  // BOS Once upon a
  // A state of another model is refused.
  auto wrong = run_loom("generate -m " + model("llama-2-tiny-random.gguf") + " -p hi -n 2 --load-state " + quote(state));
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_NE(wrong.err.find("different model"), std::string::npos) << wrong.err;
  std::remove(state.c_str());
  EXPECT_EQ(run_loom(base + "--load-state /nonexistent/state.bin").exit_code, 1);
}

TEST(Cli, BenchJsonReportsSpeedAndBandwidth) {
  auto r = run_loom("bench -m " + model("stories260K.gguf") + " -p 8 -n 4 -r 1 --bw-mib 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"model", "threads", "pp_tokens", "tg_tokens", "pp_tps", "tg_tps", "tg_gbps", "mem_bw_gbps",
                          "bw_fraction", "depth", "reps"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["pp_tokens"], 8);
  EXPECT_EQ(j["tg_tokens"], 4);
  EXPECT_GT(j["pp_tps"].get<double>(), 0.0);
  EXPECT_GT(j["tg_gbps"].get<double>(), 0.0);
  EXPECT_EQ(run_loom("bench -m " + model("stories260K.gguf") + " -r 0").exit_code, 2);
  // At a depth both tests run after that many tokens (llama-bench's -d): the labels say so.
  auto d = run_loom("bench -m " + model("stories260K.gguf") + " -p 8 -n 4 -d 40 -r 1 --bw-mib 0");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.out.find("pp8@d40"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("tg4@d40"), std::string::npos) << d.out;
  // The context is sized for depth + prompt, past the model's trained 512 positions too.
  auto deep = run_loom("bench -m " + model("stories260K.gguf") + " -p 8 -n 2 -d 600 -r 1 --bw-mib 0 --json");
  ASSERT_EQ(deep.exit_code, 0) << deep.err;
  auto dj = nlohmann::json::parse(deep.out);
  EXPECT_EQ(dj["depth"], 600);
  EXPECT_GT(dj["pp_tps"].get<double>(), 0.0);
}

TEST(Cli, BenchParallelReportsAggregateAndPerStream) {
  auto r = run_loom("bench -m " + model("stories260K.gguf") + " -p 16 -n 6 -r 2 --bw-mib 0 --parallel 4 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["parallel"], 4);
  const double agg = j["aggregate_tps"].get<double>(), per = j["per_stream_tps"].get<double>();
  EXPECT_GT(agg, 0.0);
  EXPECT_NEAR(per * 4, agg, 0.05 * agg);
  EXPECT_EQ(j["tg_runs"].size(), 2u);
  EXPECT_GT(j["pp_aggregate_tps"].get<double>(), 0.0);
  // Without --parallel there are no parallel fields; out-of-range values are flag errors.
  auto one = run_loom("bench -m " + model("stories260K.gguf") + " -p 8 -n 4 -r 1 --bw-mib 0 --json");
  EXPECT_FALSE(nlohmann::json::parse(one.out).contains("parallel"));
  EXPECT_EQ(run_loom("bench -m " + model("stories260K.gguf") + " --parallel 0").exit_code, 2);
  // tg only (-p 0) works in parallel too.
  auto tg = run_loom("bench -m " + model("stories260K.gguf") + " -p 0 -n 4 -r 1 --bw-mib 0 --parallel 3 --json");
  ASSERT_EQ(tg.exit_code, 0) << tg.err;
  EXPECT_GT(nlohmann::json::parse(tg.out)["aggregate_tps"].get<double>(), 0.0);
}

// T5 (encoder-decoder): generate encodes the prompt and decodes from the start token, matching
// llama.cpp's greedy ids; logits is the first decoder step; tokenize appends EOS; bench measures
// encode + decoder; the T5 encoder embeds. (The CLI runs an F16 cache; the goldens F32.)
TEST(Cli, T5GenerateLogitsTokenizeBenchAndEncoderEmbed) {
  const std::string m = quote(data_dir() + "/synth-flan-t5-tiny-f32.gguf");
  auto g = nlohmann::json::parse(read_text_file(data_dir() + "/synth-flan-t5-tiny-f32.json"));
  const auto& run = g["runs"][0];
  const std::string prompt = quote(run["prompt"].get<std::string>());
  auto r = run_loom("generate -m " + m + " -p " + prompt + " -n 6 --temp 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_ids"], run["prompt_ids"]);
  auto want = run["greedy_ids"].get<std::vector<int>>();
  want.resize(6);
  EXPECT_EQ(j["ids"].get<std::vector<int>>(), want);
  EXPECT_EQ(j["decoder_start"], g["decoder_start"]);
  auto plain = run_loom("generate -m " + m + " -p " + prompt + " -n 6 --temp 0");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(plain.out, j["text"].get<std::string>() + "\n");

  auto l = run_loom("logits -m " + m + " -p " + prompt + " --json");
  ASSERT_EQ(l.exit_code, 0) << l.err;
  auto got = nlohmann::json::parse(l.out)["logits"].get<std::vector<float>>();
  auto ref = read_f32_file(data_dir() + "/" + run["last_logits_file"].get<std::string>());
  EXPECT_LE(max_abs_diff(got, ref), 2e-3f * max_abs(ref));

  auto t = run_loom("tokenize -m " + m + " -p " + prompt + " --json");
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_EQ(nlohmann::json::parse(t.out)["ids"], run["prompt_ids"]);

  auto b = run_loom("bench -m " + m + " -p 16 -n 4 -r 1 --bw-mib 0 --json");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  auto bj = nlohmann::json::parse(b.out);
  EXPECT_TRUE(bj["encoder_decoder"].get<bool>());
  EXPECT_GT(bj["pp_tps"].get<double>(), 0.0);
  EXPECT_GT(bj["pp_decoder_tps"].get<double>(), 0.0);
  EXPECT_GT(bj["tg_tps"].get<double>(), 0.0);
  EXPECT_NE(run_loom("generate -m " + m + " -p " + prompt + " -n 2 --parallel 2").exit_code, 0);

  const std::string e = quote(data_dir() + "/synth-t5encoder-tiny-f32.gguf");
  auto eg = nlohmann::json::parse(read_text_file(data_dir() + "/synth-t5encoder-tiny-f32.json"));
  auto em = run_loom("embed -m " + e + " -p " + quote(eg["runs"][0]["prompt"].get<std::string>()) + " --json");
  ASSERT_EQ(em.exit_code, 0) << em.err;
  auto emb = nlohmann::json::parse(em.out)["embedding"].get<std::vector<float>>();
  auto eref = read_f32_file(data_dir() + "/" + eg["runs"][0]["embedding_file"].get<std::string>());
  ASSERT_EQ(emb.size(), eref.size());
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < emb.size(); ++i)
    dot += double(emb[i]) * eref[i], na += double(emb[i]) * emb[i], nb += double(eref[i]) * eref[i];
  EXPECT_GE(dot / std::sqrt(na * nb), 0.9999);
}

// Recurrent models (mamba): generate matches llama.cpp's greedy ids, logits its last-prompt
// logits, bench runs at depth, state files resume, and what a state cannot do is refused.
TEST(Cli, MambaGenerateLogitsBenchAndState) {
  const std::string m = quote(data_dir() + "/synth-mamba-tiny-f32.gguf");
  auto g = nlohmann::json::parse(read_text_file(data_dir() + "/synth-mamba-tiny-f32.json"));
  const auto& run = g["runs"][0];
  auto r = run_loom("generate -m " + m + " -p " + quote(run["prompt"].get<std::string>()) + " -n 8 --temp 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["prompt_ids"], run["prompt_ids"]);
  auto want = run["greedy_ids"].get<std::vector<int>>();
  want.resize(8);
  EXPECT_EQ(j["ids"].get<std::vector<int>>(), want);

  auto l = run_loom("logits -m " + m + " -p " + quote(run["prompt"].get<std::string>()) + " --json");
  ASSERT_EQ(l.exit_code, 0) << l.err;
  auto got = nlohmann::json::parse(l.out)["logits"].get<std::vector<float>>();
  auto ref = read_f32_file(data_dir() + "/" + run["last_logits_file"].get<std::string>());
  EXPECT_LE(max_abs_diff(got, ref), 1e-3f * max_abs(ref));

  auto b = run_loom("bench -m " + m + " -p 8 -n 4 -d 16 -r 1 --bw-mib 0 --json");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  auto bj = nlohmann::json::parse(b.out);
  EXPECT_GT(bj["tg_tps"].get<double>(), 0.0);
  EXPECT_GT(bj["kv_bytes_per_token"].get<double>(), 0.0);  // the state, whatever the depth

  const std::string state = std::string(LOOM_BINARY_DIR) + "/cli_test_mamba_state.bin";
  const std::string base = "generate -m " + m + " -p " + quote(run["prompt"].get<std::string>()) + " --temp 0 --json ";
  auto first = run_loom(base + "-n 4 --save-state " + quote(state));
  ASSERT_EQ(first.exit_code, 0) << first.err;
  auto second = run_loom(base + "-n 4 --load-state " + quote(state));
  ASSERT_EQ(second.exit_code, 0) << second.err;
  auto ids = nlohmann::json::parse(first.out)["ids"].get<std::vector<int>>();
  auto more = nlohmann::json::parse(second.out)["ids"].get<std::vector<int>>();
  ids.insert(ids.end(), more.begin(), more.end());
  EXPECT_EQ(ids, want);
  // Another prompt cannot reuse part of a state: it starts over, and still generates the same.
  const std::string other_prompt = " -p " + quote(run["prompt"].get<std::string>() + " and then");
  auto other = run_loom("generate -m " + m + other_prompt + " -n 4 --temp 0 --json --load-state " + quote(state));
  ASSERT_EQ(other.exit_code, 0) << other.err;
  auto fresh = run_loom("generate -m " + m + other_prompt + " -n 4 --temp 0 --json");
  auto oj = nlohmann::json::parse(other.out);
  EXPECT_EQ(oj["reused_tokens"], 0);
  EXPECT_EQ(oj["ids"], nlohmann::json::parse(fresh.out)["ids"]);
  std::remove(state.c_str());
  auto shift = run_loom(base + "-n 2 --context-shift");
  EXPECT_EQ(shift.exit_code, 1);
  EXPECT_NE(shift.err.find("recurrent"), std::string::npos) << shift.err;
  auto par = run_loom(base + "-n 4 --parallel 2");
  ASSERT_EQ(par.exit_code, 0) << par.err;
  auto pj = nlohmann::json::parse(par.out);
  EXPECT_EQ(pj["sequences"][0]["ids"].get<std::vector<int>>(), std::vector<int>(want.begin(), want.begin() + 4));
}

TEST(Cli, GenerateChatAppliesTheTemplate) {
  // stories260K has no template: the ChatML fallback, tokenized with special-token parsing.
  const std::string chatml = "<|im_start|>user\nTell me a story<|im_end|>\n<|im_start|>assistant\n";
  auto want = run_loom("tokenize -m " + model("stories260K.gguf") + " --parse-special --json -p " + quote(chatml));
  auto r = run_loom("generate -m " + model("stories260K.gguf") + " -p 'Tell me a story' --chat -n 4 --temp 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["prompt_ids"], nlohmann::json::parse(want.out)["ids"]);
}

TEST(Cli, MissingModelFailsWithOneLineAndExitCode1) {
  for (const char* cmd : {"generate", "tokenize", "logits", "info", "embed"}) {
    const std::string prompt = std::string(cmd) == "info" ? "" : " -p hi";
    auto r = run_loom(std::string(cmd) + " -m /nonexistent/model.gguf" + prompt);
    EXPECT_EQ(r.exit_code, 1) << cmd;
    EXPECT_NE(r.err.find("loom: "), std::string::npos) << cmd;
    EXPECT_NE(r.err.find("/nonexistent/model.gguf"), std::string::npos) << cmd;
  }
}

TEST(Cli, NotAGgufFileFailsCleanly) {
  auto r = run_loom("generate -m " + quote(std::string(LOOM_SOURCE_DIR) + "/README.md") + " -p hi");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not a GGUF file"), std::string::npos) << r.err;
}

TEST(Cli, BadFlagsExitWith2) {
  EXPECT_EQ(run_loom("generate -m x --no-such-flag").exit_code, 2);
  EXPECT_EQ(run_loom("generate -m " + model("stories260K.gguf") + " -p hi -n -5").exit_code, 2);
  EXPECT_EQ(run_loom("generate -m " + model("stories260K.gguf") + " -p hi --temp abc").exit_code, 2);
  EXPECT_EQ(run_loom("nosuchcommand").exit_code, 2);
  EXPECT_EQ(run_loom("").exit_code, 2);
}

TEST(Cli, PromptLongerThanContextIsRefused) {
  std::string long_prompt;
  for (int i = 0; i < 300; ++i) long_prompt += "hello world ";
  auto r = run_loom("generate -m " + model("stories260K.gguf") + " -p " + quote(long_prompt) + " -c 64 -n 4");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("context"), std::string::npos) << r.err;
}

TEST(Cli, GenerationStopsAtTheContextLimit) {
  auto r = run_loom("generate -m " + model("stories260K.gguf") + " -p 'Once upon a time' -c 16 -n 100 --temp 0 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_LE(j["ids"].size() + j["prompt_ids"].size(), 16u + 1u);
}

}  // namespace
}  // namespace loom::test

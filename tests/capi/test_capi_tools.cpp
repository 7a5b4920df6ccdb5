// The C API's additions of 0.3 (loom.h "since 0.3"), through loom.hpp where it wraps them: the
// streaming detokenizer, the sampler's row sampling and history, drafters and speculative rounds,
// GGUF listing, quantization, template rendering, JSON schema -> grammar, context options, model
// and machine facts. Each with its error paths: a bad argument is a status and a message, never a
// crash, and a refused call changes nothing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../model/model_test_util.h"
#include "loom/loom.hpp"
#include "test_util.h"

namespace {

using namespace loom::api;
using loom::test::shared_path;

Model stories() { return Model::load(shared_path("models/stories260K.gguf")).value(); }

nlohmann::json golden_run() { return loom::test::load_json(shared_path("golden/stories260K.json"))["runs"][0]; }

std::string data_path(const std::string& name) { return loom::test::data_dir() + "/" + name; }

TEST(CApiTools, DetokenizerChunksAddUpToDetokenize) {
  Model model = stories();
  const auto r = golden_run();
  const auto ids = r["greedy_ids"].get<std::vector<Token>>();
  Detokenizer d = Detokenizer::create(model).value();
  std::string streamed;
  for (Token t : ids) streamed += d.push(t).value();
  streamed += d.flush();
  // Continuation keeps the first piece's leading space, as the golden text does after a prompt.
  std::string want = r["greedy_text"].get<std::string>();
  EXPECT_EQ(streamed, want);
  // A token outside the vocabulary is refused and the stream goes on unchanged.
  auto bad = d.push(model.n_vocab());
  EXPECT_FALSE(bad);
  EXPECT_EQ(bad.status().code(), LOOM_ERR_OUT_OF_RANGE);
  std::string again;
  for (Token t : ids) again += d.push(t).value();
  again += d.flush();
  EXPECT_EQ(again, want);
  // C-level argument checks.
  const char* text = nullptr;
  size_t len = 0;
  EXPECT_EQ(loom_detokenizer_push(nullptr, 1, &text, &len), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(loom_detokenizer_new(nullptr, 0), nullptr);
  EXPECT_NE(std::string(loom_last_error()).find("NULL"), std::string::npos);
}

TEST(CApiTools, DetokenizerHoldsBackSplitCharacters) {
  Model model = stories();
  // A multi-byte character tokenized into byte tokens comes out whole, in one chunk.
  const auto ids = model.tokenize("\xe2\x82\xac", false).value();  // U+20AC
  ASSERT_FALSE(ids.empty());
  Detokenizer d = Detokenizer::create(model, 0).value();
  std::vector<std::string> chunks;
  for (Token t : ids) chunks.push_back(d.push(t).value());
  chunks.push_back(d.flush());
  std::string all;
  int non_empty = 0;
  for (const auto& c : chunks) {
    all += c;
    non_empty += !c.empty();
  }
  EXPECT_EQ(all, model.detokenize(ids).value());
  EXPECT_EQ(non_empty, 1);
}

TEST(CApiTools, SamplerRowsHistoryAndGrammar) {
  Model model = stories();
  ContextParams cp;
  cp.p.n_ctx = 128;
  cp.p.n_threads = 1;
  Context ctx = Context::create(model, cp).value();
  auto ids = model.tokenize("Once upon a time").value();
  Batch b(64);
  b.add_tokens(ids.data(), ids.size(), 0);
  b.set_logits_last();
  ASSERT_TRUE(ctx.decode(b));
  const float* logits = ctx.logits(-1);
  ASSERT_NE(logits, nullptr);
  Sampler greedy = Sampler::create(model, R"({"temperature": 0, "n_ctx": 128})").value();
  ASSERT_TRUE(greedy.accept_history(ids));
  const Token t = greedy.pick(logits, ctx.n_vocab());
  EXPECT_EQ(t, Token(std::max_element(logits, logits + ctx.n_vocab()) - logits));
  EXPECT_FALSE(greedy.has_grammar());
  EXPECT_TRUE(greedy.grammar_can_end());
  // Wrong sizes and ids are refused with a message.
  EXPECT_EQ(greedy.pick(logits, ctx.n_vocab() - 1), LOOM_TOKEN_NULL);
  EXPECT_NE(std::string(loom_last_error()).find("n_vocab"), std::string::npos);
  EXPECT_FALSE(greedy.accept_history({model.n_vocab()}));
  EXPECT_FALSE(Sampler::create(model, R"({"n_ctx": 0})"));
  EXPECT_FALSE(Sampler::create(model, R"({"n_ctx": "x"})"));
  // A grammar: "ab" then nothing.
  Sampler g = Sampler::create(model, R"({"temperature": 0, "grammar": "root ::= \"a\" \"b\""})").value();
  EXPECT_TRUE(g.has_grammar());
  EXPECT_FALSE(g.grammar_can_end());
}

// Greedy decoding through loom_speculative_round with a prompt-lookup and a model drafter gives
// the golden story, token for token.
TEST(CApiTools, SpeculativeRoundsGiveThePlainGreedyTokens) {
  Model model = stories();
  const auto r = golden_run();
  const auto want = r["greedy_ids"].get<std::vector<Token>>();
  const auto prompt = r["prompt_ids"].get<std::vector<Token>>();
  ContextParams cp;
  cp.p.n_ctx = 256;
  cp.p.n_threads = 1;
  std::vector<Drafter> drafters;
  drafters.push_back(Drafter::lookup(4, 1).value());
  drafters.push_back(Drafter::model(model, model, cp, 0.0f).value());
  EXPECT_NE(drafters[0].describe().find("lookup"), std::string::npos) << drafters[0].describe();
  for (Drafter& drafter : drafters) {
    Context ctx = Context::create(model, cp).value();
    Sampler greedy = Sampler::create(model, R"({"temperature": 0})").value();
    std::vector<Token> history(prompt.begin(), prompt.end() - 1);
    Batch b(256);
    b.add_tokens(history.data(), history.size(), 0);
    if (b.size() > 0) {
      ASSERT_TRUE(ctx.decode(b));
    }
    history.push_back(prompt.back());
    std::vector<Token> out;
    int64_t accepted = 0;
    while (out.size() < want.size()) {
      const int32_t k = int32_t(std::min<size_t>(8, want.size() - out.size() - 1));
      std::vector<Token> draft = k > 0 ? drafter.draft(history, k).value() : std::vector<Token>{};
      size_t picked = 0;
      auto round = speculative_round(ctx, 0, history, draft, [&](const float* logits, int32_t n) -> Expected<SpecPick> {
        const Token t = greedy.pick(logits, n);
        greedy.accept(t);
        ++picked;
        return SpecPick{t, true, out.size() + picked >= want.size()};
      });
      ASSERT_TRUE(round) << round.status().message();
      accepted += round->accepted;
      for (Token t : round->tokens) {
        out.push_back(t);
        history.push_back(t);
      }
      if (round->stopped) break;
    }
    EXPECT_EQ(out, want) << drafter.describe();
    if (&drafter == &drafters[1]) {
      EXPECT_GT(accepted, 0) << "the target drafting for itself must be accepted";
    }
  }
}

TEST(CApiTools, SpeculativeErrorsChangeNothing) {
  Model model = stories();
  ContextParams cp;
  cp.p.n_ctx = 64;
  cp.p.n_threads = 1;
  Context ctx = Context::create(model, cp).value();
  const std::vector<Token> history = model.tokenize("Once upon").value();
  Batch b(64);
  b.add_tokens(history.data(), history.size() - 1, 0);
  ASSERT_TRUE(ctx.decode(b));
  const int32_t pos_max = loom_kv_seq_pos_max(ctx.handle(), 0);
  const int32_t n_tokens = loom_kv_n_tokens(ctx.handle());
  ASSERT_EQ(pos_max, int32_t(history.size()) - 2);
  // The callback's own error ends the round with it.
  auto round = speculative_round(ctx, 0, history, {5, 6}, [](const float*, int32_t) -> Expected<SpecPick> {
    return Status(LOOM_ERR_IO, "the caller's failure");
  });
  ASSERT_FALSE(round);
  EXPECT_EQ(round.status().message(), "the caller's failure");
  // A draft that does not fit, an empty history, NULL arguments.
  std::vector<Token> long_draft(80, 5);
  EXPECT_FALSE(
      speculative_round(ctx, 0, history, long_draft, [](const float*, int32_t) { return Expected<SpecPick>(SpecPick{}); }));
  Token out[4];
  int32_t n_out = 0;
  EXPECT_EQ(loom_speculative_round(
                ctx.handle(), 0, history.data(), 0, nullptr, 0,
                [](const float*, int32_t, loom_spec_pick*, void*) { return int32_t(LOOM_OK); }, nullptr, out, &n_out,
                nullptr, nullptr),
            LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(
      loom_speculative_round(nullptr, 0, history.data(), 1, nullptr, 0, nullptr, nullptr, out, &n_out, nullptr, nullptr),
      LOOM_ERR_INVALID_ARGUMENT);
  // The cache holds what it held (the verified rows were removed again).
  EXPECT_EQ(loom_kv_seq_pos_max(ctx.handle(), 0), pos_max);
  EXPECT_EQ(loom_kv_n_tokens(ctx.handle()), n_tokens);
  // Drafter arguments.
  EXPECT_EQ(loom_drafter_lookup_new(0, 1), nullptr);
  EXPECT_EQ(loom_drafter_lookup_new(2, 3), nullptr);
  auto other = Model::load(data_path("synth-bert-rank-tiny-f32.gguf")).value();
  auto mismatch = Drafter::model(other, model, cp, 0.5f);
  ASSERT_FALSE(mismatch);
  EXPECT_NE(mismatch.status().message().find("differs from the target"), std::string::npos) << mismatch.status().message();
  EXPECT_FALSE(Drafter::model(model, model, cp, 1.5f));
  Drafter lookup = Drafter::lookup(3).value();
  EXPECT_EQ(loom_drafter_draft(nullptr, history.data(), 1, 2, out), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(loom_drafter_draft(nullptr, nullptr, 0, 2, out), LOOM_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(lookup.draft(history, 0).value().empty());
}

TEST(CApiTools, GgufDescribeListsMetadataAndTensors) {
  auto described = gguf_describe(shared_path("models/stories260K.gguf"));
  ASSERT_TRUE(described) << described.status().message();
  const auto j = nlohmann::json::parse(*described);
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["gguf_version"], 3);
  Model model = stories();
  EXPECT_EQ(j["metadata"].size(), size_t(loom_model_meta_count(model.handle())));
  bool found = false;
  for (const auto& kv : j["metadata"]) {
    if (kv["key"] == "general.architecture") {
      found = true;
      EXPECT_EQ(kv["value"], "llama");
      EXPECT_EQ(kv["text"], "\"llama\"");
    }
  }
  EXPECT_TRUE(found);
  uint64_t bytes = 0;
  for (const auto& t : j["tensors"]) bytes += t["bytes"].get<uint64_t>();
  EXPECT_EQ(bytes, loom_model_size(model.handle()));
  // Too small a buffer asks for more; a missing or truncated file is an error.
  char small[8];
  EXPECT_LT(loom_gguf_describe(shared_path("models/stories260K.gguf").c_str(), small, sizeof small), -8);
  EXPECT_EQ(loom_gguf_describe("/nonexistent.gguf", small, sizeof small), LOOM_SIZE_ERROR);
  EXPECT_EQ(loom_gguf_describe(nullptr, small, sizeof small), LOOM_SIZE_ERROR);
  const std::string cut = testing::TempDir() + "/loom-capi-tools-cut.gguf";
  {
    const std::string whole = loom::test::read_text_file(shared_path("models/stories260K.gguf"));
    std::ofstream(cut, std::ios::binary) << whole.substr(0, 1000);
  }
  auto truncated = gguf_describe(cut);
  EXPECT_FALSE(truncated);
  std::filesystem::remove(cut);
}

TEST(CApiTools, QuantizeWritesAModelThatLoads) {
  // stories260K's FFN rows (172) are no multiple of 32: the synthetic llama's are.
  const std::string in = shared_path("models/synth-llama-tiny-f32.gguf");
  const std::string out = testing::TempDir() + "/loom-capi-tools-q8.gguf";
  std::filesystem::remove(out);
  int calls = 0;
  size_t count = 0;
  auto summary = quantize(in, out, R"({"type": "q8_0", "threads": 1})", [&](const std::string& line) {
    const auto t = nlohmann::json::parse(line);
    count = t["count"].get<size_t>();
    EXPECT_EQ(t["index"].get<int>(), calls);
    ++calls;
  });
  ASSERT_TRUE(summary) << summary.status().message();
  EXPECT_GT(calls, 0);
  EXPECT_EQ(size_t(calls), count);
  const auto s = nlohmann::json::parse(*summary);
  EXPECT_EQ(s["file_type_name"], "q8_0");
  EXPECT_GT(s["converted"].get<int>(), 0);
  auto q = Model::load(out);
  ASSERT_TRUE(q) << q.status().message();
  EXPECT_NE(q->desc().find("Q8_0"), std::string::npos) << q->desc();
  std::filesystem::remove(out);
  // Refusals: unknown type or parameter, missing type, bad JSON, missing input; no file is left.
  for (const char* p :
       {R"({"type": "q9_9"})", R"({"type": "q8_0", "colour": 1})", "{}", "not json", R"({"type": "q8_0", "threads": -1})"}) {
    EXPECT_FALSE(quantize(in, out, p)) << p;
    EXPECT_FALSE(std::filesystem::exists(out)) << p;
  }
  EXPECT_FALSE(quantize("/nonexistent.gguf", out, R"({"type": "q8_0"})"));
  EXPECT_NE(quantize_types().find("q4_k_m"), std::string::npos) << quantize_types();
}

TEST(CApiTools, RenderTemplateAndSchemaGrammar) {
  auto out = render_template("{{ a }}-{{ b | length }}{% if c is undefined %}!{% endif %}", R"({"a": "x", "b": [1, 2]})");
  ASSERT_TRUE(out) << out.status().message();
  EXPECT_EQ(*out, "x-2!");
  EXPECT_EQ(render_template("{{ strftime_now('%Y') }}", "{}", 0).value(), "1970");
  EXPECT_FALSE(render_template("{{ a }", "{}"));
  EXPECT_FALSE(render_template("x", "[1]"));
  EXPECT_FALSE(render_template("x", "{"));
  EXPECT_EQ(loom_template_render(nullptr, "{}", -1, nullptr, 0), LOOM_SIZE_ERROR);
  auto g = json_schema_to_grammar(R"({"type": "object", "properties": {"n": {"type": "integer"}}})");
  ASSERT_TRUE(g) << g.status().message();
  EXPECT_NE(g->find("root ::="), std::string::npos);
  Model model = stories();
  EXPECT_TRUE(Sampler::create(model, nlohmann::json{{"grammar", *g}}.dump()));
  EXPECT_FALSE(json_schema_to_grammar("{\"type\": 3"));
}

TEST(CApiTools, ModelContextAndMachineFacts) {
  Model model = stories();
  EXPECT_FALSE(model.is_recurrent());
  EXPECT_EQ(model.pooling_type(), LOOM_POOLING_UNSPECIFIED);
  EXPECT_TRUE(model.cls_labels().empty());
  EXPECT_GT(model.decode_weight_bytes(), 0u);
  EXPECT_LE(model.decode_weight_bytes(), loom_model_size(model.handle()) * 2);
  ContextParams cp;
  cp.p.n_ctx = 64;
  cp.p.n_threads = 1;
  Context ctx = Context::create(model, cp, R"({"kv_unified": true})").value();
  EXPECT_TRUE(ctx.causal());
  // F16 cache: K and V rows of n_head_kv * head_dim halves on every layer.
  const uint64_t head_dim = uint64_t(model.n_embd() / loom_model_n_head(model.handle()));
  EXPECT_EQ(loom_kv_cell_bytes(ctx.handle()),
            uint64_t(model.n_layer()) * 2 * uint64_t(loom_model_n_head_kv(model.handle())) * head_dim * 2);
  EXPECT_EQ(loom_recurrent_seq_state_bytes(ctx.handle()), 0u);
  EXPECT_FALSE(Context::create(model, cp, R"({"kv_unified": 1})"));
  EXPECT_FALSE(Context::create(model, cp, R"({"colour": true})"));
  EXPECT_FALSE(Context::create(model, cp, "["));
  EXPECT_NE(system_info().find("kernels = "), std::string::npos) << system_info();
  EXPECT_GE(cpu_count(), 1);

  Model mamba = Model::load(data_path("synth-mamba-tiny-f32.gguf")).value();
  EXPECT_TRUE(mamba.is_recurrent());
  Context mctx = Context::create(mamba, cp).value();
  EXPECT_GT(loom_recurrent_seq_state_bytes(mctx.handle()), 0u);
  EXPECT_EQ(loom_kv_cell_bytes(mctx.handle()), 0u);

  Model ranker = Model::load(data_path("synth-bert-rank-tiny-f32.gguf")).value();
  EXPECT_EQ(ranker.pooling_type(), LOOM_POOLING_RANK);
  EXPECT_EQ(ranker.cls_labels(), std::vector<std::string>{"LABEL_0"});
  EXPECT_EQ(loom_model_cls_label(ranker.handle(), 1, nullptr, 0), -1);
  const auto pair = ranker.tokenize_rerank("what is it", "it is a test").value();
  const auto q = ranker.tokenize("what is it", false).value();
  const auto d = ranker.tokenize("it is a test", false).value();
  EXPECT_GE(pair.size(), q.size() + d.size() + 2);
  EXPECT_TRUE(std::search(pair.begin(), pair.end(), q.begin(), q.end()) != pair.end());

  // A chat prompt: special text parsed; the template's BOS text is not doubled.
  const std::string rendered = model.piece(model.bos(), true) + "Hello";
  const auto chat_ids = model.tokenize_chat(rendered).value();
  ASSERT_FALSE(chat_ids.empty());
  EXPECT_EQ(chat_ids[0], model.bos());
  EXPECT_EQ(std::count(chat_ids.begin(), chat_ids.end(), model.bos()), 1);
}

}  // namespace

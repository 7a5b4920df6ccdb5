// Conformance of the llama forward pass with llama.cpp's golden outputs (../shared/golden).
#include <algorithm>

#include "model_test_util.h"
#include "sample/sampler.h"

namespace loom::test {
namespace {

struct GoldenCase {
  const char* model;   // file under models/ (or golden/kq/)
  const char* golden;  // json under golden/
  float rel_tol;       // max |Δ| <= rel_tol * max|golden|
  bool check_top1;
};

void PrintTo(const GoldenCase& c, std::ostream* os) { *os << c.golden; }

class GoldenLogits : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(GoldenLogits, LastPromptLogitsMatchLlamaCpp) {
  const GoldenCase& c = GetParam();
  auto model = load_shared_model(c.model);
  ASSERT_TRUE(model);
  const std::string golden_path = shared_path(c.golden);
  auto g = load_json(golden_path);
  const std::string dir = golden_path.substr(0, golden_path.rfind('/') + 1);
  for (const auto& run : g["runs"]) {
    auto ids = run["prompt_ids"].get<std::vector<int32_t>>();
    auto want = read_f32_file(dir + run["last_logits_file"].get<std::string>());
    ASSERT_EQ(want.size(), size_t(model->hparams().n_vocab));
    auto ctx = make_context(model);
    ASSERT_TRUE(ctx);
    auto got = prompt_logits(*ctx, ids);
    const float tol = c.rel_tol * max_abs(want);
    EXPECT_LE(max_abs_diff(got, want), tol) << "prompt: " << run["prompt"];
    if (c.check_top1) {
      EXPECT_EQ(sample::argmax(got), sample::argmax(want)) << "prompt: " << run["prompt"];
    }
  }
}

// Greedy ids only for the real models: the synthetic ones have near-ties (compare logits there).
class GoldenGreedy : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(GoldenGreedy, GreedyIdsMatchLlamaCpp) {
  const GoldenCase& c = GetParam();
  auto model = load_shared_model(c.model);
  ASSERT_TRUE(model);
  auto g = load_json(shared_path(c.golden));
  for (const auto& run : g["runs"]) {
    auto ids = run["prompt_ids"].get<std::vector<int32_t>>();
    auto want = run["greedy_ids"].get<std::vector<int32_t>>();
    auto ctx = make_context(model);
    ASSERT_TRUE(ctx);
    auto logits = prompt_logits(*ctx, ids);
    std::vector<int32_t> got;
    int32_t pos = int32_t(ids.size());
    while (got.size() < want.size()) {
      int32_t tok = sample::argmax(logits);
      got.push_back(tok);
      if (model->vocab().is_eog(tok)) break;
      int32_t one[1] = {tok};
      ASSERT_TRUE(ctx->decode(Batch::from_tokens(one, pos++)).is_ok());
      auto l = ctx->logits(-1);
      ASSERT_TRUE(l.has_value());
      logits.assign(l->begin(), l->end());
    }
    EXPECT_EQ(got, want) << "prompt: " << run["prompt"];
  }
}

std::string case_name(const ::testing::TestParamInfo<GoldenCase>& info) { return param_name(info.param.golden); }

INSTANTIATE_TEST_SUITE_P(RealModels, GoldenGreedy,
                         ::testing::Values(GoldenCase{"models/stories260K.gguf", "golden/stories260K.json", 5e-3f, true},
                                           GoldenCase{"models/llama-2-tiny-random.gguf", "golden/llama-2-tiny-random.json",
                                                      1e-3f, false}),
                         case_name);

INSTANTIATE_TEST_SUITE_P(
    Models, GoldenLogits,
    ::testing::Values(GoldenCase{"models/stories260K.gguf", "golden/stories260K.json", 5e-3f, true},
                      GoldenCase{"models/llama-2-tiny-random.gguf", "golden/llama-2-tiny-random.json", 1e-3f, false},
                      GoldenCase{"models/synth-llama-tiny-f32.gguf", "golden/synth-llama-tiny-f32.json", 1e-3f, false},
                      GoldenCase{"models/synth-llama-tiny-f16.gguf", "golden/synth-llama-tiny-f16.json", 1e-3f, false},
                      GoldenCase{"models/synth-llama-tiny-q8_0.gguf", "golden/synth-llama-tiny-q8_0.json", 2e-2f, false},
                      GoldenCase{"models/synth-llama-tiny-q4_0.gguf", "golden/synth-llama-tiny-q4_0.json", 2e-2f, false}),
    case_name);

// Teacher-forced comparison over every greedy step of the k-quant family's goldens (the types
// this build supports: the others need k-quant kernels).
struct StepCase {
  const char* golden;  // under golden/kq/
  float rel_tol;
};
void PrintTo(const StepCase& c, std::ostream* os) { *os << c.golden; }

class GoldenSteps : public ::testing::TestWithParam<StepCase> {};

TEST_P(GoldenSteps, TeacherForcedStepLogitsMatchLlamaCpp) {
  const StepCase& c = GetParam();
  const std::string json_path = shared_path(std::string("golden/kq/") + c.golden);
  auto g = load_json(json_path);
  auto model = load_shared_model("golden/kq/" + g["model_file"].get<std::string>());
  ASSERT_TRUE(model);
  const size_t nv = size_t(model->hparams().n_vocab);
  for (const auto& run : g["runs"]) {
    auto ids = run["prompt_ids"].get<std::vector<int32_t>>();
    auto greedy = run["greedy_ids"].get<std::vector<int32_t>>();
    auto steps = read_f32_file(shared_path("golden/kq/" + run["step_logits_file"].get<std::string>()));
    ASSERT_EQ(steps.size(), greedy.size() * nv);
    auto ctx = make_context(model);
    ASSERT_TRUE(ctx);
    auto got = prompt_logits(*ctx, ids);
    int32_t pos = int32_t(ids.size());
    for (size_t k = 0; k < greedy.size(); ++k) {
      std::vector<float> want(steps.begin() + long(k * nv), steps.begin() + long((k + 1) * nv));
      EXPECT_LE(max_abs_diff(got, want), c.rel_tol * max_abs(want)) << "step " << k << " prompt " << run["prompt"];
      if (k + 1 == greedy.size()) break;
      int32_t one[1] = {greedy[k]};
      ASSERT_TRUE(ctx->decode(Batch::from_tokens(one, pos++)).is_ok());
      auto l = ctx->logits(-1);
      ASSERT_TRUE(l.has_value());
      got.assign(l->begin(), l->end());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(KQuantFamily, GoldenSteps,
                         ::testing::Values(StepCase{"synth-llama-kq-f32.json", 1e-3f},
                                           StepCase{"synth-llama-kq-bf16.json", 1e-2f},
                                           StepCase{"synth-llama-kq-q8_0.json", 3e-2f}),
                         [](const auto& info) { return param_name(info.param.golden); });

}  // namespace
}  // namespace loom::test

namespace loom::test {
namespace {

// Other decoder families: prompt logits and teacher-forced greedy steps (these goldens carry no
// step files, so the greedy ids are followed while the margins are clear).
class FamilyGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(FamilyGolden, PromptLogitsMatchLlamaCpp) {
  const std::string name = GetParam();
  auto model = load_shared_model("models/" + name + ".gguf");
  ASSERT_TRUE(model);
  const std::string golden_path = shared_path("golden/" + name + ".json");
  auto g = load_json(golden_path);
  for (const auto& run : g["runs"]) {
    auto ids = run["prompt_ids"].get<std::vector<int32_t>>();
    auto want = read_f32_file(shared_path("golden/" + run["last_logits_file"].get<std::string>()));
    auto ctx = make_context(model);
    ASSERT_TRUE(ctx);
    auto got = prompt_logits(*ctx, ids);
    EXPECT_LE(max_abs_diff(got, want), 1e-3f * max_abs(want)) << name << " prompt: " << run["prompt"];
    // Chunked through the cache (one token at a time) lands on the same logits.
    auto chunked = make_context(model);
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      std::vector<int32_t> one = {ids[i]};
      ASSERT_TRUE(chunked->decode(Batch::from_tokens(one, int32_t(i))).is_ok());
    }
    std::vector<int32_t> last = {ids.back()};
    ASSERT_TRUE(chunked->decode(Batch::from_tokens(last, int32_t(ids.size() - 1))).is_ok());
    auto l = chunked->logits(-1);
    std::vector<float> cl(l->begin(), l->end());
    EXPECT_LE(max_abs_diff(cl, want), 1e-3f * max_abs(want)) << name << " chunked";
  }
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyGolden,
                         ::testing::Values("synth-qwen2-tiny-f32", "synth-phi3-tiny-f32", "synth-gemma2-tiny-f32"),
                         [](const auto& info) { return param_name(info.param); });

TEST(BertGolden, MeanPooledEmbeddingMatchesLlamaCpp) {
  auto model = load_shared_model("models/synth-bert-tiny-f32.gguf");
  ASSERT_TRUE(model);
  auto g = load_json(shared_path("golden/synth-bert-tiny-f32.json"));
  ContextParams cp;
  cp.n_ctx = 512;
  cp.n_batch = cp.n_ubatch = 512;
  cp.n_threads = 2;
  auto ctx = Context::create(model, cp);
  ASSERT_TRUE(ctx.has_value()) << ctx.status().message();
  EXPECT_FALSE((*ctx)->causal());
  EXPECT_EQ((*ctx)->pooling(), Pooling::kMean);
  for (const auto& run : g["runs"]) {
    auto ids = run["prompt_ids"].get<std::vector<int32_t>>();
    auto want = read_f32_file(shared_path("golden/" + run["embedding_file"].get<std::string>()));
    ASSERT_TRUE((*ctx)->encode(Batch::from_tokens(ids, 0)).is_ok());
    auto e = (*ctx)->embeddings_seq(0);
    ASSERT_TRUE(e.has_value()) << e.status().message();
    ASSERT_EQ(e->size(), want.size());
    EXPECT_GE(cosine(*e, want), 0.9999) << run["prompt"];
  }
}

}  // namespace
}  // namespace loom::test

// Conformance of the llama forward pass with llama.cpp's golden outputs (../shared/golden).
#include <algorithm>

#include "model_test_util.h"
#include "sample/sampler.h"

namespace loom::test {
namespace {

struct GoldenCase {
  const char* model;     // file under models/ (or golden/kq/)
  const char* golden;    // json under golden/
  float rel_tol;         // max |Δ| <= rel_tol * max|golden|
  bool check_greedy;     // compare greedy ids exactly
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
      EXPECT_EQ(argmax(got), argmax(want)) << "prompt: " << run["prompt"];
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
      int32_t tok = argmax(logits);
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

std::string case_name(const ::testing::TestParamInfo<GoldenCase>& info) {
  std::string n = info.param.golden;
  n = n.substr(n.rfind('/') + 1);
  n = n.substr(0, n.find(".json"));
  for (char& ch : n) {
    if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
  }
  return n;
}

INSTANTIATE_TEST_SUITE_P(
    RealModels, GoldenGreedy,
    ::testing::Values(GoldenCase{"models/stories260K.gguf", "golden/stories260K.json", 5e-3f, true, true},
                      GoldenCase{"models/llama-2-tiny-random.gguf", "golden/llama-2-tiny-random.json", 1e-3f, true, false}),
    case_name);

INSTANTIATE_TEST_SUITE_P(
    Models, GoldenLogits,
    ::testing::Values(GoldenCase{"models/stories260K.gguf", "golden/stories260K.json", 5e-3f, true, true},
                      GoldenCase{"models/llama-2-tiny-random.gguf", "golden/llama-2-tiny-random.json", 1e-3f, true, false},
                      GoldenCase{"models/synth-llama-tiny-f32.gguf", "golden/synth-llama-tiny-f32.json", 1e-3f, false, false},
                      GoldenCase{"models/synth-llama-tiny-f16.gguf", "golden/synth-llama-tiny-f16.json", 1e-3f, false, false},
                      GoldenCase{"models/synth-llama-tiny-q8_0.gguf", "golden/synth-llama-tiny-q8_0.json", 2e-2f, false, false},
                      GoldenCase{"models/synth-llama-tiny-q4_0.gguf", "golden/synth-llama-tiny-q4_0.json", 2e-2f, false, false}),
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
                         [](const auto& info) {
                           std::string n = info.param.golden;
                           n = n.substr(0, n.find(".json"));
                           for (char& ch : n) {
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace loom::test

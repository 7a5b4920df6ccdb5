// LoRA adapters and control vectors against llama.cpp's goldens (../shared/golden/adapters),
// teacher-forced over every greedy step; removal restores the base logits exactly.
#include "context_test_util.h"
#include "model/adapters.h"

namespace loom::test {
namespace {

struct AdapterCase {
  const char* golden;
  std::vector<std::pair<const char*, float>> loras;
  const char* cvec = nullptr;
  float cvec_strength = 0;
  int il_start = 0, il_end = 0;
};

void PrintTo(const AdapterCase& c, std::ostream* os) { *os << c.golden; }

std::shared_ptr<const Model> base_model() { return load_shared_model("golden/adapters/synth-llama-lorabase-f32.gguf"); }

void check_steps(Context& ctx, const std::string& golden_json, float tol) {
  auto g = load_json(shared_path("golden/adapters/" + golden_json));
  const size_t nv = size_t(ctx.n_vocab());
  for (const auto& run : g["runs"]) {
    ctx.kv_clear();
    auto ids = run["prompt_ids"].get<std::vector<int32_t>>();
    auto greedy = run["greedy_ids"].get<std::vector<int32_t>>();
    auto steps = read_f32_file(shared_path("golden/adapters/" + run["step_logits_file"].get<std::string>()));
    ASSERT_EQ(steps.size(), greedy.size() * nv);
    auto got = feed(ctx, ids, 0);
    int32_t pos = int32_t(ids.size());
    for (size_t k = 0; k < greedy.size(); ++k) {
      std::vector<float> want(steps.begin() + long(k * nv), steps.begin() + long((k + 1) * nv));
      ASSERT_LE(max_abs_diff(got, want), tol * std::max(1.0f, max_abs(want)))
          << golden_json << " step " << k << " prompt " << run["prompt"];
      if (k + 1 == greedy.size()) break;
      got = feed(ctx, {greedy[k]}, pos++);
    }
  }
}

class AdapterGolden : public ::testing::TestWithParam<AdapterCase> {};

TEST_P(AdapterGolden, StepsMatchLlamaCpp) {
  const AdapterCase& c = GetParam();
  auto model = base_model();
  ASSERT_TRUE(model);
  auto ctx = new_context(model, small_params(256, 1));
  for (const auto& [file, scale] : c.loras) {
    auto a = LoraAdapter::load(shared_path(std::string("golden/adapters/") + file), *model);
    ASSERT_TRUE(a.has_value()) << a.status().message();
    ASSERT_TRUE(ctx->set_lora(*a, scale).is_ok());
  }
  if (c.cvec) {
    auto cv = ControlVector::load(shared_path(std::string("golden/adapters/") + c.cvec), c.cvec_strength);
    ASSERT_TRUE(cv.has_value()) << cv.status().message();
    ASSERT_TRUE(ctx->set_control_vector(cv->data, cv->n_embd, c.il_start, c.il_end).is_ok());
  }
  check_steps(*ctx, std::string(c.golden) + ".json", 1e-3f);
}

INSTANTIATE_TEST_SUITE_P(Adapters, AdapterGolden,
                         ::testing::Values(AdapterCase{"lorabase", {}},
                                           AdapterCase{"lorabase-A100", {{"lora-A.gguf", 1.0f}}},
                                           AdapterCase{"lorabase-A050", {{"lora-A.gguf", 0.5f}}},
                                           AdapterCase{"lorabase-A100-B070", {{"lora-A.gguf", 1.0f}, {"lora-B.gguf", 0.7f}}},
                                           AdapterCase{"lorabase-C100", {{"lora-C-embd-output.gguf", 1.0f}}},
                                           AdapterCase{"lorabase-cvec080-L2-3", {}, "control-vector.gguf", 0.8f, 2, 3},
                                           AdapterCase{"lorabase-cvecm050-L1-3", {}, "control-vector.gguf", -0.5f, 1, 3}),
                         [](const auto& info) { return param_name(info.param.golden); });

TEST(Adapters, SetRemoveClearAtRunTimeRestoresBaseExactly) {
  auto model = base_model();
  auto ctx = new_context(model, small_params(256, 1));
  const std::vector<int32_t> ids = {1, 403, 407, 261, 378};
  auto base = feed(*ctx, ids, 0);
  auto a = LoraAdapter::load(shared_path("golden/adapters/lora-A.gguf"), *model);
  auto b = LoraAdapter::load(shared_path("golden/adapters/lora-B.gguf"), *model);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(ctx->set_lora(*a, 1.0f).is_ok());
  ASSERT_TRUE(ctx->set_lora(*b, 0.7f).is_ok());
  ctx->kv_clear();
  auto both = feed(*ctx, ids, 0);
  EXPECT_GT(max_abs_diff(both, base), 0.1f);
  ASSERT_TRUE(ctx->set_lora(*a, 0.0f).is_ok());  // overwrite the scale
  ASSERT_TRUE(ctx->remove_lora(b->get()).is_ok());
  EXPECT_EQ(ctx->remove_lora(b->get()).code(), StatusCode::kNotFound);
  ctx->kv_clear();
  EXPECT_EQ(feed(*ctx, ids, 0), base);  // scale 0 adds exactly nothing
  ctx->clear_lora();
  ctx->kv_clear();
  EXPECT_EQ(feed(*ctx, ids, 0), base);
  // Control vector set then cleared.
  auto cv = ControlVector::load(shared_path("golden/adapters/control-vector.gguf"), 0.8f);
  ASSERT_TRUE(cv.has_value());
  ASSERT_TRUE(ctx->set_control_vector(cv->data, cv->n_embd, 1, 3).is_ok());
  ctx->kv_clear();
  EXPECT_GT(max_abs_diff(feed(*ctx, ids, 0), base), 1e-3f);
  ASSERT_TRUE(ctx->set_control_vector({}, 0, 0, 0).is_ok());
  ctx->kv_clear();
  EXPECT_EQ(feed(*ctx, ids, 0), base);
  EXPECT_FALSE(ctx->set_control_vector(cv->data, 17, 1, 3).is_ok());
}

TEST(Adapters, MismatchedAdapterFilesAreRefused) {
  auto other = load_shared_model("models/stories260K.gguf");  // llama, but other shapes
  auto a = LoraAdapter::load(shared_path("golden/adapters/lora-A.gguf"), *other);
  ASSERT_FALSE(a.has_value());
  EXPECT_NE(a.status().message().find("shape"), std::string::npos) << a.status().message();
  auto not_adapter = LoraAdapter::load(shared_path("models/stories260K.gguf"), *other);
  EXPECT_FALSE(not_adapter.has_value());
  auto cv = ControlVector::load(shared_path("models/stories260K.gguf"), 1.0f);
  EXPECT_FALSE(cv.has_value());
}

}  // namespace
}  // namespace loom::test

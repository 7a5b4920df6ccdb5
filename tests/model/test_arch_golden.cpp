// Architectures whose goldens live in tests/data (made with real llama.cpp, see its README):
// teacher-forced comparison of every greedy step.
#include "model_test_util.h"

#include <cmath>

#include "base/half.h"
#include "gguf/gguf_writer.h"

namespace loom::test {
namespace {

class ArchGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(ArchGolden, TeacherForcedStepsMatchLlamaCpp) {
  const std::string name = GetParam();
  const std::string dir = data_dir() + "/";
  auto m = Model::load(dir + name + ".gguf");
  ASSERT_TRUE(m.has_value()) << m.status().message();
  auto model = *m;
  auto g = load_json(dir + name + ".json");
  const size_t nv = size_t(model->hparams().n_vocab);
  for (const auto& run : g["runs"]) {
    auto ids = run["prompt_ids"].get<std::vector<int32_t>>();
    auto greedy = run["greedy_ids"].get<std::vector<int32_t>>();
    auto steps = read_f32_file(dir + run["step_logits_file"].get<std::string>());
    ASSERT_EQ(steps.size(), greedy.size() * nv);
    auto ctx = make_context(model);
    auto got = prompt_logits(*ctx, ids);
    int32_t pos = int32_t(ids.size());
    for (size_t k = 0; k < greedy.size(); ++k) {
      std::vector<float> want(steps.begin() + long(k * nv), steps.begin() + long((k + 1) * nv));
      ASSERT_LE(max_abs_diff(got, want), 1e-3f * max_abs(want)) << name << " step " << k << " prompt " << run["prompt"];
      if (k + 1 == greedy.size()) break;
      std::vector<int32_t> one = {greedy[k]};
      ASSERT_TRUE(ctx->decode(Batch::from_tokens(one, pos++)).is_ok());
      auto l = ctx->logits(-1);
      got.assign(l->begin(), l->end());
    }
  }
}

// The phi3 LongRoPE pair: the reference ran both at n_ctx 512, which selects the long factors
// of the first (original context 64) and the short ones of the second (original context 4096).
INSTANTIATE_TEST_SUITE_P(OwnData, ArchGolden,
                         ::testing::Values("synth-qwen3-tiny-f32", "synth-gemma-tiny-f32", "synth-gemma3-tiny-f32",
                                           "synth-phi3-longrope-tiny-f32", "synth-phi3-longrope-short-tiny-f32"),
                         [](const auto& info) { return param_name(info.param); });

}  // namespace
}  // namespace loom::test

namespace loom::test {
namespace {

// nomic-bert (rotary positions, fused qkv, SwiGLU): mean-pooled embedding from real llama.cpp.
TEST(EncoderGolden, NomicBertMeanPooledEmbeddingMatchesLlamaCpp) {
  const std::string dir = data_dir() + "/";
  auto m = Model::load(dir + "synth-nomic-bert-tiny-f32.gguf");
  ASSERT_TRUE(m.has_value()) << m.status().message();
  auto g = load_json(dir + "synth-nomic-bert-tiny-f32.json");
  ContextParams cp;
  cp.n_ctx = 512;
  cp.n_batch = cp.n_ubatch = 512;
  cp.n_threads = 2;
  auto ctx = Context::create(*m, cp);
  ASSERT_TRUE(ctx.has_value()) << ctx.status().message();
  EXPECT_FALSE((*ctx)->causal());
  for (const auto& run : g["runs"]) {
    // The reference embedded the prompt as its tokenizer adds specials ([CLS] … [SEP]); the
    // golden's prompt_ids omit the [SEP] (a known limitation of ref-golden.mjs), so tokenize here.
    auto ids = (*m)->vocab().tokenize(run["prompt"].get<std::string>(), true, false);
    ASSERT_EQ(ids.back(), (*m)->vocab().sep());
    auto want = read_f32_file(dir + run["embedding_file"].get<std::string>());
    ASSERT_TRUE((*ctx)->encode(Batch::from_tokens(ids, 0)).is_ok());
    auto e = (*ctx)->embeddings_seq(0);
    ASSERT_TRUE(e.has_value()) << e.status().message();
    ASSERT_EQ(e->size(), want.size());
    EXPECT_GE(cosine(*e, want), 0.9999) << run["prompt"];
  }
}

}  // namespace
}  // namespace loom::test

namespace loom::test {
namespace {

constexpr const char* kLongRope = "synth-phi3-longrope-tiny-f32";
constexpr const char* kLongRopeShort = "synth-phi3-longrope-short-tiny-f32";

std::shared_ptr<const Model> load_data_model(const std::string& name) {
  auto m = Model::load(data_dir() + "/" + name + ".gguf");
  EXPECT_TRUE(m.has_value()) << m.status().message();
  return m ? *m : nullptr;
}

std::vector<int32_t> data_prompt(const std::string& name, int run) {
  return load_json(data_dir() + "/" + name + ".json")["runs"][run]["prompt_ids"].get<std::vector<int32_t>>();
}

std::vector<float> logits_at(std::shared_ptr<const Model> m, const std::vector<int32_t>& ids, int n_ctx, int n_seq_max = 1) {
  ContextParams cp;
  cp.n_ctx = n_ctx;
  cp.n_batch = cp.n_ubatch = n_ctx;
  cp.n_seq_max = n_seq_max;
  cp.n_threads = 2;
  auto ctx = Context::create(std::move(m), cp);
  EXPECT_TRUE(ctx.has_value()) << ctx.status().message();
  return ctx ? prompt_logits(**ctx, ids) : std::vector<float>{};
}

TEST(LongRope, FactorsAndAttnFactorAreLoaded) {
  auto m = load_data_model(kLongRope);
  ASSERT_TRUE(m);
  const ModelHparams& hp = m->hparams();
  EXPECT_EQ(hp.n_ctx_orig_yarn, 64);
  EXPECT_NEAR(hp.rope_attn_factor, std::sqrt(2.0), 1e-6);
  ASSERT_TRUE(m->weights().rope_long && m->weights().rope_short);
  EXPECT_EQ(m->weights().rope_long[0], 1.0f);
  EXPECT_EQ(m->weights().rope_long[3], 8.0f);
  EXPECT_EQ(m->weights().rope_short[2], 1.0f + 6.0f / 7.0f);
  // Models without the tensors have none, and their contexts rotate without factors.
  auto plain = load_shared_model("models/synth-phi3-tiny-f32.gguf");
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->weights().rope_long, nullptr);
  EXPECT_EQ(plain->hparams().rope_attn_factor, 1.0f);
}

TEST(LongRope, ContextSizePerSequenceSelectsLongOrShortFactors) {
  // The two files differ only in their original context (64 / 4096), so the long one run with
  // a context of at most 64 cells per sequence must compute exactly what the short one does.
  auto lng = load_data_model(kLongRope), sht = load_data_model(kLongRopeShort);
  ASSERT_TRUE(lng && sht);
  const auto ids = data_prompt(kLongRope, 0);
  const auto short_ref = logits_at(sht, ids, 512);
  const auto long_ref = logits_at(lng, ids, 512);
  ASSERT_FALSE(short_ref.empty());
  EXPECT_GT(max_abs_diff(long_ref, short_ref), 1e-3f * max_abs(short_ref));
  EXPECT_EQ(logits_at(lng, ids, 64), short_ref);       // 64 per sequence: not above 64
  EXPECT_EQ(logits_at(lng, ids, 128, 2), short_ref);   // 128 cells, 2 sequences: 64 each
  EXPECT_EQ(logits_at(lng, ids, 65), long_ref);        // above 64: long
  EXPECT_EQ(logits_at(lng, ids, 129, 2), short_ref);   // 64.5 per sequence, integer 64: short
}

TEST(LongRope, KShiftRotatesWithTheSelectedFactors) {
  // Tokens decoded at positions 50.. and shifted back by 50 must equal a fresh decode at 0.. :
  // the shift has to rotate each pair with the same divided frequency as the forward pass.
  auto m = load_data_model(kLongRope);
  ASSERT_TRUE(m);
  const auto p = data_prompt(kLongRope, 1);
  std::vector<int32_t> head(p.begin(), p.end() - 1);
  const std::vector<int32_t> last = {p.back()};
  for (auto [kt, tol] : {std::pair{TensorType::F32, 1e-4f}, std::pair{TensorType::F16, 5e-3f}}) {
    ContextParams cp;
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 256;  // long factors
    cp.n_threads = 2;
    cp.type_k = kt;
    auto ref_ctx = Context::create(m, cp);
    auto ctx = Context::create(m, cp);
    ASSERT_TRUE(ref_ctx.has_value() && ctx.has_value());
    const auto ref = prompt_logits(**ref_ctx, p);
    ASSERT_TRUE((*ctx)->decode(Batch::from_tokens(head, 50)).is_ok());
    ASSERT_TRUE((*ctx)->seq_add(0, 50, -1, -50).is_ok());
    ASSERT_TRUE((*ctx)->decode(Batch::from_tokens(last, int32_t(head.size()))).is_ok());
    auto l = (*ctx)->logits(-1);
    ASSERT_TRUE(l.has_value());
    const std::vector<float> got(l->begin(), l->end());
    EXPECT_LE(max_abs_diff(got, ref), tol * max_abs(ref)) << tensor_type_name(kt);
  }
}

TEST(LongRope, BadFactorTensorsAreRefusedWithAClearError) {
  auto src = gguf::GgufFile::open(data_dir() + "/" + kLongRope + ".gguf");
  ASSERT_TRUE(src.has_value()) << src.status().message();
  auto with_factors = [&](const char* name, TensorType type, int64_t n, float value) {
    auto w = gguf::GgufWriter::from_file(*src);
    EXPECT_TRUE(w.has_value());
    w->remove_tensor(name);
    std::vector<uint8_t> bytes;
    for (int64_t i = 0; i < n; ++i) {
      const float v = value > 0 ? value + float(i) : value;
      if (type == TensorType::F16) {
        const uint16_t h = f32_to_f16(v);
        bytes.insert(bytes.end(), reinterpret_cast<const uint8_t*>(&h), reinterpret_cast<const uint8_t*>(&h) + 2);
      } else {
        bytes.insert(bytes.end(), reinterpret_cast<const uint8_t*>(&v), reinterpret_cast<const uint8_t*>(&v) + 4);
      }
    }
    EXPECT_TRUE(w->add_tensor(name, type, {n}, bytes).is_ok());
    auto f = gguf::GgufFile::from_bytes(w->to_bytes());
    EXPECT_TRUE(f.has_value()) << f.status().message();
    return Model::from_gguf(std::move(*f));
  };
  // n_rot / 2 = 8 values expected.
  auto wrong = with_factors("rope_factors_long.weight", TensorType::F32, 4, 1.0f);
  ASSERT_FALSE(wrong.has_value());
  EXPECT_EQ(wrong.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(wrong.status().message().find("rope_factors_long.weight"), std::string::npos) << wrong.status().message();
  EXPECT_NE(wrong.status().message().find("expected [8]"), std::string::npos) << wrong.status().message();
  auto zero = with_factors("rope_factors_short.weight", TensorType::F32, 8, 0.0f);
  ASSERT_FALSE(zero.has_value());
  EXPECT_NE(zero.status().message().find("rope_factors_short.weight"), std::string::npos) << zero.status().message();
  // F16 factors are converted to float.
  auto half = with_factors("rope_factors_short.weight", TensorType::F16, 8, 1.0f);
  ASSERT_TRUE(half.has_value()) << half.status().message();
  EXPECT_EQ((*half)->weights().rope_short[7], 8.0f);
}

}  // namespace
}  // namespace loom::test

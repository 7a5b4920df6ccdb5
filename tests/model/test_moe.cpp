// Mixture-of-experts feed-forward (model/forward_moe.cpp): the router's choice and weights per
// gating rule (against values worked out here), hostile router values (NaN, ties, infinities),
// the hyperparameters and bindings of the MoE synthetic files (tests/data/synth-*moe*-tiny-f32,
// synth-mixtral-tiny-f32; goldens from real llama.cpp in test_arch_golden), the decode bytes that
// count only the chosen experts, and refusals of inconsistent files naming the key or tensor.
#include "model_test_util.h"

#include <cmath>
#include <limits>

#include "gguf/gguf_writer.h"
#include "model/forward_internal.h"

namespace loom::test {
namespace {

ModelHparams router(int64_t n_expert, int64_t n_used, ExpertGating g, bool norm) {
  ModelHparams hp;
  hp.n_expert = n_expert;
  hp.n_expert_used = n_used;
  hp.expert_gating = g;
  hp.expert_weights_norm = norm;
  return hp;
}

TEST(MoeRouting, SoftmaxChoosesTheLargestAndNormalises) {
  const ModelHparams hp = router(4, 2, ExpertGating::kSoftmax, true);
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f, /* token 1 */ 0.5f, -1.0f, 0.25f, 4.0f};
  std::vector<int32_t> chosen(4);
  std::vector<float> w(4);
  detail::route_tokens(hp, nullptr, logits.data(), 2, chosen.data(), w.data());
  EXPECT_EQ(chosen, (std::vector<int32_t>{1, 2, 3, 0}));
  // Normalised over the chosen two: e^3 / (e^3 + e^2), e^2 / (e^3 + e^2).
  EXPECT_NEAR(w[0], std::exp(3.0) / (std::exp(3.0) + std::exp(2.0)), 1e-6);
  EXPECT_NEAR(w[1], std::exp(2.0) / (std::exp(3.0) + std::exp(2.0)), 1e-6);
  EXPECT_NEAR(w[2] + w[3], 1.0, 1e-6);
  // Without normalisation the weights are the softmax over all four.
  const ModelHparams raw = router(4, 2, ExpertGating::kSoftmax, false);
  logits = {1.0f, 3.0f, 2.0f, 0.0f};
  detail::route_tokens(raw, nullptr, logits.data(), 1, chosen.data(), w.data());
  const double z = std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + 1.0;
  EXPECT_NEAR(w[0], std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(w[1], std::exp(2.0) / z, 1e-6);
}

TEST(MoeRouting, SigmoidChoosesByBiasedScoresAndWeighsByUnbiasedOnes) {
  // lfm2moe: the bias moves expert 0 (σ = 0.5, the lowest) to first place (0.5 + 0.5) ahead of
  // expert 1 (σ(2) = 0.88) and expert 2 (σ(1) = 0.73) for the choice; the weights stay σ(logit).
  const ModelHparams hp = router(3, 2, ExpertGating::kSigmoid, true);
  std::vector<float> logits = {0.0f, 2.0f, 1.0f};
  const std::vector<float> bias = {0.5f, 0.0f, 0.0f};
  std::vector<int32_t> chosen(2);
  std::vector<float> w(2);
  detail::route_tokens(hp, bias.data(), logits.data(), 1, chosen.data(), w.data());
  EXPECT_EQ(chosen, (std::vector<int32_t>{0, 1}));
  const double s1 = 1.0 / (1.0 + std::exp(-2.0)), s0 = 0.5;
  EXPECT_NEAR(w[0], s0 / (s1 + s0), 1e-6);
  EXPECT_NEAR(w[1], s1 / (s1 + s0), 1e-6);
}

TEST(MoeRouting, SoftmaxOverTheChosenLogitsAndAScale) {
  ModelHparams hp = router(4, 2, ExpertGating::kSoftmaxChosen, false);
  hp.expert_weights_scale = 2.5f;
  std::vector<float> logits = {-1.0f, 0.5f, 1.5f, 0.0f};
  std::vector<int32_t> chosen(2);
  std::vector<float> w(2);
  detail::route_tokens(hp, nullptr, logits.data(), 1, chosen.data(), w.data());
  EXPECT_EQ(chosen, (std::vector<int32_t>{2, 1}));
  const double e = std::exp(1.0);  // softmax of {1.5, 0.5}
  EXPECT_NEAR(w[0], 2.5 * e / (e + 1.0), 1e-6);
  EXPECT_NEAR(w[1], 2.5 / (e + 1.0), 1e-6);
}

TEST(MoeRouting, TiesNaNAndInfinitiesChooseDistinctValidExperts) {
  std::vector<int32_t> chosen(3);
  std::vector<float> w(3);
  {  // all equal: the lowest indices, weights equal
    const ModelHparams hp = router(5, 3, ExpertGating::kSoftmax, true);
    std::vector<float> logits(5, 0.25f);
    detail::route_tokens(hp, nullptr, logits.data(), 1, chosen.data(), w.data());
    EXPECT_EQ(chosen, (std::vector<int32_t>{0, 1, 2}));
    for (float v : w) EXPECT_NEAR(v, 1.0f / 3.0f, 1e-6);
  }
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (ExpertGating g : {ExpertGating::kSoftmax, ExpertGating::kSigmoid, ExpertGating::kSoftmaxChosen}) {
    for (const std::vector<float>& bad : {std::vector<float>{nan, 1.0f, nan, 2.0f, 0.0f},
                                          std::vector<float>{nan, nan, nan, nan, nan},
                                          std::vector<float>{inf, -inf, inf, 0.0f, nan},
                                          std::vector<float>{-inf, -inf, -inf, -inf, -inf}}) {
      const ModelHparams hp = router(5, 3, g, true);
      std::vector<float> logits = bad;
      detail::route_tokens(hp, nullptr, logits.data(), 1, chosen.data(), w.data());
      std::vector<int32_t> sorted = chosen;
      std::sort(sorted.begin(), sorted.end());
      EXPECT_TRUE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) << "an expert chosen twice";
      for (int32_t e : chosen) EXPECT_TRUE(e >= 0 && e < 5) << e;
    }
  }
}

std::shared_ptr<const Model> load(const std::string& name) {
  auto m = Model::load(data_dir() + "/synth-" + name + "-tiny-f32.gguf");
  EXPECT_TRUE(m.has_value()) << m.status().message();
  return m ? *m : nullptr;
}

TEST(MoeModels, HyperparametersAndBindings) {
  struct Want {
    const char* name;
    Arch arch;
    int64_t n_ff_exp, n_ff_shexp, lead;
    ExpertGating gating;
    bool norm;
  };
  for (const Want& c : {Want{"qwen3moe", Arch::kQwen3, 32, 0, 0, ExpertGating::kSoftmax, true},
                        Want{"olmoe", Arch::kLlama, 32, 0, 0, ExpertGating::kSoftmax, false},
                        Want{"mixtral", Arch::kLlama, 32, 0, 0, ExpertGating::kSoftmax, true},
                        Want{"qwen35moe", Arch::kQwen35, 32, 32, 0, ExpertGating::kSoftmax, true},
                        Want{"lfm2moe", Arch::kLfm2, 32, 0, 1, ExpertGating::kSigmoid, true},
                        Want{"granitemoe", Arch::kGranite, 32, 32, 0, ExpertGating::kSoftmax, true},
                        Want{"granitehybridmoe", Arch::kGraniteHybrid, 32, 32, 0, ExpertGating::kSoftmax, true}}) {
    SCOPED_TRACE(c.name);
    auto m = load(c.name);
    ASSERT_TRUE(m);
    const ModelHparams& hp = m->hparams();
    EXPECT_EQ(hp.arch, c.arch);
    EXPECT_EQ(hp.n_expert, 8);
    EXPECT_EQ(hp.n_expert_used, 2);
    EXPECT_EQ(hp.n_ff_exp, c.n_ff_exp);
    EXPECT_EQ(hp.n_ff_shexp, c.n_ff_shexp);
    EXPECT_EQ(hp.n_layer_dense_lead, c.lead);
    EXPECT_EQ(hp.expert_gating, c.gating);
    EXPECT_EQ(hp.expert_weights_norm, c.norm);
    EXPECT_EQ(hp.qk_norm_full, std::string(c.name) == "olmoe");
    const ModelWeights& w = m->weights();
    uint64_t stacks = 0;
    for (int64_t il = 0; il < hp.n_layer; ++il) {
      const LayerWeights& l = w.layers[size_t(il)];
      EXPECT_EQ(hp.layer_is_moe(il), il >= c.lead);
      if (!hp.layer_is_moe(il)) {
        EXPECT_FALSE(l.ffn_gate.empty());
        EXPECT_TRUE(l.ffn_up_exps.empty());
        continue;
      }
      EXPECT_TRUE(l.ffn_gate.empty());
      EXPECT_EQ(l.ffn_gate_inp.rows, 8);
      EXPECT_EQ(l.ffn_down_exps.rows, 8 * hp.n_embd);
      EXPECT_EQ(l.ffn_up_exps.rows, 8 * 32 * (l.gate_up_fused ? 2 : 1));
      EXPECT_EQ(l.ffn_gate_exps.empty(), l.gate_up_fused);
      EXPECT_EQ(l.ffn_exp_probs_b != nullptr, hp.arch == Arch::kLfm2);
      EXPECT_EQ(l.ffn_up_shexp.empty(), c.n_ff_shexp == 0);
      EXPECT_EQ(l.ffn_gate_inp_shexp.empty(), hp.arch != Arch::kQwen35);
      for (const TensorView* t : {&l.ffn_gate_exps, &l.ffn_up_exps, &l.ffn_down_exps}) {
        stacks += uint64_t(t->rows) * t->row_bytes;
      }
      // An expert's view is its slice of the stack.
      const TensorView e3 = expert_view(l.ffn_down_exps, 3, hp.n_embd);
      EXPECT_EQ(e3.data, l.ffn_down_exps.row(3 * hp.n_embd));
      EXPECT_EQ(e3.rows, hp.n_embd);
    }
    // qwen35moe's last trunk block stores gate|up fused.
    if (hp.arch == Arch::kQwen35) EXPECT_TRUE(w.layers[size_t(hp.n_layer - 1)].gate_up_fused);
    // A decode step reads 2 of the 8 experts.
    uint64_t all = 0;
    for (const auto& t : m->file().tensors()) all += t.nbytes;
    EXPECT_LT(m->decode_weight_bytes(), all - stacks * 6 / 8 + 1);
  }
}

// A copy of a synthetic file with one change, loaded from memory.
Status load_changed(const std::string& name, const std::function<void(gguf::GgufWriter&)>& change) {
  auto f = gguf::GgufFile::open(data_dir() + "/synth-" + name + "-tiny-f32.gguf");
  if (!f) return f.status();
  auto w = gguf::GgufWriter::from_file(*f);
  if (!w) return w.status();
  change(*w);
  auto g = gguf::GgufFile::from_bytes(w->to_bytes());
  if (!g) return g.status();
  auto m = Model::from_gguf(std::move(*g));
  return m ? Status::ok() : m.status();
}

void set_u32(gguf::GgufWriter& w, const std::string& key, uint32_t v) {
  w.remove(key);
  ASSERT_TRUE(w.set_u32(key, v).is_ok());
}

TEST(MoeModels, InconsistentFilesAreRefusedWithTheKeyOrTensor) {
  auto refused = [](const std::string& name, const std::function<void(gguf::GgufWriter&)>& change,
                    const std::string& says) {
    const Status st = load_changed(name, change);
    EXPECT_FALSE(st.is_ok()) << says;
    EXPECT_NE(st.message().find(says), std::string::npos) << st.message();
  };
  // More experts used than there are, none used, or none at all in an MoE architecture.
  refused("qwen3moe", [](gguf::GgufWriter& w) { set_u32(w, "qwen3moe.expert_used_count", 9); }, "expert_used_count");
  refused("qwen3moe", [](gguf::GgufWriter& w) { set_u32(w, "qwen3moe.expert_used_count", 0); }, "expert_used_count");
  refused("qwen3moe", [](gguf::GgufWriter& w) { w.remove("qwen3moe.expert_count"); }, "expert_count");
  refused("qwen3moe", [](gguf::GgufWriter& w) { w.remove("qwen3moe.expert_used_count"); }, "expert_used_count");
  // An expert count that disagrees with the tensors, a width that disagrees with them.
  refused("qwen3moe", [](gguf::GgufWriter& w) { set_u32(w, "qwen3moe.expert_count", 4); }, "ffn_gate_inp");
  refused("qwen3moe", [](gguf::GgufWriter& w) { set_u32(w, "qwen3moe.expert_feed_forward_length", 48); }, "_exps");
  refused("mixtral", [](gguf::GgufWriter& w) { set_u32(w, "llama.expert_count", 16); }, "ffn_gate_inp");
  // Missing pieces: a stack, lfm2moe's selection bias, qwen35moe's shared-expert gate, the gating.
  refused("qwen3moe", [](gguf::GgufWriter& w) { w.remove_tensor("blk.1.ffn_down_exps.weight"); }, "blk.1.ffn_down_exps");
  refused("lfm2moe", [](gguf::GgufWriter& w) { w.remove_tensor("blk.2.exp_probs_b.bias"); }, "exp_probs_b");
  refused("lfm2moe", [](gguf::GgufWriter& w) { w.remove("lfm2moe.expert_gating_func"); }, "expert_gating_func");
  refused("lfm2moe", [](gguf::GgufWriter& w) { set_u32(w, "lfm2moe.expert_gating_func", 7); }, "expert_gating_func");
  refused("qwen35moe", [](gguf::GgufWriter& w) { w.remove_tensor("blk.0.ffn_gate_inp_shexp.weight"); }, "ffn_gate_inp_shexp");
  // Experts where the architecture has none.
  auto dense = gguf::GgufFile::open(data_dir() + "/synth-mistral3-tiny-f32.gguf");
  ASSERT_TRUE(dense.has_value());
  auto w = gguf::GgufWriter::from_file(*dense);
  ASSERT_TRUE(w.has_value());
  set_u32(*w, "mistral3.expert_count", 8);
  auto g = gguf::GgufFile::from_bytes(w->to_bytes());
  ASSERT_TRUE(g.has_value());
  auto m = Model::from_gguf(std::move(*g));
  ASSERT_FALSE(m.has_value());
  EXPECT_EQ(m.status().code(), StatusCode::kUnsupported) << m.status().message();
}

// NaN router weights (a corrupt file whose values pass the loader) compute garbage but never crash
// or choose an expert out of range.
TEST(MoeModels, NaNRouterWeightsDecodeWithoutCrashing) {
  auto f = gguf::GgufFile::open(data_dir() + "/synth-qwen3moe-tiny-f32.gguf");
  ASSERT_TRUE(f.has_value());
  auto w = gguf::GgufWriter::from_file(*f);
  ASSERT_TRUE(w.has_value());
  const gguf::TensorInfo* r = f->find_tensor("blk.0.ffn_gate_inp.weight");
  ASSERT_TRUE(r);
  std::vector<uint8_t> bytes(r->nbytes);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (size_t i = 0; i < bytes.size() / 4; ++i) std::memcpy(bytes.data() + 4 * i, &nan, 4);
  w->remove_tensor(r->name);
  ASSERT_TRUE(w->add_tensor(r->name, TensorType::F32, {r->ne[0], r->ne[1]}, bytes).is_ok());
  auto g = gguf::GgufFile::from_bytes(w->to_bytes());
  ASSERT_TRUE(g.has_value());
  auto m = Model::from_gguf(std::move(*g));
  ASSERT_TRUE(m.has_value()) << m.status().message();
  auto ctx = make_context(*m);
  const std::vector<int32_t> ids = {1, 403, 407, 261, 378};
  EXPECT_TRUE(ctx->decode(Batch::from_tokens(ids, 0)).is_ok());
  EXPECT_TRUE(ctx->logits(-1).has_value());
}

}  // namespace
}  // namespace loom::test

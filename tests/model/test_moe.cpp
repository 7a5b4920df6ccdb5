// Mixture-of-experts feed-forward (model/forward_moe.cpp): the router's choice and weights per
// gating rule (against values worked out here), hostile router values (NaN, ties, infinities),
// the hyperparameters and bindings of the MoE synthetic files (tests/data/synth-*moe*-tiny-f32,
// synth-mixtral-tiny-f32; goldens from real llama.cpp in test_arch_golden), the decode bytes that
// count only the chosen experts, and refusals of inconsistent files naming the key or tensor.
// gpt-oss (synth-gpt-oss-tiny-{f32,mxfp4}): its clamped SwiGLU and attention sinks against values
// worked out here, its hyperparameters, bindings and refusals, sequence edits and the K-shift over
// its sliding layers, and `loom quantize`'s MXFP4_MOE mix of it. gemma4 with experts
// (synth-gemma4moe-tiny-f32): bindings, refusals, and that its router / expert scales count.
// llama-quantize's per-tensor types on the MoE files (MoeQuantize), and its Q4_K_M file of a wide
// qwen3moe made byte for byte.
#include "model_test_util.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "base/threadpool.h"
#include "gguf/gguf_writer.h"
#include "model/forward_internal.h"
#include "model/packing.h"
#include "model/quantize_model.h"
#include "ops/attention.h"
#include "ops/ops.h"
#include "quant/packed.h"

namespace loom::test {
namespace {

ModelHparams router(int64_t n_expert, int64_t n_used, model::ExpertGating g, bool norm) {
  ModelHparams hp;
  hp.n_expert = n_expert;
  hp.n_expert_used = n_used;
  hp.expert_gating = g;
  hp.expert_weights_norm = norm;
  return hp;
}

TEST(MoeRouting, SoftmaxChoosesTheLargestAndNormalises) {
  const ModelHparams hp = router(4, 2, model::ExpertGating::kSoftmax, true);
  std::vector<float> logits = {1.0f, 3.0f, 2.0f, 0.0f, /* token 1 */ 0.5f, -1.0f, 0.25f, 4.0f};
  std::vector<int32_t> chosen(4);
  std::vector<float> w(4);
  model::detail::route_tokens(hp, nullptr, logits.data(), 2, chosen.data(), w.data());
  EXPECT_EQ(chosen, (std::vector<int32_t>{1, 2, 3, 0}));
  // Normalised over the chosen two: e^3 / (e^3 + e^2), e^2 / (e^3 + e^2).
  EXPECT_NEAR(w[0], std::exp(3.0) / (std::exp(3.0) + std::exp(2.0)), 1e-6);
  EXPECT_NEAR(w[1], std::exp(2.0) / (std::exp(3.0) + std::exp(2.0)), 1e-6);
  EXPECT_NEAR(w[2] + w[3], 1.0, 1e-6);
  // Without normalisation the weights are the softmax over all four.
  const ModelHparams raw = router(4, 2, model::ExpertGating::kSoftmax, false);
  logits = {1.0f, 3.0f, 2.0f, 0.0f};
  model::detail::route_tokens(raw, nullptr, logits.data(), 1, chosen.data(), w.data());
  const double z = std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + 1.0;
  EXPECT_NEAR(w[0], std::exp(3.0) / z, 1e-6);
  EXPECT_NEAR(w[1], std::exp(2.0) / z, 1e-6);
}

TEST(MoeRouting, SigmoidChoosesByBiasedScoresAndWeighsByUnbiasedOnes) {
  // lfm2moe: the bias moves expert 0 (σ = 0.5, the lowest) to first place (0.5 + 0.5) ahead of
  // expert 1 (σ(2) = 0.88) and expert 2 (σ(1) = 0.73) for the choice; the weights stay σ(logit).
  const ModelHparams hp = router(3, 2, model::ExpertGating::kSigmoid, true);
  std::vector<float> logits = {0.0f, 2.0f, 1.0f};
  const std::vector<float> bias = {0.5f, 0.0f, 0.0f};
  std::vector<int32_t> chosen(2);
  std::vector<float> w(2);
  model::detail::route_tokens(hp, bias.data(), logits.data(), 1, chosen.data(), w.data());
  EXPECT_EQ(chosen, (std::vector<int32_t>{0, 1}));
  const double s1 = 1.0 / (1.0 + std::exp(-2.0)), s0 = 0.5;
  EXPECT_NEAR(w[0], s0 / (s1 + s0), 1e-6);
  EXPECT_NEAR(w[1], s1 / (s1 + s0), 1e-6);
}

TEST(MoeRouting, SoftmaxOverTheChosenLogitsAndAScale) {
  ModelHparams hp = router(4, 2, model::ExpertGating::kSoftmaxChosen, false);
  hp.expert_weights_scale = 2.5f;
  std::vector<float> logits = {-1.0f, 0.5f, 1.5f, 0.0f};
  std::vector<int32_t> chosen(2);
  std::vector<float> w(2);
  model::detail::route_tokens(hp, nullptr, logits.data(), 1, chosen.data(), w.data());
  EXPECT_EQ(chosen, (std::vector<int32_t>{2, 1}));
  const double e = std::exp(1.0);  // softmax of {1.5, 0.5}
  EXPECT_NEAR(w[0], 2.5 * e / (e + 1.0), 1e-6);
  EXPECT_NEAR(w[1], 2.5 / (e + 1.0), 1e-6);
}

TEST(MoeRouting, TiesNaNAndInfinitiesChooseDistinctValidExperts) {
  std::vector<int32_t> chosen(3);
  std::vector<float> w(3);
  {  // all equal: the lowest indices, weights equal
    const ModelHparams hp = router(5, 3, model::ExpertGating::kSoftmax, true);
    std::vector<float> logits(5, 0.25f);
    model::detail::route_tokens(hp, nullptr, logits.data(), 1, chosen.data(), w.data());
    EXPECT_EQ(chosen, (std::vector<int32_t>{0, 1, 2}));
    for (float v : w) EXPECT_NEAR(v, 1.0f / 3.0f, 1e-6);
  }
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (model::ExpertGating g :
       {model::ExpertGating::kSoftmax, model::ExpertGating::kSigmoid, model::ExpertGating::kSoftmaxChosen}) {
    for (const std::vector<float>& bad :
         {std::vector<float>{nan, 1.0f, nan, 2.0f, 0.0f}, std::vector<float>{nan, nan, nan, nan, nan},
          std::vector<float>{inf, -inf, inf, 0.0f, nan}, std::vector<float>{-inf, -inf, -inf, -inf, -inf}}) {
      const ModelHparams hp = router(5, 3, g, true);
      std::vector<float> logits = bad;
      model::detail::route_tokens(hp, nullptr, logits.data(), 1, chosen.data(), w.data());
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
    model::ExpertGating gating;
    bool norm;
  };
  for (const Want& c : {Want{"qwen3moe", Arch::kQwen3, 32, 0, 0, model::ExpertGating::kSoftmax, true},
                        Want{"olmoe", Arch::kLlama, 32, 0, 0, model::ExpertGating::kSoftmax, false},
                        Want{"mixtral", Arch::kLlama, 32, 0, 0, model::ExpertGating::kSoftmax, true},
                        Want{"qwen35moe", Arch::kQwen35, 32, 32, 0, model::ExpertGating::kSoftmax, true},
                        Want{"lfm2moe", Arch::kLfm2, 32, 0, 1, model::ExpertGating::kSigmoid, true},
                        Want{"granitemoe", Arch::kGranite, 32, 32, 0, model::ExpertGating::kSoftmax, true},
                        Want{"granitehybridmoe", Arch::kGraniteHybrid, 32, 32, 0, model::ExpertGating::kSoftmax, true},
                        Want{"qwen3next", Arch::kQwen35, 32, 32, 0, model::ExpertGating::kSoftmax, true}}) {
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
      const model::LayerWeights& l = w.layers[size_t(il)];
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
      const TensorView e3 = model::expert_view(l.ffn_down_exps, 3, hp.n_embd);
      EXPECT_EQ(e3.data, l.ffn_down_exps.row(3 * hp.n_embd));
      EXPECT_EQ(e3.rows, hp.n_embd);
    }
    // qwen35moe's and qwen3next's last trunk block stores gate|up fused.
    if (hp.arch == Arch::kQwen35) {
      EXPECT_TRUE(w.layers[size_t(hp.n_layer - 1)].gate_up_fused);
    }
    // qwen3next: the DeltaNet's layouts, one β|α projection, plain RoPE.
    const bool next = std::string(c.name) == "qwen3next";
    EXPECT_EQ(hp.delta_kv_interleaved, next);
    EXPECT_EQ(hp.delta_ba_fused, next);
    if (next) {
      EXPECT_EQ(hp.rope_sections[0] + hp.rope_sections[1] + hp.rope_sections[2], 0);
      EXPECT_EQ(w.layers[0].ssm_beta.rows, 2 * hp.ssm_dt_rank);
      EXPECT_TRUE(w.layers[0].ssm_alpha.empty());
    }
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
  auto refused = [](const std::string& name, const std::function<void(gguf::GgufWriter&)>& change, const std::string& says) {
    const Status st = load_changed(name, change);
    EXPECT_FALSE(st.is_ok()) << says;
    EXPECT_NE(st.message().find(says), std::string::npos) << st.message();
  };
  // More experts used than there are, none used, or none at all in an MoE architecture.
  refused(
      "qwen3moe", [](gguf::GgufWriter& w) { set_u32(w, "qwen3moe.expert_used_count", 9); }, "expert_used_count");
  refused(
      "qwen3moe", [](gguf::GgufWriter& w) { set_u32(w, "qwen3moe.expert_used_count", 0); }, "expert_used_count");
  refused(
      "qwen3moe", [](gguf::GgufWriter& w) { w.remove("qwen3moe.expert_count"); }, "expert_count");
  refused(
      "qwen3moe", [](gguf::GgufWriter& w) { w.remove("qwen3moe.expert_used_count"); }, "expert_used_count");
  // An expert count that disagrees with the tensors, a width that disagrees with them.
  refused(
      "qwen3moe", [](gguf::GgufWriter& w) { set_u32(w, "qwen3moe.expert_count", 4); }, "ffn_gate_inp");
  refused(
      "qwen3moe", [](gguf::GgufWriter& w) { set_u32(w, "qwen3moe.expert_feed_forward_length", 48); }, "_exps");
  refused(
      "mixtral", [](gguf::GgufWriter& w) { set_u32(w, "llama.expert_count", 16); }, "ffn_gate_inp");
  // Missing pieces: a stack, lfm2moe's selection bias, qwen35moe's shared-expert gate, the gating.
  refused(
      "qwen3moe", [](gguf::GgufWriter& w) { w.remove_tensor("blk.1.ffn_down_exps.weight"); }, "blk.1.ffn_down_exps");
  refused(
      "lfm2moe", [](gguf::GgufWriter& w) { w.remove_tensor("blk.2.exp_probs_b.bias"); }, "exp_probs_b");
  refused(
      "lfm2moe", [](gguf::GgufWriter& w) { w.remove("lfm2moe.expert_gating_func"); }, "expert_gating_func");
  refused(
      "lfm2moe", [](gguf::GgufWriter& w) { set_u32(w, "lfm2moe.expert_gating_func", 7); }, "expert_gating_func");
  refused(
      "qwen35moe", [](gguf::GgufWriter& w) { w.remove_tensor("blk.0.ffn_gate_inp_shexp.weight"); }, "ffn_gate_inp_shexp");
  // qwen3next: its fused β|α projection, its experts.
  refused(
      "qwen3next", [](gguf::GgufWriter& w) { w.remove_tensor("blk.1.ssm_ba.weight"); }, "blk.1.ssm_ba");
  refused(
      "qwen3next", [](gguf::GgufWriter& w) { w.remove("qwen3next.expert_count"); }, "expert_count");
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

// ---- gpt-oss ----------------------------------------------------------------------------------

TEST(MoeGptOss, SwigluOaiClampsAsTheReference) {
  // out = g·σ(1.702·g)·(u + 1) with g = min(gate, 7), u = clamp(up, -7, 7), worked out in double.
  auto want = [](double g, double u) {
    g = std::min(g, 7.0);
    u = std::clamp(u, -7.0, 7.0);
    return g / (1.0 + std::exp(-1.702 * g)) * (u + 1.0);
  };
  const std::vector<float> gate = {0.0f, 1.0f, -1.0f, 6.5f, 7.0f, 7.5f, 100.0f, -10.0f, -100.0f, 3.0f, 3.0f, 3.0f, 2.0f};
  const std::vector<float> up = {0.0f, 0.5f, 2.0f, -3.0f, 9.0f, -9.0f, 50.0f, 1.0f, 1.0f, 7.0f, -7.5f, -1.0f, 1e30f};
  std::vector<float> out = gate;
  ops::swiglu_oai_inplace(out.data(), up.data(), int64_t(out.size()), model::kSwigluOaiAlpha, model::kSwigluOaiLimit);
  for (size_t i = 0; i < gate.size(); ++i) {
    const double w = want(gate[i], up[i]);
    EXPECT_NEAR(out[i], w, 1e-6 * std::max(1.0, std::fabs(w))) << "gate " << gate[i] << " up " << up[i];
  }
  // The clamps by hand: a gate above 7 counts as 7 (7.5 and 100 alike), an up value beyond ±7 as
  // ±7; the gate is not clamped from below (-10 gives -10·σ(-17.02)·2, not -7·…).
  EXPECT_EQ(out[5], out[4] * float((-7.0 + 1.0) / (7.0 + 1.0)));
  EXPECT_NEAR(out[6], 7.0 / (1.0 + std::exp(-1.702 * 7.0)) * 8.0, 1e-5);
  EXPECT_NEAR(out[7], -10.0 / (1.0 + std::exp(17.02)) * 2.0, 1e-12);
  EXPECT_EQ(out[9], out[10] * float(8.0 / -6.0));
  EXPECT_EQ(out[11], 0.0f);  // up = -1: u + 1 = 0
  // NaN passes through (no crash, no clamp to a number).
  std::vector<float> g = {std::numeric_limits<float>::quiet_NaN(), 1.0f},
                     u = {1.0f, std::numeric_limits<float>::quiet_NaN()};
  ops::swiglu_oai_inplace(g.data(), u.data(), 2, model::kSwigluOaiAlpha, model::kSwigluOaiLimit);
  EXPECT_TRUE(std::isnan(g[0]) && std::isnan(g[1]));
}

TEST(MoeGptOss, RoutingIsASoftmaxOverTheChosenBiasedLogits) {
  // gpt-oss adds the router bias to the logits (the forward does, before route_tokens), chooses the
  // 4 largest biased logits and weighs them by a softmax over those 4, not renormalised, unscaled.
  auto m = load("gpt-oss");
  ASSERT_TRUE(m);
  const ModelHparams& hp = m->hparams();
  ASSERT_EQ(hp.expert_gating, model::ExpertGating::kSoftmaxChosen);
  ASSERT_FALSE(hp.expert_weights_norm);
  ASSERT_EQ(hp.expert_weights_scale, 0.0f);
  ModelHparams r = router(8, 4, hp.expert_gating, hp.expert_weights_norm);
  const std::vector<float> raw = {0.1f, 2.0f, -1.0f, 0.5f, 1.5f, 0.0f, -3.0f, 1.0f};
  const std::vector<float> bias = {1.0f, -1.5f, 0.0f, 0.0f, 0.0f, 2.0f, 0.0f, 0.25f};
  std::vector<float> logits(8);
  for (size_t e = 0; e < 8; ++e) logits[e] = raw[e] + bias[e];  // {1.1, 0.5, -1, 0.5, 1.5, 2, -3, 1.25}
  std::vector<int32_t> chosen(4);
  std::vector<float> w(4);
  model::detail::route_tokens(r, nullptr, logits.data(), 1, chosen.data(), w.data());
  EXPECT_EQ(chosen, (std::vector<int32_t>{5, 4, 7, 0}));
  const double z = std::exp(2.0) + std::exp(1.5) + std::exp(1.25) + std::exp(1.1);
  EXPECT_NEAR(w[0], std::exp(2.0) / z, 1e-6);
  EXPECT_NEAR(w[1], std::exp(1.5) / z, 1e-6);
  EXPECT_NEAR(w[2], std::exp(1.25) / z, 1e-6);
  EXPECT_NEAR(w[3], std::exp(1.1) / z, 1e-6);
}

// One attention problem over F32 K/V: n_tok tokens (causal over the last n_tok of n_kv cells, or
// token 0 seeing every cell), random values.
struct SinkProblem {
  int n_tok, n_kv, H = 4, Hkv = 2, D = 16;
  std::vector<float> q, k, v, mask;
  std::vector<int32_t> groups;
  ops::AttentionParams p;
  SinkProblem(int n_tok_, int n_kv_, uint32_t seed) : n_tok(n_tok_), n_kv(n_kv_) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    auto fill = [&](std::vector<float>& x, size_t n) {
      x.resize(n);
      for (float& f : x) f = nd(rng);
    };
    fill(q, size_t(n_tok * H * D));
    fill(k, size_t(n_kv * Hkv * D));
    fill(v, size_t(n_kv * Hkv * D));
    mask.assign(size_t(n_tok * n_kv), 0.0f);
    for (int t = 0; t < n_tok; ++t) {
      for (int c = n_kv - n_tok + t + 1; c < n_kv; ++c) mask[size_t(t * n_kv + c)] = -std::numeric_limits<float>::infinity();
    }
    groups.assign(size_t(n_tok), 0);
    p.n_tokens = n_tok;
    p.n_head = H;
    p.n_head_kv = Hkv;
    p.head_dim = D;
    p.n_kv = n_kv;
    p.k_type = p.v_type = TensorType::F32;
    p.k = k.data();
    p.v = v.data();
    p.k_row_bytes = p.v_row_bytes = sizeof(float) * size_t(Hkv * D);
    p.mask = mask.data();
    p.prefix_group = groups.data();
    p.scale = 1.0f / std::sqrt(float(D));
  }
  std::vector<float> run(const float* sinks, bool reference) const {
    ops::AttentionParams a = p;
    a.sinks = sinks;
    ThreadPool pool(2);
    std::vector<uint8_t> scratch(ops::attention_scratch_bytes(n_tok, n_kv, D, a.k_type, pool.size()));
    std::vector<float> out(size_t(n_tok * H * D));
    if (reference) ops::ref::attention(pool, a, q.data(), out.data(), scratch.data());
    else ops::attention(pool, a, q.data(), out.data(), scratch.data());
    return out;
  }
  // softmax over the visible cells and the sink (no value), worked out in double.
  std::vector<double> want(const float* sinks) const {
    std::vector<double> out(size_t(n_tok * H * D), 0.0);
    for (int t = 0; t < n_tok; ++t) {
      for (int h = 0; h < H; ++h) {
        const int kvh = h / (H / Hkv);
        std::vector<double> s;
        std::vector<int> cells;
        for (int c = 0; c < n_kv; ++c) {
          if (std::isinf(mask[size_t(t * n_kv + c)])) continue;
          double d = 0;
          for (int i = 0; i < D; ++i) d += double(q[size_t((t * H + h) * D + i)]) * k[size_t((c * Hkv + kvh) * D + i)];
          s.push_back(d * p.scale);
          cells.push_back(c);
        }
        double mx = sinks ? double(sinks[h]) : -INFINITY;
        for (double x : s) mx = std::max(mx, x);
        double z = sinks ? std::exp(double(sinks[h]) - mx) : 0.0;
        for (double x : s) z += std::exp(x - mx);
        for (size_t j = 0; j < s.size(); ++j) {
          const double wj = std::exp(s[j] - mx) / z;
          for (int i = 0; i < D; ++i) out[size_t((t * H + h) * D + i)] += wj * v[size_t((cells[j] * Hkv + kvh) * D + i)];
        }
      }
    }
    return out;
  }
};

TEST(MoeGptOss, AttentionSinksJoinTheSoftmaxSum) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> none = {-inf, -inf, -inf, -inf};
  const std::vector<float> sinks = {-2.0f, 0.0f, 3.0f, 30.0f};
  // Decode over few cells, over many (split ranges, merged), a prompt (tiles of several tokens).
  for (const auto& [n_tok, n_kv] : {std::pair{1, 5}, std::pair{1, 700}, std::pair{6, 40}, std::pair{6, 600}}) {
    SCOPED_TRACE(std::to_string(n_tok) + " tokens over " + std::to_string(n_kv) + " cells");
    const SinkProblem pr(n_tok, n_kv, uint32_t(n_kv * 7 + n_tok));
    for (bool reference : {false, true}) {
      SCOPED_TRACE(reference ? "reference" : "fast path");
      const std::vector<float> plain = pr.run(nullptr, reference);
      // A sink of -inf is no sink: the same bits.
      EXPECT_EQ(pr.run(none.data(), reference), plain);
      const std::vector<float> got = pr.run(sinks.data(), reference);
      const std::vector<double> want = pr.want(sinks.data()), want_plain = pr.want(nullptr);
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-5 * std::max(1.0, std::fabs(want_plain[i]))) << i;
      }
      // Every head's output shrinks by the sink's share of the sum; a sink of 30 leaves almost nothing.
      for (int t = 0; t < n_tok; ++t) {
        for (int h = 0; h < 4; ++h) {
          double a = 0, b = 0;
          for (int i = 0; i < 16; ++i) {
            a += std::fabs(got[size_t((t * 4 + h) * 16 + i)]);
            b += std::fabs(plain[size_t((t * 4 + h) * 16 + i)]);
          }
          EXPECT_LT(a, b) << "token " << t << " head " << h;
          if (h == 3) {
            EXPECT_LT(a, 1e-9 * b) << "token " << t;
          }
        }
      }
    }
  }
  // A row that sees no cell stays zero with a sink.
  SinkProblem pr(1, 8, 5);
  std::fill(pr.mask.begin(), pr.mask.end(), -inf);
  for (bool reference : {false, true}) {
    for (float x : pr.run(sinks.data(), reference)) EXPECT_EQ(x, 0.0f);
  }
}

TEST(MoeGptOss, HyperparametersAndBindings) {
  for (const char* name : {"gpt-oss", "gpt-oss-mxfp4"}) {
    SCOPED_TRACE(name);
    auto mm = Model::load(
        data_dir() + (std::string(name) == "gpt-oss" ? "/synth-gpt-oss-tiny-f32.gguf" : "/synth-gpt-oss-tiny-mxfp4.gguf"));
    ASSERT_TRUE(mm.has_value()) << mm.status().message();
    const auto& m = *mm;
    const ModelHparams& hp = m->hparams();
    EXPECT_EQ(hp.arch, Arch::kGptOss);
    EXPECT_EQ(hp.rope_mode, ops::RopeMode::kNeox);
    EXPECT_EQ(hp.n_expert, 8);
    EXPECT_EQ(hp.n_expert_used, 4);
    EXPECT_EQ(hp.n_ff_exp, 64);
    EXPECT_EQ(hp.ffn_act, model::FfnAct::kSwigluOai);
    EXPECT_EQ(hp.n_head * hp.head_dim, 128);  // wider than n_embd 64
    // Even layers slide over 8 tokens, odd ones see everything; YaRN from the file.
    EXPECT_EQ(hp.swa_window, 8);
    for (int il = 0; il < 4; ++il) EXPECT_EQ(hp.is_swa_layer(il), il % 2 == 0) << il;
    EXPECT_EQ(hp.rope_scaling, model::RopeScalingKind::kYarn);
    EXPECT_EQ(hp.rope_freq_scale, 0.25f);
    EXPECT_EQ(hp.n_ctx_orig_yarn, 32);
    EXPECT_EQ(hp.rope_freq_base_swa, hp.rope_freq_base);
    for (const model::LayerWeights& l : m->weights().layers) {
      EXPECT_TRUE(l.bq && l.bk && l.bv && l.bo && l.attn_sinks);
      EXPECT_TRUE(l.ffn_gate_inp_b && l.ffn_gate_exps_b && l.ffn_up_exps_b && l.ffn_down_exps_b);
      EXPECT_TRUE(l.ffn_norm);  // post_attention_norm
      EXPECT_EQ(l.post_attn_norm, nullptr);
      EXPECT_EQ(l.ffn_up_exps.rows, 8 * 64);
      EXPECT_EQ(l.ffn_down_exps.type, std::string(name) == "gpt-oss" ? TensorType::F32 : TensorType::MXFP4);
      // The MXFP4 stacks are packed where this CPU has MXFP4 packed kernels (x86-64, AArch64).
      if (std::string(name) != "gpt-oss") {
        const bool packs = model::detail::repacking_enabled() && quant::packed_kernels_available(TensorType::MXFP4);
        EXPECT_EQ(l.ffn_down_exps.packed != nullptr, packs);
        EXPECT_EQ(l.ffn_up_exps.packed != nullptr, packs);
      }
    }
    auto ctx = make_context(m);
    ASSERT_TRUE(ctx);
    EXPECT_EQ(ctx->params().yarn_ext_factor, 1.0f);
  }
}

Status load_gpt_oss_changed(const std::function<void(gguf::GgufWriter&)>& change) { return load_changed("gpt-oss", change); }

TEST(MoeGptOss, InconsistentFilesAreRefused) {
  auto refused = [](const std::function<void(gguf::GgufWriter&)>& change, const std::string& says) {
    const Status st = load_gpt_oss_changed(change);
    EXPECT_FALSE(st.is_ok()) << says;
    EXPECT_NE(st.message().find(says), std::string::npos) << st.message();
  };
  refused([](gguf::GgufWriter& w) { set_u32(w, "gpt-oss.expert_used_count", 9); }, "expert_used_count");
  refused([](gguf::GgufWriter& w) { set_u32(w, "gpt-oss.expert_count", 16); }, "ffn_gate_inp");
  refused([](gguf::GgufWriter& w) { w.remove("gpt-oss.expert_count"); }, "expert_count");
  refused([](gguf::GgufWriter& w) { w.remove("gpt-oss.expert_feed_forward_length"); }, "expert_feed_forward_length");
  refused([](gguf::GgufWriter& w) { set_u32(w, "gpt-oss.expert_feed_forward_length", 32); }, "_exps");
  refused([](gguf::GgufWriter& w) { w.remove("gpt-oss.attention.sliding_window"); }, "sliding_window");
  refused([](gguf::GgufWriter& w) { set_u32(w, "gpt-oss.rope.dimension_count", 8); }, "rope.dimension_count");
  refused([](gguf::GgufWriter& w) { set_u32(w, "gpt-oss.attention.head_count", 4); }, "attn_q");
  for (const char* t :
       {"blk.1.attn_sinks.weight", "blk.0.attn_output.bias", "blk.2.ffn_gate_inp.bias", "blk.3.ffn_gate_exps.bias",
        "blk.0.ffn_up_exps.bias", "blk.1.ffn_down_exps.bias", "blk.2.post_attention_norm.weight", "blk.0.attn_k.bias"}) {
    refused([t](gguf::GgufWriter& w) { w.remove_tensor(t); }, t);
  }
  // A sink vector of the wrong length.
  refused(
      [](gguf::GgufWriter& w) {
        w.remove_tensor("blk.0.attn_sinks.weight");
        std::vector<uint8_t> b(4 * 4, 0);
        ASSERT_TRUE(w.add_tensor("blk.0.attn_sinks.weight", TensorType::F32, {4}, b).is_ok());
      },
      "attn_sinks");
  // Without q/k/v biases (optional in the reference, all three) the file loads.
  EXPECT_TRUE(load_gpt_oss_changed([](gguf::GgufWriter& w) {
                for (int il = 0; il < 4; ++il) {
                  for (const char* n : {"attn_q.bias", "attn_k.bias", "attn_v.bias"})
                    w.remove_tensor("blk." + std::to_string(il) + "." + n);
                }
              }).is_ok());
}

std::vector<float> feed(Context& ctx, const std::vector<int32_t>& ids, int pos0) {
  Batch b;
  for (size_t i = 0; i < ids.size(); ++i) b.add(ids[i], pos0 + int32_t(i), {0}, i + 1 == ids.size());
  const Status st = ctx.decode(b);
  EXPECT_TRUE(st.is_ok()) << st.message();
  auto l = ctx.logits(-1);
  return l ? std::vector<float>(l->begin(), l->end()) : std::vector<float>{};
}

std::unique_ptr<Context> f32_context(std::shared_ptr<const Model> m, bool swa_full = false) {
  ContextParams cp;
  cp.n_ctx = 512;
  cp.n_batch = cp.n_ubatch = 512;
  cp.n_threads = 2;
  cp.type_k = cp.type_v = TensorType::F32;
  cp.swa_full = swa_full;
  auto ctx = Context::create(std::move(m), cp);
  EXPECT_TRUE(ctx.has_value()) << ctx.status().message();
  return ctx ? std::move(*ctx) : nullptr;
}

std::vector<int32_t> long_prompt(const Model& m) {
  return m.vocab().tokenize("The quick brown fox jumps over the lazy dog because it wanted to see the big red ball", true,
                            false);
}

// The K-shift turns every layer's K (sliding and full, YaRN's frequencies): a sequence decoded at
// positions 50.. and shifted by -50 continues as one decoded from 0 (F32 K/V).
TEST(MoeGptOss, KShiftOverSlidingAndFullLayers) {
  auto m = load("gpt-oss");
  ASSERT_TRUE(m);
  const auto p = long_prompt(*m);
  ASSERT_GT(p.size(), 12u);  // longer than the window
  const std::vector<int32_t> head(p.begin(), p.end() - 1);
  for (bool swa_full : {false, true}) {
    SCOPED_TRACE(swa_full ? "swa_full" : "window cache");
    auto shifted = f32_context(m, swa_full);
    ASSERT_TRUE(shifted);
    feed(*shifted, head, 50);
    ASSERT_TRUE(shifted->seq_add(0, 0, -1, -50).is_ok());
    const auto got = feed(*shifted, {p.back()}, int(p.size()) - 1);
    auto fresh = f32_context(m, swa_full);
    const auto want = feed(*fresh, p, 0);
    EXPECT_LE(max_abs_diff(got, want), 1e-4f * max_abs(want));
  }
}

// Removing a sequence's tail and decoding it again, token by token, gives the prompt's logits; the
// sliding layers see only the last 8 positions either way.
TEST(MoeGptOss, SequenceEditsAndDecodeMatchThePrompt) {
  auto m = load("gpt-oss");
  ASSERT_TRUE(m);
  const auto p = long_prompt(*m);
  auto fresh = f32_context(m);
  const auto want = feed(*fresh, p, 0);
  auto ctx = f32_context(m);
  feed(*ctx, p, 0);
  const int keep = int(p.size()) - 10;
  ASSERT_TRUE(ctx->seq_rm(0, keep, -1).is_ok());
  std::vector<float> got;
  for (int i = keep; i < int(p.size()); ++i) got = feed(*ctx, {p[size_t(i)]}, i);
  EXPECT_LE(max_abs_diff(got, want), 1e-4f * max_abs(want));
}

// `loom quantize` MXFP4_MOE: byte for byte llama-quantize's file; the expert stacks MXFP4, every
// other quantizable matrix Q8_0, the router, norms, biases and sinks kept.
TEST(MoeGptOss, QuantizeMxfp4MoeMix) {
  auto f = gguf::GgufFile::open(data_dir() + "/synth-gpt-oss-tiny-f32.gguf");
  ASSERT_TRUE(f.has_value());
  model::QuantizeParams qp;
  qp.ftype = model::FileType::MOSTLY_MXFP4_MOE;
  qp.n_threads = 2;
  {
    // In llama.cpp's tensor order the file is llama-quantize's (llama_model_quantize with
    // LLAMA_FTYPE_MOSTLY_MXFP4_MOE on this file, 1 thread: 421664 bytes, FNV-1a 64 below).
    model::QuantizeParams lo = qp;
    lo.llama_cpp_order = true;
    auto lw = model::quantize_model(*f, lo);
    ASSERT_TRUE(lw.has_value()) << lw.status().message();
    const std::vector<uint8_t> bytes = lw->to_bytes();
    uint64_t h = 1469598103934665603ull;
    for (uint8_t c : bytes) h = (h ^ c) * 1099511628211ull;
    EXPECT_EQ(bytes.size(), 421664u);
    EXPECT_EQ(h, 0x70df73cca49c145full);
  }
  auto w = model::quantize_model(*f, qp);
  ASSERT_TRUE(w.has_value()) << w.status().message();
  auto g = gguf::GgufFile::from_bytes(w->to_bytes());
  ASSERT_TRUE(g.has_value()) << g.status().message();
  for (const auto& t : g->tensors()) {
    const std::string n = t.name;
    TensorType want = TensorType::F32;
    if (n.find("_exps.weight") != std::string::npos) want = TensorType::MXFP4;
    else if (n.find(".weight") != std::string::npos && n.find("norm") == std::string::npos &&
             n.find("ffn_gate_inp") == std::string::npos && n.find("attn_sinks") == std::string::npos)
      want = TensorType::Q8_0;
    EXPECT_EQ(t.type, want) << n;
  }
  // The result loads and decodes (its numbers are llama-quantize's file's: see the hash above).
  auto q = Model::from_gguf(std::move(*g));
  ASSERT_TRUE(q.has_value()) << q.status().message();
  EXPECT_EQ((*q)->weights().layers[0].ffn_up_exps.type, TensorType::MXFP4);
  EXPECT_EQ((*q)->weights().layers[0].wq.type, TensorType::Q8_0);
  auto cq = f32_context(*q);
  const auto a = feed(*cq, long_prompt(**q), 0);
  ASSERT_EQ(a.size(), 512u);
  for (float x : a) ASSERT_TRUE(std::isfinite(x));
}

// ---- gemma4 with experts -----------------------------------------------------------------------

// A copy of synth-gemma4moe with one change, loaded from memory.
Expected<std::shared_ptr<const Model>> gemma4moe_changed(const std::function<void(gguf::GgufWriter&)>& change) {
  LOOM_ASSIGN_OR_RETURN(auto f, gguf::GgufFile::open(data_dir() + "/synth-gemma4moe-tiny-f32.gguf"));
  LOOM_ASSIGN_OR_RETURN(auto w, gguf::GgufWriter::from_file(f));
  change(w);
  LOOM_ASSIGN_OR_RETURN(auto g, gguf::GgufFile::from_bytes(w.to_bytes()));
  LOOM_ASSIGN_OR_RETURN(auto m, Model::from_gguf(std::move(g)));
  return std::shared_ptr<const Model>(std::move(m));
}

// Replaces an F32 tensor by one of the same shape filled with v.
void fill_tensor(gguf::GgufWriter& w, const gguf::GgufFile& f, const std::string& name, float v) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  ASSERT_TRUE(t) << name;
  std::vector<int64_t> ne(t->ne.begin(), t->ne.begin() + t->n_dims);
  std::vector<uint8_t> bytes(t->nbytes);
  for (size_t i = 0; i < bytes.size() / 4; ++i) std::memcpy(bytes.data() + 4 * i, &v, 4);
  w.remove_tensor(name);
  ASSERT_TRUE(w.add_tensor(name, TensorType::F32, ne, bytes).is_ok());
}

TEST(MoeGemma4, HyperparametersAndBindings) {
  auto mm = Model::load(data_dir() + "/synth-gemma4moe-tiny-f32.gguf");
  ASSERT_TRUE(mm.has_value()) << mm.status().message();
  const auto& m = *mm;
  const ModelHparams& hp = m->hparams();
  EXPECT_EQ(hp.arch, Arch::kGemma4);
  EXPECT_EQ(hp.n_expert, 8);
  EXPECT_EQ(hp.n_expert_used, 2);
  EXPECT_EQ(hp.n_ff_exp, 32);
  EXPECT_EQ(hp.expert_gating, model::ExpertGating::kSoftmax);
  EXPECT_TRUE(hp.expert_weights_norm);
  EXPECT_TRUE(hp.moe_beside_dense);
  EXPECT_EQ(hp.n_ff_at(5), 256);  // the dense half keeps gemma4's per-layer widths
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    SCOPED_TRACE(il);
    const model::LayerWeights& l = m->weights().layers[size_t(il)];
    EXPECT_TRUE(hp.layer_is_moe(il));
    EXPECT_EQ(l.ffn_gate.rows, hp.n_ff_at(il));  // the dense FFN beside the experts
    EXPECT_EQ(l.ffn_down.cols, hp.n_ff_at(il));
    EXPECT_EQ(l.ffn_gate_inp.rows, 8);
    EXPECT_TRUE(l.ffn_gate_inp_s && l.pre_ffn_norm_2 && l.post_ffn_norm_1 && l.post_ffn_norm_2 && l.post_ffn_norm);
    EXPECT_TRUE(l.ffn_down_exps_s);
    EXPECT_EQ(l.ffn_gate_exps_s, nullptr);
    EXPECT_EQ(l.gate_up_fused, il == 3);
    EXPECT_EQ(l.ffn_up_exps.rows, 8 * 32 * (il == 3 ? 2 : 1));
  }
}

TEST(MoeGemma4, InconsistentFilesAreRefused) {
  auto refused = [](const std::function<void(gguf::GgufWriter&)>& change, const std::string& says) {
    auto m = gemma4moe_changed(change);
    ASSERT_FALSE(m.has_value()) << says;
    EXPECT_NE(m.status().message().find(says), std::string::npos) << m.status().message();
  };
  refused([](gguf::GgufWriter& w) { w.remove("gemma4.expert_feed_forward_length"); }, "expert_feed_forward_length");
  refused([](gguf::GgufWriter& w) { set_u32(w, "gemma4.expert_used_count", 9); }, "expert_used_count");
  refused([](gguf::GgufWriter& w) { set_u32(w, "gemma4.expert_count", 4); }, "ffn_gate_inp");
  refused([](gguf::GgufWriter& w) { w.remove_tensor("blk.2.ffn_gate_inp.scale"); }, "blk.2.ffn_gate_inp.scale");
  refused([](gguf::GgufWriter& w) { w.remove_tensor("blk.0.pre_ffw_norm_2.weight"); }, "pre_ffw_norm_2");
  refused([](gguf::GgufWriter& w) { w.remove_tensor("blk.6.post_ffw_norm_1.weight"); }, "post_ffw_norm_1");
  refused([](gguf::GgufWriter& w) { w.remove_tensor("blk.1.ffn_gate.weight"); }, "blk.1.ffn_gate.weight");
  refused(
      [](gguf::GgufWriter& w) {
        w.remove("gemma4.expert_feed_forward_length");
        ASSERT_TRUE(w.set_i32_array("gemma4.expert_feed_forward_length", {32, 32, 32, 48, 32, 32, 32}).is_ok());
      },
      "expert_feed_forward_length");
  // One width per layer, all equal, is the same model.
  auto same = gemma4moe_changed([](gguf::GgufWriter& w) {
    w.remove("gemma4.expert_feed_forward_length");
    ASSERT_TRUE(w.set_i32_array("gemma4.expert_feed_forward_length", {32, 32, 32, 32, 32, 32, 32}).is_ok());
  });
  ASSERT_TRUE(same.has_value()) << same.status().message();
  EXPECT_EQ((*same)->hparams().n_ff_exp, 32);
}

// The golden (ArchGolden, synth-gemma4moe-tiny-f32) is within 1e-3; without the router's input
// scale or the per-expert scales the same prompt misses it by far: the test model makes both count.
TEST(MoeGemma4, RouterAndExpertScalesMoveTheLogits) {
  const auto g = load_json(data_dir() + "/synth-gemma4moe-tiny-f32.json");
  const auto& run = g["runs"][1];
  const auto want = read_f32_file(data_dir() + "/" + run["last_logits_file"].get<std::string>());
  const auto ids = run["prompt_ids"].get<std::vector<int32_t>>();
  auto f = gguf::GgufFile::open(data_dir() + "/synth-gemma4moe-tiny-f32.gguf");
  ASSERT_TRUE(f.has_value());
  auto miss = [&](const std::function<void(gguf::GgufWriter&)>& change) {
    auto m = gemma4moe_changed(change);
    EXPECT_TRUE(m.has_value()) << m.status().message();
    if (!m) return 0.0f;
    auto ctx = f32_context(*m);
    return max_abs_diff(feed(*ctx, ids, 0), want) / max_abs(want);
  };
  EXPECT_LE(miss([](gguf::GgufWriter&) {}), 1e-3f);
  EXPECT_GT(miss([&](gguf::GgufWriter& w) {
              for (int il = 0; il < 7; ++il) w.remove_tensor("blk." + std::to_string(il) + ".ffn_down_exps.scale");
            }),
            1e-2f);
  EXPECT_GT(miss([&](gguf::GgufWriter& w) {
              for (int il = 0; il < 7; ++il) fill_tensor(w, *f, "blk." + std::to_string(il) + ".ffn_gate_inp.scale", 1.0f);
            }),
            1e-2f);
}

// ---- llama-quantize's rules on mixture-of-experts files ----------------------------------------

// The wide qwen3moe (2 layers of n_embd 256, 8 experts of 256, F16 matrices) that
// tests/data/synth-qwen3moe-kq-q4_k_m.gguf (llama-quantize's Q4_K_M) was made from: 7 MB, so the
// test makes it (generated_model: size and hash as when the golden was made).
std::string wide_qwen3moe_f16() {
  return generated_model("synth-qwen3moe-kq-f16", "bench-shape qwen3moe-kq", 7375872, 0xa9817a9f3466db0aull);
}

// loom's plan gives every tensor the type llama-quantize gave it (tests/data/moe-quant-types.json,
// tools/dev/moe-quant-types.sh): the k-quant and legacy mixes of qwen3moe (narrow: fallbacks; wide:
// the K-quant rules themselves), Mixtral-style llama, gpt-oss, qwen35moe, olmoe, lfm2moe,
// granitehybrid with experts and gemma4 with experts — attn_v / attn_k Q8_0 and attn_output Q5_K
// with 8 experts, ffn_down_exps by the layer in its name, routers, scales and norms kept.
TEST(MoeQuantize, TypesAreLlamaQuantizes) {
  const nlohmann::json want = load_json(data_dir() + "/moe-quant-types.json");
  ASSERT_GE(want.size(), 9u);
  for (const auto& [base, mixes] : want.items()) {
    const std::string path = base == "synth-qwen3moe-kq-f16.gguf" ? wide_qwen3moe_f16() : data_dir() + "/" + base;
    ASSERT_FALSE(path.empty()) << base;
    auto f = gguf::GgufFile::open(path);
    ASSERT_TRUE(f.has_value()) << f.status().message();
    for (const auto& [mix, types] : mixes.items()) {
      SCOPED_TRACE(base + " " + mix);
      model::QuantizeParams qp;
      auto ft = model::parse_file_type(mix);
      ASSERT_TRUE(ft.has_value()) << mix;
      qp.ftype = *ft;
      auto plan = model::plan_tensor_types(*f, qp);
      ASSERT_TRUE(plan.has_value()) << plan.status().message();
      ASSERT_EQ(types.size(), f->tensors().size());
      for (size_t i = 0; i < plan->size(); ++i) {
        const std::string& name = f->tensors()[i].name;
        ASSERT_TRUE(types.contains(name)) << name;
        EXPECT_EQ(std::string(tensor_type_name((*plan)[i].type)), types[name].get<std::string>()) << name;
      }
    }
  }
}

// loom quantize Q4_K_M of the wide qwen3moe, in llama.cpp's tensor order, is llama-quantize's file
// byte for byte (the one the MoeKQuantGolden goldens ran).
TEST(MoeQuantize, Q4KMOfAWideQwen3MoeIsLlamaQuantizesFile) {
  const std::string path = wide_qwen3moe_f16();
  ASSERT_FALSE(path.empty());
  auto f = gguf::GgufFile::open(path);
  ASSERT_TRUE(f.has_value()) << f.status().message();
  model::QuantizeParams qp;
  qp.ftype = model::FileType::MOSTLY_Q4_K_M;
  qp.n_threads = 2;
  qp.llama_cpp_order = true;
  auto w = model::quantize_model(*f, qp);
  ASSERT_TRUE(w.has_value()) << w.status().message();
  const std::vector<uint8_t> got = w->to_bytes();
  const std::vector<uint8_t> want = read_file(data_dir() + "/synth-qwen3moe-kq-q4_k_m.gguf");
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want);
}

}  // namespace
}  // namespace loom::test

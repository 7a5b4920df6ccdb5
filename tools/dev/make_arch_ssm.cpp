// make_arch_variant's generator for state-space models (mamba, mamba2, granitehybrid): a model
// from scratch with IN's tokenizer and random weights (make_ssm_model in make_arch_families.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "make_arch_families.h"

namespace loom {
namespace {

// make_ssm_model's layout (see above).
struct SsmDims {
  bool v2 = false, granite = false;
  std::string a;
  int64_t E = 0, L = 0, V = 0;
  int64_t Di = 0, S = 16, K = 4, G = 2, H = 0, R = 0, Cc = 0;
  // granitehybrid's attention layers and FFN.
  int64_t n_head = 4, n_head_kv = 2, D = 16, F = 0;
  std::vector<int64_t> attn_layers;

  bool is_attn(int64_t il) const { return std::find(attn_layers.begin(), attn_layers.end(), il) != attn_layers.end(); }
};

SsmDims ssm_dims(SsmKind kind, int64_t E, int64_t L, int64_t V, const std::vector<int64_t>& attn_layers) {
  SsmDims d;
  d.v2 = kind != SsmKind::kMamba, d.granite = kind == SsmKind::kGraniteHybrid;
  d.a = d.granite ? "granitehybrid" : d.v2 ? "mamba2" : "mamba";
  d.E = E, d.L = L, d.V = V;
  d.Di = 2 * E, d.H = d.Di / 16, d.R = d.v2 ? d.H : (E + 15) / 16;
  d.Cc = d.v2 ? d.Di + 2 * d.G * d.S : d.Di;
  d.F = 2 * E;
  d.attn_layers = attn_layers;
  return d;
}

// granitehybrid's keys: the converter's per-layer kv heads (0 = a Mamba-2 layer), the
// multipliers, no RoPE.
Status set_granite_hybrid_metadata(gguf::GgufWriter& w, const SsmDims& d) {
  const std::string& a = d.a;
  std::vector<int32_t> kv_heads;
  for (int64_t il = 0; il < d.L; ++il) kv_heads.push_back(d.is_attn(il) ? int32_t(d.n_head_kv) : 0);
  LOOM_RETURN_IF_ERROR(w.set_i32_array(a + ".attention.head_count_kv", kv_heads));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.key_length", uint32_t(d.D)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.value_length", uint32_t(d.D)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".rope.dimension_count", uint32_t(d.D)));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".rope.freq_base", 10000.0f));
  LOOM_RETURN_IF_ERROR(w.set_bool(a + ".rope.scaling.finetuned", false));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".embedding_scale", 12.0f));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".residual_scale", 0.22f));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".attention.scale", 0.125f));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".logit_scale", 4.0f));
  return w.set_u32(a + ".vocab_size", uint32_t(d.V));
}

Status set_ssm_metadata(gguf::GgufWriter& w, const SsmDims& d) {
  const std::string& a = d.a;
  LOOM_RETURN_IF_ERROR(w.set_string("general.architecture", a));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".context_length", 1u << 20));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".embedding_length", uint32_t(d.E)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".feed_forward_length", d.granite ? uint32_t(d.F) : 0));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.head_count", d.granite ? uint32_t(d.n_head) : 0));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".block_count", uint32_t(d.L)));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".ssm.conv_kernel", uint32_t(d.K)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".ssm.inner_size", uint32_t(d.Di)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".ssm.state_size", uint32_t(d.S)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".ssm.time_step_rank", uint32_t(d.R)));
  if (d.v2) LOOM_RETURN_IF_ERROR(w.set_u32(a + ".ssm.group_count", uint32_t(d.G)));
  if (d.granite) LOOM_RETURN_IF_ERROR(set_granite_hybrid_metadata(w, d));
  return Status::ok();
}

// Adds make_ssm_model's tensors (matrices F16 when f16, else F32) with its random draws.
struct SsmFiller {
  gguf::GgufWriter& w;
  bool f16;
  std::mt19937& rng;
  std::normal_distribution<float> unit{0.0f, 1.0f};
  std::uniform_real_distribution<float> uni{0.0f, 1.0f};

  template <typename Gen>
  Status operator()(const std::string& name, std::vector<int64_t> ne, bool matrix, Gen&& gen) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    std::vector<uint8_t> bytes;
    if (matrix && f16) {
      bytes.resize(size_t(n) * 2);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(gen(i));
        std::memcpy(bytes.data() + 2 * i, &h, 2);
      }
      return w.add_tensor(name, TensorType::F16, ne, bytes);
    }
    bytes.resize(size_t(n) * 4);
    for (int64_t i = 0; i < n; ++i) {
      const float v = gen(i);
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    }
    return w.add_tensor(name, TensorType::F32, ne, bytes);
  }
  auto normal(float std) {
    return [this, std](int64_t) { return std * unit(rng); };
  }
  auto fan_in(int64_t n) { return normal(1.0f / std::sqrt(float(n))); }
  auto norm_weight() {
    return [this](int64_t) { return 1.0f + 0.1f * unit(rng); };
  }
  // softplus^-1 of a log-uniform step in [1e-3, 1e-1].
  auto dt_bias() {
    return [this](int64_t) {
      const float dt = std::exp(std::log(1e-3f) + uni(rng) * (std::log(1e-1f) - std::log(1e-3f)));
      return std::log(std::expm1(dt));
    };
  }
};

// granitehybrid's attention layer: q/k/v/o.
Status add_ssm_attention(const SsmDims& d, SsmFiller& add, const std::string& p) {
  const int64_t E = d.E, D = d.D;
  LOOM_RETURN_IF_ERROR(add(p + "attn_q.weight", {E, d.n_head * D}, true, add.fan_in(E)));
  LOOM_RETURN_IF_ERROR(add(p + "attn_k.weight", {E, d.n_head_kv * D}, true, add.fan_in(E)));
  LOOM_RETURN_IF_ERROR(add(p + "attn_v.weight", {E, d.n_head_kv * D}, true, add.fan_in(E)));
  return add(p + "attn_output.weight", {d.n_head * D, E}, true, add.fan_in(d.n_head * D));
}

Status add_mamba2_mixer(const SsmDims& d, SsmFiller& add, const std::string& p) {
  const int64_t E = d.E, Di = d.Di, Cc = d.Cc, H = d.H, K = d.K, G = d.G;
  LOOM_RETURN_IF_ERROR(add(p + "ssm_in.weight", {E, Di + Cc + H}, true, add.fan_in(E)));
  LOOM_RETURN_IF_ERROR(add(p + "ssm_conv1d.weight", {K, Cc}, false, add.fan_in(K)));
  LOOM_RETURN_IF_ERROR(add(p + "ssm_conv1d.bias", {Cc}, false, add.normal(0.1f)));
  LOOM_RETURN_IF_ERROR(add(p + "ssm_dt.bias", {H}, false, add.dt_bias()));
  LOOM_RETURN_IF_ERROR(add(p + "ssm_a", {1, H}, false, [&](int64_t) { return -(1.0f + 15.0f * add.uni(add.rng)); }));
  LOOM_RETURN_IF_ERROR(add(p + "ssm_d", {1, H}, false, add.norm_weight()));
  return add(p + "ssm_norm.weight", {Di / G, G}, false, add.norm_weight());
}

Status add_mamba1_mixer(const SsmDims& d, SsmFiller& add, const std::string& p) {
  const int64_t E = d.E, Di = d.Di, R = d.R, S = d.S, K = d.K;
  LOOM_RETURN_IF_ERROR(add(p + "ssm_in.weight", {E, 2 * Di}, true, add.fan_in(E)));
  LOOM_RETURN_IF_ERROR(add(p + "ssm_conv1d.weight", {K, Di}, false, add.fan_in(K)));
  LOOM_RETURN_IF_ERROR(add(p + "ssm_conv1d.bias", {Di}, false, add.normal(0.1f)));
  LOOM_RETURN_IF_ERROR(add(p + "ssm_x.weight", {Di, R + 2 * S}, true, add.fan_in(Di)));
  LOOM_RETURN_IF_ERROR(add(p + "ssm_dt.weight", {R, Di}, true, add.normal(0.5f / std::sqrt(float(R)))));
  LOOM_RETURN_IF_ERROR(add(p + "ssm_dt.bias", {Di}, false, add.dt_bias()));
  LOOM_RETURN_IF_ERROR(
      add(p + "ssm_a", {S, Di}, false, [&](int64_t i) { return -float(i % S + 1) * std::exp(0.1f * add.unit(add.rng)); }));
  return add(p + "ssm_d", {Di}, false, add.norm_weight());
}

// Block il: norm, attention or the Mamba mixer, and granitehybrid's SwiGLU FFN.
Status add_ssm_block(const SsmDims& d, SsmFiller& add, int64_t il) {
  const int64_t E = d.E, F = d.F;
  const std::string p = "blk." + std::to_string(il) + ".";
  const bool attn = d.granite && d.is_attn(il);
  LOOM_RETURN_IF_ERROR(add(p + "attn_norm.weight", {E}, false, add.norm_weight()));
  if (attn) LOOM_RETURN_IF_ERROR(add_ssm_attention(d, add, p));
  else if (d.v2) LOOM_RETURN_IF_ERROR(add_mamba2_mixer(d, add, p));
  else LOOM_RETURN_IF_ERROR(add_mamba1_mixer(d, add, p));
  if (!attn) LOOM_RETURN_IF_ERROR(add(p + "ssm_out.weight", {d.Di, E}, true, add.normal(0.5f / std::sqrt(float(d.Di)))));
  if (d.granite) {
    LOOM_RETURN_IF_ERROR(add(p + "ffn_norm.weight", {E}, false, add.norm_weight()));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_gate.weight", {E, F}, true, add.fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_up.weight", {E, F}, true, add.fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_down.weight", {F, E}, true, add.fan_in(F)));
  }
  return Status::ok();
}

}  // namespace

Status make_ssm_model(const gguf::GgufFile& in, gguf::GgufWriter& w, SsmKind kind, int64_t E, int64_t L, bool f16,
                      bool untied, const std::vector<int64_t>& attn_layers, std::mt19937& rng) {
  LOOM_ASSIGN_OR_RETURN(const int64_t V, clear_model(in, w));
  const SsmDims d = ssm_dims(kind, E, L, V, attn_layers);
  LOOM_RETURN_IF_ERROR(set_ssm_metadata(w, d));
  SsmFiller add{w, f16, rng};
  // Granite scales the embeddings by 12: rows of N(0, 0.1) enter the residual stream at about 1.2.
  LOOM_RETURN_IF_ERROR(add("token_embd.weight", {E, V}, true, add.normal(d.granite ? 0.1f : 0.5f)));
  LOOM_RETURN_IF_ERROR(add("output_norm.weight", {E}, false, add.norm_weight()));
  // Granite divides the logits by 4: output rows 4x wider keep them O(1).
  const float out_std = (d.granite ? 4.0f : 1.0f) / std::sqrt(float(E));
  if (untied) LOOM_RETURN_IF_ERROR(add("output.weight", {E, V}, true, add.normal(out_std)));
  for (int64_t il = 0; il < L; ++il) LOOM_RETURN_IF_ERROR(add_ssm_block(d, add, il));
  return Status::ok();
}

}  // namespace loom

// make_arch_variant's generator for this year's small-model families (smollm3, granite, lfm2,
// qwen35): a model from scratch with IN's tokenizer and random weights, every distinctive feature
// of the family present. Shapes: n_embd 64, 4 heads of 16 with 2 kv heads, n_ff 128, F32.
//   smollm3: 4 layers, RoPE base 1e4 on layers 0-2, layer 3 without RoPE (the reference's NoPE step 4)
//   granite: 3 layers with Granite's multipliers: embedding 12, residual 0.22, attention 0.125, logits 1/4
//   lfm2:    4 layers, short-conv on 0 and 2 (l_cache 3), GQA attention with q/k norms on 1 and 3
//            (head_count_kv [0, 2, 0, 2]), NEOX RoPE base 1e6, the final norm as token_embd_norm
//   qwen35:  4 trunk layers, Gated DeltaNet on 0-2 (conv 4 taps, 2 key heads and 4 value heads of 16:
//            value head h reads key head h mod 2), gated attention on 3 (q projection with a per-head
//            gate, q/k norms, partial NEOX rotary of 8 of 16 dims with M-RoPE sections [2, 1, 1, 0],
//            base 1e7), the FFN norm named post_attention_norm, plus one multi-token-prediction block
//            (blk.4, nextn_predict_layers 1) that a runtime must load and leave unused
#include "make_arch_families.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/half.h"
#include "quant/quant.h"

namespace loom {

// Drops w's architecture keys and tensors (a copy of in), keeping the tokenizer; returns n_vocab.
Expected<int64_t> clear_model(const gguf::GgufFile& in, gguf::GgufWriter& w) {
  const std::string from = *in.get_string("general.architecture");
  for (const auto& kv : std::vector<gguf::KeyValue>(w.metadata())) {
    if (kv.key.rfind(from + ".", 0) == 0 || kv.key == "general.architecture") w.remove(kv.key);
  }
  for (const auto& t : in.tensors()) w.remove_tensor(t.name);
  const gguf::TensorInfo* emb = in.find_tensor("token_embd.weight");
  auto tokens = in.get_array("tokenizer.ggml.tokens");
  const int64_t V = emb ? int64_t(emb->ne[1]) : tokens ? int64_t((*tokens)->count) : 0;
  if (V <= 0) return invalid_argument("IN has neither token_embd.weight nor tokenizer.ggml.tokens");
  return V;
}

namespace {

// gemma4's dimensions: the tiny test shape, or shape's when it has one.
struct Gemma4Dims {
  int64_t E = 64, L = 7, H = 4, Hkv = 2, D = 32, Ds = 16, P = 8, n_shared = 2, window = 16, n_turning = 12;
  std::vector<int32_t> swa = {1, 1, 0, 1, 0, 1, 0};
  std::vector<int32_t> n_ff = {128, 128, 128, 128, 128, 256, 256};
};

Gemma4Dims gemma4_dims(const FamilyShape& shape) {
  Gemma4Dims g;
  if (shape.E > 0) {  // E2B-like: four sliding layers per global one, the last 20 reading shared K/V
    g.E = shape.E, g.L = shape.L, g.H = shape.H, g.Hkv = shape.Hkv, g.D = shape.D, g.Ds = shape.S, g.P = 256,
    g.n_shared = 20;
    g.window = 512, g.n_turning = g.D / 8;
    g.swa.clear();
    g.n_ff.clear();
    for (int64_t il = 0; il < g.L; ++il) {
      g.swa.push_back(il % 5 != 4);
      g.n_ff.push_back(int32_t(il >= g.L - g.n_shared ? 2 * shape.F : shape.F));
    }
  }
  return g;
}

Status set_gemma4_metadata(gguf::GgufWriter& w, const Gemma4Dims& g, int64_t V) {
  const std::string a = "gemma4";
  LOOM_RETURN_IF_ERROR(w.set_string("general.architecture", a));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".context_length", 4096));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".embedding_length", uint32_t(g.E)));
  LOOM_RETURN_IF_ERROR(w.set_i32_array(a + ".feed_forward_length", g.n_ff));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.head_count", uint32_t(g.H)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.head_count_kv", uint32_t(g.Hkv)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".block_count", uint32_t(g.L)));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.key_length", uint32_t(g.D)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.value_length", uint32_t(g.D)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.key_length_swa", uint32_t(g.Ds)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.value_length_swa", uint32_t(g.Ds)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".rope.dimension_count", uint32_t(g.D)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".rope.dimension_count_swa", uint32_t(g.Ds)));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".rope.freq_base", 1000000.0f));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".rope.freq_base_swa", 10000.0f));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.sliding_window", uint32_t(g.window)));
  std::vector<bool> pattern;
  for (int32_t v : g.swa) pattern.push_back(v != 0);
  LOOM_RETURN_IF_ERROR(w.set_bool_array(a + ".attention.sliding_window_pattern", pattern));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.shared_kv_layers", uint32_t(g.n_shared)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".embedding_length_per_layer_input", uint32_t(g.P)));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".final_logit_softcapping", 30.0f));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".vocab_size", uint32_t(V)));
  return Status::ok();
}

// gemma4 (tiny): 7 layers, sliding (window 16, heads of 16, base 1e4) on 0, 1, 3, 5 and global
// (heads of 32, base 1e6, rope_freqs: 12 pairs turning, 4 held still) on 2, 4, 6; the last two
// layers read the K/V of layers 3 and 4 (shared_kv_layers 2) and have a twice wider FFN (n_ff
// [128 x 5, 256 x 2]); layer 1 has no attn_v (V is K's projection); per-layer embeddings of 8;
// per-layer output scales; final soft-cap 30; tied output.
Status make_gemma4(const gguf::GgufFile& in, gguf::GgufWriter& w, std::mt19937& rng, const FamilyShape& shape) {
  LOOM_ASSIGN_OR_RETURN(const int64_t V, clear_model(in, w));
  const Gemma4Dims g = gemma4_dims(shape);
  const int64_t E = g.E, L = g.L, H = g.H, Hkv = g.Hkv, D = g.D, Ds = g.Ds, P = g.P, n_shared = g.n_shared;
  const int64_t n_turning = g.n_turning;
  const std::vector<int32_t>& swa = g.swa;
  const std::vector<int32_t>& n_ff = g.n_ff;
  LOOM_RETURN_IF_ERROR(set_gemma4_metadata(w, g, V));

  Draws rnd{rng};
  const TensorFiller add{w, shape.f16};
  auto normal = [&](float std) { return rnd.normal(std); };
  auto fan_in = [&](int64_t n) { return rnd.normal(1.0f / std::sqrt(float(n))); };
  auto norm_weight = rnd.norm_weight();
  // q and k are RMS-normed and scaled by 1: norm weights of about 0.5 keep the scores (and their
  // sensitivity to the F16 cache's rounding) moderate.
  auto qk_norm_weight = [&](int64_t) { return 0.5f + 0.05f * rnd.unit(rng); };
  LOOM_RETURN_IF_ERROR(add("token_embd.weight", {E, V}, normal(0.1f)));
  LOOM_RETURN_IF_ERROR(add("output_norm.weight", {E}, norm_weight));
  LOOM_RETURN_IF_ERROR(add("rope_freqs.weight", {D / 2}, [&](int64_t i) { return i < n_turning ? 1.0f : 1e30f; }));
  LOOM_RETURN_IF_ERROR(add("per_layer_token_embd.weight", {P * L, V}, normal(0.5f)));
  LOOM_RETURN_IF_ERROR(add("per_layer_model_proj.weight", {E, P * L}, fan_in(E)));
  LOOM_RETURN_IF_ERROR(add("per_layer_proj_norm.weight", {P}, norm_weight));
  for (int64_t il = 0; il < L; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const int64_t d = swa[size_t(il)] ? Ds : D;
    const bool own_kv = il < L - n_shared;
    LOOM_RETURN_IF_ERROR(add(p + "attn_norm.weight", {E}, norm_weight));
    LOOM_RETURN_IF_ERROR(add(p + "attn_q.weight", {E, H * d}, fan_in(E)));
    if (own_kv) {
      LOOM_RETURN_IF_ERROR(add(p + "attn_k.weight", {E, Hkv * d}, fan_in(E)));
      if (il != 1) LOOM_RETURN_IF_ERROR(add(p + "attn_v.weight", {E, Hkv * d}, fan_in(E)));
      LOOM_RETURN_IF_ERROR(add(p + "attn_k_norm.weight", {d}, qk_norm_weight));
    }
    LOOM_RETURN_IF_ERROR(add(p + "attn_q_norm.weight", {d}, qk_norm_weight));
    LOOM_RETURN_IF_ERROR(add(p + "attn_output.weight", {H * d, E}, fan_in(H * d)));
    LOOM_RETURN_IF_ERROR(add(p + "post_attention_norm.weight", {E}, norm_weight));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_norm.weight", {E}, norm_weight));
    const int64_t F = n_ff[size_t(il)];
    LOOM_RETURN_IF_ERROR(add(p + "ffn_gate.weight", {E, F}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_up.weight", {E, F}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_down.weight", {F, E}, fan_in(F)));
    LOOM_RETURN_IF_ERROR(add(p + "post_ffw_norm.weight", {E}, norm_weight));
    LOOM_RETURN_IF_ERROR(add(p + "inp_gate.weight", {E, P}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "proj.weight", {P, E}, fan_in(P)));
    LOOM_RETURN_IF_ERROR(add(p + "post_norm.weight", {E}, norm_weight));
    LOOM_RETURN_IF_ERROR(add(p + "layer_output_scale.weight", {1}, [&](int64_t) { return 0.5f + rnd.uni(rng); }));
  }
  return Status::ok();
}

// mistral3 (tiny): llama-shaped, 3 layers, 4 heads of 16 with 2 kv heads, YaRN (factor 4, original
// context 32, beta 32 / 1, yarn_log_multiplier 1) and attention temperature scaling 0.1 (queries
// from position 32 on are scaled), untied output.
Status make_mistral3(const gguf::GgufFile& in, gguf::GgufWriter& w, std::mt19937& rng, const FamilyShape& shape) {
  LOOM_ASSIGN_OR_RETURN(const int64_t V, clear_model(in, w));
  const std::string a = "mistral3";
  int64_t E = 64, L = 3, H = 4, Hkv = 2, D = 16, F = 128;
  int64_t orig = 32;
  float factor = 4.0f, base = 1e6f;
  if (shape.E > 0)
    E = shape.E, L = shape.L, H = shape.H, Hkv = shape.Hkv, D = shape.D, F = shape.F, orig = 16384, factor = 16.0f;
  LOOM_RETURN_IF_ERROR(w.set_string("general.architecture", a));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".context_length", uint32_t(orig * int64_t(factor))));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".embedding_length", uint32_t(E)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".feed_forward_length", uint32_t(F)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.head_count", uint32_t(H)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.head_count_kv", uint32_t(Hkv)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.key_length", uint32_t(D)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.value_length", uint32_t(D)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".rope.dimension_count", uint32_t(D)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".block_count", uint32_t(L)));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".rope.freq_base", base));
  LOOM_RETURN_IF_ERROR(w.set_string(a + ".rope.scaling.type", "yarn"));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".rope.scaling.factor", factor));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".rope.scaling.original_context_length", uint32_t(orig)));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".rope.scaling.yarn_beta_fast", 32.0f));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".rope.scaling.yarn_beta_slow", 1.0f));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".rope.scaling.yarn_log_multiplier", 1.0f));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".attention.temperature_scale", 0.1f));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".vocab_size", uint32_t(V)));
  Draws rnd{rng};
  const TensorFiller add{w, shape.f16};
  auto normal = [&](float std) { return rnd.normal(std); };
  auto fan_in = [&](int64_t n) { return rnd.normal(1.0f / std::sqrt(float(n))); };
  auto norm_weight = rnd.norm_weight();
  LOOM_RETURN_IF_ERROR(add("token_embd.weight", {E, V}, normal(0.5f)));
  LOOM_RETURN_IF_ERROR(add("output_norm.weight", {E}, norm_weight));
  if (shape.E == 0) LOOM_RETURN_IF_ERROR(add("output.weight", {E, V}, fan_in(E)));
  for (int64_t il = 0; il < L; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    LOOM_RETURN_IF_ERROR(add(p + "attn_norm.weight", {E}, norm_weight));
    LOOM_RETURN_IF_ERROR(add(p + "attn_q.weight", {E, H * D}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "attn_k.weight", {E, Hkv * D}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "attn_v.weight", {E, Hkv * D}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "attn_output.weight", {H * D, E}, fan_in(H * D)));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_norm.weight", {E}, norm_weight));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_gate.weight", {E, F}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_up.weight", {E, F}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_down.weight", {F, E}, fan_in(F)));
  }
  return Status::ok();
}

// gemma3n (tiny): 25 layers (the reference's fixed sizes need more than 20 to reach the shared-KV
// layers): n_embd 64, 4 heads of 16 with 2 kv heads, n_ff 128, sliding window 16 on 4 of every 5
// layers (layers 20-24 read layer 18's / 19's K/V), the fixed 4 AltUp streams, Laurel rank 64,
// per-layer inputs of 256, soft-cap 30, tied output.
Status make_gemma3n(const gguf::GgufFile& in, gguf::GgufWriter& w, std::mt19937& rng) {
  LOOM_ASSIGN_OR_RETURN(const int64_t V, clear_model(in, w));
  const std::string a = "gemma3n";
  const int64_t E = 64, L = 25, H = 4, Hkv = 2, D = 16, F = 128, P = 256, A = 4, R = 64;
  LOOM_RETURN_IF_ERROR(w.set_string("general.architecture", a));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".context_length", 4096));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".embedding_length", uint32_t(E)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".feed_forward_length", uint32_t(F)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.head_count", uint32_t(H)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.head_count_kv", uint32_t(Hkv)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.key_length", uint32_t(D)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.value_length", uint32_t(D)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".block_count", uint32_t(L)));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".rope.freq_base", 1000000.0f));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".rope.freq_base_swa", 10000.0f));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.sliding_window", 16));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".final_logit_softcapping", 30.0f));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".vocab_size", uint32_t(V)));
  Draws rnd{rng};
  const TensorFiller add{w, false};
  auto normal = [&](float std) { return rnd.normal(std); };
  auto fan_in = [&](int64_t n) { return rnd.normal(1.0f / std::sqrt(float(n))); };
  auto norm_weight = rnd.norm_weight();
  auto qk_norm_weight = [&](int64_t) { return 0.5f + 0.05f * rnd.unit(rng); };
  LOOM_RETURN_IF_ERROR(add("token_embd.weight", {E, V}, normal(0.1f)));
  LOOM_RETURN_IF_ERROR(add("output_norm.weight", {E}, norm_weight));
  LOOM_RETURN_IF_ERROR(add("altup_proj.weight", {E, E, A - 1}, fan_in(E)));
  LOOM_RETURN_IF_ERROR(add("altup_unembd_proj.weight", {E, E, A - 1}, fan_in(E)));
  LOOM_RETURN_IF_ERROR(add("per_layer_token_embd.weight", {P * L, V}, normal(0.5f)));
  LOOM_RETURN_IF_ERROR(add("per_layer_model_proj.weight", {E, P * L}, fan_in(E)));
  LOOM_RETURN_IF_ERROR(add("per_layer_proj_norm.weight", {P}, norm_weight));
  for (int64_t il = 0; il < L; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    LOOM_RETURN_IF_ERROR(add(p + "attn_norm.weight", {E}, norm_weight));
    LOOM_RETURN_IF_ERROR(add(p + "attn_q.weight", {E, H * D}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "attn_k.weight", {E, Hkv * D}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "attn_v.weight", {E, Hkv * D}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "attn_output.weight", {H * D, E}, fan_in(H * D)));
    LOOM_RETURN_IF_ERROR(add(p + "attn_q_norm.weight", {D}, qk_norm_weight));
    LOOM_RETURN_IF_ERROR(add(p + "attn_k_norm.weight", {D}, qk_norm_weight));
    LOOM_RETURN_IF_ERROR(add(p + "post_attention_norm.weight", {E}, norm_weight));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_norm.weight", {E}, norm_weight));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_gate.weight", {E, F}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_up.weight", {E, F}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_down.weight", {F, E}, fan_in(F)));
    LOOM_RETURN_IF_ERROR(add(p + "post_ffw_norm.weight", {E}, norm_weight));
    LOOM_RETURN_IF_ERROR(add(p + "inp_gate.weight", {E, P}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "proj.weight", {P, E}, fan_in(P)));
    LOOM_RETURN_IF_ERROR(add(p + "post_norm.weight", {E}, norm_weight));
    LOOM_RETURN_IF_ERROR(add(p + "altup_correct_coef.weight", {A, A}, normal(0.1f)));
    LOOM_RETURN_IF_ERROR(add(p + "altup_correct_scale.weight", {E}, norm_weight));
    LOOM_RETURN_IF_ERROR(add(p + "altup_predict_coef.weight", {A, A * A}, normal(0.1f)));
    LOOM_RETURN_IF_ERROR(add(p + "altup_router.weight", {E, A}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "altup_router_norm.weight", {E}, norm_weight));
    LOOM_RETURN_IF_ERROR(add(p + "laurel_l.weight", {E, R}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "laurel_r.weight", {R, E}, fan_in(R)));
    LOOM_RETURN_IF_ERROR(add(p + "laurel_post_norm.weight", {E}, norm_weight));
  }
  return Status::ok();
}

// The layout of the dense families (smollm3, granite, lfm2, qwen35): the tiny test shape (see the
// top of the file), or shape's when it has one.
struct DenseFamily {
  std::string a;
  bool smol = false, granite = false, lfm2 = false, qwen35 = false;
  int64_t E = 64, H = 4, Hkv = 2, D = 16, F = 128, n_rot = 16;
  int64_t L = 4, n_nextn = 0;
  // qwen35's DeltaNet: key heads Hk, value heads Hv of S channels, conv taps K.
  int64_t S = 16, Hk = 2, Hv = 4, K = 4;
  std::vector<int64_t> lfm2_attn = {1, 3};
  std::vector<int32_t> sections = {2, 1, 1, 0};
  float rope_base = 1e4f;

  int64_t Di() const { return Hv * S; }
  int64_t Cc() const { return 2 * Hk * S + Di(); }
  bool is_attn(int64_t il) const {
    if (lfm2) return std::find(lfm2_attn.begin(), lfm2_attn.end(), il) != lfm2_attn.end();
    if (qwen35) return (il + 1) % 4 == 0 || il >= L;
    return true;
  }
};

DenseFamily dense_family(const std::string& a, const FamilyShape& shape) {
  DenseFamily f;
  f.a = a;
  f.smol = a == "smollm3", f.granite = a == "granite", f.lfm2 = a == "lfm2", f.qwen35 = a == "qwen35";
  f.n_rot = f.qwen35 ? 8 : f.D;
  f.L = f.granite ? 3 : 4, f.n_nextn = f.qwen35 ? 1 : 0;
  f.rope_base = f.lfm2 ? 1e6f : f.qwen35 ? 1e7f : 1e4f;
  if (shape.E > 0) {  // a real model's shape (speed benchmarks)
    f.E = shape.E, f.L = shape.L, f.H = shape.H, f.Hkv = shape.Hkv, f.D = shape.D, f.F = shape.F, f.n_rot = shape.n_rot;
    f.S = shape.S, f.Hk = shape.Hk, f.Hv = shape.Hv, f.K = shape.K, f.n_nextn = shape.n_nextn;
    if (!shape.lfm2_attn.empty()) f.lfm2_attn = shape.lfm2_attn;
    if (!shape.sections.empty()) f.sections = shape.sections;
    if (shape.rope_base > 0) f.rope_base = shape.rope_base;
  }
  return f;
}

// qwen35's attention and DeltaNet keys.
Status set_qwen35_metadata(gguf::GgufWriter& w, const DenseFamily& f) {
  const std::string& a = f.a;
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.key_length", uint32_t(f.D)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.value_length", uint32_t(f.D)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".rope.dimension_count", uint32_t(f.n_rot)));
  LOOM_RETURN_IF_ERROR(w.set_i32_array(a + ".rope.dimension_sections", f.sections));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".rope.freq_base", f.rope_base));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".full_attention_interval", 4));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".nextn_predict_layers", uint32_t(f.n_nextn)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".ssm.conv_kernel", uint32_t(f.K)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".ssm.inner_size", uint32_t(f.Di())));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".ssm.state_size", uint32_t(f.S)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".ssm.time_step_rank", uint32_t(f.Hv)));
  return w.set_u32(a + ".ssm.group_count", uint32_t(f.Hk));
}

Status set_dense_metadata(gguf::GgufWriter& w, const DenseFamily& f, int64_t V) {
  const std::string& a = f.a;
  LOOM_RETURN_IF_ERROR(w.set_string("general.architecture", a));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".context_length", 4096));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".embedding_length", uint32_t(f.E)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".feed_forward_length", uint32_t(f.F)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.head_count", uint32_t(f.H)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".block_count", uint32_t(f.L + f.n_nextn)));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".vocab_size", uint32_t(V)));
  if (f.lfm2) {
    std::vector<int32_t> kv_heads;
    for (int64_t il = 0; il < f.L; ++il) kv_heads.push_back(f.is_attn(il) ? int32_t(f.Hkv) : 0);
    LOOM_RETURN_IF_ERROR(w.set_i32_array(a + ".attention.head_count_kv", kv_heads));
    LOOM_RETURN_IF_ERROR(w.set_u32(a + ".shortconv.l_cache", 3));
    LOOM_RETURN_IF_ERROR(w.set_f32(a + ".rope.freq_base", f.rope_base));
  } else {
    LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.head_count_kv", uint32_t(f.Hkv)));
  }
  if (f.qwen35) {
    LOOM_RETURN_IF_ERROR(set_qwen35_metadata(w, f));
  } else if (!f.lfm2) {
    LOOM_RETURN_IF_ERROR(w.set_u32(a + ".rope.dimension_count", uint32_t(f.n_rot)));
    if (f.D != f.E / f.H) {
      LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.key_length", uint32_t(f.D)));
      LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.value_length", uint32_t(f.D)));
    }
    LOOM_RETURN_IF_ERROR(w.set_f32(a + ".rope.freq_base", f.rope_base));
  }
  if (f.granite) {
    LOOM_RETURN_IF_ERROR(w.set_f32(a + ".embedding_scale", 12.0f));
    LOOM_RETURN_IF_ERROR(w.set_f32(a + ".residual_scale", 0.22f));
    LOOM_RETURN_IF_ERROR(w.set_f32(a + ".attention.scale", 0.125f));
    LOOM_RETURN_IF_ERROR(w.set_f32(a + ".logit_scale", 4.0f));
  }
  return Status::ok();
}

// A layer's token mixer: attention, lfm2's short convolution or qwen35's Gated DeltaNet.
Status add_dense_mixer(const DenseFamily& f, const TensorFiller& add, Draws& rnd, const std::string& p, int64_t il) {
  const int64_t E = f.E, H = f.H, Hkv = f.Hkv, D = f.D, Hv = f.Hv, Di = f.Di(), Cc = f.Cc();
  auto fan_in = [&](int64_t n) { return rnd.normal(1.0f / std::sqrt(float(n))); };
  if (f.is_attn(il)) {
    LOOM_RETURN_IF_ERROR(add(p + "attn_q.weight", {E, (f.qwen35 ? 2 : 1) * H * D}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "attn_k.weight", {E, Hkv * D}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "attn_v.weight", {E, Hkv * D}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "attn_output.weight", {H * D, E}, fan_in(H * D)));
    if (f.lfm2 || f.qwen35) {
      LOOM_RETURN_IF_ERROR(add(p + "attn_q_norm.weight", {D}, rnd.norm_weight()));
      LOOM_RETURN_IF_ERROR(add(p + "attn_k_norm.weight", {D}, rnd.norm_weight()));
    }
  } else if (f.lfm2) {
    LOOM_RETURN_IF_ERROR(add(p + "shortconv.conv.weight", {3, E}, rnd.normal(1.0f / std::sqrt(3.0f))));  // l_cache 3
    LOOM_RETURN_IF_ERROR(add(p + "shortconv.in_proj.weight", {E, 3 * E}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "shortconv.out_proj.weight", {E, E}, fan_in(E)));
  } else {  // qwen35's Gated DeltaNet
    LOOM_RETURN_IF_ERROR(add(p + "attn_qkv.weight", {E, Cc}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "attn_gate.weight", {E, Di}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "ssm_conv1d.weight", {f.K, Cc}, rnd.normal(1.0f / std::sqrt(float(f.K)))));
    LOOM_RETURN_IF_ERROR(add(p + "ssm_dt.bias", {Hv}, [&](int64_t) {
      const float dt = std::exp(std::log(1e-3f) + rnd.uni(rnd.rng) * (std::log(1e-1f) - std::log(1e-3f)));
      return std::log(std::expm1(dt));
    }));
    LOOM_RETURN_IF_ERROR(add(p + "ssm_a", {Hv}, [&](int64_t) { return -(1.0f + 15.0f * rnd.uni(rnd.rng)); }));
    LOOM_RETURN_IF_ERROR(add(p + "ssm_beta.weight", {E, Hv}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "ssm_alpha.weight", {E, Hv}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "ssm_norm.weight", {f.S}, rnd.norm_weight()));
    LOOM_RETURN_IF_ERROR(add(p + "ssm_out.weight", {Di, E}, fan_in(Di)));
  }
  return Status::ok();
}

// Block il: norm, mixer, SwiGLU FFN, and for qwen35's multi-token-prediction block its extras.
Status add_dense_block(const DenseFamily& f, const TensorFiller& add, Draws& rnd, int64_t il) {
  const int64_t E = f.E, F = f.F;
  auto fan_in = [&](int64_t n) { return rnd.normal(1.0f / std::sqrt(float(n))); };
  auto norm_weight = rnd.norm_weight();
  const std::string p = "blk." + std::to_string(il) + ".";
  LOOM_RETURN_IF_ERROR(add(p + "attn_norm.weight", {E}, norm_weight));
  LOOM_RETURN_IF_ERROR(add_dense_mixer(f, add, rnd, p, il));
  LOOM_RETURN_IF_ERROR(add(p + (f.qwen35 ? "post_attention_norm.weight" : "ffn_norm.weight"), {E}, norm_weight));
  LOOM_RETURN_IF_ERROR(add(p + "ffn_gate.weight", {E, F}, fan_in(E)));
  LOOM_RETURN_IF_ERROR(add(p + "ffn_up.weight", {E, F}, fan_in(E)));
  LOOM_RETURN_IF_ERROR(add(p + "ffn_down.weight", {F, E}, fan_in(F)));
  if (il >= f.L) {  // qwen35's multi-token-prediction block
    LOOM_RETURN_IF_ERROR(add(p + "nextn.eh_proj.weight", {2 * E, E}, fan_in(2 * E)));
    LOOM_RETURN_IF_ERROR(add(p + "nextn.enorm.weight", {E}, norm_weight));
    LOOM_RETURN_IF_ERROR(add(p + "nextn.hnorm.weight", {E}, norm_weight));
    LOOM_RETURN_IF_ERROR(add(p + "nextn.shared_head_norm.weight", {E}, norm_weight));
  }
  return Status::ok();
}

}  // namespace

Status make_family_model(const gguf::GgufFile& in, gguf::GgufWriter& w, const std::string& a, bool untied, std::mt19937& rng,
                         const FamilyShape& shape) {
  if (a == "gemma4") return make_gemma4(in, w, rng, shape);
  if (a == "mistral3") return make_mistral3(in, w, rng, shape);
  if (a == "gemma3n") return make_gemma3n(in, w, rng);
  if (a == "qwen3moe") return make_qwen3moe_shape(in, w, rng, shape);
  if (a == "gpt-oss") return make_gpt_oss_shape(in, w, rng, shape);
  if (a != "smollm3" && a != "granite" && a != "lfm2" && a != "qwen35")
    return invalid_argument("unknown family '" + a + "'");
  LOOM_ASSIGN_OR_RETURN(const int64_t V, clear_model(in, w));
  const DenseFamily f = dense_family(a, shape);
  LOOM_RETURN_IF_ERROR(set_dense_metadata(w, f, V));

  Draws rnd{rng};
  const TensorFiller add{w, shape.f16};
  const int64_t E = f.E;
  LOOM_RETURN_IF_ERROR(add("token_embd.weight", {E, V}, rnd.normal(f.granite ? 0.1f : 0.5f)));
  LOOM_RETURN_IF_ERROR(add(f.lfm2 ? "token_embd_norm.weight" : "output_norm.weight", {E}, rnd.norm_weight()));
  if (untied)
    LOOM_RETURN_IF_ERROR(add("output.weight", {E, V}, rnd.normal((f.granite ? 4.0f : 1.0f) / std::sqrt(float(E)))));
  for (int64_t il = 0; il < f.L + f.n_nextn; ++il) LOOM_RETURN_IF_ERROR(add_dense_block(f, add, rnd, il));
  return Status::ok();
}

}  // namespace loom

namespace loom {

bool family_shape(const std::string& name, std::string& arch, FamilyShape& s) {
  s = FamilyShape{};
  s.f16 = true;
  if (name == "qwen35-0.8b") {  // Qwen3.5-0.8B: 24 layers (every 4th attention), tied output
    arch = "qwen35";
    s.E = 1024, s.L = 24, s.H = 8, s.Hkv = 2, s.D = 256, s.F = 3584, s.n_rot = 64;
    s.S = 128, s.Hk = 16, s.Hv = 16, s.K = 4, s.n_nextn = 1;
    s.sections = {11, 11, 10, 0};
    s.rope_base = 1e7f;
    return true;
  }
  if (name == "lfm2-1.2b") {  // LFM2-1.2B: 16 layers, attention on 6 of them
    arch = "lfm2";
    s.E = 2048, s.L = 16, s.H = 32, s.Hkv = 8, s.D = 64, s.F = 8192, s.n_rot = 64;
    s.lfm2_attn = {2, 5, 8, 10, 12, 14};
    s.rope_base = 1e6f;
    return true;
  }
  if (name == "gemma4-e2b") {  // Gemma 4 E2B-like: 35 layers, heads of 256 (sliding) / 512 (global)
    arch = "gemma4";
    s.E = 1536, s.L = 35, s.H = 8, s.Hkv = 1, s.D = 512, s.S = 256, s.F = 6144;
    return true;
  }
  if (name == "ministral3-3b") {  // Ministral 3 3B: 26 layers, YaRN factor 16 from 16384
    arch = "mistral3";
    s.E = 3072, s.L = 26, s.H = 32, s.Hkv = 8, s.D = 128, s.F = 9216;
    return true;
  }
  if (name == "qwen3moe-2b") {  // Qwen3-30B-A3B's layout at ~2.5B: 64 experts of 512, 8 chosen
    arch = "qwen3moe";
    s.E = 1024, s.L = 24, s.H = 16, s.Hkv = 4, s.D = 64, s.F = 512, s.n_rot = 64;
    s.n_expert = 64, s.n_expert_used = 8;
    s.rope_base = 1e6f;
    return true;
  }
  if (name == "gpt-oss-2b") {  // gpt-oss-20b's layout at ~1.7B: 32 experts of 1024, 4 chosen, a window of 128
    arch = "gpt-oss";
    s.E = 1024, s.L = 12, s.H = 32, s.Hkv = 4, s.D = 64, s.F = 1024;
    s.n_expert = 32, s.n_expert_used = 4, s.window = 128;
    s.rope_base = 150000.0f;
    return true;
  }
  if (name == "qwen3moe-kq") {  // the smallest qwen3moe whose experts fill K-quant blocks (Q4_K_M golden)
    arch = "qwen3moe";
    s.E = 256, s.L = 2, s.H = 4, s.Hkv = 2, s.D = 64, s.F = 256, s.n_rot = 64;
    s.n_expert = 8, s.n_expert_used = 2;
    s.rope_base = 1e6f;
    s.router_std = 6.0f;  // decisive routers: no choice within the quantized file's rounding of a tie
    return true;
  }
  if (name == "smollm3-3b") {  // SmolLM3-3B: 36 layers, NoPE every 4th
    arch = "smollm3";
    s.E = 2048, s.L = 36, s.H = 16, s.Hkv = 4, s.D = 128, s.F = 11008, s.n_rot = 128;
    s.rope_base = 5e6f;
    return true;
  }
  return false;
}

}  // namespace loom

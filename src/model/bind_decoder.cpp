// The decoder-only families' and hybrids' weights (Model::bind_decoder): the embedding and LM
// head, the family extras (LongRoPE factors, M-RoPE sections, Gemma's AltUp and per-layer
// embeddings), and per block its mixer (attention or a recurrent mixer) and FFN (dense, experts or both).
#include <cmath>
#include <limits>
#include <utility>

#include "model/model.h"
#include "model/weight_binder.h"
#include "quant/packed.h"
#include "quant/quant.h"

namespace loom::model {
namespace {

using detail::Binder;

// lfm2's gated short-convolution block, prefix p = "blk.N.".
Status bind_short_conv(Binder& b, const ModelHparams& hp, const std::string& p, LayerWeights& l) {
  const int64_t E = hp.n_embd;
  l.ssm_in = b.matrix(p + "shortconv.in_proj.weight", E, 3 * E);
  l.ssm_conv = b.floats(p + "shortconv.conv.weight", {hp.ssm_d_conv, E});
  l.ssm_out = b.matrix(p + "shortconv.out_proj.weight", E, E);
  return b.status();
}

// qwen35's Gated DeltaNet block, prefix p = "blk.N.".
Status bind_delta_net(Binder& b, const ModelHparams& hp, const std::string& p, LayerWeights& l) {
  const int64_t E = hp.n_embd, Di = hp.ssm_d_inner, S = hp.ssm_d_state, Hv = hp.ssm_dt_rank, Cc = hp.ssm_conv_channels();
  l.ssm_in = b.matrix(p + "attn_qkv.weight", E, Cc);
  l.ssm_z = b.matrix(p + "attn_gate.weight", E, Di);
  if (hp.delta_ba_fused) {
    // qwen3next: β and α rows interleaved per key head in one projection (delta_net_block splits them).
    l.ssm_beta = b.matrix(p + "ssm_ba.weight", E, 2 * Hv);
  } else {
    l.ssm_beta = b.matrix(p + "ssm_beta.weight", E, Hv);
    l.ssm_alpha = b.matrix(p + "ssm_alpha.weight", E, Hv);
  }
  l.ssm_conv = b.floats(p + "ssm_conv1d.weight", {hp.ssm_d_conv, Cc});
  l.ssm_dt_b = b.vector(p + "ssm_dt.bias", Hv);
  l.ssm_a = b.vector(p + "ssm_a", Hv);
  l.ssm_norm = b.vector(p + "ssm_norm.weight", S);
  l.ssm_out = b.matrix(p + "ssm_out.weight", Di, E);
  LOOM_RETURN_IF_ERROR(b.status());
  for (int64_t h = 0; h < Hv; ++h) {
    // The decay is exp(softplus(·) · a): a positive or non-finite a would make the state grow.
    if (!(l.ssm_a[h] <= 0.0f) || !std::isfinite(l.ssm_a[h])) {
      return corrupt("tensor '" + p + "ssm_a' has the value " + std::to_string(l.ssm_a[h]) + " at index " +
                     std::to_string(h) + " (the stored decay must be negative and finite)");
    }
  }
  return Status::ok();
}

// gemma4's attention of layer il: heads of the layer's size (sliding or global), q/k norms, no V
// projection in some files (V is then K's projection, the reference's use_alternative_attention),
// no K/V at all on shared-KV layers, post-norms, an optional output scale.
Status bind_gemma4_attention(Binder& b, const ModelHparams& hp, const std::string& p, int64_t il, bool fused,
                             LayerWeights& l) {
  const int64_t E = hp.n_embd, D = hp.head_dim_at(il), Q = hp.n_head * D, KV = hp.n_head_kv_at(il) * D;
  const bool own_kv = hp.kv_source(il) < 0;
  if (fused) {
    b.qkv(p, true, E, Q, KV, l);
  } else {
    l.wq = b.matrix(p + "attn_q.weight", E, Q);
    if (own_kv) {
      l.wk = b.matrix(p + "attn_k.weight", E, KV);
      l.wv = b.matrix(p + "attn_v.weight", E, KV, /*required=*/false);
      if (l.wv.empty()) l.wv = l.wk;
    }
  }
  l.wo = b.matrix(p + "attn_output.weight", Q, E);
  l.q_norm = b.vector(p + "attn_q_norm.weight", D);
  if (own_kv) l.k_norm = b.vector(p + "attn_k_norm.weight", D);
  l.post_attn_norm = b.vector(p + "post_attention_norm.weight", E);
  l.post_ffn_norm = b.vector(p + "post_ffw_norm.weight", E);
  const float* scale = b.floats(p + "layer_output_scale.weight", {1}, /*required=*/false);
  l.out_scale = scale ? *scale : 0.0f;
  LOOM_RETURN_IF_ERROR(b.status());
  if (scale && !std::isfinite(*scale)) return corrupt("tensor '" + p + "layer_output_scale.weight' is not finite");
  return Status::ok();
}

// The mixture-of-experts FFN of a block (names and shapes of the reference's loaders).
Status bind_moe_ffn(Binder& b, const gguf::GgufFile& file, const ModelHparams& hp, const std::string& p, LayerWeights& l) {
  const int64_t E = hp.n_embd, X = hp.n_expert, F = hp.n_ff_exp;
  l.ffn_gate_inp = b.matrix(p + "ffn_gate_inp.weight", E, X);
  if (file.find_tensor(p + "ffn_gate_up_exps.weight")) {
    l.ffn_up_exps = b.matrix3(p + "ffn_gate_up_exps.weight", E, 2 * F, X);
    l.gate_up_fused = true;
  } else {
    // The llama and granite loaders allow experts without a gate (act(up) alone).
    const bool gate_optional = hp.arch == Arch::kLlama || hp.arch == Arch::kGranite || hp.arch == Arch::kGraniteHybrid;
    l.ffn_gate_exps = b.matrix3(p + "ffn_gate_exps.weight", E, F, X, !gate_optional);
    l.ffn_up_exps = b.matrix3(p + "ffn_up_exps.weight", E, F, X);
  }
  l.ffn_down_exps = b.matrix3(p + "ffn_down_exps.weight", F, E, X);
  // The per-expert scales every loader of the reference takes when present (the fused gate|up
  // stack has none).
  if (!l.gate_up_fused) {
    l.ffn_gate_exps_s = b.vector(p + "ffn_gate_exps.scale", X, /*required=*/false);
    l.ffn_up_exps_s = b.vector(p + "ffn_up_exps.scale", X, /*required=*/false);
  }
  l.ffn_down_exps_s = b.vector(p + "ffn_down_exps.scale", X, /*required=*/false);
  if (hp.moe_beside_dense) {
    // gemma4: the router's input scale and the norms around the two halves.
    l.ffn_gate_inp_s = b.vector(p + "ffn_gate_inp.scale", E);
    l.pre_ffn_norm_2 = b.vector(p + "pre_ffw_norm_2.weight", E);
    l.post_ffn_norm_1 = b.vector(p + "post_ffw_norm_1.weight", E);
    l.post_ffn_norm_2 = b.vector(p + "post_ffw_norm_2.weight", E);
  }
  if (hp.arch == Arch::kLfm2) l.ffn_exp_probs_b = b.vector(p + "exp_probs_b.bias", X);
  if (hp.arch == Arch::kGptOss) {
    l.ffn_gate_inp_b = b.vector(p + "ffn_gate_inp.bias", X);
    l.ffn_gate_exps_b = b.floats(p + "ffn_gate_exps.bias", {F, X}, !l.gate_up_fused);
    l.ffn_up_exps_b = b.floats(p + "ffn_up_exps.bias", {F, X}, !l.gate_up_fused);
    l.ffn_down_exps_b = b.floats(p + "ffn_down_exps.bias", {E, X});
    if (l.gate_up_fused && b.status().is_ok()) {
      return unsupported("gpt-oss: fused ffn_gate_up_exps (" + p +
                         "ffn_gate_up_exps.weight) is not supported: the "
                         "reference loads separate gate and up stacks with their biases");
    }
  }
  if (hp.n_ff_shexp > 0) {
    const int64_t S = hp.n_ff_shexp;
    l.ffn_gate_shexp = b.matrix(p + "ffn_gate_shexp.weight", E, S);
    l.ffn_up_shexp = b.matrix(p + "ffn_up_shexp.weight", E, S);
    l.ffn_down_shexp = b.matrix(p + "ffn_down_shexp.weight", S, E);
    if (hp.arch == Arch::kQwen35) l.ffn_gate_inp_shexp = b.matrix(p + "ffn_gate_inp_shexp.weight", E, 1);
  }
  return b.status();
}

// Optional tensors of the reference's granite loaders that loom does not compute with (no
// Granite 3 / 4 release has them): refused by name rather than ignored.
Status refuse_granite_extras(const gguf::GgufFile& file, const ModelHparams& hp) {
  for (int64_t il = -1; il < hp.n_layer; ++il) {
    const std::string p = il < 0 ? "" : "blk." + std::to_string(il) + ".";
    for (const char* n : {"attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_qkv.bias", "attn_output.bias", "ffn_gate.bias",
                          "ffn_up.bias", "ffn_down.bias", "rope_freqs.weight"}) {
      if (file.find_tensor(p + n)) {
        return unsupported(hp.arch_name + ": tensor '" + p + n +
                           "' is not supported yet (biases and RoPE frequency "
                           "factors are optional in the reference and absent from Granite 3 / 4 releases)");
      }
    }
  }
  return Status::ok();
}

// phi3's LongRoPE factors (Phi-3-*-128k, Phi-3.5): optional, stored as F32 (F16 converted).
Status bind_longrope_factors(Binder& b, const ModelHparams& hp, ModelWeights& w) {
  w.rope_long = b.vector("rope_factors_long.weight", hp.n_rot / 2, /*required=*/false);
  w.rope_short = b.vector("rope_factors_short.weight", hp.n_rot / 2, /*required=*/false);
  LOOM_RETURN_IF_ERROR(b.status());
  for (const auto& [name, f] :
       {std::pair{"rope_factors_long.weight", w.rope_long}, std::pair{"rope_factors_short.weight", w.rope_short}}) {
    for (int64_t i = 0; f && i < hp.n_rot / 2; ++i) {
      // A frequency divisor of zero, a negative or a non-finite one would turn RoPE into NaNs.
      if (!(f[i] > 0 && std::isfinite(f[i]))) {
        return corrupt("tensor '" + std::string(name) + "' has the non-positive or non-finite value " +
                       std::to_string(f[i]) + " at index " + std::to_string(i));
      }
    }
  }
  return Status::ok();
}

// Interleaved M-RoPE (the reference's imrope) for text: pair i's sector i mod Σsections turns
// with the t, h or w position (all = the token's position) when it falls in one of the first
// three sections' interleaved slots, else with e = 0 (an infinite divisor, kept in `owned`).
void imrope_divisors(const ModelHparams& hp, ModelWeights& w, std::vector<std::vector<float>>& owned) {
  const int* s = hp.rope_sections;
  const int n_sect = s[0] + s[1] + s[2] + s[3];
  std::vector<float> ff(size_t(hp.n_rot / 2), 1.0f);
  bool any = false;
  for (size_t i = 0; i < ff.size(); ++i) {
    const int sector = int(i) % n_sect;
    const bool positional = (sector % 3 == 0 && sector < 3 * s[0]) || (sector % 3 == 1 && sector < 3 * s[1]) ||
                            (sector % 3 == 2 && sector < 3 * s[2]);
    if (!positional) ff[i] = std::numeric_limits<float>::infinity(), any = true;
  }
  if (any) {
    owned.push_back(std::move(ff));
    w.rope_sections = owned.back().data();
  }
}

// gemma3n's AltUp stream projections: {n_embd, n_embd, n_altup - 1} tensors, one matrix per stream.
void bind_altup_projections(Binder& b, const ModelHparams& hp, ModelWeights& w) {
  const int64_t A = hp.n_altup, E = hp.n_embd;
  const TensorView proj = b.matrix3("altup_proj.weight", E, E, A - 1);
  const TensorView unembd = b.matrix3("altup_unembd_proj.weight", E, E, A - 1);
  for (int64_t k = 0; k + 1 < A && !proj.empty() && !unembd.empty(); ++k) {
    w.altup_proj.push_back(b.rows_of(proj, k * E, E));
    w.altup_unembd_proj.push_back(b.rows_of(unembd, k * E, E));
  }
}

// gemma4 / gemma3n: the global layers' proportional RoPE divisors (shared by them), and the
// per-layer token embeddings: a table of n_layer slices per token, and a projection of the
// embedding into them.
Status bind_gemma_globals(Binder& b, const ModelHparams& hp, ModelWeights& w) {
  w.rope_freqs = b.vector("rope_freqs.weight", hp.head_dim / 2, /*required=*/false);
  if (hp.n_embd_per_layer > 0) {
    const int64_t P = hp.n_embd_per_layer, PL = P * hp.n_layer;
    w.per_layer_tok_embd = b.matrix("per_layer_token_embd.weight", PL, hp.n_vocab);
    w.per_layer_model_proj = b.matrix("per_layer_model_proj.weight", hp.n_embd, PL);
    w.per_layer_proj_norm = b.vector("per_layer_proj_norm.weight", P);
  }
  LOOM_RETURN_IF_ERROR(b.status());
  for (int64_t i = 0; w.rope_freqs && i < hp.head_dim / 2; ++i) {
    if (!(w.rope_freqs[i] > 0) || std::isnan(w.rope_freqs[i])) {
      return corrupt("tensor 'rope_freqs.weight' has the non-positive value " + std::to_string(w.rope_freqs[i]) +
                     " at index " + std::to_string(i));
    }
  }
  return Status::ok();
}

// gpt-oss's attention extras: q/k/v biases optional (all three or none), the output's bias and
// the sinks required.
Status bind_gpt_oss_attention(Binder& b, const gguf::GgufFile& file, const ModelHparams& hp, const std::string& p, int64_t Q,
                              int64_t KV, LayerWeights& l) {
  l.bq = b.vector(p + "attn_q.bias", Q, /*required=*/false);
  l.bk = b.vector(p + "attn_k.bias", KV, /*required=*/l.bq != nullptr);
  l.bv = b.vector(p + "attn_v.bias", KV, /*required=*/l.bq != nullptr);
  if (b.status().is_ok() && !l.bq && (file.find_tensor(p + "attn_k.bias") || file.find_tensor(p + "attn_v.bias"))) {
    return unsupported("gpt-oss: " + p +
                       "attn_k.bias / attn_v.bias without attn_q.bias (loom adds the three "
                       "biases together)");
  }
  l.bo = b.vector(p + "attn_output.bias", hp.n_embd);
  l.attn_sinks = b.vector(p + "attn_sinks.weight", hp.n_head);
  return Status::ok();
}

// The attention of a block that is neither gemma4's nor qwen35's: q/k/v (phi3 always fuses them;
// granitehybrid may: the reference takes attn_qkv when present), their biases and norms, the
// output projection, gemma2/3's post-norms.
Status bind_attention(Binder& b, const gguf::GgufFile& file, const ModelHparams& hp, const std::string& p, int64_t il,
                      LayerWeights& l) {
  const int64_t E = hp.n_embd, Q = hp.n_embd_q(), D = hp.head_dim, KV = hp.n_embd_kv_at(il);
  const bool fused_qkv =
      hp.arch == Arch::kPhi3 || (hp.arch == Arch::kGraniteHybrid && file.find_tensor(p + "attn_qkv.weight"));
  b.qkv(p, fused_qkv, E, Q, KV, l);
  l.wo = b.matrix(p + "attn_output.weight", Q, E);
  if (hp.arch == Arch::kGptOss) LOOM_RETURN_IF_ERROR(bind_gpt_oss_attention(b, file, hp, p, Q, KV, l));
  if (hp.qkv_bias) {
    l.bq = b.vector(p + "attn_q.bias", Q);
    l.bk = b.vector(p + "attn_k.bias", KV);
    l.bv = b.vector(p + "attn_v.bias", KV);
  }
  if (hp.qk_norm || hp.qk_norm_full) {
    l.q_norm = b.vector(p + "attn_q_norm.weight", hp.qk_norm_full ? Q : D);
    l.k_norm = b.vector(p + "attn_k_norm.weight", hp.qk_norm_full ? KV : D);
  }
  if (hp.post_norms) {
    l.post_attn_norm = b.vector(p + "post_attention_norm.weight", E);
    l.post_ffn_norm = b.vector(p + "post_ffw_norm.weight", E);
  }
  return Status::ok();
}

// qwen35's attention: the q projection carries a gate per head ([q | gate] rows per head).
void bind_gated_attention(Binder& b, const ModelHparams& hp, const std::string& p, int64_t il, LayerWeights& l) {
  const int64_t E = hp.n_embd, Q = hp.n_embd_q(), D = hp.head_dim, KV = hp.n_embd_kv_at(il);
  l.wq = b.matrix(p + "attn_q.weight", E, 2 * Q);
  l.wk = b.matrix(p + "attn_k.weight", E, KV);
  l.wv = b.matrix(p + "attn_v.weight", E, KV);
  l.wo = b.matrix(p + "attn_output.weight", Q, E);
  l.q_norm = b.vector(p + "attn_q_norm.weight", D);
  l.k_norm = b.vector(p + "attn_k_norm.weight", D);
}

// The mixer of block il: a hybrid's recurrent mixer in place of attention, or the family's attention.
Status bind_mixer(Binder& b, const gguf::GgufFile& file, const ModelHparams& hp, const std::string& p, int64_t il,
                  LayerWeights& l) {
  if (hp.layer_is_recurrent(il)) {
    switch (hp.rec_mixer) {
      case RecurrentMixer::kShortConv: return bind_short_conv(b, hp, p, l);
      case RecurrentMixer::kDeltaNet: return bind_delta_net(b, hp, p, l);
      default: return detail::bind_ssm_mixer(b, hp, p, l);
    }
  }
  if (hp.arch == Arch::kGemma4 || hp.arch == Arch::kGemma3n) {
    return bind_gemma4_attention(b, hp, p, il, file.find_tensor(p + "attn_qkv.weight") != nullptr, l);
  }
  if (hp.attn_output_gate) {
    bind_gated_attention(b, hp, p, il, l);
    return Status::ok();
  }
  return bind_attention(b, file, hp, p, il, l);
}

// The FFN of block il: its norm (qwen35 and gpt-oss name it after attention: post_attention_norm;
// no norm follows the FFN), the experts, and the dense FFN (phi3: gate|up fused) unless the
// experts replace it.
Status bind_ffn(Binder& b, const gguf::GgufFile& file, const ModelHparams& hp, const std::string& p, int64_t il,
                LayerWeights& l) {
  const int64_t E = hp.n_embd, F = hp.n_ff_at(il);
  const bool ffn_norm_post_attn = hp.arch == Arch::kQwen35 || hp.arch == Arch::kGptOss;
  l.ffn_norm = b.vector(p + (ffn_norm_post_attn ? "post_attention_norm.weight" : "ffn_norm.weight"), E);
  const bool dense_ffn = !hp.layer_is_moe(il) || hp.moe_beside_dense;
  if (hp.layer_is_moe(il)) LOOM_RETURN_IF_ERROR(bind_moe_ffn(b, file, hp, p, l));
  if (!dense_ffn) return Status::ok();
  if (hp.arch == Arch::kPhi3) {
    const TensorView gate_up = b.matrix(p + "ffn_up.weight", E, 2 * F);
    l.ffn_gate = b.rows_of(gate_up, 0, F);
    l.ffn_up = b.rows_of(gate_up, F, F);
  } else {
    l.ffn_gate = b.matrix(p + "ffn_gate.weight", E, F);
    l.ffn_up = b.matrix(p + "ffn_up.weight", E, F);
  }
  l.ffn_down = b.matrix(p + "ffn_down.weight", F, E);
  return Status::ok();
}

// gemma3n's per-block AltUp router and coefficients and its Laurel block (every layer of layer
// 0's rank, which sets hp.laurel_rank).
Status bind_altup_laurel(Binder& b, const gguf::GgufFile& file, ModelHparams& hp, const std::string& p, int64_t il,
                         LayerWeights& l) {
  const int64_t E = hp.n_embd, A = hp.n_altup;
  l.altup_router_norm = b.vector(p + "altup_router_norm.weight", E);
  l.altup_router = b.floats(p + "altup_router.weight", {E, A});
  l.altup_predict_coef = b.floats(p + "altup_predict_coef.weight", {A, A * A});
  l.altup_correct_coef = b.floats(p + "altup_correct_coef.weight", {A, A});
  l.altup_correct_scale = b.vector(p + "altup_correct_scale.weight", E);
  const gguf::TensorInfo* ll = file.find_tensor(p + "laurel_l.weight");
  const int64_t rank = ll ? ll->ne[1] : 64;
  if (il == 0) hp.laurel_rank = rank;
  if (rank != hp.laurel_rank || rank < 1 || rank > E) {
    return corrupt("tensor '" + p + "laurel_l.weight' has rank " + std::to_string(rank) + " (layer 0's is " +
                   std::to_string(hp.laurel_rank) + ")");
  }
  l.laurel_l = b.matrix(p + "laurel_l.weight", E, rank);
  l.laurel_r = b.matrix(p + "laurel_r.weight", rank, E);
  l.laurel_post_norm = b.vector(p + "laurel_post_norm.weight", E);
  return Status::ok();
}

// Block il: its norm, mixer and FFN, gemma3n's AltUp and Laurel, the per-layer embedding's gate,
// projection and norm (gemma4, gemma3n).
Status bind_block(Binder& b, const gguf::GgufFile& file, ModelHparams& hp, int64_t il, LayerWeights& l) {
  const std::string p = "blk." + std::to_string(il) + ".";
  const int64_t E = hp.n_embd;
  l.attn_norm = b.vector(p + "attn_norm.weight", E);
  LOOM_RETURN_IF_ERROR(bind_mixer(b, file, hp, p, il, l));
  LOOM_RETURN_IF_ERROR(bind_ffn(b, file, hp, p, il, l));
  if (hp.arch == Arch::kGemma3n) LOOM_RETURN_IF_ERROR(bind_altup_laurel(b, file, hp, p, il, l));
  if (hp.n_embd_per_layer > 0) {
    l.pl_inp_gate = b.matrix(p + "inp_gate.weight", E, hp.n_embd_per_layer);
    l.pl_proj = b.matrix(p + "proj.weight", hp.n_embd_per_layer, E);
    l.pl_post_norm = b.vector(p + "post_norm.weight", E);
  }
  return Status::ok();
}

// The bytes a decode step reads: every matrix once but only one embedding row (unless tied to
// the output), one row of the per-layer embeddings and n_expert_used of each layer's experts.
uint64_t decode_step_bytes(const Binder& b, const gguf::TensorInfo& emb, const ModelHparams& hp, const ModelWeights& w) {
  uint64_t bytes = w.tied_output ? b.bytes() : b.bytes() - emb.nbytes + w.tok_embd.row_bytes;
  for (const LayerWeights& l : w.layers) {
    if (hp.n_expert == 0) break;  // dense: no stacks
    for (const TensorView* t : {&l.ffn_gate_exps, &l.ffn_up_exps, &l.ffn_down_exps}) {
      const uint64_t stack = uint64_t(t->rows) * t->row_bytes;
      bytes -= stack - stack / uint64_t(hp.n_expert) * uint64_t(hp.n_expert_used);
    }
  }
  if (!w.per_layer_tok_embd.empty()) {
    bytes -= w.per_layer_tok_embd.row_bytes * uint64_t(w.per_layer_tok_embd.rows - 1);
  }
  return bytes;
}

}  // namespace

Status Model::bind_decoder() {
  ModelHparams& hp = hp_;
  LOOM_ASSIGN_OR_RETURN(const gguf::TensorInfo* emb, token_embedding());
  const int64_t E = hp.n_embd;
  if (hp.arch == Arch::kGraniteHybrid || hp.arch == Arch::kGranite) LOOM_RETURN_IF_ERROR(refuse_granite_extras(file_, hp));
  Binder b(file_, owned_);
  b.embedding_and_output(E, hp.n_vocab, w_, hp.arch == Arch::kLfm2 ? "token_embd_norm.weight" : "output_norm.weight");
  if (hp.arch == Arch::kPhi3) LOOM_RETURN_IF_ERROR(bind_longrope_factors(b, hp, w_));
  if (hp.rope_sections[0] + hp.rope_sections[1] + hp.rope_sections[2] + hp.rope_sections[3] > 0) {
    imrope_divisors(hp, w_, owned_);
  }
  if (hp.arch == Arch::kGemma3n) bind_altup_projections(b, hp, w_);
  if (hp.arch == Arch::kGemma4 || hp.arch == Arch::kGemma3n) LOOM_RETURN_IF_ERROR(bind_gemma_globals(b, hp, w_));
  w_.layers.resize(size_t(hp.n_layer));
  for (int64_t il = 0; il < hp.n_layer; ++il) LOOM_RETURN_IF_ERROR(bind_block(b, file_, hp, il, w_.layers[size_t(il)]));
  LOOM_RETURN_IF_ERROR(b.status());
  w_.experts_packable = hp.n_expert > 0 && hp.n_ff_exp % quant::kPackRows == 0 && E % quant::kPackRows == 0;
  decode_weight_bytes_ = decode_step_bytes(b, *emb, hp, w_);
  n_params_ = b.params();
  return Status::ok();
}

}  // namespace loom::model

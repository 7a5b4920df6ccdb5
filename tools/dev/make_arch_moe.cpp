// make_arch_variant's mixture-of-experts generator: a dense synthetic model turned into its MoE
// architecture. The metadata moves to the new architecture's prefix, and each block's dense FFN
// (ffn_gate / ffn_up / ffn_down) is replaced by a router of 8 experts choosing 2 per token, the
// experts' stacked matrices of width 32, and what the architecture adds:
//   qwen3moe   (from qwen3):  expert_feed_forward_length 32, softmax, weights normalised
//   olmoe      (from qwen3):  as many K/V heads as query heads, q/k norms across all heads (n_embd
//                             wide), experts n_ff wide (feed_forward_length 32), weights not normalised
//   llama      (from llama):  Mixtral-style experts in a llama file (feed_forward_length 32)
//   qwen35moe  (from qwen35): experts 32 wide, a shared expert of 32 gated by σ(ffn_gate_inp_shexp ·
//                             h); the last trunk block stores gate and up fused (ffn_gate_up_exps)
//   lfm2moe    (from lfm2):   block 0 keeps its dense FFN (leading_dense_block_count 1), sigmoid
//                             gating (expert_gating_func 2), a selection bias exp_probs_b
//   granitemoe (from granite), granitehybrid (from granitehybrid): experts n_ff wide
//                             (feed_forward_length 32) and an ungated shared expert of 32
//   gemma4     (from gemma4): the dense FFN stays beside the experts (make_gemma4_moe below)
//   qwen3next  (from qwen35): qwen35moe's experts, DeltaNet's β/α fused (qwen3next_mixers below)
// Random weights (the given generator): routers N(0, 2/sqrt(n_embd)) so that the choice varies from
// token to token, experts fan-in scaled.
//
// gpt-oss has no dense family in loom, so make_gpt_oss writes it from scratch with IN's tokenizer:
// 4 layers (0 and 2 slide over a window of 8 tokens, 1 and 3 see everything), n_embd 64, 8 query
// heads of 16 (Q = 128 wider than the model, as gpt-oss's) over 2 K/V heads, q/k/v and output
// biases N(0, 0.1), attention sinks N(0, 1) per head, NEOX RoPE base 150000 with YaRN (factor 4
// from an original context of 32), 8 experts of width 64 choosing 4 per token, router bias
// N(0, 0.5), gate and up weights N(0, 2.5/sqrt(n_embd)) (so that the clamp of the SwiGLU at 7
// bites on some values) with biases N(0, 0.5), down fan-in scaled with bias N(0, 0.1), untied
// output. "gpt-oss-mxfp4" stores the three expert stacks as MXFP4 and draws them smaller (gate and
// up N(0, 1/sqrt(n_embd)), down N(0, 0.25/sqrt(64))): MXFP4 dots take Q8_0 activations, and with the
// F32 file's outliers (SwiGLU outputs up to 56) one Q8_0 rounding that a float-rounding difference
// tips moved a step's logits by 4 % on some of loom's kernel paths; with these, every path stays
// within 1e-6 of llama.cpp. The clamp is conformance-tested by the F32 file.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "make_arch_families.h"
#include "quant/quant.h"

namespace loom {
namespace {

// The test model's dimensions, or a bench shape's (FamilyShape: E, L, H, Hkv, D, F = the experts'
// width, n_expert, n_expert_used, window, rope_base; F16 matrices with F32 routers and biases, the
// published files' YaRN factor 32 from 4096).
struct GptOssDims {
  int64_t E = 64, L = 4, H = 8, Hkv = 2, D = 16, X = 8, K = 4, Fe = 64, window = 8, orig = 32, ctx = 4096;
  float base = 150000.0f, yarn = 4.0f;
  bool f16 = false;
};

Status make_gpt_oss(const gguf::GgufFile& in, gguf::GgufWriter& w, std::mt19937& rng, bool mxfp4, const GptOssDims& g = {}) {
  LOOM_ASSIGN_OR_RETURN(const int64_t V, clear_model(in, w));
  const std::string a = "gpt-oss";
  const int64_t E = g.E, L = g.L, H = g.H, Hkv = g.Hkv, D = g.D, X = g.X, K = g.K, Fe = g.Fe, window = g.window,
                orig = g.orig;
  LOOM_RETURN_IF_ERROR(w.set_string("general.architecture", a));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".context_length", uint32_t(g.ctx)));
  if (mxfp4) {
    w.remove("general.file_type");
    LOOM_RETURN_IF_ERROR(w.set_u32("general.file_type", 38));  // MOSTLY_MXFP4_MOE, as llama-quantize names it
  }
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".embedding_length", uint32_t(E)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".feed_forward_length", uint32_t(Fe)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".block_count", uint32_t(L)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.head_count", uint32_t(H)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.head_count_kv", uint32_t(Hkv)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.key_length", uint32_t(D)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.value_length", uint32_t(D)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".rope.dimension_count", uint32_t(D)));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-5f));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.sliding_window", uint32_t(window)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".expert_count", uint32_t(X)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".expert_used_count", uint32_t(K)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".expert_feed_forward_length", uint32_t(Fe)));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".rope.freq_base", g.base));
  LOOM_RETURN_IF_ERROR(w.set_string(a + ".rope.scaling.type", "yarn"));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".rope.scaling.factor", g.yarn));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".rope.scaling.original_context_length", uint32_t(orig)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".vocab_size", uint32_t(V)));
  // Expert weights: F32, gate and up large enough that the clamp bites; MXFP4, smaller ones (see the
  // comment at the top).
  const float gate_up_std = (mxfp4 ? 1.0f : 2.5f) / std::sqrt(float(E));
  const float down_std = (mxfp4 ? 0.25f : 1.0f) / std::sqrt(float(Fe));
  Draws rnd{rng};
  // Matrices (F16 for a bench shape); routers, biases and sinks F32 as in the published files.
  const TensorFiller add{w, g.f16}, add_f32{w, false};
  auto fan_in = [&](int64_t n) { return rnd.normal(1.0f / std::sqrt(float(n))); };
  auto norm_weight = rnd.norm_weight();
  // An expert stack {cols, rows, X}: F32 (F16), or MXFP4 rows of the same drawn values.
  auto stack = [&](const std::string& name, int64_t cols, int64_t rows, float std) -> Status {
    if (!mxfp4) return add(name, {cols, rows, X}, rnd.normal(std));
    std::vector<float> v(size_t(cols * rows * X));
    for (float& x : v) x = std * rnd.unit(rng);
    const size_t rb = size_t(row_bytes(TensorType::MXFP4, cols));
    std::vector<uint8_t> bytes(rb * size_t(rows * X));
    for (int64_t r = 0; r < rows * X; ++r) {
      quant::quantize_row(TensorType::MXFP4, v.data() + r * cols, bytes.data() + size_t(r) * rb, cols);
    }
    return w.add_tensor(name, TensorType::MXFP4, {cols, rows, X}, bytes);
  };
  LOOM_RETURN_IF_ERROR(add("token_embd.weight", {E, V}, rnd.normal(0.5f)));
  LOOM_RETURN_IF_ERROR(add("output_norm.weight", {E}, norm_weight));
  LOOM_RETURN_IF_ERROR(add("output.weight", {E, V}, fan_in(E)));
  for (int64_t il = 0; il < L; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    LOOM_RETURN_IF_ERROR(add(p + "attn_norm.weight", {E}, norm_weight));
    LOOM_RETURN_IF_ERROR(add(p + "attn_q.weight", {E, H * D}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "attn_k.weight", {E, Hkv * D}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "attn_v.weight", {E, Hkv * D}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add_f32(p + "attn_q.bias", {H * D}, rnd.normal(0.1f)));
    LOOM_RETURN_IF_ERROR(add_f32(p + "attn_k.bias", {Hkv * D}, rnd.normal(0.1f)));
    LOOM_RETURN_IF_ERROR(add_f32(p + "attn_v.bias", {Hkv * D}, rnd.normal(0.1f)));
    LOOM_RETURN_IF_ERROR(add(p + "attn_output.weight", {H * D, E}, fan_in(H * D)));
    LOOM_RETURN_IF_ERROR(add_f32(p + "attn_output.bias", {E}, rnd.normal(0.1f)));
    LOOM_RETURN_IF_ERROR(add_f32(p + "attn_sinks.weight", {H}, rnd.normal(1.0f)));
    LOOM_RETURN_IF_ERROR(add(p + "post_attention_norm.weight", {E}, norm_weight));
    LOOM_RETURN_IF_ERROR(add_f32(p + "ffn_gate_inp.weight", {E, X}, rnd.normal(2.0f / std::sqrt(float(E)))));
    LOOM_RETURN_IF_ERROR(add_f32(p + "ffn_gate_inp.bias", {X}, rnd.normal(0.5f)));
    LOOM_RETURN_IF_ERROR(stack(p + "ffn_gate_exps.weight", E, Fe, gate_up_std));
    LOOM_RETURN_IF_ERROR(add_f32(p + "ffn_gate_exps.bias", {Fe, X}, rnd.normal(0.5f)));
    LOOM_RETURN_IF_ERROR(stack(p + "ffn_up_exps.weight", E, Fe, gate_up_std));
    LOOM_RETURN_IF_ERROR(add_f32(p + "ffn_up_exps.bias", {Fe, X}, rnd.normal(0.5f)));
    LOOM_RETURN_IF_ERROR(stack(p + "ffn_down_exps.weight", Fe, E, down_std));
    LOOM_RETURN_IF_ERROR(add_f32(p + "ffn_down_exps.bias", {E, X}, rnd.normal(0.1f)));
  }
  return Status::ok();
}

// qwen3next (from qwen35): no M-RoPE sections (rope.dimension_sections removed: the reference
// rotates qwen3next plainly), and each DeltaNet block's ssm_beta / ssm_alpha (the same values) fused
// into ssm_ba, per key head its Hv / Hk β rows then its Hv / Hk α rows (value heads k·r .. k·r + r - 1
// of key head k): with 2 key heads and 4 value heads, ssm_ba's rows are β0 β1 α0 α1 β2 β3 α2 α3. The
// FFNs become qwen35moe's experts and gated shared expert.
Status qwen3next_mixers(const gguf::GgufFile& in, gguf::GgufWriter& w, const std::string& a, int64_t L) {
  w.remove(a + ".rope.dimension_sections");
  const int64_t E = *in.get_int("qwen35.embedding_length"), Hv = *in.get_int("qwen35.ssm.time_step_rank"),
                Hk = *in.get_int("qwen35.ssm.group_count"), r = Hv / Hk;
  for (int64_t il = 0; il < L; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const gguf::TensorInfo* bt = in.find_tensor(p + "ssm_beta.weight");
    const gguf::TensorInfo* at = in.find_tensor(p + "ssm_alpha.weight");
    if (!bt || !at) continue;
    if (bt->type != TensorType::F32 || at->type != TensorType::F32)
      return invalid_argument(p + "ssm_beta/alpha must be F32");
    const size_t row = size_t(E) * 4;
    std::vector<uint8_t> ba(row * size_t(2 * Hv));
    for (int64_t k = 0; k < Hk; ++k) {
      for (int64_t j = 0; j < r; ++j) {
        std::memcpy(ba.data() + size_t(k * 2 * r + j) * row, bt->data + size_t(k * r + j) * row, row);
        std::memcpy(ba.data() + size_t(k * 2 * r + r + j) * row, at->data + size_t(k * r + j) * row, row);
      }
    }
    w.remove_tensor(p + "ssm_beta.weight");
    w.remove_tensor(p + "ssm_alpha.weight");
    LOOM_RETURN_IF_ERROR(w.add_tensor(p + "ssm_ba.weight", TensorType::F32, {E, 2 * Hv}, ba));
  }
  return Status::ok();
}

// gemma4 (from gemma4): every block keeps its dense FFN and adds the experts beside it, as the
// reference's Gemma 4 MoE: the router ffn_gate_inp N(0, 2) (it reads RMSNorm(x) / sqrt(n_embd), so
// its logits come out about N(0, 2)) with its input scale ffn_gate_inp.scale (norm weights), the
// experts' pre-norm and the two halves' post-norms (norm weights), per-expert output scales
// ffn_down_exps.scale U(0.5, 1.5); block 3 stores gate and up fused (ffn_gate_up_exps).
Status make_gemma4_moe(gguf::GgufWriter& w, const std::string& a, int64_t E, int64_t L, int64_t X, int64_t K, int64_t Fe,
                       std::mt19937& rng) {
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".expert_count", uint32_t(X)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".expert_used_count", uint32_t(K)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".expert_feed_forward_length", uint32_t(Fe)));
  Draws rnd{rng};
  const TensorFiller add{w, false};
  auto fan_in = [&](int64_t n) { return rnd.normal(1.0f / std::sqrt(float(n))); };
  for (int64_t il = 0; il < L; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    LOOM_RETURN_IF_ERROR(add(p + "ffn_gate_inp.weight", {E, X}, rnd.normal(2.0f)));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_gate_inp.scale", {E}, rnd.norm_weight()));
    LOOM_RETURN_IF_ERROR(add(p + "pre_ffw_norm_2.weight", {E}, rnd.norm_weight()));
    LOOM_RETURN_IF_ERROR(add(p + "post_ffw_norm_1.weight", {E}, rnd.norm_weight()));
    LOOM_RETURN_IF_ERROR(add(p + "post_ffw_norm_2.weight", {E}, rnd.norm_weight()));
    if (il == 3) {
      LOOM_RETURN_IF_ERROR(add(p + "ffn_gate_up_exps.weight", {E, 2 * Fe, X}, fan_in(E)));
    } else {
      LOOM_RETURN_IF_ERROR(add(p + "ffn_gate_exps.weight", {E, Fe, X}, fan_in(E)));
      LOOM_RETURN_IF_ERROR(add(p + "ffn_up_exps.weight", {E, Fe, X}, fan_in(E)));
    }
    LOOM_RETURN_IF_ERROR(add(p + "ffn_down_exps.weight", {Fe, E, X}, fan_in(Fe)));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_down_exps.scale", {X}, [&](int64_t) { return 0.5f + rnd.uni(rng); }));
  }
  return Status::ok();
}

// The dense architecture a MoE variant is made from (nullptr: no such variant).
const char* moe_base_arch(const std::string& arch) {
  return arch == "qwen3moe" || arch == "olmoe"        ? "qwen3"
         : arch == "qwen35moe" || arch == "qwen3next" ? "qwen35"
         : arch == "lfm2moe"                          ? "lfm2"
         : arch == "granitemoe"                       ? "granite"
         : arch == "granitehybrid"                    ? "granitehybrid"
         : arch == "llama"                            ? "llama"
         : arch == "gemma4"                           ? "gemma4"
                                                      : nullptr;
}

// Moves w's "<from>.x" keys to "<to>.x" and sets general.architecture to `to`.
Status move_arch_keys(gguf::GgufWriter& w, const std::string& from, const std::string& to) {
  for (const auto& kv : std::vector<gguf::KeyValue>(w.metadata())) {
    if (kv.key.rfind(from + ".", 0) != 0) continue;
    LOOM_RETURN_IF_ERROR(w.set(to + kv.key.substr(from.size()), kv.value));
    w.remove(kv.key);
  }
  w.remove("general.architecture");
  return w.set_string("general.architecture", to);
}

// What a MoE variant of a dense model adds: 8 experts of 32, 2 chosen, and per architecture a
// shared expert (gated for qwen35moe / qwen3next), a leading dense block (lfm2moe).
struct MoeVariant {
  std::string arch, from;
  int64_t E = 0, L = 0;
  static constexpr int64_t X = 8, K = 2, Fe = 32, Fs = 32;
  bool next = false, own_width = false, gated_shared = false, shared = false;
  int64_t lead = 0;
};

MoeVariant moe_variant(const gguf::GgufFile& in, const std::string& arch, const std::string& from) {
  MoeVariant v;
  v.arch = arch, v.from = from;
  v.E = *in.get_int(from + ".embedding_length"), v.L = *in.get_int(from + ".block_count");
  v.next = arch == "qwen3next";
  v.own_width = arch == "qwen3moe" || arch == "qwen35moe" || v.next || arch == "lfm2moe";
  v.gated_shared = arch == "qwen35moe" || v.next;
  v.shared = v.gated_shared || arch == "granitemoe" || arch == "granitehybrid";
  v.lead = arch == "lfm2moe" ? 1 : 0;
  return v;
}

Status set_moe_metadata(const gguf::GgufFile& in, gguf::GgufWriter& w, const MoeVariant& v) {
  const std::string& a = v.arch;
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".expert_count", uint32_t(v.X)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".expert_used_count", uint32_t(v.K)));
  if (v.own_width) {
    LOOM_RETURN_IF_ERROR(w.set_u32(a + ".expert_feed_forward_length", uint32_t(v.Fe)));
  } else {
    w.remove(a + ".feed_forward_length");
    LOOM_RETURN_IF_ERROR(w.set_u32(a + ".feed_forward_length", uint32_t(v.Fe)));
  }
  if (v.shared) LOOM_RETURN_IF_ERROR(w.set_u32(a + ".expert_shared_feed_forward_length", uint32_t(v.Fs)));
  if (a == "olmoe") {
    w.remove(a + ".attention.head_count_kv");
    LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.head_count_kv", uint32_t(*in.get_int(v.from + ".attention.head_count"))));
  }
  if (a == "lfm2moe") {
    LOOM_RETURN_IF_ERROR(w.set_u32(a + ".leading_dense_block_count", uint32_t(v.lead)));
    LOOM_RETURN_IF_ERROR(w.set_u32(a + ".expert_gating_func", 2));
  }
  return Status::ok();
}

// Block p's dense FFN replaced by the experts (and the shared expert); olmoe's attention widened.
Status add_moe_block(const MoeVariant& v, gguf::GgufWriter& w, const TensorFiller& add, Draws& rnd, const std::string& p,
                     bool fused) {
  const int64_t E = v.E, X = v.X, Fe = v.Fe, Fs = v.Fs;
  auto fan_in = [&](int64_t n) { return rnd.normal(1.0f / std::sqrt(float(n))); };
  for (const char* n : {"ffn_gate.weight", "ffn_up.weight", "ffn_down.weight"}) w.remove_tensor(p + n);
  LOOM_RETURN_IF_ERROR(add(p + "ffn_gate_inp.weight", {E, X}, rnd.normal(2.0f / std::sqrt(float(E)))));
  if (fused) {
    LOOM_RETURN_IF_ERROR(add(p + "ffn_gate_up_exps.weight", {E, 2 * Fe, X}, fan_in(E)));
  } else {
    LOOM_RETURN_IF_ERROR(add(p + "ffn_gate_exps.weight", {E, Fe, X}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_up_exps.weight", {E, Fe, X}, fan_in(E)));
  }
  LOOM_RETURN_IF_ERROR(add(p + "ffn_down_exps.weight", {Fe, E, X}, fan_in(Fe)));
  if (v.arch == "lfm2moe") LOOM_RETURN_IF_ERROR(add(p + "exp_probs_b.bias", {X}, rnd.normal(0.1f)));
  if (v.shared) {
    LOOM_RETURN_IF_ERROR(add(p + "ffn_gate_shexp.weight", {E, Fs}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_up_shexp.weight", {E, Fs}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_down_shexp.weight", {Fs, E}, fan_in(Fs)));
    if (v.gated_shared) LOOM_RETURN_IF_ERROR(add(p + "ffn_gate_inp_shexp.weight", {E}, fan_in(E)));
  }
  if (v.arch == "olmoe") {
    // OLMoE has as many K/V heads as query heads (the reference's norms are n_embd wide): new K
    // and V projections of n_embd rows, norms across all heads.
    for (const char* n : {"attn_q_norm.weight", "attn_k_norm.weight", "attn_k.weight", "attn_v.weight"}) {
      w.remove_tensor(p + n);
    }
    LOOM_RETURN_IF_ERROR(add(p + "attn_k.weight", {E, E}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "attn_v.weight", {E, E}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "attn_q_norm.weight", {E}, rnd.norm_weight()));
    LOOM_RETURN_IF_ERROR(add(p + "attn_k_norm.weight", {E}, rnd.norm_weight()));
  }
  return Status::ok();
}

}  // namespace

Status make_moe_model(const gguf::GgufFile& in, gguf::GgufWriter& w, const std::string& arch, std::mt19937& rng) {
  if (arch == "gpt-oss" || arch == "gpt-oss-mxfp4") return make_gpt_oss(in, w, rng, arch == "gpt-oss-mxfp4");
  const std::string from = *in.get_string("general.architecture");
  const char* expected = moe_base_arch(arch);
  if (!expected) return invalid_argument("no MoE variant '" + arch + "'");
  if (from != expected) return invalid_argument(arch + " is made from a " + expected + " model, not " + from);
  if (arch == "gemma4") {
    return make_gemma4_moe(w, arch, *in.get_int("gemma4.embedding_length"), *in.get_int("gemma4.block_count"), MoeVariant::X,
                           MoeVariant::K, MoeVariant::Fe, rng);
  }
  // Metadata under the new prefix.
  if (arch != from) LOOM_RETURN_IF_ERROR(move_arch_keys(w, from, arch));
  const MoeVariant v = moe_variant(in, arch, from);
  LOOM_RETURN_IF_ERROR(set_moe_metadata(in, w, v));

  Draws rnd{rng};
  const TensorFiller add{w, false};
  // The last trunk block of qwen35moe stores gate and up as one tensor.
  auto nextn = in.get_int_or(from + ".nextn_predict_layers", 0);
  const int64_t fused_block = v.gated_shared ? v.L - (nextn ? *nextn : 0) - 1 : -1;
  if (v.next) LOOM_RETURN_IF_ERROR(qwen3next_mixers(in, w, arch, v.L));
  for (int64_t il = v.lead; il < v.L; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    if (!in.find_tensor(p + "ffn_gate.weight")) continue;
    LOOM_RETURN_IF_ERROR(add_moe_block(v, w, add, rnd, p, il == fused_block));
  }
  return Status::ok();
}

Status make_gpt_oss_shape(const gguf::GgufFile& in, gguf::GgufWriter& w, std::mt19937& rng, const FamilyShape& shape) {
  if (shape.E == 0 || shape.n_expert == 0) return invalid_argument("gpt-oss: only bench shapes are made this way");
  GptOssDims g;
  g.E = shape.E, g.L = shape.L, g.H = shape.H, g.Hkv = shape.Hkv, g.D = shape.D, g.X = shape.n_expert;
  g.K = shape.n_expert_used, g.Fe = shape.F, g.window = shape.window, g.orig = 4096, g.ctx = 131072;
  g.base = shape.rope_base, g.yarn = 32.0f, g.f16 = true;
  return make_gpt_oss(in, w, rng, /*mxfp4=*/false, g);
}

Status make_qwen3moe_shape(const gguf::GgufFile& in, gguf::GgufWriter& w, std::mt19937& rng, const FamilyShape& shape) {
  if (shape.E == 0 || shape.n_expert == 0) return invalid_argument("qwen3moe: only bench shapes are made from scratch");
  LOOM_ASSIGN_OR_RETURN(const int64_t V, clear_model(in, w));
  const std::string a = "qwen3moe";
  const int64_t E = shape.E, L = shape.L, H = shape.H, Hkv = shape.Hkv, D = shape.D, F = shape.F, X = shape.n_expert;
  LOOM_RETURN_IF_ERROR(w.set_string("general.architecture", a));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".context_length", 32768));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".embedding_length", uint32_t(E)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".feed_forward_length", uint32_t(4 * E)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".expert_feed_forward_length", uint32_t(F)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".expert_count", uint32_t(X)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".expert_used_count", uint32_t(shape.n_expert_used)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.head_count", uint32_t(H)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.head_count_kv", uint32_t(Hkv)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.key_length", uint32_t(D)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".attention.value_length", uint32_t(D)));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".block_count", uint32_t(L)));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f));
  LOOM_RETURN_IF_ERROR(w.set_f32(a + ".rope.freq_base", shape.rope_base));
  LOOM_RETURN_IF_ERROR(w.set_u32(a + ".vocab_size", uint32_t(V)));
  Draws rnd{rng};
  const TensorFiller add{w, true}, add_f32{w, false};
  auto fan_in = [&](int64_t n) { return rnd.normal(1.0f / std::sqrt(float(n))); };
  LOOM_RETURN_IF_ERROR(add("token_embd.weight", {E, V}, rnd.normal(0.5f)));
  LOOM_RETURN_IF_ERROR(add("output_norm.weight", {E}, rnd.norm_weight()));
  for (int64_t il = 0; il < L; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    LOOM_RETURN_IF_ERROR(add(p + "attn_norm.weight", {E}, rnd.norm_weight()));
    LOOM_RETURN_IF_ERROR(add(p + "attn_q.weight", {E, H * D}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "attn_k.weight", {E, Hkv * D}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "attn_v.weight", {E, Hkv * D}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "attn_output.weight", {H * D, E}, fan_in(H * D)));
    LOOM_RETURN_IF_ERROR(add(p + "attn_q_norm.weight", {D}, rnd.norm_weight()));
    LOOM_RETURN_IF_ERROR(add(p + "attn_k_norm.weight", {D}, rnd.norm_weight()));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_norm.weight", {E}, rnd.norm_weight()));
    // The router F32 (llama-quantize keeps ffn_gate_inp so), the stacks F16 for llama-quantize.
    const float router_std = shape.router_std > 0 ? shape.router_std : 2.0f;
    LOOM_RETURN_IF_ERROR(add_f32(p + "ffn_gate_inp.weight", {E, X}, rnd.normal(router_std / std::sqrt(float(E)))));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_gate_exps.weight", {E, F, X}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_up_exps.weight", {E, F, X}, fan_in(E)));
    LOOM_RETURN_IF_ERROR(add(p + "ffn_down_exps.weight", {F, E, X}, fan_in(F)));
  }
  return Status::ok();
}

}  // namespace loom

// Hyperparameters of a model, read from GGUF metadata ("<arch>.<key>").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf.h"
#include "ops/ops.h"

namespace loom::model {

// Architecture families. The decoder families share one forward (forward_decoder.cpp) driven by
// the fields below; BERT-style encoders have their own (forward_bert.cpp).
enum class Arch {
  kLlama,
  kQwen2,
  kQwen3,
  kPhi3,
  kGemma,
  kGemma2,
  kGemma3,
  kBert,
  kNomicBert,
  kMamba,
  kMamba2,
  kT5,
  kT5Encoder,
  kGraniteHybrid,  // Granite 4 hybrid: Mamba-2 and attention layers in one decoder stack
  kGranite,        // dense Granite 3 / 4: llama with Granite's four multipliers
  kSmolLM3,        // llama without RoPE on every fourth layer (NoPE)
  kLfm2,           // LFM2 / LFM2.5: gated short-convolution layers and GQA attention layers
  kQwen35,         // Qwen3.5: Gated DeltaNet layers and gated full-attention layers
  kGemma4,         // Gemma 4: sliding/global layers of different head sizes, shared-KV layers, per-layer embeddings
  kMistral3,       // Ministral 3: llama with YaRN and attention temperature scaling
  kGemma3n,        // Gemma 3n: AltUp streams, Laurel, per-layer embeddings, activation sparsity (forward_gemma3n.cpp)
  kGptOss,         // gpt-oss: sliding / full layers in turn, attention sinks, biased experts with a clamped SwiGLU
};
// <arch>.rope.scaling.type (llama.cpp's default when absent: linear, a no-op at factor 1).
enum class RopeScalingKind : uint8_t { kNone, kLinear, kYarn, kLongRope };
// The mixer of a model's recurrent layers.
enum class RecurrentMixer : uint8_t {
  kNone,
  kMamba1,     // mamba
  kMamba2,     // mamba2, granitehybrid
  kShortConv,  // lfm2: y = C ⊙ conv(B ⊙ x), no state beyond the conv's
  kDeltaNet,   // qwen35: gated delta rule over a [head_v][head_k] matrix per head
};
// kSwigluOai: gpt-oss's clamped SwiGLU (ops::swiglu_oai_inplace with alpha 1.702, limit 7).
enum class FfnAct { kSilu, kGelu, kSwigluOai };
inline constexpr float kSwigluOaiAlpha = 1.702f;  // the reference's fixed values
inline constexpr float kSwigluOaiLimit = 7.0f;
// How a mixture-of-experts router turns its logits into expert weights (llama.cpp's
// <arch>.expert_gating_func values 1-3): softmax over all experts, a sigmoid per expert, or the raw
// logits chosen and then a softmax over the chosen ones (gpt-oss).
enum class ExpertGating : uint8_t { kSoftmax = 1, kSigmoid = 2, kSoftmaxChosen = 3 };

struct ModelHparams {
  std::string arch_name;  // general.architecture
  Arch arch = Arch::kLlama;
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  // key/value length per head (n_embd / n_head unless given)
  int64_t n_ff = 0;
  int64_t n_rot = 0;  // rotated dimensions per head
  float rms_eps = 1e-5f;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;
  // <arch>.rope.scaling.original_context_length (n_ctx_train when absent): YaRN's original
  // context, and the threshold above which a context's n_ctx per sequence selects LongRoPE's
  // long factors instead of the short ones.
  int64_t n_ctx_orig_yarn = 0;
  // <arch>.rope.scaling.attn_factor (1 when absent): multiplies the rotated q and k (phi3
  // LongRoPE's magnitude scale), whichever factors are selected, as the reference does.
  float rope_attn_factor = 1.0f;
  ops::RopeMode rope_mode = ops::RopeMode::kNormal;
  RopeScalingKind rope_scaling = RopeScalingKind::kLinear;
  float yarn_beta_fast = 32.0f;  // rope.scaling.yarn_beta_fast
  float yarn_beta_slow = 1.0f;   // rope.scaling.yarn_beta_slow
  float yarn_log_mul = 0.0f;     // rope.scaling.yarn_log_multiplier (mscale_all_dim; 0: none)
  // mistral3: queries scaled by 1 + temp_scale · log(floor(pos / n_ctx_orig_yarn) + 1) after RoPE
  // (attention.temperature_scale; 0: none).
  float attn_temp_scale = 0.0f;
  int pooling_type = -1;  // <arch>.pooling_type: 0 none, 1 mean, 2 cls, 3 last, 4 rank; -1 unset
  bool causal = true;     // <arch>.attention.causal (encoders: false)
  // Classifier heads (rerankers, rank pooling): <arch>.classifier.output_labels, when present,
  // names the outputs and gives their number; n_cls_out is 1 without labels (llama.cpp's rule).
  std::vector<std::string> cls_labels;
  int64_t n_cls_out = 1;

  // Family traits (set from the architecture, some from metadata).
  FfnAct ffn_act = FfnAct::kSilu;  // gated FFN: act(gate) * up
  // GELU read from the reference's f16 table (ggml's CPU GELU) rather than computed (the Gemma
  // families: with F32 K/V the difference reaches the 1e-3 conformance tolerance).
  bool gelu_f16_table = false;
  bool qkv_bias = false;        // qwen2: q/k/v biases
  bool qk_norm = false;         // qwen3: RMSNorm per head on q and k
  bool post_norms = false;      // gemma2: norms after attention and FFN, before the residual add
  float embd_scale = 0.0f;      // gemma: embeddings multiplied by sqrt(n_embd); granite: embedding_scale (0: none)
  float attn_scale = 0.0f;      // query scale; 0: 1/sqrt(head_dim) (granite: attention.scale)
  float residual_scale = 0.0f;  // granite: each block's mixer and FFN output multiplied before its residual add (0: none)
  float logit_scale = 0.0f;     // granite: logits divided by this (0: none)
  // Attention layers rotate q and k. granitehybrid: rope.scaling.finetuned (default true); Granite
  // 4's hybrids write false: no positional encoding at all (the Mamba-2 layers order the tokens).
  bool use_rope = true;
  // smollm3: layer il has no RoPE when (il + 1) % no_rope_step == 0 (NoPE layers); 0: none.
  int no_rope_step = 0;
  // qwen35: the q projection gives per head [q (head_dim) | gate (head_dim)]; the attention output
  // is multiplied by sigmoid(gate) before the out-projection.
  bool attn_output_gate = false;
  // qwen3next's Gated DeltaNet differs from qwen35's in two layouts: value head h reads key head
  // h / (Hv / Hk) (the key heads repeated in place, not tiled: h mod Hk), and β and α come from one
  // projection ssm_ba whose rows run per key head: its Hv / Hk β rows, then its Hv / Hk α rows.
  bool delta_kv_interleaved = false;
  bool delta_ba_fused = false;
  // qwen35: <arch>.rope.dimension_sections (M-RoPE's t/h/w/e sections, interleaved). For text every
  // section turns with the token's position except the fourth (e), which turns by 0; all zero: none.
  int rope_sections[4] = {0, 0, 0, 0};
  // gemma4: sliding layers' own head size and rotated dims (attention.key_length_swa,
  // rope.dimension_count_swa; 0: the same as the full layers', head_dim / n_rot, which are then the
  // larger); per-layer FFN widths (feed_forward_length as an array; n_ff is the largest); per-layer
  // token embeddings of n_embd_per_layer (embedding_length_per_layer_input; 0: none); a V RMSNorm
  // without weight; global layers rotate with the file's rope_freqs divisors.
  int64_t head_dim_swa = 0;
  int64_t n_rot_swa = 0;
  std::vector<int64_t> n_ff_layer;
  int64_t n_embd_per_layer = 0;
  bool v_norm = false;
  // gemma3n (the reference's fixed values): AltUp streams and the active one, Laurel's rank, the
  // first layers whose FFN gate keeps only values above mean + 1.645·std (activation sparsity).
  int64_t n_altup = 0;
  int64_t laurel_rank = 0;
  int64_t n_layer_sparse = 0;
  // Multi-token-prediction blocks after the trunk (<arch>.nextn_predict_layers, counted in
  // block_count): loaded with the file but never run. n_layer counts the trunk only.
  int64_t n_layer_nextn = 0;
  float attn_softcap = 0.0f;        // gemma2: scores = c * tanh(scores / c)
  float final_softcap = 0.0f;       // gemma2: logits = c * tanh(logits / c)
  int swa_window = 0;               // sliding-window size for SWA layers (0: none)
  int swa_pattern = 0;              // layer il uses SWA when il % pattern < pattern - 1
  std::vector<uint8_t> swa_layer;   // gemma4: per layer, 1 for a sliding layer (overrides swa_pattern)
  float rope_freq_base_swa = 0.0f;  // gemma3: SWA layers rotate with this base (and scale 1); 0: same as others
                                    // (gpt-oss: with this base and the file's scaling, YaRN included)
  float norm_eps = 1e-12f;          // LayerNorm epsilon (BERT)

  // Selective state-space blocks (mamba: Mamba-1, mamba2 and granitehybrid's recurrent layers:
  // Mamba-2): <arch>.ssm.*. Each sequence
  // carries a conv state [conv channels][d_conv - 1] and an SSM state [d_inner][d_state] per
  // layer instead of K/V. Mamba-2 convolves x, B and C together (d_inner + 2·n_group·d_state
  // channels), has one decay and step per head of d_inner / n_head channels, and B, C per group.
  int64_t ssm_d_conv = 0;       // ssm.conv_kernel: taps of the causal depthwise convolution
  int64_t ssm_d_inner = 0;      // ssm.inner_size (Mamba-1: = 2 * n_embd, as the reference requires)
  int64_t ssm_d_state = 0;      // ssm.state_size
  int64_t ssm_dt_rank = 0;      // ssm.time_step_rank (Mamba-2: the number of heads)
  int64_t ssm_n_group = 0;      // ssm.group_count (Mamba-2; 0 for Mamba-1)
  bool ssm_dt_b_c_rms = false;  // ssm.dt_b_c_rms: RMSNorm (no weight) of dt, B and C (Falcon-Mamba)

  // T5 (t5: encoder-decoder, t5encoder: its encoder alone): relative-position buckets per head
  // (<arch>.attention.relative_buckets_count) from the bias table of layer 0 unless a layer has its
  // own, no 1/sqrt(d) attention scale, RMSNorms, ReLU or gated-GELU FFN. n_layer is the encoder's
  // depth; the decoder has n_dec_layer (<arch>.decoder_block_count, default n_layer) layers, at most
  // n_layer (llama.cpp does not run more).
  int64_t n_rel_buckets = 0;
  int64_t n_dec_layer = 0;
  int32_t dec_start_token = -1;  // <arch>.decoder_start_token_id; -1: BOS (else the pad id)

  // The mixer of the recurrent layers (kNone: no recurrent layers).
  RecurrentMixer rec_mixer = RecurrentMixer::kNone;

  // Embedding-only encoders (no LM head): BERT families and the T5 encoder.
  bool is_encoder() const { return arch == Arch::kBert || arch == Arch::kNomicBert || arch == Arch::kT5Encoder; }
  // Models with a T5 encoder (encode() keeps its output for cross-attention when there is a decoder).
  bool has_encoder() const { return arch == Arch::kT5 || arch == Arch::kT5Encoder; }
  bool is_t5() const { return has_encoder(); }
  // Recurrent models keep a fixed-size state per sequence instead of a KV cache (every layer;
  // hybrids are is_hybrid()).
  bool is_recurrent() const { return arch == Arch::kMamba || arch == Arch::kMamba2; }
  // The recurrent layers are Mamba-2 blocks (one decay per head, B and C per group).
  bool is_mamba2() const { return rec_mixer == RecurrentMixer::kMamba2; }
  // Channels of the convolution: x (Mamba-1), x, B and C (Mamba-2), q, k and v (DeltaNet: the
  // groups are the key heads, d_state their width), B ⊙ x (short conv: d_inner = n_embd).
  int64_t ssm_conv_channels() const { return ssm_d_inner + 2 * ssm_n_group * ssm_d_state; }
  // Floats of one sequence's recurrent state in one layer: the conv state, the SSM state.
  int64_t n_embd_conv_state() const { return (ssm_d_conv - 1) * ssm_conv_channels(); }
  int64_t n_embd_ssm_state() const { return ssm_d_state * ssm_d_inner; }

  // Per-layer memory. Hybrid models (attention and recurrent layers in one stack) mark their
  // recurrent layers: granitehybrid and lfm2 by a K/V head count of 0 in the per-layer
  // <arch>.attention.head_count_kv array, qwen35 by <arch>.attention.recurrent_layers or
  // full_attention_interval. Empty n_head_kv_layer: every layer has n_head_kv; with an array,
  // n_head_kv is its largest value (buffers are sized for the widest layer).
  std::vector<int64_t> n_head_kv_layer;
  std::vector<uint8_t> recurrent_layer;  // hybrids: 1 for a recurrent layer; empty: none
  bool layer_is_recurrent(int64_t il) const {
    return is_recurrent() || (!recurrent_layer.empty() && recurrent_layer[size_t(il)] != 0);
  }
  // Mixture-of-experts feed-forward (n_expert 0: every layer dense): a router picks n_expert_used
  // of n_expert SwiGLU experts of width n_ff_exp per token and mixes their outputs by the gated
  // router weights, normalised to sum 1 when expert_weights_norm, times expert_weights_scale (0:
  // none). Layers below n_layer_dense_lead keep a dense FFN of n_ff (lfm2moe). A shared expert of
  // width n_ff_shexp (0: none) runs for every token beside them (qwen35moe: gated by a sigmoid of
  // its own one-row router; granite: ungated). Selection may add a per-expert bias (lfm2moe's
  // exp_probs_b) that the weights do not see.
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  int64_t n_ff_shexp = 0;
  int64_t n_layer_dense_lead = 0;
  ExpertGating expert_gating = ExpertGating::kSoftmax;
  bool expert_weights_norm = false;
  float expert_weights_scale = 0.0f;
  bool layer_is_moe(int64_t il) const { return n_expert > 0 && il >= n_layer_dense_lead; }
  // gemma4: the dense FFN (n_ff_at(il) wide, its own norm) runs beside the experts in every MoE
  // layer; the experts read their own pre-norm, the router an unweighted RMSNorm of the residual
  // times 1/sqrt(n_embd) and a per-channel scale, and each half has its own post-norm before the
  // two are added (forward_decoder.cpp, forward_moe.cpp).
  bool moe_beside_dense = false;
  // olmoe: q and k are RMS-normed across all heads at once (weights of n_embd_q / n_embd_kv)
  // instead of per head.
  bool qk_norm_full = false;
  // Some layers attend and some keep a recurrent state.
  bool is_hybrid() const {
    if (is_recurrent() || recurrent_layer.empty()) return false;
    bool attn = false, rec = false;
    for (uint8_t r : recurrent_layer) (r ? rec : attn) = true;
    return attn && rec;
  }
  // Layer il rotates q and k (RoPE on, and not one of smollm3's NoPE layers).
  bool layer_has_rope(int64_t il) const { return use_rope && !(no_rope_step > 0 && (il + 1) % no_rope_step == 0); }
  bool has_recurrent_layers() const { return is_recurrent() || is_hybrid(); }
  int64_t n_head_kv_at(int64_t il) const { return n_head_kv_layer.empty() ? n_head_kv : n_head_kv_layer[size_t(il)]; }
  // Layers that attend over another layer's K/V instead of storing their own (Gemma 3n / 4's
  // shared KV layers: llama.cpp's layer reuse): kv_reuse[il] is that layer, -1 its own; empty:
  // every layer its own. Set by the families that have it.
  std::vector<int> kv_reuse;
  int kv_source(int64_t il) const { return kv_reuse.empty() ? -1 : kv_reuse[size_t(il)]; }
  int64_t head_dim_at(int64_t il) const { return head_dim_swa > 0 && is_swa_layer(il) ? head_dim_swa : head_dim; }
  int64_t n_rot_at(int64_t il) const { return n_rot_swa > 0 && is_swa_layer(il) ? n_rot_swa : n_rot; }
  int64_t n_ff_at(int64_t il) const { return n_ff_layer.empty() ? n_ff : n_ff_layer[size_t(il)]; }
  int64_t n_embd_kv_at(int64_t il) const { return n_head_kv_at(il) * head_dim_at(il); }

  bool is_swa_layer(int64_t il) const {
    if (!swa_layer.empty()) return swa_window > 0 && swa_layer[size_t(il)] != 0;
    return swa_window > 0 && (swa_pattern <= 1 || il % swa_pattern < swa_pattern - 1);
  }

  int64_t n_embd_q() const { return n_head * head_dim; }
  int64_t n_embd_kv() const { return n_head_kv * head_dim; }
};

// Reads and validates hyperparameters; n_vocab is taken from the token embedding by the caller
// when the metadata lacks it.
Expected<ModelHparams> read_hparams(const gguf::GgufFile& file);

}  // namespace loom::model

// Re-exported: the layers above name these as loom::X (CONTRIBUTING.md, "Namespaces").
namespace loom {
using model::Arch;
using model::ModelHparams;
}  // namespace loom

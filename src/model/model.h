// A loaded model: hyperparameters, vocabulary and weights bound by tensor name. Immutable after
// load, so one Model may serve many contexts and threads at once.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf.h"
#include "model/hparams.h"
#include "ops/tensor_view.h"
#include "vocab/vocab.h"

namespace loom::model {

// Weights of one block. Optional tensors are null/empty when the family has none. Fused tensors
// in the file (phi3's attn_qkv and gate+up) are bound as row ranges, so the forward sees the
// same views for every family.
struct LayerWeights {
  const float* attn_norm = nullptr;       // [n_embd] (BERT: unused)
  TensorView wq;                          // [n_embd_q rows][n_embd]
  TensorView wk;                          // [n_embd_kv rows][n_embd]
  TensorView wv;                          // [n_embd_kv rows][n_embd]
  TensorView wo;                          // [n_embd rows][n_embd_q]
  const float* bq = nullptr;              // [n_embd_q] biases (qwen2, BERT)
  const float* bk = nullptr;              // [n_embd_kv]
  const float* bv = nullptr;              // [n_embd_kv]
  const float* bo = nullptr;              // [n_embd] (BERT, gpt-oss)
  const float* attn_sinks = nullptr;      // [n_head] a learned logit per head in the softmax's sum (gpt-oss)
  const float* q_norm = nullptr;          // [head_dim] per-head RMSNorm of q (qwen3)
  const float* k_norm = nullptr;          // [head_dim]
  const float* post_attn_norm = nullptr;  // [n_embd] (gemma2)
  const float* ffn_norm = nullptr;        // [n_embd]
  TensorView ffn_gate;                    // [n_ff rows][n_embd] (BERT: none)
  TensorView ffn_up;                      // [n_ff rows][n_embd]
  TensorView ffn_down;                    // [n_embd rows][n_ff]
  const float* ffn_up_b = nullptr;        // [n_ff] (BERT)
  const float* ffn_down_b = nullptr;      // [n_embd] (BERT)
  const float* post_ffn_norm = nullptr;   // [n_embd] (gemma2)
  // Mixture-of-experts FFN (ModelHparams::layer_is_moe): the router [n_expert rows][n_embd], the
  // experts' matrices stacked, expert e's rows at [e·rows, (e + 1)·rows) (expert() gives its view):
  // gate and up [n_expert·n_ff_exp rows][n_embd] (gate may be absent: act(up) alone), down
  // [n_expert·n_embd rows][n_ff_exp]; lfm2moe's selection bias [n_expert]; the shared expert
  // (ffn_*_shexp, n_ff_shexp wide) and qwen35moe's gate for it [1 row][n_embd]. A file's fused
  // ffn_gate_up_exps is bound as ffn_up_exps of 2·n_ff_exp rows per expert (gate rows, then up
  // rows) with gate_up_fused set and ffn_gate_exps empty.
  bool gate_up_fused = false;
  TensorView ffn_gate_inp;
  TensorView ffn_gate_exps;
  TensorView ffn_up_exps;
  TensorView ffn_down_exps;
  const float* ffn_exp_probs_b = nullptr;
  // gpt-oss's biases: the router's [n_expert] (added to its logits), each expert's gate and up
  // [n_expert][n_ff_exp] and down [n_expert][n_embd] (expert e's row e).
  const float* ffn_gate_inp_b = nullptr;
  const float* ffn_gate_exps_b = nullptr;
  const float* ffn_up_exps_b = nullptr;
  const float* ffn_down_exps_b = nullptr;
  // Per-expert output scales [n_expert] (the reference's optional ffn_{gate,up,down}_exps.scale:
  // expert e's gate / up / down product times element e; gemma4's per_expert_scale is the down one),
  // and gemma4's router input scale [n_embd] (ffn_gate_inp.scale) and the norms of its two FFN
  // halves: the experts' pre-norm and the post-norms of the dense half (1) and the experts (2).
  const float* ffn_gate_exps_s = nullptr;
  const float* ffn_up_exps_s = nullptr;
  const float* ffn_down_exps_s = nullptr;
  const float* ffn_gate_inp_s = nullptr;
  const float* pre_ffn_norm_2 = nullptr;
  const float* post_ffn_norm_1 = nullptr;
  const float* post_ffn_norm_2 = nullptr;
  TensorView ffn_gate_shexp;
  TensorView ffn_up_shexp;
  TensorView ffn_down_shexp;
  TensorView ffn_gate_inp_shexp;
  // BERT post-norm LayerNorms (weight, bias).
  const float* attn_out_norm = nullptr;
  const float* attn_out_norm_b = nullptr;
  const float* layer_out_norm = nullptr;
  const float* layer_out_norm_b = nullptr;
  // Mamba blocks (attn_norm is their RMSNorm weight); Di = d_inner, S = d_state, R = dt_rank,
  // Mamba-2: H heads (= R), G groups, Cc = Di + 2·G·S conv channels.
  TensorView ssm_in;                  // [2·Di rows][n_embd]: x rows, then z rows (Mamba-2: [Di + Cc + H]: z, x|B|C, dt)
  const float* ssm_conv = nullptr;    // [Di][d_conv] depthwise causal convolution taps (Mamba-2: [Cc][d_conv])
  const float* ssm_conv_b = nullptr;  // [Di] (Mamba-2: [Cc])
  TensorView ssm_x;                   // [R + 2·S rows][Di]: dt, B, C (Mamba-1)
  TensorView ssm_dt;                  // [Di rows][R] (Mamba-1)
  const float* ssm_dt_b = nullptr;    // [Di] (Mamba-2: [H])
  const float* ssm_a = nullptr;       // [Di][S] the (negative) state decay A (Mamba-2: [H], one per head)
  const float* ssm_d = nullptr;       // [Di] skip connection (Mamba-2: [H])
  const float* ssm_norm = nullptr;    // [Di] grouped RMSNorm weight, G groups of Di / G (Mamba-2)
  TensorView ssm_out;                 // [n_embd rows][Di]
  // Short-conv blocks (lfm2) reuse ssm_in ([3·n_embd rows][n_embd]: B, C, x), ssm_conv ([n_embd][L])
  // and ssm_out ([n_embd rows][n_embd]). Gated DeltaNet blocks (qwen35; Hk key heads and Hv value
  // heads of S = d_state channels, Cc = 2·Hk·S + Di) reuse ssm_in (attn_qkv: [Cc rows][n_embd]),
  // ssm_conv ([Cc][d_conv]), ssm_dt_b ([Hv]), ssm_a ([Hv], negative), ssm_norm ([S]) and ssm_out;
  // their own projections ssm_z, ssm_beta and ssm_alpha follow the gemma3n fields below.
  // gemma4: the layer's output scale (0: none) and its per-layer-embedding block: gate [P rows][n_embd],
  // projection [n_embd rows][P], post-norm [n_embd] (P = n_embd_per_layer).
  float out_scale = 0.0f;
  TensorView pl_inp_gate;
  TensorView pl_proj;
  const float* pl_post_norm = nullptr;
  // gemma3n: AltUp's router (norm, [n_altup rows][n_embd]), prediction and correction coefficients
  // ([n_altup² rows][n_altup], [n_altup rows][n_altup]) and correction scale [n_embd]; Laurel's
  // low-rank residual (left [rank rows][n_embd], right [n_embd rows][rank], post-norm).
  const float* altup_router_norm = nullptr;
  const float* altup_router = nullptr;
  const float* altup_predict_coef = nullptr;
  const float* altup_correct_coef = nullptr;
  const float* altup_correct_scale = nullptr;
  TensorView laurel_l;
  TensorView laurel_r;
  const float* laurel_post_norm = nullptr;
  // Gated DeltaNet (qwen35, see the Mamba fields above):
  TensorView ssm_z;      // [Di rows][n_embd] the output gate (attn_gate)
  TensorView ssm_beta;   // [Hv rows][n_embd] the write strength, through a sigmoid (qwen3next:
                         // ssm_ba, [2·Hv rows], per key head its β rows then its α rows)
  TensorView ssm_alpha;  // [Hv rows][n_embd] the decay's input (qwen3next: empty)
  // T5: the relative-attention bias table (layer 0's serves layers without one) and the decoder's
  // cross-attention over the encoder output.
  const float* attn_rel_b = nullptr;  // [n_rel_buckets][n_head]
  const float* cross_norm = nullptr;  // [n_embd]
  TensorView wq_cross;                // [n_embd_q rows][n_embd]
  TensorView wk_cross;                // [n_embd_kv rows][n_embd]
  TensorView wv_cross;                // [n_embd_kv rows][n_embd]
  TensorView wo_cross;                // [n_embd rows][n_embd_q]

  // Every matrix of the block (empty views included), for the passes over all weights: packing,
  // scratch sizing.
  std::vector<TensorView*> matrices();
  std::vector<const TensorView*> matrices() const;
};

// Expert e's rows of a stacked expert matrix of `rows` rows per expert: its GGUF rows, and its
// slice of the packed copy when the stack has one (packed groups never straddle two experts: the
// stack is packed only when rows is a multiple of the packed group height).
TensorView expert_view(const TensorView& stacked, int64_t e, int64_t rows);

struct ModelWeights {
  TensorView tok_embd;                 // [n_vocab rows][n_embd]
  const float* output_norm = nullptr;  // [n_embd] (BERT: none)
  TensorView output;                   // [n_vocab rows][n_embd]; == tok_embd when tied (BERT: none)
  bool tied_output = false;
  TensorView pos_embd;              // [n_ctx_train rows][n_embd] learned positions (BERT)
  TensorView type_embd;             // [n_token_types rows][n_embd] (BERT)
  const float* tok_norm = nullptr;  // [n_embd] LayerNorm after the embeddings (BERT)
  const float* tok_norm_b = nullptr;
  // Classification head of a BERT cross-encoder (reranker), for rank pooling; each part optional,
  // as in llama.cpp: score = cls_out·tanh(cls·h + cls_b) + cls_out_b of the first (CLS) token's
  // hidden state h, the tanh layer skipped without cls (a direct projection), the projection
  // skipped without cls_out.
  TensorView cls;                    // [n_embd rows][n_embd]
  const float* cls_b = nullptr;      // [n_embd]
  TensorView cls_out;                // [n_cls_out rows][n_embd]
  const float* cls_out_b = nullptr;  // [n_cls_out]
  // Phi-3 LongRoPE frequency divisors, [n_rot/2] each, shared by all layers (null when absent):
  // a context uses the long ones when its n_ctx per sequence exceeds n_ctx_orig_yarn.
  const float* rope_long = nullptr;
  const float* rope_short = nullptr;
  // qwen35's M-RoPE sections as frequency divisors for text ([n_rot/2]: 1, or +inf for the pairs of
  // the fourth section, which turn by position 0); null when every pair turns with the position.
  const float* rope_sections = nullptr;
  // gemma4: the global layers' proportional-RoPE divisors ([head_dim/2], rope_freqs.weight; null:
  // none) and the per-layer token embeddings: per token a row of n_layer slices of P
  // ([n_vocab rows][n_layer·P]), the embedding's projection into them ([n_layer·P rows][n_embd])
  // and the slices' RMSNorm weight [P].
  const float* rope_freqs = nullptr;
  // gemma3n: the projections of the embedding into the other AltUp streams and back, one
  // [n_embd rows][n_embd] matrix per stream after the first (n_altup - 1 of each).
  std::vector<TensorView> altup_proj;
  std::vector<TensorView> altup_unembd_proj;
  TensorView per_layer_tok_embd;
  TensorView per_layer_model_proj;
  const float* per_layer_proj_norm = nullptr;
  // The stacked expert matrices may be packed: each expert's rows (n_ff_exp, n_embd) fill whole
  // packed groups, so an expert's slice of the copy starts at a group (expert_view).
  bool experts_packable = false;
  std::vector<LayerWeights> layers;        // T5: the decoder's blocks (none for t5encoder)
  std::vector<LayerWeights> enc_layers;    // T5: the encoder's blocks
  const float* enc_output_norm = nullptr;  // [n_embd] T5: after the encoder's last block

  bool has_cls_head() const { return !cls.empty() || !cls_out.empty(); }
};

struct ModelLoadParams {
  bool vocab_only = false;  // tokenizer work without binding weights
  // Copy Q4_0/Q8_0 matrices into the row-interleaved layout of quant/packed.h when this CPU has
  // kernels for it (also off with LOOM_NO_REPACK=1). The mapped originals' pages are released.
  bool repack = true;
  // Called on the loading thread with the fraction done (0 first, increasing, 1 last): 0.1 after
  // the vocabulary and the weight binding, then by bytes of weights packed.
  std::function<void(float)> progress;
};

namespace detail {
struct PackedStorage;
}

class Model {
 public:
  static Expected<std::shared_ptr<const Model>> load(const std::string& path, const ModelLoadParams& params = {});
  // Builds from an already opened file (tests construct files in memory).
  static Expected<std::shared_ptr<const Model>> from_gguf(gguf::GgufFile file, const ModelLoadParams& params = {});

  const ModelHparams& hparams() const { return hp_; }
  const Vocab& vocab() const { return *vocab_; }
  const ModelWeights& weights() const { return w_; }
  const gguf::GgufFile& file() const { return file_; }
  // Bytes of weights a single-token decode step reads (every matrix once, in its packed copy where
  // it has one, plus one embedding row).
  uint64_t decode_weight_bytes() const { return decode_weight_bytes_; }
  // The packed weights came from a packed-cache file (LOOM_PACK_CACHE, model/packing.h).
  bool packed_from_cache() const;
  uint64_t n_params() const { return n_params_; }
  // Bytes of packed weight copies made at load (0 when none).
  size_t packed_bytes() const;
  int64_t load_time_us() const { return load_time_us_; }
  // T5: the token the decoder starts from: <arch>.decoder_start_token_id, else BOS, else the pad
  // id (llama.cpp's examples take BOS); -1 for models without an encoder-decoder.
  int32_t decoder_start_token() const;

 private:
  Model() = default;
  // token_embd.weight, with n_vocab taken from it when the metadata lacks it and checked
  // against the vocabulary.
  Expected<const gguf::TensorInfo*> token_embedding();
  Status bind_decoder();
  Status bind_bert();
  Status bind_mamba();
  Status bind_t5();
  // Of the extra bytes the packed expert stacks hold over their GGUF layout, those of the experts
  // a decode step does not choose (all but n_expert_used of n_expert).
  int64_t unchosen_expert_extra() const;

  gguf::GgufFile file_;
  ModelHparams hp_;
  std::optional<Vocab> vocab_;  // always set after a successful load
  ModelWeights w_;
  std::vector<std::vector<float>> owned_;          // norm vectors converted to f32 when stored otherwise
  std::shared_ptr<detail::PackedStorage> packed_;  // row-interleaved copies (see packing.h)
  uint64_t decode_weight_bytes_ = 0;
  uint64_t n_params_ = 0;
  int64_t load_time_us_ = 0;
};

}  // namespace loom::model

// Re-exported: the layers above name these as loom::X (CONTRIBUTING.md, "Namespaces").
namespace loom {
using model::Model;
using model::ModelWeights;
}  // namespace loom

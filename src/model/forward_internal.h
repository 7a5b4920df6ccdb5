// Shared pieces of the per-family forward passes (not part of the model layer's interface).
#pragma once

#include <algorithm>
#include <vector>

#include "model/forward.h"
#include "model/model.h"
#include "ops/attention.h"

namespace loom::model::detail {

// Activation buffers of one micro-batch of T tokens, carved from the scratch arena.
struct Buffers {
  float* x;       // [T][E] residual stream
  float* xb;      // [T][E] normed input of a sub-block
  float* q;       // [T][Q]
  float* k;       // [T][KV]
  float* v;       // [T][KV]
  float* att;     // [T][Q]
  float* tmp;     // [T][E] sub-block output before the residual add
  float* gate;    // [T][F]
  float* up;      // [T][F]
  float* lora_t;  // [T][max_rank] A·x
  float* lora_u;  // [T][max(F, V, Q)] B·(A·x)
  // Mamba mixers (Di = d_inner, S = d_state, R = dt_rank; empty for families without them)
  float* ssm_xz;   // [T][2·Di] in-projection: x, then the gate z (Mamba-2: [T][Di + Cc + H] z, x|B|C, dt)
  float* ssm_xc;   // [T][Di] convolved x (Mamba-2: [T][Cc] x|B|C)
  float* ssm_xdb;  // [T][R + 2·S] dt (low rank), B, C
  float* ssm_dtr;  // [T][R] the dt part, contiguous
  float* ssm_dt;   // [T][Di]
  float* ssm_y;    // [T][Di] scan output
  // Short conv (lfm2): ssm_xz [T][3·E] B|C|x, ssm_y B ⊙ x, ssm_xc its convolution. Gated DeltaNet
  // (qwen35): ssm_xz holds q|k|v [T][Cc], then z [T][Di], β [T][Hv] and g [T][Hv]; ssm_xc the
  // convolved q|k|v, ssm_y the rule's output.
  float* qg;        // [T][2·Q] qwen35's q projection: per head q, then its output gate (else empty)
  float* pl_inp;    // [T][n_layer][P] gemma4's per-layer inputs (P = n_embd_per_layer; else empty)
  float* pl_gate;   // [T][P] gemma4's per-layer gate of the current layer
  float* pl_row;    // [n_layer·P] one token's row of the per-layer embedding table
  float* alt;       // gemma3n: [2][n_altup][T][E] the AltUp streams, then their predictions
  float* alt_coef;  // gemma3n: [T][n_altup² + 2·n_altup] router outputs and coefficients
  float* laurel;    // gemma3n: [T][laurel_rank]
  // Mixture-of-experts blocks (X experts, K chosen per token; empty for dense models):
  float* moe_logits;         // [T][X] router logits, then gated probabilities
  int32_t* moe_chosen;       // [T][K] chosen experts per token, best first
  float* moe_weights;        // [T][K] their weights
  int32_t* moe_start;        // [X + 1] offsets of each expert's pairs in moe_pairs
  int32_t* moe_pairs;        // [T·K] (token·K + slot) grouped by expert
  float* moe_x;              // [T][E] the input rows of a wave of experts, gathered
  float* moe_y;              // [T][E] their output rows (then the shared expert's)
  int32_t* pos_bucket;       // [T][n_kv] T5 relative-position buckets (empty for other families)
  float* rope_cs;            // [T][max rotated dims] the rotation table of the last RoPE (ops::rope_table)
  ops::RopeParams rope_key;  // ... made for these parameters and head size (-1: none yet)
  int rope_key_dim = -1;
  void* mm;             // matmul activation scratch
  void* attn;           // attention scratch
  int rows = 0;         // T: the rows each [T][...] buffer holds
  size_t mm_bytes = 0;  // bytes at mm
};

// Carves the buffers from `arena` (reset first) for the scratch's reserved sizes.
Buffers carve(const Model& m, ForwardScratch& scratch, TensorType type_k, int n_threads);

// y = W·x (+ LoRA updates) for T rows.
void linear(ThreadPool& pool, const TensorView& w, const std::vector<LoraPair>* loras, const float* x, int T, float* y,
            Buffers& b);

// The adapters of block il's weight `kind`, or null.
const std::vector<LoraPair>* layer_lora(const ForwardConfig& cfg, int il, LayerWeight kind);

inline bool observe(const ForwardConfig& c, const char* name, int layer, const float* data, int64_t cols, int64_t rows) {
  return !c.eval_cb || c.eval_cb(name, layer, data, cols, rows, c.eval_data);
}

inline Status aborted() { return Status(StatusCode::kAborted, "aborted by callback"); }

// Token embeddings (+ the embedding LoRA) into b.x, or a copy of the input embeddings.
void embed_tokens(const Model& m, const ForwardBatch& fb, const ForwardConfig& cfg, ThreadPool& pool, Buffers& b);

// Attention settings shared by the families for layer il reading `a`: heads, cells, the layer's
// K/V storage and row sizes, mask, scale 1/sqrt(head_dim) (families adjust scale and softcap).
ops::AttentionParams attention_params(const ModelHparams& hp, const ForwardBatch& fb, const AttnInputs& a, int il);

// The RoPE of layer il: the context's, or for sliding-window layers of families that rotate them
// differently (gemma3, gemma4), their own base with no scaling; gemma4's layers rotate their own
// number of dims, its global layers with the file's proportional divisors.
ops::RopeParams layer_rope(const Model& m, const ops::RopeParams& rope, int il);

// Adds the control vector of block il (when one is set for it) to each of the T rows of x.
void add_control_vector(const ForwardConfig& cfg, int il, float* x, int T, int64_t E);

// Final norm of the output rows and the LM head (or their hidden states): the decoder families'
// and mamba's common tail.
// rows_compacted: b.x holds the output rows alone, in order (keep_output_rows), not all of the batch.
Status write_outputs(const Model& m, const ForwardBatch& fb, const ForwardConfig& cfg, ThreadPool& pool, Buffers& b,
                     bool rows_compacted = false);
// The RoPE table (ops::rope_table) of the batch's positions for p and head_dim: made once per
// forward pass and parameters, shared by a layer's queries and keys and by the layers that rotate
// alike.
const float* rope_table_of(const ForwardBatch& fb, const ops::RopeParams& p, int head_dim, Buffers& b);
// Moves the output rows of b.x ([n_tokens][E]) to its first fb.n_outputs rows, in output order.
void keep_output_rows(const ForwardBatch& fb, int64_t E, Buffers& b);

// Quantizes this micro-batch's K/V rows of layer il into their cells of `a`.
void store_kv(const ForwardBatch& fb, const AttnInputs& a, int il, const Buffers& b);

// The K type the scratch's attention buffers are sized for (the full KV part's).
inline TensorType scratch_k_type(const ForwardBatch& fb) { return fb.attn.kv ? fb.attn.kv->type_k : TensorType::F32; }

// The mixers of one block, from the normed input b.xb ([T][n_embd]) into b.tmp ([T][n_embd]), for
// the family forwards that stack them:
// attention of layer il over its KV part (q/k/v projections, biases, q/k norms, RoPE unless the
// model has none, K/V stored into the micro-batch's cells, out-projection): forward_decoder.cpp;
// with q0 / nq, K and V of all T rows but the queries, attention and out-projection of the rows
// [q0, q0 + nq) alone (nq < 0: to the end), into b.tmp rows [0, nq);
Status attention_block(const Model& m, const ForwardBatch& fb, const ForwardConfig& cfg, ThreadPool& pool, int il,
                       Buffers& b, int q0 = 0, int nq = -1);
// The run [first, first + fb.n_outputs) when the batch's output rows are adjacent and in order, else -1.
int output_run_start(const ForwardBatch& fb);
// the selective state-space mixer of layer il (Mamba-1, or Mamba-2 for mamba2 and hybrids),
// continuing each run's state from fb.rs (fb.rs->layers[il]): forward_mamba.cpp.
Status ssm_block(const Model& m, const ForwardBatch& fb, const ForwardConfig& cfg, ThreadPool& pool, int il, Buffers& b);

// The mixture-of-experts FFN of layer il, from b.xb into b.tmp: forward_moe.cpp.
Status moe_block(const Model& m, const ForwardBatch& fb, const ForwardConfig& cfg, ThreadPool& pool, int il, Buffers& b);
// The router's choice for T tokens: gates logits ([T][n_expert], overwritten by the gated
// probabilities), picks the n_expert_used best per token (by probability + bias when bias is set;
// NaN never beats a number; ties to the lower index) into chosen [T][K] and their final weights
// into weights [T][K].
void route_tokens(const ModelHparams& hp, const float* bias, float* logits, int T, int32_t* chosen, float* weights);

// lfm2's gated short convolution of layer il: forward_short_conv.cpp.
Status short_conv_block(const Model& m, const ForwardBatch& fb, const ForwardConfig& cfg, ThreadPool& pool, int il,
                        Buffers& b);
// qwen35's Gated DeltaNet mixer of layer il: forward_delta_net.cpp.
Status delta_net_block(const Model& m, const ForwardBatch& fb, const ForwardConfig& cfg, ThreadPool& pool, int il,
                       Buffers& b);

// Each run's state rows of one layer into their destinations: a copy of the source row, or zeros
// for a new sequence (forward_mamba.cpp).
void take_state_rows(const ForwardBatch& fb, const RecurrentView& rs, const RecurrentLayerView& st);

// fn(run, c0, c1) over every (sequence run, channel) pair of the micro-batch, channels in blocks
// so that each work item is worth a dispatch; an item's result must not depend on the blocking.
template <typename Fn>
void for_run_channels(ThreadPool& pool, int n_runs, int64_t n_ch, Fn&& fn) {
  pool.parallel_for(
      int64_t(n_runs) * n_ch,
      [&](int64_t lo, int64_t hi) {
        while (lo < hi) {
          const int r = int(lo / n_ch);
          const int64_t c0 = lo % n_ch, c1 = std::min<int64_t>(n_ch, c0 + (hi - lo));
          fn(r, c0, c1);
          lo += c1 - c0;
        }
      },
      64);
}

Status forward_decoder(const Model& m, const ForwardBatch& fb, ForwardScratch& scratch, ThreadPool& pool,
                       const ForwardConfig& cfg);
Status forward_bert(const Model& m, const ForwardBatch& fb, ForwardScratch& scratch, ThreadPool& pool,
                    const ForwardConfig& cfg);
Status forward_t5(const Model& m, const ForwardBatch& fb, ForwardScratch& scratch, ThreadPool& pool,
                  const ForwardConfig& cfg);
Status forward_mamba(const Model& m, const ForwardBatch& fb, ForwardScratch& scratch, ThreadPool& pool,
                     const ForwardConfig& cfg);
Status forward_gemma3n(const Model& m, const ForwardBatch& fb, ForwardScratch& scratch, ThreadPool& pool,
                       const ForwardConfig& cfg);
// gemma4 / gemma3n: the micro-batch's per-layer inputs into b.pl_inp (forward_decoder.cpp).
void per_layer_inputs(const Model& model, const ForwardBatch& fb, ThreadPool& pool, Buffers& b);

}  // namespace loom::model::detail

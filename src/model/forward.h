// The forward pass of one micro-batch. The caller (the context) decides which cache cells the
// tokens write and which cells each token may see (the mask); the forward only computes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/arena.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "gguf/tensor_type.h"
#include "ops/ops.h"
#include "ops/tensor_view.h"

namespace loom::model {

class Model;

// K/V storage of one layer: [cell][n_head_kv][head size] in the cache's types; null k/v where the
// layer keeps nothing in this cache.
struct KvLayerView {
  void* k = nullptr;
  void* v = nullptr;
  size_t k_row_bytes = 0;  // bytes of one cell's K (all kv heads of this layer)
  size_t v_row_bytes = 0;
  int64_t n_embd_k = 0;  // floats of one cell's K
  int64_t n_embd_v = 0;
  bool reused = false;  // another layer's storage (read-only here: that layer writes it)
};

struct KvView {
  TensorType type_k = TensorType::F16;
  TensorType type_v = TensorType::F16;
  int n_cells = 0;
  std::vector<KvLayerView> layers;  // [n_layer of the model]
};

// Recurrent state storage (mamba): per layer, rows of conv states ([d_inner][d_conv - 1] floats)
// and SSM states ([d_inner][d_state] floats); a row holds one sequence's state.
struct RecurrentLayerView {
  float* conv = nullptr;
  float* ssm = nullptr;
};

struct RecurrentView {
  int64_t conv_row = 0;  // floats per conv row
  int64_t ssm_row = 0;   // floats per SSM row
  int n_rows = 0;
  std::vector<RecurrentLayerView> layers;
};

// One low-rank update y += scale · B·(A·x) of a weight (A: [rank rows][n_in], B: [n_out rows][rank]).
struct LoraPair {
  TensorView a;
  TensorView b;
  float scale = 1.0f;
};

enum LayerWeight { kWq, kWk, kWv, kWo, kFfnGate, kFfnUp, kFfnDown, kNumLayerWeights };

// Adapters in effect for a context: LoRA pairs per weight and a control vector per layer.
struct ForwardAdapters {
  std::vector<std::array<std::vector<LoraPair>, kNumLayerWeights>> layers;  // [n_layer]
  std::vector<LoraPair> tok_embd;  // a: [n_vocab rows][rank] (row per token), b: [n_embd rows][rank]
  std::vector<LoraPair> output;
  int max_rank = 0;
  std::vector<float> cvec;                  // [n_layer][n_embd] added to each block's output; empty = none
  int cvec_il_start = 0, cvec_il_end = -1;  // inclusive layer range
};

// Observes named intermediate activations ([rows][cols] floats). Return false to stop the pass
// (the forward then returns kAborted).
using EvalCallback = bool (*)(const char* name, int layer, const float* data, int64_t cols, int64_t rows, void* user);

// Per-context settings of the forward pass.
struct ForwardConfig {
  ops::RopeParams rope;                    // effective RoPE (model values with context overrides)
  bool (*abort_cb)(void* data) = nullptr;  // polled between layers
  void* abort_data = nullptr;
  EvalCallback eval_cb = nullptr;
  void* eval_data = nullptr;
  const ForwardAdapters* adapters = nullptr;
  int n_threads = 0;  // threads for this pass (0: the whole pool)
  // Mixture of experts: moe_block adds each token's chosen experts here ([n_layer][n_expert],
  // owned by the context; null: not counted).
  uint64_t* expert_counts = nullptr;
};

// T5 cross-attention inputs of a decoder pass: the K/V of the encoder output per decoder layer
// (computed once after encode, see t5_cross_kv, in the context's K/V types) and which encoder
// tokens each token may see.
struct CrossAttentionView {
  int n_enc = 0;
  TensorType type_k = TensorType::F32;
  TensorType type_v = TensorType::F32;
  const uint8_t* k = nullptr;  // [n_dec_layer][n_enc_max] rows of n_embd_kv in type_k
  const uint8_t* v = nullptr;  // same in type_v
  size_t k_row_bytes = 0, v_row_bytes = 0;
  size_t k_layer_bytes = 0, v_layer_bytes = 0;  // bytes between layers
  const float* mask = nullptr;  // [n_tokens][n_enc] additive (0 / -inf): the token shares a sequence with the encoder token
};

// What the attention layers that read one KV part see in a micro-batch.
struct AttnInputs {
  const KvView* kv = nullptr;      // the part's storage (per model layer)
  const int32_t* cells = nullptr;  // [n_tokens] cell each token's K/V is written to
  int n_kv = 0;                    // attention considers cells [0, n_kv)
  const float* mask = nullptr;     // [n_tokens][n_kv] additive mask (0 / -inf), by column
  // Column c of the mask is cell kv_cells[c] (null: cell c); the columns list each token's
  // visible cells in the order attention sums them (position order, see ops::AttentionParams).
  const int32_t* kv_cells = nullptr;
  // Per token: tokens with the same group >= 0 that are adjacent in the batch may share attention
  // tiles (their visible columns nest: one sequence, causal); -1: alone (ops::AttentionParams).
  const int32_t* prefix_group = nullptr;
  const int32_t* kv_pos = nullptr;  // T5: the position of each mask column's cell ([n_kv])
};

struct ForwardBatch {
  int n_tokens = 0;
  const int32_t* tokens = nullptr;  // [n_tokens] (ids validated by the caller), or
  const float* embd = nullptr;      // [n_tokens][n_embd] input embeddings instead of tokens
  const int32_t* pos = nullptr;     // [n_tokens]
  // Attention layers read `attn`, except the model's sliding-window layers when `attn_swa` has a
  // mask: their own window-sized cache (iSWA), or the same cache under a sliding mask.
  AttnInputs attn;
  AttnInputs attn_swa;
  // Recurrent layers: the tokens are runs of one sequence each, in order; run r is rows
  // [seq_start[r], seq_start[r + 1]), continues the state in row state_src[r] (-1: a new
  // sequence, zero state) and leaves its state in row state_dst[r] (distinct per run; it may be
  // state_src[r], else it is overwritten).
  const RecurrentView* rs = nullptr;
  int n_seq_runs = 0;
  const int32_t* seq_start = nullptr;  // [n_seq_runs + 1]
  const int32_t* state_src = nullptr;  // [n_seq_runs]
  const int32_t* state_dst = nullptr;  // [n_seq_runs]
  // T5: the encoder pass (t5encoder always; t5 during encode), the decoder's cross-attention.
  bool encoder = false;
  const CrossAttentionView* cross = nullptr;
  int n_outputs = 0;
  const int32_t* output_rows = nullptr;  // [n_outputs] batch rows whose outputs are wanted
  float* logits = nullptr;               // [n_outputs][n_vocab], or null
  float* hidden = nullptr;               // [n_outputs][n_embd] final-norm hidden states, or null

  // The attention inputs of layer il.
  const AttnInputs& attn_of(bool swa_layer) const { return swa_layer && attn_swa.mask ? attn_swa : attn; }
};

// Scratch buffers for micro-batches of up to max_tokens over up to max_kv cells, reserved once
// (and again when adapters of a larger rank are attached).
class ForwardScratch {
 public:
  ForwardScratch() = default;
  ForwardScratch(const Model& model, int max_tokens, int max_kv, TensorType type_k, int n_threads, int max_lora_rank = 0);
  Arena& arena() { return arena_; }
  int max_tokens() const { return max_tokens_; }
  int max_kv() const { return max_kv_; }
  int max_lora_rank() const { return max_lora_rank_; }

 private:
  Arena arena_;
  int max_tokens_ = 0;
  int max_kv_ = 0;
  int max_lora_rank_ = 0;
};

// The effective RoPE of a model, before context overrides, for a context of n_ctx_per_seq cells
// per sequence: that size selects LongRoPE's long factors (above the model's original context)
// or its short ones, as the reference does.
ops::RopeParams model_rope(const Model& model, int64_t n_ctx_per_seq);

// Runs the model's forward for one micro-batch: stores K/V into the given cells, writes the
// requested outputs of the output rows.
Status forward(const Model& model, const ForwardBatch& batch, ForwardScratch& scratch, ThreadPool& pool,
               const ForwardConfig& config);

// llama.cpp's llama_relative_position_bucket (T5): the bucket of key position x seen from query
// position y among n_buckets (half per direction when bidirectional), exact below n_buckets/4
// (bidirectional) or /2, logarithmic up to a distance of 128, then the last bucket.
int32_t relative_position_bucket(int32_t x, int32_t y, int64_t n_buckets, bool bidirectional);

// T5: K and V of the cross-attention of every decoder layer over the encoder output enc
// ([n_enc][n_embd], after the encoder's final norm), stored as rows of the view's types into its
// k and v buffers (writable: the caller owns them). n_enc must fit the scratch's micro-batch;
// scratch_type_k: the K type the scratch was sized for.
Status t5_cross_kv(const Model& model, const float* enc, int n_enc, const CrossAttentionView& out, TensorType scratch_type_k,
                   ForwardScratch& scratch, ThreadPool& pool);

// Re-rotates cached K rows of the layers stored in kv by per-cell position deltas ([kv.n_cells],
// 0 = unchanged): the lazy half of a position shift (RoPE(a + d) = RoPE(d) ∘ RoPE(a)).
Status shift_k(const Model& model, const KvView& kv, const int32_t* deltas, ForwardScratch& scratch, ThreadPool& pool,
               const ForwardConfig& config);

}  // namespace loom::model

// Re-exported: the layers above name these as loom::X (CONTRIBUTING.md, "Namespaces").
namespace loom {
using model::KvView;
}  // namespace loom

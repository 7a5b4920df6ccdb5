// The inference context: owns a KV cache and turns batches of tokens from many sequences into
// logits or embeddings. Used by one thread at a time; the Model it holds may be shared.
//
// Behaviour follows ../shared/spec/context.md; where loom deliberately differs from the reference
// (no aborts on bad input, all-or-nothing decode, checked state files) docs/context.md says so.
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/threadpool.h"
#include "base/uninit_buffer.h"
#include "context/batch.h"
#include "kv/memory.h"
#include "model/adapters.h"
#include "model/encoder_state.h"
#include "model/forward.h"
#include "model/rank_head.h"
#include "model/model.h"

namespace loom::context {

enum class RopeScaling { kUnspecified, kNone, kLinear, kYarn };
enum class Pooling { kUnspecified, kNone, kMean, kCls, kLast, kRank };
// "none", "mean", "cls", "last", "rank" (the CLI's and llama.cpp's names); nullopt otherwise.
std::optional<Pooling> parse_pooling(std::string_view name);
enum class AttentionType { kUnspecified, kCausal, kNonCausal };

struct ContextParams {
  int n_ctx = 512;          // 0: the model's training context
  int n_batch = 2048;       // most tokens one decode() call accepts
  int n_ubatch = 512;       // most tokens one forward pass computes (0: n_batch)
  int n_outputs_max = 0;    // most tokens with logits per decode (the logits buffer: n_outputs_max x
                            // n_vocab floats); 0: n_batch. More is kInvalidArgument.
  int n_seq_max = 1;        // sequence ids are in [0, n_seq_max)
  bool kv_unified = false;  // any sequence may use all n_ctx cells: "n_ctx per sequence" (LongRoPE's
                            // choice) is n_ctx, not n_ctx / n_seq_max (llama.cpp's kv_unified)
  int n_threads = 0;        // threads for single-token steps (0: all cores)
  int n_threads_batch = 0;  // threads for batches (0: n_threads)
  RopeScaling rope_scaling = RopeScaling::kUnspecified;
  float rope_freq_base = 0.0f;     // 0: from the model
  float rope_freq_scale = 0.0f;    // 0: from the model
  float yarn_ext_factor = -1.0f;   // < 0: 1 for YaRN scaling, else 0
  float yarn_attn_factor = -1.0f;  // < 0: llama.cpp's derivation (YaRN's mscale, the file's yarn_log_multiplier)
  float yarn_beta_fast = -1.0f;    // < 0: the model's rope.scaling.yarn_beta_fast (else 32)
  float yarn_beta_slow = -1.0f;    // < 0: the model's rope.scaling.yarn_beta_slow (else 1)
  int yarn_orig_ctx = 0;  // 0: the model's original context (rope.scaling.original_context_length, else n_ctx_train)
  // Sliding-window attention, N = a token at position p sees its sequence's positions (p - N, p].
  // -1: the model's (gemma2/gemma3: their SWA layers; every other family: none, even when a
  // llama/Mistral file carries attention.sliding_window, as the reference ignores it there);
  // 0: off (full attention everywhere); N > 0: families with SWA layers slide over N on those
  // layers, every other family slides over N on every layer. Resolved at creation to the window
  // in effect (0: none). Not for encoders.
  int n_swa = -1;
  // The model's sliding-window layers keep n_ctx cells as the others do (llama.cpp's --swa-full)
  // instead of a window-sized cache of their own (docs/context.md, Memory).
  bool swa_full = false;
  // Sequences that hold a sliding window at once: the window cache's sizing (0: n_seq_max). A
  // scheduler whose other sequence ids hold cached prefixes sets its slots here.
  int n_seq_swa = 0;
  // Sequences that hold a recurrent state at once: the recurrent part's cells (0: n_seq_max).
  int n_seq_states = 0;
  Pooling pooling = Pooling::kUnspecified;
  AttentionType attention = AttentionType::kUnspecified;
  bool embeddings = false;  // produce embeddings instead of logits
  TensorType type_k = TensorType::F16;
  TensorType type_v = TensorType::F16;
  float defrag_thold = -1.0f;  // > 0: defragment before a decode when holes exceed this fraction
  bool no_perf = false;
  bool (*abort_callback)(void* data) = nullptr;  // polled between layers; true stops the decode
  void* abort_data = nullptr;
  model::EvalCallback eval_callback = nullptr;  // observes named intermediate activations
  void* eval_data = nullptr;
};

struct PerfCounters {
  int64_t t_load_us = 0;
  int64_t n_prompt_tokens = 0;  // tokens decoded in calls of more than one token
  int64_t t_prompt_us = 0;
  int64_t n_gen_tokens = 0;  // single-token decodes
  int64_t t_gen_us = 0;
  // Prompt tokens whose KV was reused instead of computed: the tokens a whole-context state_load
  // brings back, and what callers with a cache count with Context::count_reused (the scheduler's
  // prefix cache hits). Sequence state loads are not counted: they are a cache's building blocks,
  // and the cache counts the tokens a prompt actually reuses.
  int64_t n_reused = 0;
};

// decode()/encode() results as the C API numbers them: 0 ok, 1 no KV slot (free cells and retry),
// 2 aborted, negative invalid input or internal error.
int decode_result_code(const Status& st);

class Context {
 public:
  static Expected<std::unique_ptr<Context>> create(std::shared_ptr<const Model> model, const ContextParams& params);
  ~Context();

  // ---- configuration as resolved at creation ----
  const Model& model() const { return *model_; }
  const ContextParams& params() const { return params_; }
  int n_ctx() const { return params_.n_ctx; }
  int n_batch() const { return params_.n_batch; }
  int n_ubatch() const { return params_.n_ubatch; }
  int n_seq_max() const { return params_.n_seq_max; }
  int n_vocab() const { return int(model_->hparams().n_vocab); }
  int n_embd() const { return int(model_->hparams().n_embd); }
  Pooling pooling() const { return params_.pooling; }
  bool causal() const { return causal_; }
  // Models with recurrent layers (mamba; hybrids) keep a state per sequence, which cannot forget
  // its last tokens alone.
  bool recurrent() const { return mem_->rs() != nullptr; }

  // ---- run-time toggles (take effect on the next decode) ----
  void set_embeddings(bool on);
  void set_causal_attn(bool causal) { causal_ = causal; }
  void set_n_threads(int n_threads, int n_threads_batch);
  void set_abort_callback(bool (*cb)(void*), void* data);

  // ---- evaluation ----
  // All-or-nothing: on any error the KV cache is exactly as before the call.
  // Errors: kInvalidArgument (bad token, position, sequence, size), kResourceExhausted (no KV
  // slot), kAborted (callback).
  Status decode(const Batch& batch);
  // Non-causal evaluation of a whole batch (at most n_ubatch tokens) that leaves the KV cache as
  // it was: the path of embedding / encoder models. Produces embeddings (pooled per sequence
  // when pooling is set).
  Status encode(const Batch& batch);
  // Runs one token through the model and clears the cache again (pages weights in).
  Status warmup();
  // T5 (encoder-decoder): encode() keeps each sequence's output for the decoder's cross-attention
  // (an encode replaces the output of the sequences it encodes and keeps the others'; memory edits
  // and kv_clear leave it, as llama.cpp's; encoder_forget drops it); n_encoded() is the number of encoder tokens kept (0 before any encode),
  // decoder_start_token() the token a decoder starts from (t5.decoder_start_token_id, else BOS,
  // else the pad id; -1 for other models).
  int n_encoded() const { return enc_.n_rows(); }
  // Drops a sequence's encoder output (seq < 0: all); a scheduler does when a request leaves.
  void encoder_forget(int seq);
  int32_t decoder_start_token() const;

  // ---- outputs of the last decode / encode ----
  int n_outputs() const { return n_outputs_; }
  // Logits of batch row i (negative i counts back from the last output).
  Expected<std::span<const float>> logits(int i) const;
  // All output rows in batch order: [n_outputs][n_vocab].
  std::span<const float> all_logits() const;
  Expected<std::span<const float>> embeddings(int i) const;
  std::span<const float> all_embeddings() const;
  // Pooled embedding of a sequence of the last decode: n_embd floats; rank pooling: the
  // classification head's n_cls_out scores (raw, no sigmoid), as llama_get_embeddings_seq.
  Expected<std::span<const float>> embeddings_seq(int seq) const;

  // ---- memory (docs/context.md: each operation on every kind of memory) ----
  const Memory& memory() const { return *mem_; }
  // The full-size KV part (every attention layer but an iSWA model's window layers); a model
  // without attention layers has none: check memory().kv() first.
  const KvCache& kv() const { return *mem_->kv(); }
  const RecurrentCache* recurrent_cache() const { return mem_->rs(); }  // null without recurrent layers
  int kv_used_cells() const { return mem_->used(); }
  int kv_n_tokens() const { return mem_->n_tokens(); }
  void kv_clear();
  // `parts` (MemoryPart bits) restricts an edit to some parts of the memory: a prefix cache shares
  // the full KV part's cells by range and keeps the other parts as checkpoints.
  Status seq_rm(int seq, int p0, int p1, uint8_t parts = kv::kPartsAll);
  Status seq_cp(int src, int dst, int p0, int p1, uint8_t parts = kv::kPartsAll);
  Status seq_keep(int seq);
  Status seq_add(int seq, int p0, int p1, int delta);
  Status seq_div(int seq, int p0, int p1, int d);
  Expected<int> seq_pos_min(int seq) const;
  Expected<int> seq_pos_max(int seq) const;
  bool can_shift() const { return true; }  // RoPE families re-rotate K; recurrent states only move their position
  // Applies pending position shifts to K now (otherwise done at the next decode).
  Status kv_update();
  void kv_defrag();

  // ---- state ----
  // Whole context: KV cache, last outputs, and `tokens` (the caller's prompt/history) stored beside.
  std::vector<uint8_t> state_save(std::span<const int32_t> tokens = {}) const;
  Status state_load(std::span<const uint8_t> data, std::vector<int32_t>* tokens = nullptr);
  Status state_save_file(const std::string& path, std::span<const int32_t> tokens = {}) const;
  Status state_load_file(const std::string& path, std::vector<int32_t>* tokens = nullptr);
  // One sequence's cells; restoring into another sequence id works. `parts` saves only some parts
  // of the memory (a checkpoint of the parts valid at the sequence's end, kPartsAtEnd); loading
  // replaces the destination's memory in the parts the state holds and leaves the others alone.
  Expected<std::vector<uint8_t>> seq_state_save(int seq, std::span<const int32_t> tokens = {},
                                                uint8_t parts = kv::kPartsAll) const;
  Status seq_state_load(std::span<const uint8_t> data, int dst_seq, std::vector<int32_t>* tokens = nullptr);
  Status seq_state_save_file(const std::string& path, int seq, std::span<const int32_t> tokens = {}) const;
  Status seq_state_load_file(const std::string& path, int dst_seq, std::vector<int32_t>* tokens = nullptr);
  // The tokens stored in a sequence state file, after checking from its header alone that this
  // context can load it (same model, cache types and geometry); the checksum is verified only
  // when it is loaded. Reads the header, not the KV rows.
  Expected<std::vector<int32_t>> seq_state_file_tokens(const std::string& path) const;

  // ---- adapters ----
  // Adds the adapter, or changes its scale when already attached.
  Status set_lora(std::shared_ptr<const LoraAdapter> adapter, float scale);
  // kNotFound when the adapter is not attached.
  Status remove_lora(const LoraAdapter* adapter);
  void clear_lora();
  // data: [n_layers_in_data][n_embd], the first row being layer 1 (llama.cpp's layout); the
  // vector is added to the output of blocks il_start..il_end (inclusive). Empty data clears.
  Status set_control_vector(std::span<const float> data, int n_embd, int il_start, int il_end);

  // ---- perf ----
  const PerfCounters& perf() const { return perf_; }
  void reset_perf();
  // n tokens of a prompt reused from a cache (PerfCounters::n_reused); ignored with no_perf.
  void count_reused(int64_t n) {
    if (!params_.no_perf) perf_.n_reused += n;
  }
  std::string perf_report() const;
  // Mixture-of-experts models: how often each expert was chosen since creation or reset_perf(),
  // [n_layer][n_expert] (empty for other models). Counted by every decode (prompt and generated
  // tokens alike); read it on the thread that decodes.
  std::span<const uint64_t> expert_counts() const { return expert_counts_; }
  // A summary of those counts over the MoE layers: experts chosen in all, the busiest expert's
  // share of its layer's choices (even routing: 1 / n_expert), experts never chosen of all slots.
  struct ExpertUsage {
    uint64_t choices = 0;
    double busiest_share = 0.0;
    uint64_t never = 0, slots = 0;
  };
  ExpertUsage expert_usage() const;

 private:
  // create() without turning std::bad_alloc into a Status.
  static Expected<std::unique_ptr<Context>> create_unguarded(std::shared_ptr<const Model> model, const ContextParams& p);
  Context() = default;
  struct Checked {  // a validated batch
    int n = 0;
    bool use_embd = false;
  };
  Status validate(const Batch& batch, bool encoding, Checked* out);
  // Micro-batches over the memory's parts: in batch order, or (with a recurrent part) llama.cpp's
  // equal split into runs of one sequence each (decode.cpp).
  Status run_ubatches(const Batch& batch, const Checked& c, bool encoding);
  struct Ubatch;
  struct AttnBuffers;
  // The next micro-batch after `done` tokens; 0 when none is left.
  int next_ubatch(const Batch& batch, const Checked& c, bool encoding, int done, Ubatch* ub);
  // A KV part's mask and columns for a micro-batch (cells: where its tokens went in that part).
  void build_attn(const KvCache& part, const Ubatch& ub, const int32_t* cells, const kv::MaskParams& mp, AttnBuffers& buf,
                  model::AttnInputs* out);
  Status validate_recurrent(const Batch& batch, int n) const;
  // Pieces of run_ubatches (decode.cpp): the recurrent part's plan for the batch's n rows; a T5
  // encoder micro-batch's mask over its own cells; a T5 decoder micro-batch's view of the encoder
  // rows; the micro-batch's output rows (stored after `stored` earlier ones; returns their number);
  // outputs stored in micro-batch order put back into batch order.
  Status plan_recurrent(RecurrentCache& rs, int n, std::span<RecurrentCache::SeqPlan>* plans);
  void build_encoder_mask(const Batch& batch, const Ubatch& ub, model::ForwardBatch* fb);
  model::CrossAttentionView build_cross_attention(const Batch& batch, const Ubatch& ub);
  int mark_outputs(const Ubatch& ub, int stored);
  // The memory parts one call runs over (an encode: its own cells only) and their masks.
  struct MemoryParts {
    KvCache* kv = nullptr;   // full KV part (or the encoder's cells)
    KvCache* kvs = nullptr;  // sliding-window cache
    RecurrentCache* rs = nullptr;
    kv::MaskParams mp, mp_swa;  // the full part's mask; the window layers'
    bool encoding = false;
    int swa_taken = 0;  // window cells taken so far by this call (swa_cells_)
  };
  // Places a micro-batch in every part (cells, masks, state rows, T5 encoder/cross views) and
  // points the forward batch at them; fails when the window cache has no room.
  Status attach_memory(const Batch& batch, const Ubatch& ub, MemoryParts& parts, model::ForwardBatch* fb,
                       model::CrossAttentionView* cross);
  void reorder_outputs(int n, int n_out, float* out_base, size_t out_row);
  // Marks the batch rows that produce an output in output_of_row_; returns their number.
  int assign_outputs(const Batch& batch, int n, bool all);
  void reserve_ubatch_buffers();
  Status prepare_kv();
  void rebuild_adapters();
  void pool_outputs(const Checked& c);
  uint64_t fingerprint() const;
  Status check_seq(int seq, bool allow_negative) const;

  std::shared_ptr<const Model> model_;
  ContextParams params_;
  bool causal_ = true;
  bool swa_all_layers_ = false;  // n_swa applies to every layer (a family without SWA layers)
  bool has_logits_buffer_ = true;
  std::unique_ptr<Memory> mem_;
  // Encoder passes (T5's encoder, BERT-style models) attend over their batch's K/V in F32, as
  // llama.cpp's encoders (which use no cache) do, whatever the cache types: n_ubatch cells.
  std::unique_ptr<KvCache> enc_kv_;
  std::unique_ptr<ThreadPool> pool_;
  model::ForwardScratch scratch_;
  model::ForwardConfig fwd_;
  model::ForwardAdapters adapters_;
  std::vector<std::pair<std::shared_ptr<const LoraAdapter>, float>> loras_;

  // Reserved at creation, reused by every decode.
  UninitFloats logits_;                 // [n_outputs_max][n_vocab], pages resident once written
  std::vector<float> embd_;             // [n_batch][n_embd] per-token outputs (embeddings mode)
  std::vector<float> pooled_;           // [n_seq_max][n_embd]
  model::RankHead rank_;                // rank pooling: the classification head's buffers and scores
  std::vector<uint8_t> pooled_valid_;   // [n_seq_max]
  std::vector<int32_t> pool_count_;     // [n_seq_max] tokens pooled per sequence
  std::vector<int32_t> pool_pos_;       // [n_seq_max] position of the cls / last token chosen
  std::vector<int32_t> output_of_row_;  // batch row -> output index, -1 when none
  std::vector<int32_t> pos_;            // [n_batch] resolved positions
  std::vector<int32_t> seq_;            // [n_batch] first sequence of each token (mask, positions)
  // Micro-batches (decode.cpp). A micro-batch is rows of the batch: the next n_ubatch in order,
  // or with a recurrent part runs of one sequence each (gathered into the ub_* buffers).
  struct Ubatch {
    int m = 0;                        // tokens
    const int32_t* rows = nullptr;    // [m] batch row of each token
    const int32_t* tokens = nullptr;  // [m] (or embd)
    const float* embd = nullptr;      // [m][n_embd]
    const int32_t* pos = nullptr;     // [m]
    const int32_t* seq = nullptr;     // [m] first sequence of each token
    const int32_t* cells = nullptr;   // [m] cells of the full KV part
    int n_runs = 0;                   // recurrent runs: ub_start_, ub_src_, ub_dst_
  };
  // One KV part's attention inputs of a micro-batch: its mask ([n_ubatch][part cells]), mask
  // column order, prefix groups, column positions (T5).
  struct AttnBuffers {
    std::vector<float> mask;
    std::vector<int32_t> col_cells, group, col_pos;
  };
  std::vector<int32_t> cells_;           // [n_batch] full-part cells of the batch's rows
  std::vector<int32_t> swa_cells_;       // [n_batch] window-cache cells taken by the current decode
  std::vector<int32_t> out_rows_;        // [n_ubatch]
  AttnBuffers attn_;                     // the full KV part
  AttnBuffers attn_swa_;                 // the window layers: their own cache, or the full one sliding
  std::vector<int32_t> ubatch_seqs_;     // [n_ubatch] distinct sequences of a micro-batch
  std::vector<int32_t> ubatch_seq_min_;  // [n_ubatch] their lowest positions (sliding windows)
  std::vector<int32_t> deltas_;          // [largest KV part] pending K-shift
  std::vector<int32_t> iota_;            // [n_batch] 0, 1, 2, ... (rows of an in-order micro-batch)
  // Equal split (a recurrent part): the plan per sequence of the batch, the batch's rows grouped by
  // sequence, and one micro-batch gathered from them.
  std::vector<RecurrentCache::SeqPlan> rs_plans_;                          // [n_seq_max]
  mutable std::vector<int32_t> rs_index_;                                  // [n_seq_max] sequence -> plan index, -1
  std::vector<int32_t> rs_off_, rs_count_, rs_done_;                       // [n_seq_max] per plan: first, count, consumed
  int n_plans_ = 0;                                                        // sequences of the current batch
  std::vector<int32_t> rs_tok_;                                            // [n_batch] batch rows grouped by sequence
  std::vector<int32_t> ub_rows_, ub_tokens_, ub_pos_, ub_seq_, ub_cells_;  // [n_ubatch]
  std::vector<float> ub_embd_;                       // [n_ubatch][n_embd] input embeddings (reserved on first use)
  std::vector<int32_t> ub_start_, ub_src_, ub_dst_;  // [n_ubatch + 1] runs of the micro-batch
  std::vector<int32_t> ub_plan_;                     // [n_ubatch] plan index of each run
  std::vector<int32_t> out_store_;                   // [n_batch] batch row -> storage row of its output
  std::vector<int32_t> perm_dest_;                   // [n_batch] storage row -> batch-order output row
  std::vector<uint8_t> perm_done_;                   // [n_batch]
  std::vector<float> perm_tmp_;                      // [max(n_vocab, n_embd)]
  // T5: each sequence's encoder output as cross K/V, and a decoder micro-batch's cross mask
  // ([n_ubatch][encoder rows], grown as the rows grow) and its tokens' sequence sets.
  model::EncoderState enc_;
  std::vector<float> cross_mask_;
  std::vector<model::EncoderState::SeqSet> cross_seqs_;
  int n_outputs_ = 0;
  int last_batch_size_ = 0;
  bool last_was_embd_ = false;
  PerfCounters perf_;
  std::vector<uint64_t> expert_counts_;  // see expert_counts(); fwd_.expert_counts points here
};

}  // namespace loom::context

// Re-exported: the layers above name these as loom::X (CONTRIBUTING.md, "Namespaces").
namespace loom {
using context::Context;
using context::ContextParams;
using context::Pooling;
}  // namespace loom

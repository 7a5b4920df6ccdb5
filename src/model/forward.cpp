// What every family's forward shares: scratch sizing, buffers, LoRA-aware linear layers, input
// embeddings, K/V stores, the K-shift, and the dispatch by architecture.
#include "model/forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/forward_internal.h"
#include "ops/attention.h"
#include "ops/matmul.h"
#include "quant/quant.h"

namespace loom::model {
namespace detail {
namespace {

int64_t max_cols(const Model& m) {
  const ModelHparams& hp = m.hparams();
  return std::max({hp.n_embd, hp.n_embd_q(), hp.n_ff});
}

size_t max_matmul_scratch(const Model& m, int64_t n, int max_rank) {
  const ModelWeights& w = m.weights();
  size_t best = w.output.empty() ? 0 : ops::matmul_scratch_bytes(w.output.type, w.output.cols, n);
  if (!w.per_layer_model_proj.empty()) {
    best = std::max(best, ops::matmul_scratch_bytes(w.per_layer_model_proj.type, w.per_layer_model_proj.cols, n));
  }
  for (const std::vector<LayerWeights>* ls : {&w.layers, &w.enc_layers}) {
    for (const LayerWeights& l : *ls) {
      for (const TensorView* t : l.matrices()) {
        if (!t->empty()) best = std::max(best, ops::matmul_scratch_bytes(t->type, t->cols, n));
      }
    }
  }
  if (max_rank > 0) {
    // LoRA halves may be of any supported type: size for the widest activation format.
    for (TensorType t : {TensorType::F16, TensorType::BF16, TensorType::Q8_1}) {
      best = std::max(best, ops::matmul_scratch_bytes(t, std::max<int64_t>(max_cols(m), max_rank), n));
    }
  }
  return best;
}

template <typename Alloc>
void layout(const Model& m, int T, int n_kv, TensorType type_k, int n_threads, int max_rank, Alloc&& alloc, Buffers* b) {
  const ModelHparams& hp = m.hparams();
  const size_t E = size_t(hp.n_embd), Q = size_t(hp.n_embd_q()), KV = size_t(hp.n_embd_kv()),
               F = std::max({size_t(hp.n_ff), 2 * size_t(hp.n_ff_exp), size_t(hp.n_ff_shexp)}), V = size_t(hp.n_vocab),
               t = size_t(T);
  auto floats = [&](size_t n) { return static_cast<float*>(alloc(sizeof(float) * n)); };
  b->x = floats(E * t);
  b->xb = floats(E * t);
  b->q = floats(Q * t);
  b->k = floats(KV * t);
  b->v = floats(KV * t);
  b->att = floats(Q * t);
  b->tmp = floats(E * t);
  b->gate = floats(F * t);
  b->up = floats(F * t);
  b->lora_t = floats(size_t(max_rank) * t);
  b->lora_u = floats(max_rank > 0 ? std::max({F, V, Q, E}) * t : 0);
  const size_t Di = size_t(hp.ssm_d_inner), R = size_t(hp.ssm_dt_rank), S = size_t(hp.ssm_d_state),
               Cc = size_t(hp.ssm_conv_channels());
  // Mamba-1: x, z; Mamba-2: z, x|B|C, dt; short conv: B|C|x (Di = E); DeltaNet: q|k|v, z, β, g.
  b->ssm_xz = floats(std::max(3 * Di, Di + Cc + 2 * R) * t);
  b->ssm_xc = floats(Cc * t);
  b->ssm_xdb = floats((R + 2 * S) * t);
  b->ssm_dtr = floats(R * t);
  b->ssm_dt = floats(Di * t);
  b->ssm_y = floats(Di * t);
  b->qg = floats(hp.attn_output_gate ? 2 * Q * t : 0);
  const size_t P = size_t(hp.n_embd_per_layer);
  b->pl_inp = floats(P * size_t(hp.n_layer) * t);
  b->pl_gate = floats(P * t);
  b->pl_row = floats(P * size_t(hp.n_layer));
  const size_t A = size_t(hp.n_altup);
  b->alt = floats(2 * A * E * t);
  b->alt_coef = floats((A * A + 2 * A) * t);
  b->laurel = floats(size_t(hp.laurel_rank) * t);
  const size_t X = size_t(hp.n_expert), K = size_t(hp.n_expert_used);
  auto ints = [&](size_t n) { return static_cast<int32_t*>(alloc(sizeof(int32_t) * n)); };
  b->moe_logits = floats(X > 0 ? X * t : 0);
  b->moe_chosen = ints(K * t);
  b->moe_weights = floats(K * t);
  b->moe_start = ints(X > 0 ? X + 1 : 0);
  b->moe_pairs = ints(K * t);
  b->moe_x = floats(X > 0 ? E * t : 0);
  b->moe_y = floats(X > 0 ? E * t : 0);
  int64_t rot = 0;
  for (int64_t il = 0; il < hp.n_layer; ++il) rot = std::max(rot, hp.head_dim_at(il));
  b->rope_cs = floats(size_t(rot) * t);
  b->pos_bucket = static_cast<int32_t*>(alloc(hp.is_t5() ? sizeof(int32_t) * t * size_t(n_kv) : 0));
  b->rows = T;
  b->mm_bytes = max_matmul_scratch(m, T, max_rank);
  b->mm = alloc(b->mm_bytes);
  size_t attn = hp.is_recurrent() ? 0 : ops::attention_scratch_bytes(T, n_kv, int(hp.head_dim), type_k, n_threads);
  // Encoder passes attend over F32 K/V (llama.cpp's encoders use no cache), and T5's
  // cross-attention reads the encoder's K/V as F32 rows.
  if (hp.is_t5() || hp.is_encoder()) {
    attn = std::max(attn, ops::attention_scratch_bytes(T, n_kv, int(hp.head_dim), TensorType::F32, n_threads));
  }
  b->attn = hp.is_recurrent() ? nullptr : alloc(attn);
}

}  // namespace

Buffers carve(const Model& m, ForwardScratch& scratch, TensorType type_k, int n_threads) {
  Arena& arena = scratch.arena();
  arena.reset();
  Buffers b;
  layout(
      m, scratch.max_tokens(), scratch.max_kv(), type_k, n_threads, scratch.max_lora_rank(),
      [&](size_t bytes) { return arena.allocate(bytes); }, &b);
  return b;
}

void linear(ThreadPool& pool, const TensorView& w, const std::vector<LoraPair>* loras, const float* x, int T, float* y,
            Buffers& b) {
  ops::matmul(pool, w, x, T, y, b.mm);
  if (!loras) return;
  for (const LoraPair& l : *loras) {
    ops::matmul(pool, l.a, x, T, b.lora_t, b.mm);
    ops::matmul(pool, l.b, b.lora_t, T, b.lora_u, b.mm);
    const int64_t n = int64_t(T) * w.rows;
    for (int64_t i = 0; i < n; ++i) y[i] += l.scale * b.lora_u[i];
  }
}

const std::vector<LoraPair>* layer_lora(const ForwardConfig& cfg, int il, LayerWeight kind) {
  const ForwardAdapters* ad = cfg.adapters;
  if (!ad || ad->layers.empty()) return nullptr;
  const auto& v = ad->layers[size_t(il)][kind];
  return v.empty() ? nullptr : &v;
}

void embed_tokens(const Model& m, const ForwardBatch& fb, const ForwardConfig& cfg, ThreadPool& pool, Buffers& b) {
  const int64_t E = m.hparams().n_embd;
  const int T = fb.n_tokens;
  if (fb.embd) {
    std::memcpy(b.x, fb.embd, sizeof(float) * size_t(T) * size_t(E));
    return;
  }
  for (int t = 0; t < T; ++t) ops::get_row(m.weights().tok_embd, fb.tokens[t], b.x + t * E);
  if (!cfg.adapters) return;
  // E[t] + s·B·A[t]: A holds one row per token.
  for (const LoraPair& l : cfg.adapters->tok_embd) {
    for (int t = 0; t < T; ++t) ops::get_row(l.a, fb.tokens[t], b.lora_t + int64_t(t) * l.a.cols);
    ops::matmul(pool, l.b, b.lora_t, T, b.lora_u, b.mm);
    for (int64_t i = 0; i < int64_t(T) * E; ++i) b.x[i] += l.scale * b.lora_u[i];
  }
}

ops::AttentionParams attention_params(const ModelHparams& hp, const ForwardBatch& fb, const AttnInputs& a, int il) {
  const KvLayerView& l = a.kv->layers[size_t(il)];
  ops::AttentionParams ap;
  ap.n_tokens = fb.n_tokens;
  ap.n_head = int(hp.n_head);
  ap.n_head_kv = int(hp.n_head_kv_at(il));
  ap.head_dim = int(hp.head_dim_at(il));
  ap.n_kv = a.n_kv;
  ap.k_type = a.kv->type_k;
  ap.v_type = a.kv->type_v;
  ap.k_row_bytes = l.k_row_bytes;
  ap.v_row_bytes = l.v_row_bytes;
  ap.k = l.k;
  ap.v = l.v;
  ap.mask = a.mask;
  ap.kv_cells = a.kv_cells;
  ap.prefix_group = a.prefix_group;
  ap.scale = 1.0f / std::sqrt(float(hp.head_dim_at(il)));
  return ap;
}

ops::RopeParams layer_rope(const Model& m, const ops::RopeParams& rope, int il) {
  const ModelHparams& hp = m.hparams();
  const bool swa = hp.is_swa_layer(il);
  if (hp.arch == Arch::kGemma4) {
    // Sliding layers: their own base and rotated dims, unscaled; global layers: the context's
    // rotation over n_rot with the file's proportional divisors.
    ops::RopeParams l = rope;
    l.n_rot = int(hp.n_rot_at(il));
    if (swa) {
      l.freq_base = hp.rope_freq_base_swa;
      l.freq_scale = 1.0f;
      l.freq_factors = nullptr;
    } else {
      l.freq_factors = m.weights().rope_freqs;
    }
    return l;
  }
  if (hp.rope_freq_base_swa <= 0 || !swa) return rope;
  if (hp.arch == Arch::kGptOss) {
    // Sliding layers: the file's base and scale for them (the reference's, whatever the context
    // overrides), the context's YaRN otherwise.
    ops::RopeParams l = rope;
    l.freq_base = hp.rope_freq_base_swa;
    l.freq_scale = hp.rope_freq_scale;
    return l;
  }
  ops::RopeParams local = rope;
  local.freq_base = hp.rope_freq_base_swa;
  local.freq_scale = 1.0f;
  local.ext_factor = 0.0f;
  local.attn_factor = 1.0f;
  return local;
}

void add_control_vector(const ForwardConfig& cfg, int il, float* x, int T, int64_t E) {
  const ForwardAdapters* ad = cfg.adapters;
  if (!ad || ad->cvec.empty() || il < ad->cvec_il_start || il > ad->cvec_il_end ||
      size_t(il + 1) * size_t(E) > ad->cvec.size()) {
    return;
  }
  const float* dir = ad->cvec.data() + size_t(il) * size_t(E);
  for (int t = 0; t < T; ++t) ops::add_inplace(x + t * E, dir, E);
}

const float* rope_table_of(const ForwardBatch& fb, const ops::RopeParams& p, int head_dim, Buffers& b) {
  if (b.rope_key_dim != head_dim || !(b.rope_key == p)) {
    ops::rope_table(fb.pos, fb.n_tokens, head_dim, p, b.rope_cs);
    b.rope_key = p;
    b.rope_key_dim = head_dim;
  }
  return b.rope_cs;
}

int output_run_start(const ForwardBatch& fb) {
  if (fb.n_outputs <= 0 || !fb.output_rows) return -1;
  const int first = fb.output_rows[0];
  for (int o = 1; o < fb.n_outputs; ++o) {
    if (fb.output_rows[o] != first + o) return -1;
  }
  return first;
}

void keep_output_rows(const ForwardBatch& fb, int64_t E, Buffers& b) {
  const size_t row = sizeof(float) * size_t(E);
  for (int o = 0; o < fb.n_outputs; ++o) std::memcpy(b.xb + o * E, b.x + int64_t(fb.output_rows[o]) * E, row);
  std::memcpy(b.x, b.xb, row * size_t(fb.n_outputs));
}

Status write_outputs(const Model& m, const ForwardBatch& fb, const ForwardConfig& cfg, ThreadPool& pool, Buffers& b,
                     bool rows_compacted) {
  if (fb.n_outputs <= 0) return Status::ok();
  const ModelHparams& hp = m.hparams();
  const ModelWeights& w = m.weights();
  const ForwardAdapters* ad = cfg.adapters;
  const int64_t E = hp.n_embd;
  // Gather the output rows, normalize, project to the vocabulary.
  for (int o = 0; o < fb.n_outputs; ++o) {
    const int64_t row = rows_compacted ? o : fb.output_rows[o];
    ops::rms_norm_row(b.x + row * E, w.output_norm, E, hp.rms_eps, b.xb + o * E);
  }
  if (!observe(cfg, "result_norm", -1, b.xb, E, fb.n_outputs)) return aborted();
  if (fb.hidden) std::memcpy(fb.hidden, b.xb, sizeof(float) * size_t(fb.n_outputs) * size_t(E));
  if (fb.logits) {
    linear(pool, w.output, ad && !ad->output.empty() ? &ad->output : nullptr, b.xb, fb.n_outputs, fb.logits, b);
    if (hp.final_softcap > 0) ops::softcap_inplace(fb.logits, hp.final_softcap, int64_t(fb.n_outputs) * hp.n_vocab);
    // Granite divides the logits by logit_scale (as a product with its reciprocal, the reference's).
    if (hp.logit_scale != 0.0f) ops::scale_inplace(fb.logits, 1.0f / hp.logit_scale, int64_t(fb.n_outputs) * hp.n_vocab);
    if (!observe(cfg, "result_output", -1, fb.logits, hp.n_vocab, fb.n_outputs)) return aborted();
  }
  return Status::ok();
}

void store_kv(const ForwardBatch& fb, const AttnInputs& a, int il, const Buffers& b) {
  const KvLayerView& l = a.kv->layers[size_t(il)];
  const int64_t KK = l.n_embd_k, KV = l.n_embd_v;
  for (int t = 0; t < fb.n_tokens; ++t) {
    auto* kd = static_cast<uint8_t*>(l.k) + size_t(a.cells[t]) * l.k_row_bytes;
    auto* vd = static_cast<uint8_t*>(l.v) + size_t(a.cells[t]) * l.v_row_bytes;
    quant::quantize_row(a.kv->type_k, b.k + t * KK, kd, KK);
    quant::quantize_row(a.kv->type_v, b.v + t * KV, vd, KV);
  }
}

}  // namespace detail

ForwardScratch::ForwardScratch(const Model& model, int max_tokens, int max_kv, TensorType type_k, int n_threads,
                               int max_lora_rank)
    : max_tokens_(max_tokens), max_kv_(max_kv), max_lora_rank_(max_lora_rank) {
  size_t total = 0;
  detail::Buffers b;
  detail::layout(
      model, max_tokens, max_kv, type_k, n_threads, max_lora_rank,
      [&](size_t bytes) -> void* {
        total += Arena::padded(bytes);
        return nullptr;
      },
      &b);
  arena_.reserve(total + Arena::kAlign);
}

ops::RopeParams model_rope(const Model& model, int64_t n_ctx_per_seq) {
  const ModelHparams& hp = model.hparams();
  const ModelWeights& w = model.weights();
  ops::RopeParams rope;
  rope.n_rot = int(hp.n_rot);
  rope.freq_base = hp.rope_freq_base;
  rope.freq_scale = hp.rope_freq_scale;
  rope.mode = hp.rope_mode;
  rope.n_ctx_orig = int(hp.n_ctx_orig_yarn);
  rope.attn_factor = hp.rope_attn_factor;
  // Either factor tensor may be missing; then that size of context rotates without factors.
  rope.freq_factors = n_ctx_per_seq > hp.n_ctx_orig_yarn ? w.rope_long : w.rope_short;
  if (w.rope_sections) rope.freq_factors = w.rope_sections;
  return rope;
}

Status forward(const Model& model, const ForwardBatch& fb, ForwardScratch& scratch, ThreadPool& pool,
               const ForwardConfig& cfg) {
  const int rank = cfg.adapters ? cfg.adapters->max_rank : 0;
  if (fb.n_tokens <= 0 || fb.n_tokens > scratch.max_tokens() || fb.attn.n_kv > scratch.max_kv() ||
      fb.attn_swa.n_kv > scratch.max_kv() || rank > scratch.max_lora_rank()) {
    return internal_error("forward: micro-batch exceeds the reserved scratch");
  }
  if (cfg.n_threads > 0) pool.set_active(cfg.n_threads);
  const ModelHparams& hp = model.hparams();
  if (hp.has_recurrent_layers() && (!fb.rs || fb.n_seq_runs <= 0)) {
    return internal_error("forward: a model with recurrent layers needs its state rows");
  }
  if (!hp.is_recurrent() && !fb.attn.kv) return internal_error("forward: attention layers need a KV part");
  if (hp.is_t5()) return detail::forward_t5(model, fb, scratch, pool, cfg);
  if (hp.is_encoder()) return detail::forward_bert(model, fb, scratch, pool, cfg);
  if (hp.is_recurrent()) return detail::forward_mamba(model, fb, scratch, pool, cfg);
  if (hp.arch == Arch::kGemma3n) return detail::forward_gemma3n(model, fb, scratch, pool, cfg);
  return detail::forward_decoder(model, fb, scratch, pool, cfg);  // decoders and hybrids (granitehybrid)
}

Status shift_k(const Model& model, const KvView& kv, const int32_t* deltas, ForwardScratch& scratch, ThreadPool& pool,
               const ForwardConfig& cfg) {
  const ModelHparams& hp = model.hparams();
  if (model.weights().layers.empty() || hp.is_recurrent() || hp.is_t5() || !hp.use_rope ||
      (hp.is_encoder() && !model.weights().pos_embd.empty())) {
    return Status::ok();  // learned, relative or no positions, or no attention: nothing to rotate
  }
  int64_t widest = 0;
  for (const KvLayerView& l : kv.layers) widest = std::max(widest, l.n_embd_k);
  if (scratch.arena().capacity() < sizeof(float) * size_t(widest) * 2) return internal_error("shift_k: scratch too small");
  scratch.arena().reset();
  float* row = scratch.arena().alloc<float>(size_t(widest));
  // A pure rotation by delta with the context's frequencies (LongRoPE factors included): neither
  // YaRN's magnitude scale nor the model's attn_factor may be applied a second time. (The
  // reference multiplies shifted K by its attn_factor again on every shift.)
  (void)pool;
  for (int il = 0; il < int(hp.n_layer); ++il) {
    const KvLayerView& l = kv.layers[size_t(il)];
    if (!l.k || l.reused || !hp.layer_has_rope(il)) continue;  // another part's layer, one reading another's K, NoPE
    ops::RopeParams rope = detail::layer_rope(model, cfg.rope, il);
    rope.attn_factor = rope.ext_factor != 0.0f ? 1.0f / (1.0f + 0.1f * std::log(1.0f / rope.freq_scale)) : 1.0f;
    auto* base = static_cast<uint8_t*>(l.k);
    for (int c = 0; c < kv.n_cells; ++c) {
      if (deltas[c] == 0) continue;
      uint8_t* k = base + size_t(c) * l.k_row_bytes;
      quant::dequantize_row(kv.type_k, k, row, l.n_embd_k);
      ops::rope(row, &deltas[c], 1, int(hp.n_head_kv_at(il)), int(hp.head_dim_at(il)), rope);
      quant::quantize_row(kv.type_k, row, k, l.n_embd_k);
    }
  }
  return Status::ok();
}

}  // namespace loom::model

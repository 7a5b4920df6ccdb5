// The llama-family forward pass (Llama 1/2/3, Mistral, TinyLlama, SmolLM, stories):
//   x = embed(tokens)
//   per layer: x += Wo · attn(rope(Wq·n(x)), rope(Wk·n(x)), Wv·n(x));  x += Wd · (silu(Wg·n(x)) * Wu·n(x))
//              x += cvec[layer]   (control vector, when set)
//   logits = Wout · n(x)   (only for output rows)
// where n() is RMSNorm with the layer's weight. Every W· may carry LoRA updates.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "model/forward.h"
#include "model/model.h"
#include "ops/attention.h"
#include "ops/matmul.h"
#include "ops/ops.h"
#include "quant/quant.h"

namespace loom {
namespace {

int64_t max_cols(const Model& m) {
  const ModelHparams& hp = m.hparams();
  return std::max({hp.n_embd, hp.n_embd_q(), hp.n_ff});
}

size_t max_matmul_scratch(const Model& m, int64_t n, int max_rank) {
  const ModelWeights& w = m.weights();
  size_t best = ops::matmul_scratch_bytes(w.output.type, w.output.cols, n);
  for (const LayerWeights& l : w.layers) {
    for (const TensorView* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down}) {
      best = std::max(best, ops::matmul_scratch_bytes(t->type, t->cols, n));
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

struct Buffers {
  float* x;      // [T][E] residual stream
  float* xb;     // [T][E] normed input of a sub-block
  float* q;      // [T][Q]
  float* k;      // [T][KV]
  float* v;      // [T][KV]
  float* att;    // [T][Q]
  float* tmp;    // [T][E] sub-block output before the residual add
  float* gate;   // [T][F]
  float* up;     // [T][F]
  float* lora_t; // [T][max_rank] A·x
  float* lora_u; // [T][max(F, V)] B·(A·x)
  void* mm;      // matmul activation scratch
  void* attn;    // attention scratch
};

struct Sizes {
  size_t E, Q, KV, F, V;
  explicit Sizes(const ModelHparams& hp)
      : E(size_t(hp.n_embd)), Q(size_t(hp.n_embd_q())), KV(size_t(hp.n_embd_kv())), F(size_t(hp.n_ff)),
        V(size_t(hp.n_vocab)) {}
};

template <typename Alloc>
void layout(const Model& m, int T, int n_kv, TensorType type_k, int n_threads, int max_rank, Alloc&& alloc,
            Buffers* b) {
  const Sizes s(m.hparams());
  const size_t t = size_t(T);
  b->x = static_cast<float*>(alloc(sizeof(float) * s.E * t));
  b->xb = static_cast<float*>(alloc(sizeof(float) * s.E * t));
  b->q = static_cast<float*>(alloc(sizeof(float) * s.Q * t));
  b->k = static_cast<float*>(alloc(sizeof(float) * s.KV * t));
  b->v = static_cast<float*>(alloc(sizeof(float) * s.KV * t));
  b->att = static_cast<float*>(alloc(sizeof(float) * s.Q * t));
  b->tmp = static_cast<float*>(alloc(sizeof(float) * s.E * t));
  b->gate = static_cast<float*>(alloc(sizeof(float) * s.F * t));
  b->up = static_cast<float*>(alloc(sizeof(float) * s.F * t));
  b->lora_t = static_cast<float*>(alloc(sizeof(float) * size_t(max_rank) * t));
  b->lora_u = static_cast<float*>(alloc(max_rank > 0 ? sizeof(float) * std::max({s.F, s.V, s.Q}) * t : 0));
  b->mm = alloc(max_matmul_scratch(m, T, max_rank));
  b->attn = alloc(ops::attention_scratch_bytes(n_kv, int(m.hparams().head_dim), type_k, n_threads));
}

// y = W·x (+ LoRA updates) for T rows.
void linear(ThreadPool& pool, const TensorView& w, const std::vector<LoraPair>* loras, const float* x, int T,
            float* y, Buffers& b) {
  ops::matmul(pool, w, x, T, y, b.mm);
  if (!loras) return;
  for (const LoraPair& l : *loras) {
    ops::matmul(pool, l.a, x, T, b.lora_t, b.mm);
    ops::matmul(pool, l.b, b.lora_t, T, b.lora_u, b.mm);
    const int64_t n = int64_t(T) * w.rows;
    for (int64_t i = 0; i < n; ++i) y[i] += l.scale * b.lora_u[i];
  }
}

bool observe(const ForwardConfig& c, const char* name, int layer, const float* data, int64_t cols, int64_t rows) {
  return !c.eval_cb || c.eval_cb(name, layer, data, cols, rows, c.eval_data);
}

Status aborted() { return Status(StatusCode::kAborted, "aborted by callback"); }

}  // namespace

ForwardScratch::ForwardScratch(const Model& model, int max_tokens, int max_kv, TensorType type_k, int n_threads,
                               int max_lora_rank)
    : max_tokens_(max_tokens), max_kv_(max_kv), max_lora_rank_(max_lora_rank) {
  size_t total = 0;
  Buffers b;
  layout(model, max_tokens, max_kv, type_k, n_threads, max_lora_rank,
         [&](size_t bytes) -> void* { total += Arena::padded(bytes); return nullptr; }, &b);
  arena_.reserve(total + Arena::kAlign);
}

ops::RopeParams model_rope(const Model& model) {
  const ModelHparams& hp = model.hparams();
  ops::RopeParams rope;
  rope.n_rot = int(hp.n_rot);
  rope.freq_base = hp.rope_freq_base;
  rope.freq_scale = hp.rope_freq_scale;
  rope.mode = hp.rope_mode;
  rope.n_ctx_orig = int(hp.n_ctx_train);
  return rope;
}

Status forward(const Model& model, const ForwardBatch& fb, const KvView& kv, ForwardScratch& scratch,
               ThreadPool& pool, const ForwardConfig& cfg) {
  const ModelHparams& hp = model.hparams();
  const ModelWeights& w = model.weights();
  const ForwardAdapters* ad = cfg.adapters;
  const int T = fb.n_tokens;
  const int rank = ad ? ad->max_rank : 0;
  if (T <= 0 || T > scratch.max_tokens() || fb.n_kv > scratch.max_kv() || rank > scratch.max_lora_rank()) {
    return internal_error("forward: micro-batch exceeds the reserved scratch");
  }
  if (cfg.n_threads > 0) pool.set_active(cfg.n_threads);
  const int64_t E = hp.n_embd, KV = hp.n_embd_kv(), F = hp.n_ff;
  Arena& arena = scratch.arena();
  arena.reset();
  Buffers b;
  layout(model, T, scratch.max_kv(), kv.type_k, pool.size(), scratch.max_lora_rank(),
         [&](size_t bytes) { return arena.allocate(bytes); }, &b);

  // Input embeddings (+ the embedding LoRA: E[t] + s·B·A[t]).
  if (fb.embd) {
    std::memcpy(b.x, fb.embd, sizeof(float) * size_t(T) * size_t(E));
  } else {
    for (int t = 0; t < T; ++t) ops::get_row(w.tok_embd, fb.tokens[t], b.x + t * E);
    if (ad) {
      for (const LoraPair& l : ad->tok_embd) {
        for (int t = 0; t < T; ++t) ops::get_row(l.a, fb.tokens[t], b.lora_t + int64_t(t) * l.a.cols);
        ops::matmul(pool, l.b, b.lora_t, T, b.lora_u, b.mm);
        for (int64_t i = 0; i < int64_t(T) * E; ++i) b.x[i] += l.scale * b.lora_u[i];
      }
    }
  }
  if (!observe(cfg, "inp_embd", -1, b.x, E, T)) return aborted();

  ops::AttentionParams ap;
  ap.n_tokens = T;
  ap.n_head = int(hp.n_head);
  ap.n_head_kv = int(hp.n_head_kv);
  ap.head_dim = int(hp.head_dim);
  ap.n_kv = fb.n_kv;
  ap.k_type = kv.type_k;
  ap.v_type = kv.type_v;
  ap.k_row_bytes = kv.k_row_bytes;
  ap.v_row_bytes = kv.v_row_bytes;
  ap.mask = fb.mask;
  ap.scale = 1.0f / std::sqrt(float(hp.head_dim));

  for (int il = 0; il < int(hp.n_layer); ++il) {
    if (cfg.abort_cb && cfg.abort_cb(cfg.abort_data)) return aborted();
    const LayerWeights& l = w.layers[size_t(il)];
    const KvLayerView& cache = kv.layers[size_t(il)];
    auto lora = [&](LayerWeight kind) -> const std::vector<LoraPair>* {
      if (!ad || ad->layers.empty()) return nullptr;
      const auto& v = ad->layers[size_t(il)][kind];
      return v.empty() ? nullptr : &v;
    };

    // Attention block.
    ops::rms_norm(b.x, l.attn_norm, T, E, hp.rms_eps, b.xb);
    if (!observe(cfg, "attn_norm", il, b.xb, E, T)) return aborted();
    linear(pool, l.wq, lora(kWq), b.xb, T, b.q, b);
    linear(pool, l.wk, lora(kWk), b.xb, T, b.k, b);
    linear(pool, l.wv, lora(kWv), b.xb, T, b.v, b);
    ops::rope(b.q, fb.pos, T, int(hp.n_head), int(hp.head_dim), cfg.rope);
    ops::rope(b.k, fb.pos, T, int(hp.n_head_kv), int(hp.head_dim), cfg.rope);
    if (!observe(cfg, "Qcur", il, b.q, hp.n_embd_q(), T) || !observe(cfg, "Kcur", il, b.k, KV, T) ||
        !observe(cfg, "Vcur", il, b.v, KV, T)) {
      return aborted();
    }
    for (int t = 0; t < T; ++t) {
      auto* kd = static_cast<uint8_t*>(cache.k) + size_t(fb.cells[t]) * kv.k_row_bytes;
      auto* vd = static_cast<uint8_t*>(cache.v) + size_t(fb.cells[t]) * kv.v_row_bytes;
      quant::quantize_row(kv.type_k, b.k + t * KV, kd, KV);
      quant::quantize_row(kv.type_v, b.v + t * KV, vd, KV);
    }
    ap.k = cache.k;
    ap.v = cache.v;
    ops::attention(pool, ap, b.q, b.att, b.attn);
    if (!observe(cfg, "kqv_out", il, b.att, hp.n_embd_q(), T)) return aborted();
    linear(pool, l.wo, lora(kWo), b.att, T, b.tmp, b);
    ops::add_inplace(b.x, b.tmp, T * E);
    if (!observe(cfg, "ffn_inp", il, b.x, E, T)) return aborted();

    // Feed-forward block (SwiGLU).
    ops::rms_norm(b.x, l.ffn_norm, T, E, hp.rms_eps, b.xb);
    if (!observe(cfg, "ffn_norm", il, b.xb, E, T)) return aborted();
    linear(pool, l.ffn_gate, lora(kFfnGate), b.xb, T, b.gate, b);
    linear(pool, l.ffn_up, lora(kFfnUp), b.xb, T, b.up, b);
    ops::swiglu_inplace(b.gate, b.up, T * F);
    linear(pool, l.ffn_down, lora(kFfnDown), b.gate, T, b.tmp, b);
    if (!observe(cfg, "ffn_out", il, b.tmp, E, T)) return aborted();
    ops::add_inplace(b.x, b.tmp, T * E);

    if (ad && !ad->cvec.empty() && il >= ad->cvec_il_start && il <= ad->cvec_il_end &&
        size_t(il + 1) * size_t(E) <= ad->cvec.size()) {
      const float* dir = ad->cvec.data() + size_t(il) * size_t(E);
      for (int t = 0; t < T; ++t) ops::add_inplace(b.x + t * E, dir, E);
    }
    if (!observe(cfg, "l_out", il, b.x, E, T)) return aborted();
  }

  if (fb.n_outputs > 0) {
    // Gather the output rows, normalize, project to the vocabulary.
    for (int o = 0; o < fb.n_outputs; ++o) {
      ops::rms_norm_row(b.x + int64_t(fb.output_rows[o]) * E, w.output_norm, E, hp.rms_eps, b.xb + o * E);
    }
    if (!observe(cfg, "result_norm", -1, b.xb, E, fb.n_outputs)) return aborted();
    if (fb.hidden) std::memcpy(fb.hidden, b.xb, sizeof(float) * size_t(fb.n_outputs) * size_t(E));
    if (fb.logits) {
      linear(pool, w.output, ad && !ad->output.empty() ? &ad->output : nullptr, b.xb, fb.n_outputs, fb.logits, b);
      if (!observe(cfg, "result_output", -1, fb.logits, hp.n_vocab, fb.n_outputs)) return aborted();
    }
  }
  return Status::ok();
}

Status shift_k(const Model& model, const KvView& kv, const int32_t* deltas, ForwardScratch& scratch,
               ThreadPool& pool, const ForwardConfig& cfg) {
  const ModelHparams& hp = model.hparams();
  const int64_t KV = hp.n_embd_kv();
  if (scratch.arena().capacity() < sizeof(float) * size_t(KV) * 2) return internal_error("shift_k: scratch too small");
  scratch.arena().reset();
  float* row = scratch.arena().alloc<float>(size_t(KV));
  // The rotation by delta is RoPE at position delta (YaRN's magnitude scale must not be applied
  // twice, so the shift uses attn_factor 1 and no extra mscale).
  ops::RopeParams rope = cfg.rope;
  rope.attn_factor = rope.ext_factor != 0.0f ? 1.0f / (1.0f + 0.1f * std::log(1.0f / rope.freq_scale)) : 1.0f;
  (void)pool;
  for (int il = 0; il < int(hp.n_layer); ++il) {
    auto* base = static_cast<uint8_t*>(kv.layers[size_t(il)].k);
    for (int c = 0; c < kv.n_cells; ++c) {
      if (deltas[c] == 0) continue;
      uint8_t* k = base + size_t(c) * kv.k_row_bytes;
      quant::dequantize_row(kv.type_k, k, row, KV);
      ops::rope(row, &deltas[c], 1, int(hp.n_head_kv), int(hp.head_dim), rope);
      quant::quantize_row(kv.type_k, row, k, KV);
    }
  }
  return Status::ok();
}

}  // namespace loom

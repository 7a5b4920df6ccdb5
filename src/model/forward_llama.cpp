// The llama-family forward pass (Llama 1/2/3, Mistral, TinyLlama, SmolLM, stories):
//   x = embed(tokens)
//   per layer: x += Wo · attn(rope(Wq·n(x)), rope(Wk·n(x)), Wv·n(x));  x += Wd · (silu(Wg·n(x)) * Wu·n(x))
//   logits = Wout · n(x)   (only for output rows)
// where n() is RMSNorm with the layer's weight.
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

size_t max_matmul_scratch(const Model& m, int64_t n) {
  const ModelWeights& w = m.weights();
  size_t best = ops::matmul_scratch_bytes(w.output.type, w.output.cols, n);
  for (const LayerWeights& l : w.layers) {
    for (const TensorView* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.ffn_gate, &l.ffn_up, &l.ffn_down}) {
      best = std::max(best, ops::matmul_scratch_bytes(t->type, t->cols, n));
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
  void* mm;      // matmul activation scratch
  void* attn;    // attention scratch
};

size_t buffers_bytes(const Model& m, int T, int n_kv, TensorType type_k, int n_threads) {
  const ModelHparams& hp = m.hparams();
  const size_t E = size_t(hp.n_embd), Q = size_t(hp.n_embd_q()), KV = size_t(hp.n_embd_kv()),
               F = size_t(hp.n_ff);
  size_t total = 0;
  for (size_t n : {E, E, Q, KV, KV, Q, E, F, F}) total += Arena::padded(sizeof(float) * n * size_t(T));
  total += Arena::padded(max_matmul_scratch(m, T));
  total += Arena::padded(ops::attention_scratch_bytes(n_kv, int(hp.head_dim), type_k, n_threads));
  return total;
}

Buffers carve(Arena& a, const Model& m, int T, int n_kv, TensorType type_k, int n_threads) {
  const ModelHparams& hp = m.hparams();
  const size_t E = size_t(hp.n_embd), Q = size_t(hp.n_embd_q()), KV = size_t(hp.n_embd_kv()),
               F = size_t(hp.n_ff);
  Buffers b;
  b.x = a.alloc<float>(E * T);
  b.xb = a.alloc<float>(E * T);
  b.q = a.alloc<float>(Q * T);
  b.k = a.alloc<float>(KV * T);
  b.v = a.alloc<float>(KV * T);
  b.att = a.alloc<float>(Q * T);
  b.tmp = a.alloc<float>(E * T);
  b.gate = a.alloc<float>(F * T);
  b.up = a.alloc<float>(F * T);
  b.mm = a.allocate(max_matmul_scratch(m, T));
  b.attn = a.allocate(ops::attention_scratch_bytes(n_kv, int(hp.head_dim), type_k, n_threads));
  return b;
}

}  // namespace

ForwardScratch::ForwardScratch(const Model& model, int max_tokens, int max_kv, TensorType type_k, int n_threads)
    : max_tokens_(max_tokens), max_kv_(max_kv) {
  arena_.reserve(buffers_bytes(model, max_tokens, max_kv, type_k, n_threads) + 64 * 16);
}

Status forward(const Model& model, const ForwardBatch& fb, const KvView& kv, ForwardScratch& scratch,
               ThreadPool& pool, const ForwardHooks& hooks) {
  const ModelHparams& hp = model.hparams();
  const ModelWeights& w = model.weights();
  const int T = fb.n_tokens;
  if (T <= 0 || T > scratch.max_tokens() || fb.n_kv > scratch.max_kv()) {
    return internal_error("forward: micro-batch exceeds the reserved scratch");
  }
  const int64_t E = hp.n_embd, Q = hp.n_embd_q(), KV = hp.n_embd_kv(), F = hp.n_ff;
  Arena& arena = scratch.arena();
  arena.reset();
  Buffers b = carve(arena, model, T, scratch.max_kv(), kv.type_k, pool.size());

  for (int t = 0; t < T; ++t) ops::get_row(w.tok_embd, fb.tokens[t], b.x + t * E);

  ops::RopeParams rope;
  rope.n_rot = int(hp.n_rot);
  rope.freq_base = hp.rope_freq_base;
  rope.freq_scale = hp.rope_freq_scale;
  rope.mode = hp.rope_mode;

  ops::AttentionParams ap;
  ap.n_tokens = T;
  ap.n_head = int(hp.n_head);
  ap.n_head_kv = int(hp.n_head_kv);
  ap.head_dim = int(hp.head_dim);
  ap.n_kv = fb.n_kv;
  ap.kv_type = kv.type_k;
  ap.kv_row_bytes = kv.k_row_bytes;
  ap.mask = fb.mask;
  ap.scale = 1.0f / std::sqrt(float(hp.head_dim));

  for (int64_t il = 0; il < hp.n_layer; ++il) {
    if (hooks.abort_cb && hooks.abort_cb(hooks.abort_data)) return Status(StatusCode::kAborted, "aborted");
    const LayerWeights& l = w.layers[size_t(il)];
    const KvLayerView& cache = kv.layers[size_t(il)];

    // Attention block.
    ops::rms_norm(b.x, l.attn_norm, T, E, hp.rms_eps, b.xb);
    ops::matmul(pool, l.wq, b.xb, T, b.q, b.mm);
    ops::matmul(pool, l.wk, b.xb, T, b.k, b.mm);
    ops::matmul(pool, l.wv, b.xb, T, b.v, b.mm);
    ops::rope(b.q, fb.pos, T, int(hp.n_head), int(hp.head_dim), rope);
    ops::rope(b.k, fb.pos, T, int(hp.n_head_kv), int(hp.head_dim), rope);
    for (int t = 0; t < T; ++t) {
      auto* kd = static_cast<uint8_t*>(cache.k) + size_t(fb.cells[t]) * kv.k_row_bytes;
      auto* vd = static_cast<uint8_t*>(cache.v) + size_t(fb.cells[t]) * kv.v_row_bytes;
      quant::quantize_row(kv.type_k, b.k + t * KV, kd, KV);
      quant::quantize_row(kv.type_v, b.v + t * KV, vd, KV);
    }
    ap.k = cache.k;
    ap.v = cache.v;
    ops::attention(pool, ap, b.q, b.att, b.attn);
    ops::matmul(pool, l.wo, b.att, T, b.tmp, b.mm);
    ops::add_inplace(b.x, b.tmp, T * E);

    // Feed-forward block (SwiGLU).
    ops::rms_norm(b.x, l.ffn_norm, T, E, hp.rms_eps, b.xb);
    ops::matmul(pool, l.ffn_gate, b.xb, T, b.gate, b.mm);
    ops::matmul(pool, l.ffn_up, b.xb, T, b.up, b.mm);
    ops::swiglu_inplace(b.gate, b.up, T * F);
    ops::matmul(pool, l.ffn_down, b.gate, T, b.tmp, b.mm);
    ops::add_inplace(b.x, b.tmp, T * E);
  }

  if (fb.n_outputs > 0) {
    // Gather the output rows, normalize, project to the vocabulary.
    for (int o = 0; o < fb.n_outputs; ++o) {
      ops::rms_norm_row(b.x + int64_t(fb.output_rows[o]) * E, w.output_norm, E, hp.rms_eps, b.xb + o * E);
    }
    ops::matmul(pool, w.output, b.xb, fb.n_outputs, fb.logits, b.mm);
  }
  (void)Q;
  return Status::ok();
}

}  // namespace loom

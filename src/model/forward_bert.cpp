// BERT-style encoders (post-norm, learned positions, biases, GELU FFN):
//   x = LN(tok_embd[t] + type_embd[0] + pos_embd[pos])
//   per layer: x = LN(x + Wo·attn(Wq·x + bq, Wk·x + bk, Wv·x + bv) + bo)
//              x = LN(x + Wd·gelu(Wu·x + bu) + bd)
// The outputs are the last hidden states (no final norm, no LM head): embeddings only.
#include <cmath>
#include <cstring>

#include "model/forward_internal.h"
#include "ops/attention.h"
#include "ops/matmul.h"
#include "ops/ops.h"

namespace loom::model::detail {
namespace {

// x = LN(tok_embd[t] + type_embd[0] + pos_embd[pos]) for the T rows.
void embed_input(const Model& model, const ForwardBatch& fb, const ForwardConfig& cfg, ThreadPool& pool, Buffers& b) {
  const ModelHparams& hp = model.hparams();
  const ModelWeights& w = model.weights();
  const int64_t E = hp.n_embd;
  embed_tokens(model, fb, cfg, pool, b);
  for (int t = 0; t < fb.n_tokens; ++t) {
    float* x = b.x + t * E;
    if (!w.type_embd.empty()) {  // token type 0 ("sentence A") for every token
      ops::get_row(w.type_embd, 0, b.tmp);
      ops::add_inplace(x, b.tmp, E);
    }
    if (!w.pos_embd.empty()) {  // learned positions (rotary models rotate q and k instead)
      ops::get_row(w.pos_embd, fb.pos[t], b.tmp);
      ops::add_inplace(x, b.tmp, E);
    }
    ops::layer_norm_row(x, w.tok_norm, w.tok_norm_b, E, hp.norm_eps, x);
  }
}

// x = LN(x + y) per row, y being b.tmp.
void add_and_norm(const ModelHparams& hp, const float* w, const float* bias, int T, Buffers& b) {
  const int64_t E = hp.n_embd;
  ops::add_inplace(b.x, b.tmp, T * E);
  for (int t = 0; t < T; ++t) ops::layer_norm_row(b.x + t * E, w, bias, E, hp.norm_eps, b.x + t * E);
}

// x = LN(x + Wo·attn(Wq·x + bq, Wk·x + bk, Wv·x + bv) + bo), K/V stored into the cache.
void attention_sub_block(const Model& model, const ForwardBatch& fb, const ForwardConfig& cfg, ThreadPool& pool, int il,
                         Buffers& b) {
  const ModelHparams& hp = model.hparams();
  const LayerWeights& l = model.weights().layers[size_t(il)];
  const int T = fb.n_tokens;
  const int64_t E = hp.n_embd, Q = hp.n_embd_q(), KV = hp.n_embd_kv();
  const ops::AttentionParams ap = attention_params(hp, fb, fb.attn, il);
  linear(pool, l.wq, layer_lora(cfg, il, kWq), b.x, T, b.q, b);
  linear(pool, l.wk, layer_lora(cfg, il, kWk), b.x, T, b.k, b);
  linear(pool, l.wv, layer_lora(cfg, il, kWv), b.x, T, b.v, b);
  if (l.bq) {
    ops::add_bias(b.q, l.bq, T, Q);
    ops::add_bias(b.k, l.bk, T, KV);
    ops::add_bias(b.v, l.bv, T, KV);
  }
  if (model.weights().pos_embd.empty()) {
    const float* cs = rope_table_of(fb, cfg.rope, int(hp.head_dim), b);
    ops::rope_apply(b.q, cs, T, int(hp.n_head), int(hp.head_dim), cfg.rope);
    ops::rope_apply(b.k, cs, T, int(hp.n_head_kv), int(hp.head_dim), cfg.rope);
  }
  store_kv(fb, fb.attn, il, b);
  ops::attention(pool, ap, b.q, b.att, b.attn);
  linear(pool, l.wo, layer_lora(cfg, il, kWo), b.att, T, b.tmp, b);
  if (l.bo) ops::add_bias(b.tmp, l.bo, T, E);
  add_and_norm(hp, l.attn_out_norm, l.attn_out_norm_b, T, b);
}

// x = LN(x + Wd·gelu(Wu·x + bu) + bd) (nomic-bert: Wd·(silu(Wg·x) * Wu·x)).
void ffn_sub_block(const Model& model, const ForwardConfig& cfg, ThreadPool& pool, int il, int T, Buffers& b) {
  const ModelHparams& hp = model.hparams();
  const LayerWeights& l = model.weights().layers[size_t(il)];
  const int64_t E = hp.n_embd, F = hp.n_ff;
  linear(pool, l.ffn_up, layer_lora(cfg, il, kFfnUp), b.x, T, b.up, b);
  if (l.ffn_up_b) ops::add_bias(b.up, l.ffn_up_b, T, F);
  if (!l.ffn_gate.empty()) {  // SwiGLU (nomic-bert): silu(gate) * up
    linear(pool, l.ffn_gate, layer_lora(cfg, il, kFfnGate), b.x, T, b.gate, b);
    ops::swiglu_inplace(b.gate, b.up, T * F);
    std::memcpy(b.up, b.gate, sizeof(float) * size_t(T) * size_t(F));
  } else {
    ops::gelu_inplace(b.up, T * F);
  }
  linear(pool, l.ffn_down, layer_lora(cfg, il, kFfnDown), b.up, T, b.tmp, b);
  if (l.ffn_down_b) ops::add_bias(b.tmp, l.ffn_down_b, T, E);
  add_and_norm(hp, l.layer_out_norm, l.layer_out_norm_b, T, b);
}

}  // namespace

Status forward_bert(const Model& model, const ForwardBatch& fb, ForwardScratch& scratch, ThreadPool& pool,
                    const ForwardConfig& cfg) {
  const ModelHparams& hp = model.hparams();
  const ModelWeights& w = model.weights();
  const int T = fb.n_tokens;
  const int64_t E = hp.n_embd;
  if (fb.logits) return invalid_argument("an encoder model produces embeddings, not logits (enable embeddings)");
  for (int t = 0; t < T && !w.pos_embd.empty(); ++t) {
    if (fb.pos[t] >= w.pos_embd.rows) {
      return invalid_argument("position " + std::to_string(fb.pos[t]) + " exceeds the model's " +
                              std::to_string(w.pos_embd.rows) + " learned positions");
    }
  }
  Buffers b = carve(model, scratch, scratch_k_type(fb), pool.size());

  embed_input(model, fb, cfg, pool, b);
  if (!observe(cfg, "inp_norm", -1, b.x, E, T)) return aborted();
  for (int il = 0; il < int(hp.n_layer); ++il) {
    if (cfg.abort_cb && cfg.abort_cb(cfg.abort_data)) return aborted();
    attention_sub_block(model, fb, cfg, pool, il, b);
    if (!observe(cfg, "ffn_inp", il, b.x, E, T)) return aborted();
    ffn_sub_block(model, cfg, pool, il, T, b);
    if (!observe(cfg, "l_out", il, b.x, E, T)) return aborted();
  }

  // The outputs: the last hidden states of the output rows.
  for (int o = 0; o < fb.n_outputs; ++o) {
    std::memcpy(b.xb + o * E, b.x + int64_t(fb.output_rows[o]) * E, sizeof(float) * size_t(E));
  }
  if (!observe(cfg, "result_embd", -1, b.xb, E, fb.n_outputs)) return aborted();
  if (fb.hidden) std::memcpy(fb.hidden, b.xb, sizeof(float) * size_t(fb.n_outputs) * size_t(E));
  return Status::ok();
}

}  // namespace loom::model::detail

// The decoder-only families (llama, qwen2, qwen3, phi3, gemma, gemma2, gemma3, granite, smollm3, olmoe and the
// mixture-of-experts variants qwen3moe, granitemoe, gpt-oss)
// and the hybrids (granitehybrid: Granite 4 with Mamba-2 layers; lfm2: short-conv layers; qwen35:
// Gated DeltaNet layers) as one forward pass whose differences are fields of ModelHparams:
//   x = embed(tokens) [· embd_scale]
//   per layer: h = n(x)
//              m = attn(rope(n(Wq·h + bq)), rope(n(Wk·h + bk)), Wv·h + bv) [⊙ σ(gate)] → Wo  (attention_block;
//                  no rope on NoPE layers; qwen35's q projection carries the gate; gpt-oss: sinks
//                  in the softmax, an output bias)
//                  or, on a hybrid's recurrent layer, its mixer of h: Mamba-2 (ssm_block, forward_mamba.cpp),
//                  short conv (forward_short_conv.cpp), Gated DeltaNet (forward_delta_net.cpp)
//              x += post_norm(m) [· residual_scale]
//              x += post_norm(Wd · (act(Wg·n(x)) * Wu·n(x))) [· residual_scale]
//                   (or the mixture of experts of n(x): forward_moe.cpp; gemma4 adds the experts'
//                   post_norm_2(moe(pre_norm_2(x))) to the dense FFN's post_norm_1(...) instead)
//              x += cvec[layer]   (control vector, when set)
//   logits = softcap(Wout · n(x)) [/ logit_scale]   (only for output rows; the last layer's FFN runs
//   on those rows alone, and its queries, attention and Wo too when they are one run of the batch)
// n() is RMSNorm with the matching weight; bracketed steps exist only where the family has them.
#include <cmath>
#include <cstring>

#include "model/forward_internal.h"
#include "ops/attention.h"
#include "ops/matmul.h"
#include "ops/ops.h"

namespace loom::model::detail {
namespace {

// fn(first row, rows) over a prompt's T rows split across the pool (a decode's row runs inline):
// for the per-row and per-element ops, whose every result is the same whatever the split.
template <class F>
void over_rows(ThreadPool& pool, int T, F&& fn) {
  pool.parallel_for(
      T, [&](int64_t b, int64_t e) { fn(int(b), int(e - b)); }, 32);
}

// The attention settings of layer il reading `in`, narrowed to the query rows [q0, q0 + nq) of
// the batch (their mask rows and per-token inputs), with the family's scale, softcap and sinks.
ops::AttentionParams query_rows_attention(const ModelHparams& hp, const LayerWeights& l, const ForwardBatch& fb,
                                          const AttnInputs& in, int il, int q0, int nq) {
  ops::AttentionParams ap = attention_params(hp, fb, in, il);
  if (q0 > 0 || nq < fb.n_tokens) {  // the mask rows (and per-token inputs) of the query rows
    ap.n_tokens = nq;
    ap.mask += size_t(q0) * size_t(ap.n_kv);
    if (ap.prefix_group) ap.prefix_group += q0;
    if (ap.q_pos) ap.q_pos += q0;
    if (ap.pos_bucket) ap.pos_bucket += size_t(q0) * size_t(ap.n_kv);
  }
  if (hp.attn_scale != 0.0f) ap.scale = hp.attn_scale;
  ap.softcap = hp.attn_softcap;
  ap.sinks = l.attn_sinks;  // gpt-oss
  return ap;
}

// Q of the nq rows at xq into b.q and, when the layer has its own K/V, K and V of the T rows of
// b.xb into b.k and b.v; then their biases.
void project_qkv(const Model& model, const ForwardConfig& cfg, ThreadPool& pool, int il, const float* xq, int nq, int T,
                 bool own_kv, Buffers& b) {
  const ModelHparams& hp = model.hparams();
  const LayerWeights& l = model.weights().layers[size_t(il)];
  const int64_t D = hp.head_dim_at(il), Q = hp.n_head * D, KV = hp.n_embd_kv_at(il);
  if (hp.attn_output_gate) {
    // qwen35: per head [q | gate]; q to b.q, the gates stay in b.qg until the output.
    linear(pool, l.wq, layer_lora(cfg, il, kWq), xq, nq, b.qg, b);
    for (int64_t r = 0; r < int64_t(nq) * hp.n_head; ++r) {
      std::memcpy(b.q + r * D, b.qg + r * 2 * D, sizeof(float) * size_t(D));
    }
  } else {
    linear(pool, l.wq, layer_lora(cfg, il, kWq), xq, nq, b.q, b);
  }
  if (own_kv) {
    linear(pool, l.wk, layer_lora(cfg, il, kWk), b.xb, T, b.k, b);
    linear(pool, l.wv, layer_lora(cfg, il, kWv), b.xb, T, b.v, b);
  }
  if (l.bq) {
    ops::add_bias(b.q, l.bq, nq, Q);
    if (own_kv) {
      ops::add_bias(b.k, l.bk, T, KV);
      ops::add_bias(b.v, l.bv, T, KV);
    }
  }
}

// The q/k norms (across all heads, or per head), and gemma4's weightless v norm.
void norm_qkv(const ModelHparams& hp, const LayerWeights& l, int il, int nq, int T, bool own_kv, Buffers& b) {
  const int64_t D = hp.head_dim_at(il), Q = hp.n_head * D, KV = hp.n_embd_kv_at(il);
  const int n_head_kv = int(hp.n_head_kv_at(il));
  if (l.q_norm && hp.qk_norm_full) {  // olmoe: across all heads
    ops::rms_norm(b.q, l.q_norm, nq, Q, hp.rms_eps, b.q);
    ops::rms_norm(b.k, l.k_norm, T, KV, hp.rms_eps, b.k);
  } else if (l.q_norm) {  // per-head RMSNorm before RoPE
    ops::rms_norm(b.q, l.q_norm, nq * hp.n_head, D, hp.rms_eps, b.q);
    if (own_kv) ops::rms_norm(b.k, l.k_norm, T * n_head_kv, D, hp.rms_eps, b.k);
  }
  if (hp.v_norm && own_kv) ops::rms_norm(b.v, nullptr, T * n_head_kv, D, hp.rms_eps, b.v);  // gemma4: no weight
}

// RoPE of the queries (rows [q0, q0 + nq) of the batch) and of the T keys, unless a NoPE layer;
// then mistral3's temperature of the queries.
void position_qk(const Model& model, const ForwardBatch& fb, const ForwardConfig& cfg, int il, int q0, int nq, int T,
                 bool own_kv, Buffers& b) {
  const ModelHparams& hp = model.hparams();
  const int64_t D = hp.head_dim_at(il), Q = hp.n_head * D;
  if (hp.layer_has_rope(il)) {
    const ops::RopeParams rope = layer_rope(model, cfg.rope, il);
    const float* cs = rope_table_of(fb, rope, int(D), b);
    ops::rope_apply(b.q, cs + size_t(q0) * size_t(ops::rope_dims(rope, int(D))), nq, int(hp.n_head), int(D), rope);
    if (own_kv) ops::rope_apply(b.k, cs, T, int(hp.n_head_kv_at(il)), int(D), rope);
  }
  if (hp.attn_temp_scale != 0.0f) {
    // mistral3 (Llama 4's temperature tuning): queries further out attend more sharply.
    for (int t = 0; t < nq; ++t) {
      const float s = float(std::log(double(std::floor(float(fb.pos[q0 + t]) / float(hp.n_ctx_orig_yarn))) + 1.0) *
                                double(hp.attn_temp_scale) +
                            1.0);
      ops::scale_inplace(b.q + int64_t(t) * Q, s, Q);
    }
  }
}

// qwen35: each head's attention output times σ(its gate), the gates kept in b.qg.
void gate_attention_output(int64_t D, int64_t n_heads, Buffers& b) {
  for (int64_t r = 0; r < n_heads; ++r) {
    float* o = b.att + r * D;
    const float* g = b.qg + r * 2 * D + D;
    for (int64_t i = 0; i < D; ++i) o[i] *= 1.0f / (1.0f + std::exp(-g[i]));
  }
}

}  // namespace

Status attention_block(const Model& model, const ForwardBatch& fb, const ForwardConfig& cfg, ThreadPool& pool, int il,
                       Buffers& b, int q0, int nq) {
  const ModelHparams& hp = model.hparams();
  const LayerWeights& l = model.weights().layers[size_t(il)];
  const int T = fb.n_tokens;
  // Queries (and everything after them) for batch rows [q0, q0 + nq) only; K and V for all T.
  if (nq < 0) nq = T - q0;
  const int64_t D = hp.head_dim_at(il), Q = hp.n_head * D, KV = hp.n_embd_kv_at(il);
  // The layer's KV part: a sliding-window layer's own (or its sliding mask), else the full one.
  const AttnInputs& in = fb.attn_of(hp.is_swa_layer(il));
  const ops::AttentionParams ap = query_rows_attention(hp, l, fb, in, il, q0, nq);
  // A layer that reuses another layer's K/V (Gemma 3n / 4's shared KV layers) computes only Q.
  const bool own_kv = hp.kv_source(il) < 0;

  project_qkv(model, cfg, pool, il, b.xb + int64_t(q0) * hp.n_embd, nq, T, own_kv, b);
  norm_qkv(hp, l, il, nq, T, own_kv, b);
  position_qk(model, fb, cfg, il, q0, nq, T, own_kv, b);
  if (!observe(cfg, "Qcur", il, b.q, Q, nq) ||
      (own_kv && (!observe(cfg, "Kcur", il, b.k, KV, T) || !observe(cfg, "Vcur", il, b.v, KV, T)))) {
    return aborted();
  }
  if (own_kv) store_kv(fb, in, il, b);
  ops::attention(pool, ap, b.q, b.att, b.attn);
  if (hp.attn_output_gate) gate_attention_output(D, int64_t(nq) * hp.n_head, b);
  if (!observe(cfg, "kqv_out", il, b.att, Q, nq)) return aborted();
  linear(pool, l.wo, layer_lora(cfg, il, kWo), b.att, nq, b.tmp, b);
  if (l.bo) ops::add_bias(b.tmp, l.bo, nq, hp.n_embd);  // gpt-oss
  return Status::ok();
}

// gemma4's per-layer inputs of the micro-batch, b.pl_inp [T][n_layer][P]:
//   (RMSNorm(Wmodel_proj · x / sqrt(n_embd)) per layer slice + per_layer_tok_embd[token] · sqrt(P)) / sqrt(2)
// x being the scaled embedding; input embeddings without tokens take token 0's table row (the
// reference's choice).
void per_layer_inputs(const Model& model, const ForwardBatch& fb, ThreadPool& pool, Buffers& b) {
  const ModelHparams& hp = model.hparams();
  const ModelWeights& w = model.weights();
  const int T = fb.n_tokens;
  const int64_t P = hp.n_embd_per_layer, PL = P * hp.n_layer;
  linear(pool, w.per_layer_model_proj, nullptr, b.x, T, b.pl_inp, b);  // [T][PL]
  ops::scale_inplace(b.pl_inp, 1.0f / std::sqrt(float(hp.n_embd)), T * PL);
  ops::rms_norm(b.pl_inp, w.per_layer_proj_norm, T * hp.n_layer, P, hp.rms_eps, b.pl_inp);
  const float tok_scale = std::sqrt(float(P)), mix = 1.0f / std::sqrt(2.0f);
  for (int t = 0; t < T; ++t) {
    float* dst = b.pl_inp + int64_t(t) * PL;
    ops::get_row(w.per_layer_tok_embd, fb.embd ? 0 : fb.tokens[t], b.pl_row);
    for (int64_t i = 0; i < PL; ++i) dst[i] = (dst[i] + b.pl_row[i] * tok_scale) * mix;
  }
}

namespace {

// The rows of the batch still in the residual stream: all T, or in the last layer only the output
// rows once keep_output_rows has moved them to the front (compacted).
struct LiveRows {
  int T;
  bool compacted = false;
};

// x = embed(tokens) [· embd_scale], and gemma4's per-layer inputs.
Status embed_input(const Model& model, const ForwardBatch& fb, const ForwardConfig& cfg, ThreadPool& pool, Buffers& b) {
  const ModelHparams& hp = model.hparams();
  const int T = fb.n_tokens;
  const int64_t E = hp.n_embd;
  embed_tokens(model, fb, cfg, pool, b);
  if (hp.embd_scale != 0.0f) ops::scale_inplace(b.x, hp.embd_scale, T * E);
  if (!observe(cfg, "inp_embd", -1, b.x, E, T)) return aborted();
  if (hp.n_embd_per_layer > 0) per_layer_inputs(model, fb, pool, b);
  return Status::ok();
}

// x += y [· residual_scale] for the T rows, y being b.tmp.
void add_residual(const ModelHparams& hp, ThreadPool& pool, int T, Buffers& b) {
  const int64_t E = hp.n_embd;
  if (hp.residual_scale != 0.0f) ops::scale_inplace(b.tmp, hp.residual_scale, T * E);
  over_rows(pool, T, [&](int r, int n) { ops::add_inplace(b.x + r * E, b.tmp + r * E, n * E); });
}

// The mixer of layer il over all the rows of b.xb into b.tmp: attention, or a hybrid's recurrent mixer.
Status mixer_of_layer(const Model& model, const ForwardBatch& fb, const ForwardConfig& cfg, ThreadPool& pool, int il,
                      Buffers& b) {
  const ModelHparams& hp = model.hparams();
  if (!hp.layer_is_recurrent(il)) return attention_block(model, fb, cfg, pool, il, b);
  if (hp.rec_mixer == RecurrentMixer::kShortConv) return short_conv_block(model, fb, cfg, pool, il, b);
  if (hp.rec_mixer == RecurrentMixer::kDeltaNet) return delta_net_block(model, fb, cfg, pool, il, b);
  return ssm_block(model, fb, cfg, pool, il, b);
}

// x += post_norm(mixer(n(x))) [· residual_scale]; in the last layer, then keeps the output rows
// alone (before the mixer's queries when they are one run of the batch).
Status mixer_sub_block(const Model& model, const ForwardBatch& fb, const ForwardConfig& cfg, ThreadPool& pool, int il,
                       Buffers& b, LiveRows& rows) {
  const ModelHparams& hp = model.hparams();
  const LayerWeights& l = model.weights().layers[size_t(il)];
  const int64_t E = hp.n_embd;
  over_rows(pool, rows.T, [&](int r, int n) { ops::rms_norm(b.x + r * E, l.attn_norm, n, E, hp.rms_eps, b.xb + r * E); });
  if (!observe(cfg, "attn_norm", il, b.xb, E, rows.T)) return aborted();
  // In the last layer only the output rows reach the logits: when they are one run of the batch,
  // its attention computes their queries alone (K and V still for every row, into the cache).
  const bool last_rows = il == int(hp.n_layer) - 1 && fb.n_outputs < rows.T && hp.n_embd_per_layer == 0;
  const int run = last_rows && !hp.layer_is_recurrent(il) ? output_run_start(fb) : -1;
  if (run >= 0) {
    LOOM_RETURN_IF_ERROR(attention_block(model, fb, cfg, pool, il, b, run, fb.n_outputs));
    keep_output_rows(fb, E, b);
    rows = {fb.n_outputs, true};
  } else {
    LOOM_RETURN_IF_ERROR(mixer_of_layer(model, fb, cfg, pool, il, b));
  }
  if (l.post_attn_norm) ops::rms_norm(b.tmp, l.post_attn_norm, rows.T, E, hp.rms_eps, b.tmp);
  add_residual(hp, pool, rows.T, b);
  if (last_rows && !rows.compacted) {
    // What follows in the last layer is per row, and only the output rows reach the logits (a
    // prompt usually wants its last): keep those rows alone, as the reference does.
    keep_output_rows(fb, E, b);
    rows = {fb.n_outputs, true};
  }
  return Status::ok();
}

// The dense FFN of the T rows of b.xb into y ([T][E]): Wd · (act(Wg·h) * Wu·h).
void dense_ffn(const Model& model, const ForwardConfig& cfg, ThreadPool& pool, int il, int T, Buffers& b, float* y) {
  const ModelHparams& hp = model.hparams();
  const LayerWeights& l = model.weights().layers[size_t(il)];
  const int64_t F = hp.n_ff_at(il);
  linear(pool, l.ffn_gate, layer_lora(cfg, il, kFfnGate), b.xb, T, b.gate, b);
  linear(pool, l.ffn_up, layer_lora(cfg, il, kFfnUp), b.xb, T, b.up, b);
  if (hp.ffn_act == FfnAct::kGelu && hp.gelu_f16_table) ops::geglu_f16_table_inplace(b.gate, b.up, T * F);
  else if (hp.ffn_act == FfnAct::kGelu) ops::geglu_inplace(b.gate, b.up, T * F);
  else if (hp.ffn_act == FfnAct::kSwigluOai) ops::swiglu_oai_inplace(b.gate, b.up, T * F, kSwigluOaiAlpha, kSwigluOaiLimit);
  else over_rows(pool, T, [&](int r, int n) { ops::swiglu_inplace(b.gate + r * F, b.up + r * F, n * F); });
  linear(pool, l.ffn_down, layer_lora(cfg, il, kFfnDown), b.gate, T, y, b);
}

// The mixture of experts of the T rows of b.xb into b.tmp; gemma4:
// post_norm_2(experts(pre_norm_2(x))) + post_norm_1(dense(ffn_norm(x))), the experts first
// (moe_block's buffers include moe_y, which then takes the dense half).
Status experts_ffn(const Model& model, const ForwardBatch& fb, const ForwardConfig& cfg, ThreadPool& pool, int il, int T,
                   Buffers& b) {
  const ModelHparams& hp = model.hparams();
  const LayerWeights& l = model.weights().layers[size_t(il)];
  const int64_t E = hp.n_embd;
  ForwardBatch rows = fb;
  rows.n_tokens = T;
  if (!hp.moe_beside_dense) return moe_block(model, rows, cfg, pool, il, b);
  ops::rms_norm(b.x, l.pre_ffn_norm_2, T, E, hp.rms_eps, b.xb);
  LOOM_RETURN_IF_ERROR(moe_block(model, rows, cfg, pool, il, b));
  ops::rms_norm(b.tmp, l.post_ffn_norm_2, T, E, hp.rms_eps, b.tmp);
  ops::rms_norm(b.x, l.ffn_norm, T, E, hp.rms_eps, b.xb);
  dense_ffn(model, cfg, pool, il, T, b, b.moe_y);
  ops::rms_norm(b.moe_y, l.post_ffn_norm_1, T, E, hp.rms_eps, b.moe_y);
  ops::add_inplace(b.tmp, b.moe_y, T * E);
  return Status::ok();
}

// x += post_norm(ffn(n(x))) [· residual_scale] for the T rows: the gated feed-forward block, or
// the mixture of experts.
Status ffn_sub_block(const Model& model, const ForwardBatch& fb, const ForwardConfig& cfg, ThreadPool& pool, int il, int T,
                     Buffers& b) {
  const ModelHparams& hp = model.hparams();
  const LayerWeights& l = model.weights().layers[size_t(il)];
  const int64_t E = hp.n_embd;
  if (!observe(cfg, "ffn_inp", il, b.x, E, T)) return aborted();
  over_rows(pool, T, [&](int r, int n) { ops::rms_norm(b.x + r * E, l.ffn_norm, n, E, hp.rms_eps, b.xb + r * E); });
  if (!observe(cfg, "ffn_norm", il, b.xb, E, T)) return aborted();
  if (hp.layer_is_moe(il)) {
    LOOM_RETURN_IF_ERROR(experts_ffn(model, fb, cfg, pool, il, T, b));
  } else {
    dense_ffn(model, cfg, pool, il, T, b, b.tmp);
  }
  if (l.post_ffn_norm) ops::rms_norm(b.tmp, l.post_ffn_norm, T, E, hp.rms_eps, b.tmp);
  if (!observe(cfg, "ffn_out", il, b.tmp, E, T)) return aborted();
  add_residual(hp, pool, T, b);
  return Status::ok();
}

// gemma4's per-layer embedding: x += norm(Wproj · (gelu(Wgate · x) ⊙ this layer's input)).
void add_per_layer_embedding(const Model& model, ThreadPool& pool, int il, int T, Buffers& b) {
  const ModelHparams& hp = model.hparams();
  const LayerWeights& l = model.weights().layers[size_t(il)];
  const int64_t P = hp.n_embd_per_layer, E = hp.n_embd;
  linear(pool, l.pl_inp_gate, nullptr, b.x, T, b.pl_gate, b);
  for (int t = 0; t < T; ++t) {
    float* g = b.pl_gate + int64_t(t) * P;
    const float* in = b.pl_inp + (int64_t(t) * hp.n_layer + il) * P;
    ops::geglu_f16_table_inplace(g, in, P);
  }
  linear(pool, l.pl_proj, nullptr, b.pl_gate, T, b.tmp, b);
  ops::rms_norm(b.tmp, l.pl_post_norm, T, E, hp.rms_eps, b.tmp);
  ops::add_inplace(b.x, b.tmp, T * E);
}

}  // namespace

Status forward_decoder(const Model& model, const ForwardBatch& fb, ForwardScratch& scratch, ThreadPool& pool,
                       const ForwardConfig& cfg) {
  const ModelHparams& hp = model.hparams();
  const ModelWeights& w = model.weights();
  const int64_t E = hp.n_embd;
  Buffers b = carve(model, scratch, scratch_k_type(fb), pool.size());

  LOOM_RETURN_IF_ERROR(embed_input(model, fb, cfg, pool, b));
  LiveRows rows{fb.n_tokens};
  for (int il = 0; il < int(hp.n_layer); ++il) {
    if (cfg.abort_cb && cfg.abort_cb(cfg.abort_data)) return aborted();
    LOOM_RETURN_IF_ERROR(mixer_sub_block(model, fb, cfg, pool, il, b, rows));
    if (rows.compacted && rows.T == 0) break;
    LOOM_RETURN_IF_ERROR(ffn_sub_block(model, fb, cfg, pool, il, rows.T, b));
    if (hp.n_embd_per_layer > 0) add_per_layer_embedding(model, pool, il, rows.T, b);
    const float out_scale = w.layers[size_t(il)].out_scale;
    if (out_scale != 0.0f) ops::scale_inplace(b.x, out_scale, rows.T * E);  // gemma4's layer scalar
    add_control_vector(cfg, il, b.x, rows.T, E);
    if (!observe(cfg, "l_out", il, b.x, E, rows.T)) return aborted();
  }
  return write_outputs(model, fb, cfg, pool, b, rows.compacted);
}

}  // namespace loom::model::detail

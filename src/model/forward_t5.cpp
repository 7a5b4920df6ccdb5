// T5 (t5: encoder-decoder; t5encoder: the encoder alone), as llama.cpp's llm_build_t5_enc/_dec:
//   encoder: x = embed(tokens)
//            per layer: x += Wo·attn(Wq·h, Wk·h, Wv·h; bias = rel_b[bucket(kpos - qpos, bidirectional)])
//                       with h = rms(x); x += ffn(rms(x))
//            out = rms(x, enc.output_norm)
//   decoder: x = embed(tokens)
//            per layer: x += Wo·attn(self, causal, bias = rel_b[bucket(kpos - qpos, causal)])
//                       x += Wo_c·attn(Wq_c·rms(x) over the cross K/V of the encoder output)
//                       x += ffn(rms(x))
//            logits = Wout·rms(x, dec.output_norm)   (tied: the embedding, no d_model^-0.5 rescale)
// ffn = Wd·(gelu(Wg·h) * Wu·h) with ffn_gate (flan-T5; gelu through the reference's f16 table),
// else Wd·relu(Wu·h). No attention scale
// (T5 folds it into Wq). Every layer without its own bias table uses layer 0's.
#include <cmath>
#include <cstring>

#include "model/forward_internal.h"
#include "ops/attention.h"
#include "ops/matmul.h"
#include "ops/ops.h"
#include "quant/quant.h"

namespace loom::model {

int32_t relative_position_bucket(int32_t x, int32_t y, int64_t n_buckets, bool bidirectional) {
  constexpr int64_t kMaxDistance = 128;
  if (bidirectional) n_buckets >>= 1;
  const int64_t max_exact = n_buckets >> 1;
  int32_t rel = x - y;
  int32_t bucket = 0;
  if (bidirectional) {
    bucket += (rel > 0) * int32_t(n_buckets);
    rel = std::abs(rel);
  } else {
    rel = -std::min<int32_t>(rel, 0);
  }
  if (rel < max_exact) return bucket + rel;
  // The reference's arithmetic and types exactly: logf of a double quotient, float times the
  // integer span, divided by a double log, floorf of the double sum.
  const float lf = logf(float(1.0 * rel / double(max_exact)));
  const double large_d = double(max_exact) + double(lf * float(n_buckets - max_exact)) /
                                                 std::log(1.0 * double(kMaxDistance) / double(max_exact));
  int32_t large = int32_t(floorf(float(large_d)));
  large = std::min<int32_t>(large, int32_t(n_buckets - 1));
  return bucket + large;
}

namespace detail {
namespace {

void t5_ffn(ThreadPool& pool, const LayerWeights& l, int T, int64_t F, Buffers& b) {
  if (!l.ffn_gate.empty()) {
    linear(pool, l.ffn_gate, nullptr, b.xb, T, b.gate, b);
    linear(pool, l.ffn_up, nullptr, b.xb, T, b.up, b);
    ops::geglu_f16_table_inplace(b.gate, b.up, int64_t(T) * F);  // llama.cpp's f16 GELU table
  } else {
    linear(pool, l.ffn_up, nullptr, b.xb, T, b.gate, b);
    ops::relu_inplace(b.gate, int64_t(T) * F);
  }
  linear(pool, l.ffn_down, nullptr, b.gate, T, b.tmp, b);
}

// Relative-position buckets of this micro-batch over its columns: bidirectional in the encoder,
// causal in the decoder (key position minus query position).
void position_buckets(const ModelHparams& hp, const ForwardBatch& fb, const AttnInputs& in, bool encoder, Buffers& b) {
  for (int t = 0; t < fb.n_tokens; ++t) {
    for (int c = 0; c < in.n_kv; ++c) {
      b.pos_bucket[size_t(t) * size_t(in.n_kv) + size_t(c)] =
          relative_position_bucket(in.kv_pos[c], fb.pos[t], hp.n_rel_buckets, encoder);
    }
  }
}

// The cross-attention's settings from the self-attention's: the encoder tokens' K/V rows, no bias.
ops::AttentionParams cross_attention_params(const ops::AttentionParams& ap, const CrossAttentionView& cross) {
  ops::AttentionParams cp = ap;
  cp.pos_bucket = nullptr;
  cp.pos_bias = nullptr;
  cp.n_kv = cross.n_enc;
  cp.k_type = cross.type_k;
  cp.v_type = cross.type_v;
  cp.k_row_bytes = cross.k_row_bytes;
  cp.v_row_bytes = cross.v_row_bytes;
  cp.mask = cross.mask;
  cp.kv_cells = nullptr;
  cp.prefix_group = nullptr;
  return cp;
}

// x += Wo·attn(Wq·h, Wk·h, Wv·h; bias = rel_b[bucket]) with h = rms(x), K/V stored into the cache.
Status self_attention(const ModelHparams& hp, const LayerWeights& l, const ForwardBatch& fb, const ForwardConfig& cfg,
                      ThreadPool& pool, int il, ops::AttentionParams& ap, Buffers& b) {
  const int T = fb.n_tokens;
  const int64_t E = hp.n_embd, KV = hp.n_embd_kv();
  const KvLayerView& cache = fb.attn.kv->layers[size_t(il)];
  ops::rms_norm(b.x, l.attn_norm, T, E, hp.rms_eps, b.xb);
  if (!observe(cfg, "attn_norm", il, b.xb, E, T)) return aborted();
  linear(pool, l.wq, nullptr, b.xb, T, b.q, b);
  linear(pool, l.wk, nullptr, b.xb, T, b.k, b);
  linear(pool, l.wv, nullptr, b.xb, T, b.v, b);
  if (!observe(cfg, "Qcur", il, b.q, hp.n_embd_q(), T) || !observe(cfg, "Kcur", il, b.k, KV, T) ||
      !observe(cfg, "Vcur", il, b.v, KV, T)) {
    return aborted();
  }
  store_kv(fb, fb.attn, il, b);
  ap.k = cache.k;
  ap.v = cache.v;
  ap.pos_bias = l.attn_rel_b;
  ops::attention(pool, ap, b.q, b.att, b.attn);
  if (!observe(cfg, "kqv_out", il, b.att, hp.n_embd_q(), T)) return aborted();
  linear(pool, l.wo, nullptr, b.att, T, b.tmp, b);
  ops::add_inplace(b.x, b.tmp, int64_t(T) * E);
  return Status::ok();
}

// The decoder's x += Wo_c·attn(Wq_c·rms(x) over the cross K/V of the encoder output).
Status cross_attention(const ModelHparams& hp, const LayerWeights& l, const ForwardBatch& fb, const ForwardConfig& cfg,
                       ThreadPool& pool, int il, ops::AttentionParams& cp, Buffers& b) {
  const int T = fb.n_tokens;
  const int64_t E = hp.n_embd;
  ops::rms_norm(b.x, l.cross_norm, T, E, hp.rms_eps, b.xb);
  if (!observe(cfg, "attn_norm_cross", il, b.xb, E, T)) return aborted();
  linear(pool, l.wq_cross, nullptr, b.xb, T, b.q, b);
  cp.k = fb.cross->k + size_t(il) * fb.cross->k_layer_bytes;
  cp.v = fb.cross->v + size_t(il) * fb.cross->v_layer_bytes;
  ops::attention(pool, cp, b.q, b.att, b.attn);
  linear(pool, l.wo_cross, nullptr, b.att, T, b.tmp, b);
  ops::add_inplace(b.x, b.tmp, int64_t(T) * E);
  return Status::ok();
}

// x += ffn(rms(x)).
Status ffn_sub_block(const ModelHparams& hp, const LayerWeights& l, const ForwardConfig& cfg, ThreadPool& pool, int il,
                     int T, Buffers& b) {
  const int64_t E = hp.n_embd;
  if (!observe(cfg, "ffn_inp", il, b.x, E, T)) return aborted();
  ops::rms_norm(b.x, l.ffn_norm, T, E, hp.rms_eps, b.xb);
  if (!observe(cfg, "ffn_norm", il, b.xb, E, T)) return aborted();
  t5_ffn(pool, l, T, hp.n_ff, b);
  if (!observe(cfg, "ffn_out", il, b.tmp, E, T)) return aborted();
  ops::add_inplace(b.x, b.tmp, int64_t(T) * E);
  return Status::ok();
}

// The encoder's output: its final norm of the output rows (the embeddings, and what the decoder
// attends to).
Status encoder_output(const Model& model, const ForwardBatch& fb, const ForwardConfig& cfg, Buffers& b) {
  const ModelHparams& hp = model.hparams();
  const int64_t E = hp.n_embd;
  for (int o = 0; o < fb.n_outputs; ++o) {
    ops::rms_norm_row(b.x + int64_t(fb.output_rows[o]) * E, model.weights().enc_output_norm, E, hp.rms_eps, b.xb + o * E);
  }
  if (!observe(cfg, "result_norm", -1, b.xb, E, fb.n_outputs)) return aborted();
  if (fb.hidden) std::memcpy(fb.hidden, b.xb, sizeof(float) * size_t(fb.n_outputs) * size_t(E));
  return Status::ok();
}

}  // namespace

Status forward_t5(const Model& model, const ForwardBatch& fb, ForwardScratch& scratch, ThreadPool& pool,
                  const ForwardConfig& cfg) {
  const ModelHparams& hp = model.hparams();
  const ModelWeights& w = model.weights();
  const int T = fb.n_tokens;
  const int64_t E = hp.n_embd;
  const bool encoder = fb.encoder || hp.arch == Arch::kT5Encoder;
  const AttnInputs& in = fb.attn;
  if (!in.kv_pos) return internal_error("t5: the forward needs the positions of the mask columns");
  if (!encoder && (!fb.cross || !fb.cross->mask)) return internal_error("t5: the decoder needs the encoder's output");
  Buffers b = carve(model, scratch, scratch_k_type(fb), pool.size());

  embed_tokens(model, fb, ForwardConfig{}, pool, b);  // (no adapters for T5)
  if (!observe(cfg, "inp_embd", -1, b.x, E, T)) return aborted();
  position_buckets(hp, fb, in, encoder, b);
  ops::AttentionParams ap = attention_params(hp, fb, in, 0);
  ap.scale = 1.0f;
  ap.pos_bucket = b.pos_bucket;
  ops::AttentionParams cp;
  if (!encoder) cp = cross_attention_params(ap, *fb.cross);

  const std::vector<LayerWeights>& layers = encoder ? w.enc_layers : w.layers;
  for (int il = 0; il < int(layers.size()); ++il) {
    if (cfg.abort_cb && cfg.abort_cb(cfg.abort_data)) return aborted();
    const LayerWeights& l = layers[size_t(il)];
    LOOM_RETURN_IF_ERROR(self_attention(hp, l, fb, cfg, pool, il, ap, b));
    if (!encoder) LOOM_RETURN_IF_ERROR(cross_attention(hp, l, fb, cfg, pool, il, cp, b));
    LOOM_RETURN_IF_ERROR(ffn_sub_block(hp, l, cfg, pool, il, T, b));
    if (!observe(cfg, "l_out", il, b.x, E, T)) return aborted();
  }
  if (!encoder) return write_outputs(model, fb, cfg, pool, b);
  return encoder_output(model, fb, cfg, b);
}

}  // namespace detail

Status t5_cross_kv(const Model& model, const float* enc, int n_enc, const CrossAttentionView& out, TensorType scratch_type_k,
                   ForwardScratch& scratch, ThreadPool& pool) {
  const ModelWeights& w = model.weights();
  const int64_t KV = model.hparams().n_embd_kv();
  if (n_enc <= 0) return Status::ok();
  if (n_enc > scratch.max_tokens()) return internal_error("t5_cross_kv: more encoder tokens than the scratch holds");
  detail::Buffers b = detail::carve(model, scratch, scratch_type_k, pool.size());
  auto* k = const_cast<uint8_t*>(out.k);
  auto* v = const_cast<uint8_t*>(out.v);
  for (size_t il = 0; il < w.layers.size(); ++il) {
    const LayerWeights& l = w.layers[il];
    detail::linear(pool, l.wk_cross, nullptr, enc, n_enc, b.k, b);
    detail::linear(pool, l.wv_cross, nullptr, enc, n_enc, b.v, b);
    for (int t = 0; t < n_enc; ++t) {
      quant::quantize_row(out.type_k, b.k + int64_t(t) * KV, k + il * out.k_layer_bytes + size_t(t) * out.k_row_bytes, KV);
      quant::quantize_row(out.type_v, b.v + int64_t(t) * KV, v + il * out.v_layer_bytes + size_t(t) * out.v_row_bytes, KV);
    }
  }
  return Status::ok();
}

}  // namespace loom::model

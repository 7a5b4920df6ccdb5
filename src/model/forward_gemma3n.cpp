// Gemma 3n (gemma3n), as the reference computes it: the residual stream is n_altup (4) AltUp
// streams S_0..S_3 (S_0 active), and every layer predicts, computes on the active prediction, then
// corrects:
//   x = embed(tokens)·sqrt(E);  S_0 = x;  S_k = rescale(Wproj_k · x to |x|)                  k = 1..3
//   per layer:
//     m = tanh(Wrouter · (RMSNorm(S_0, router_norm) / E));  c = Wpredict · m       [n_altup²]
//     P_j = S_j + Σ_k c[j·n + k] · S_k                                             (prediction)
//     h = RMSNorm(P_0);  lau = RMSNorm(Wr · (Wl · h), laurel_norm) + h              (Laurel)
//     a = (post_norm(attn(h)) + P_0 + lau) / √2
//     A = post_ffw_norm(Wd · (gelu(sparse(Wg · n(a))) ⊙ Wu · n(a))) + a            (sparse: first 10 layers)
//     m' = tanh(Wrouter · (RMSNorm(A, router_norm) / E));  c' = Wcorrect · m' + 1  [n_altup]
//     S_j = P_j + (A - P_0) · c'_j
//     S_j += RMSNorm(Wproj_pl · (gelu(Wgate_pl · (S_0 ⊙ correct_scale)) ⊙ per_layer_input), pl_norm)   j = 1..3
//   out = (S_0 + Σ_k rescale(Wunembd_k · S_k to |S_0|)) / n_altup;  logits = softcap(Wout · RMSNorm(out))
// sparse(g) = relu(g - (mean(g) + 1.6448536·std(g))) per token (std with n - 1); rescale(y to |x|)
// = y·|x| / |y| per token (Euclidean norms). Attention is Gemma 3's with a V norm and scale 1; the
// layers after the 20th read the K/V of the last sliding / global layer before them.
#include <cmath>
#include <cstring>

#include "model/forward_internal.h"
#include "ops/ops.h"

namespace loom::model::detail {
namespace {

constexpr float kSparsityStdMul = 1.6448533535003662f;  // the normal distribution's 0.95 quantile

float magnitude(const float* x, int64_t n) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += double(x[i] * x[i]);  // squares in float, summed in double (ggml)
  return float(std::sqrt(ss));
}

// y[t] *= |target[t]| / |y[t]| for T rows of E.
void rescale_to(float* y, const float* target, int T, int64_t E) {
  for (int t = 0; t < T; ++t) {
    const float want = magnitude(target + int64_t(t) * E, E), have = magnitude(y + int64_t(t) * E, E);
    float* r = y + int64_t(t) * E;
    for (int64_t i = 0; i < E; ++i) r[i] = r[i] * want / have;
  }
}

// The router's modalities of T rows of x: m[t][j] = tanh(Σ_e router[j][e] · RMSNorm(x)[e] / E).
void router_modalities(const ModelHparams& hp, const LayerWeights& l, const float* x, int T, float* tmp, float* m) {
  const int64_t E = hp.n_embd, A = hp.n_altup;
  for (int t = 0; t < T; ++t) {
    ops::rms_norm_row(x + int64_t(t) * E, l.altup_router_norm, E, hp.rms_eps, tmp);
    for (int64_t i = 0; i < E; ++i) tmp[i] *= 1.0f / float(E);
    for (int64_t j = 0; j < A; ++j) {
      float s = 0;
      for (int64_t i = 0; i < E; ++i) s += l.altup_router[j * E + i] * tmp[i];
      m[int64_t(t) * A + j] = std::tanh(s);
    }
  }
}

// The AltUp buffers of a micro-batch of T rows (A = n_altup streams of TE = T·E floats).
struct AltUp {
  int64_t A, TE;
  float* S;     // [A][T][E] streams
  float* Pr;    // [A][T][E] predictions
  float* mod;   // [T][A] modalities
  float* coef;  // [T][A²] (prediction) or [T][A] (correction)
};

AltUp carve_altup(const ModelHparams& hp, int T, Buffers& b) {
  AltUp u;
  u.A = hp.n_altup;
  u.TE = int64_t(T) * hp.n_embd;
  u.S = b.alt;
  u.Pr = b.alt + u.A * u.TE;
  u.mod = b.alt_coef;
  u.coef = u.mod + int64_t(T) * u.A;
  return u;
}

// x = embed(tokens)·sqrt(E), the per-layer inputs, S_0 = x, S_k = rescale(Wproj_k · x to |x|).
Status embed_streams(const Model& model, const ForwardBatch& fb, const ForwardConfig& cfg, ThreadPool& pool, const AltUp& u,
                     Buffers& b) {
  const ModelHparams& hp = model.hparams();
  const int T = fb.n_tokens;
  const int64_t E = hp.n_embd;
  embed_tokens(model, fb, cfg, pool, b);
  ops::scale_inplace(b.x, hp.embd_scale, u.TE);
  if (!observe(cfg, "inp_embd", -1, b.x, E, T)) return aborted();
  per_layer_inputs(model, fb, pool, b);
  std::memcpy(u.S, b.x, sizeof(float) * size_t(u.TE));
  for (int64_t k = 1; k < u.A; ++k) {
    linear(pool, model.weights().altup_proj[size_t(k - 1)], nullptr, b.x, T, u.S + k * u.TE, b);
    rescale_to(u.S + k * u.TE, b.x, T, E);
  }
  return Status::ok();
}

// Prediction: P_j = S_j + Σ_k c[j·A + k] · S_k, c = Wpredict · m.
void predict_streams(const ModelHparams& hp, const LayerWeights& l, int T, const AltUp& u, Buffers& b) {
  const int64_t E = hp.n_embd, A = u.A, TE = u.TE;
  router_modalities(hp, l, u.S, T, b.tmp, u.mod);
  for (int t = 0; t < T; ++t) {
    for (int64_t o = 0; o < A * A; ++o) {
      float s = 0;
      for (int64_t j = 0; j < A; ++j) s += l.altup_predict_coef[o * A + j] * u.mod[int64_t(t) * A + j];
      u.coef[int64_t(t) * A * A + o] = s;
    }
  }
  for (int64_t j = 0; j < A; ++j) {
    for (int t = 0; t < T; ++t) {
      float* p = u.Pr + j * TE + int64_t(t) * E;
      const float* c = u.coef + int64_t(t) * A * A + j * A;
      for (int64_t i = 0; i < E; ++i) {
        float s = 0;
        for (int64_t k = 0; k < A; ++k) s += u.S[k * TE + int64_t(t) * E + i] * c[k];
        p[i] = s + u.S[j * TE + int64_t(t) * E + i];
      }
    }
  }
}

// Attention and Laurel on the active prediction P_0: b.x = a = (post_norm(attn(h)) + P_0 + lau) / √2.
Status attention_laurel(const Model& model, const ForwardBatch& fb, const ForwardConfig& cfg, ThreadPool& pool, int il,
                        const AltUp& u, Buffers& b) {
  const ModelHparams& hp = model.hparams();
  const LayerWeights& l = model.weights().layers[size_t(il)];
  const int T = fb.n_tokens;
  const int64_t E = hp.n_embd, TE = u.TE;
  const float* active = u.Pr;  // P_0
  ops::rms_norm(active, l.attn_norm, T, E, hp.rms_eps, b.xb);
  linear(pool, l.laurel_l, nullptr, b.xb, T, b.laurel, b);
  linear(pool, l.laurel_r, nullptr, b.laurel, T, b.gate, b);  // [T][E] in the FFN's buffer (F >= E)
  ops::rms_norm(b.gate, l.laurel_post_norm, T, E, hp.rms_eps, b.gate);
  ops::add_inplace(b.gate, b.xb, TE);  // lau = norm(...) + h
  LOOM_RETURN_IF_ERROR(attention_block(model, fb, cfg, pool, il, b));
  ops::rms_norm(b.tmp, l.post_attn_norm, T, E, hp.rms_eps, b.tmp);
  ops::add_inplace(b.tmp, active, TE);
  float* a = b.x;  // attn_laurel = (attn + P_0 + lau) / sqrt 2
  for (int64_t i = 0; i < TE; ++i) a[i] = (b.tmp[i] + b.gate[i]) * (1.0f / std::sqrt(2.0f));
  return Status::ok();
}

// g = relu(g - (mean(g) + 1.6448536·std(g))) per token row of F (std with n - 1).
void sparsify(float* gate, int T, int64_t F) {
  for (int t = 0; t < T; ++t) {
    float* g = gate + int64_t(t) * F;
    double sum = 0;
    for (int64_t i = 0; i < F; ++i) sum += g[i];
    const float mean = float(sum / double(F));
    double ss = 0;
    for (int64_t i = 0; i < F; ++i) ss += double((g[i] - mean) * (g[i] - mean));
    const float cutoff = mean + std::sqrt(float(ss) * (1.0f / float(F - 1))) * kSparsityStdMul;
    for (int64_t i = 0; i < F; ++i) g[i] = std::max(0.0f, g[i] - cutoff);
  }
}

// The FFN of a = b.x into b.tmp: A = post_ffw_norm(Wd · (gelu(sparse(Wg · n(a))) ⊙ Wu · n(a))) + a
// (GELU through ggml's f16 table, activation sparsity on the first layers).
void sparse_ffn(const Model& model, const ForwardConfig& cfg, ThreadPool& pool, int il, int T, Buffers& b) {
  const ModelHparams& hp = model.hparams();
  const LayerWeights& l = model.weights().layers[size_t(il)];
  const int64_t E = hp.n_embd, F = hp.n_ff_at(il);
  const float* a = b.x;
  ops::rms_norm(a, l.ffn_norm, T, E, hp.rms_eps, b.xb);
  linear(pool, l.ffn_gate, layer_lora(cfg, il, kFfnGate), b.xb, T, b.gate, b);
  linear(pool, l.ffn_up, layer_lora(cfg, il, kFfnUp), b.xb, T, b.up, b);
  if (il < hp.n_layer_sparse) sparsify(b.gate, T, F);
  ops::geglu_f16_table_inplace(b.gate, b.up, int64_t(T) * F);
  linear(pool, l.ffn_down, layer_lora(cfg, il, kFfnDown), b.gate, T, b.tmp, b);
  ops::rms_norm(b.tmp, l.post_ffn_norm, T, E, hp.rms_eps, b.tmp);
  ops::add_inplace(b.tmp, a, int64_t(T) * E);  // A = activated
}

// Correction: S_j = P_j + (A - P_0) · (Wcorrect · m' + 1)_j, A = act.
void correct_streams(const ModelHparams& hp, const LayerWeights& l, const float* act, int T, const AltUp& u, Buffers& b) {
  const int64_t E = hp.n_embd, A = u.A, TE = u.TE;
  router_modalities(hp, l, act, T, b.xb, u.mod);
  for (int t = 0; t < T; ++t) {
    for (int64_t j = 0; j < A; ++j) {
      float s = 0;
      for (int64_t k = 0; k < A; ++k) s += l.altup_correct_coef[j * A + k] * u.mod[int64_t(t) * A + k];
      u.coef[int64_t(t) * A + j] = s + 1.0f;
    }
  }
  for (int64_t j = 0; j < A; ++j) {
    for (int t = 0; t < T; ++t) {
      const float c = u.coef[int64_t(t) * A + j];
      const float* aa = act + int64_t(t) * E;
      const float* p0 = u.Pr + int64_t(t) * E;
      const float* pj = u.Pr + j * TE + int64_t(t) * E;
      float* sj = u.S + j * TE + int64_t(t) * E;
      for (int64_t i = 0; i < E; ++i) sj[i] = (aa[i] - p0[i]) * c + pj[i];
    }
  }
}

// The per-layer input, through the corrected active stream, into the other streams:
// S_j += RMSNorm(Wproj_pl · (gelu(Wgate_pl · (S_0 ⊙ correct_scale)) ⊙ per_layer_input), pl_norm).
void add_per_layer_input(const Model& model, ThreadPool& pool, int il, int T, const AltUp& u, Buffers& b) {
  const ModelHparams& hp = model.hparams();
  const LayerWeights& l = model.weights().layers[size_t(il)];
  const int64_t E = hp.n_embd, P = hp.n_embd_per_layer, TE = u.TE;
  for (int64_t i = 0; i < TE; ++i) b.xb[i] = u.S[i] * l.altup_correct_scale[i % E];
  linear(pool, l.pl_inp_gate, nullptr, b.xb, T, b.pl_gate, b);
  for (int t = 0; t < T; ++t) {
    ops::geglu_f16_table_inplace(b.pl_gate + int64_t(t) * P, b.pl_inp + (int64_t(t) * hp.n_layer + il) * P, P);
  }
  linear(pool, l.pl_proj, nullptr, b.pl_gate, T, b.tmp, b);
  ops::rms_norm(b.tmp, l.pl_post_norm, T, E, hp.rms_eps, b.tmp);
  for (int64_t k = 1; k < u.A; ++k) ops::add_inplace(u.S + k * TE, b.tmp, TE);
}

// Back to one stream in b.x: the mean of S_0 and the other streams projected back at S_0's magnitude.
void merge_streams(const Model& model, ThreadPool& pool, int T, const AltUp& u, Buffers& b) {
  const int64_t E = model.hparams().n_embd, TE = u.TE;
  std::memcpy(b.x, u.S, sizeof(float) * size_t(TE));
  for (int64_t k = 1; k < u.A; ++k) {
    linear(pool, model.weights().altup_unembd_proj[size_t(k - 1)], nullptr, u.S + k * TE, T, b.tmp, b);
    rescale_to(b.tmp, u.S, T, E);
    ops::add_inplace(b.x, b.tmp, TE);
  }
  ops::scale_inplace(b.x, 1.0f / float(u.A), TE);
}

}  // namespace

Status forward_gemma3n(const Model& model, const ForwardBatch& fb, ForwardScratch& scratch, ThreadPool& pool,
                       const ForwardConfig& cfg) {
  const ModelHparams& hp = model.hparams();
  const int T = fb.n_tokens;
  const int64_t E = hp.n_embd;
  Buffers b = carve(model, scratch, scratch_k_type(fb), pool.size());
  const AltUp u = carve_altup(hp, T, b);

  LOOM_RETURN_IF_ERROR(embed_streams(model, fb, cfg, pool, u, b));
  for (int il = 0; il < int(hp.n_layer); ++il) {
    if (cfg.abort_cb && cfg.abort_cb(cfg.abort_data)) return aborted();
    const LayerWeights& l = model.weights().layers[size_t(il)];
    predict_streams(hp, l, T, u, b);
    if (!observe(cfg, "active_prediction", il, u.Pr, E, T)) return aborted();
    LOOM_RETURN_IF_ERROR(attention_laurel(model, fb, cfg, pool, il, u, b));
    if (!observe(cfg, "attn_laurel", il, b.x, E, T)) return aborted();
    sparse_ffn(model, cfg, pool, il, T, b);
    if (!observe(cfg, "ffn_out", il, b.tmp, E, T)) return aborted();
    correct_streams(hp, l, b.tmp, T, u, b);
    add_per_layer_input(model, pool, il, T, u, b);
    for (int64_t k = 0; k < u.A; ++k) add_control_vector(cfg, il, u.S + k * u.TE, T, E);
    if (!observe(cfg, "l_out", il, u.S, E, T)) return aborted();
  }
  merge_streams(model, pool, T, u, b);
  return write_outputs(model, fb, cfg, pool, b);
}

}  // namespace loom::model::detail

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

namespace loom::detail {
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

}  // namespace

Status forward_gemma3n(const Model& model, const ForwardBatch& fb, ForwardScratch& scratch, ThreadPool& pool,
                       const ForwardConfig& cfg) {
  const ModelHparams& hp = model.hparams();
  const ModelWeights& w = model.weights();
  const int T = fb.n_tokens;
  const int64_t E = hp.n_embd, A = hp.n_altup, P = hp.n_embd_per_layer, TE = int64_t(T) * E;
  Buffers b = carve(model, scratch, scratch_k_type(fb), pool.size());
  float* S = b.alt;                    // [A][T][E] streams
  float* Pr = b.alt + A * TE;          // [A][T][E] predictions
  float* mod = b.alt_coef;             // [T][A] modalities
  float* coef = mod + int64_t(T) * A;  // [T][A²] (prediction) or [T][A] (correction)

  embed_tokens(model, fb, cfg, pool, b);
  ops::scale_inplace(b.x, hp.embd_scale, TE);
  if (!observe(cfg, "inp_embd", -1, b.x, E, T)) return aborted();
  per_layer_inputs(model, fb, pool, b);
  std::memcpy(S, b.x, sizeof(float) * size_t(TE));
  for (int64_t k = 1; k < A; ++k) {
    linear(pool, w.altup_proj[size_t(k - 1)], nullptr, b.x, T, S + k * TE, b);
    rescale_to(S + k * TE, b.x, T, E);
  }

  for (int il = 0; il < int(hp.n_layer); ++il) {
    if (cfg.abort_cb && cfg.abort_cb(cfg.abort_data)) return aborted();
    const LayerWeights& l = w.layers[size_t(il)];

    // Prediction: P_j = S_j + Σ_k c[j·A + k] · S_k.
    router_modalities(hp, l, S, T, b.tmp, mod);
    for (int t = 0; t < T; ++t) {
      for (int64_t o = 0; o < A * A; ++o) {
        float s = 0;
        for (int64_t j = 0; j < A; ++j) s += l.altup_predict_coef[o * A + j] * mod[int64_t(t) * A + j];
        coef[int64_t(t) * A * A + o] = s;
      }
    }
    for (int64_t j = 0; j < A; ++j) {
      for (int t = 0; t < T; ++t) {
        float* p = Pr + j * TE + int64_t(t) * E;
        const float* c = coef + int64_t(t) * A * A + j * A;
        for (int64_t i = 0; i < E; ++i) {
          float s = 0;
          for (int64_t k = 0; k < A; ++k) s += S[k * TE + int64_t(t) * E + i] * c[k];
          p[i] = s + S[j * TE + int64_t(t) * E + i];
        }
      }
    }
    const float* active = Pr;  // P_0
    if (!observe(cfg, "active_prediction", il, active, E, T)) return aborted();

    // Attention and Laurel on the active prediction.
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
    if (!observe(cfg, "attn_laurel", il, a, E, T)) return aborted();

    // FFN (GELU through ggml's f16 table), with activation sparsity on the first layers.
    const int64_t F = hp.n_ff_at(il);
    ops::rms_norm(a, l.ffn_norm, T, E, hp.rms_eps, b.xb);
    linear(pool, l.ffn_gate, layer_lora(cfg, il, kFfnGate), b.xb, T, b.gate, b);
    linear(pool, l.ffn_up, layer_lora(cfg, il, kFfnUp), b.xb, T, b.up, b);
    if (il < hp.n_layer_sparse) {
      for (int t = 0; t < T; ++t) {
        float* g = b.gate + int64_t(t) * F;
        double sum = 0;
        for (int64_t i = 0; i < F; ++i) sum += g[i];
        const float mean = float(sum / double(F));
        double ss = 0;
        for (int64_t i = 0; i < F; ++i) ss += double((g[i] - mean) * (g[i] - mean));
        const float cutoff = mean + std::sqrt(float(ss) * (1.0f / float(F - 1))) * kSparsityStdMul;
        for (int64_t i = 0; i < F; ++i) g[i] = std::max(0.0f, g[i] - cutoff);
      }
    }
    ops::geglu_f16_table_inplace(b.gate, b.up, int64_t(T) * F);
    linear(pool, l.ffn_down, layer_lora(cfg, il, kFfnDown), b.gate, T, b.tmp, b);
    ops::rms_norm(b.tmp, l.post_ffn_norm, T, E, hp.rms_eps, b.tmp);
    ops::add_inplace(b.tmp, a, TE);  // A = activated
    const float* act = b.tmp;
    if (!observe(cfg, "ffn_out", il, act, E, T)) return aborted();

    // Correction: S_j = P_j + (A - P_0) · (Wcorrect · m' + 1)_j.
    router_modalities(hp, l, act, T, b.xb, mod);
    for (int t = 0; t < T; ++t) {
      for (int64_t j = 0; j < A; ++j) {
        float s = 0;
        for (int64_t k = 0; k < A; ++k) s += l.altup_correct_coef[j * A + k] * mod[int64_t(t) * A + k];
        coef[int64_t(t) * A + j] = s + 1.0f;
      }
    }
    for (int64_t j = 0; j < A; ++j) {
      for (int t = 0; t < T; ++t) {
        const float c = coef[int64_t(t) * A + j];
        const float* aa = act + int64_t(t) * E;
        const float* p0 = Pr + int64_t(t) * E;
        const float* pj = Pr + j * TE + int64_t(t) * E;
        float* sj = S + j * TE + int64_t(t) * E;
        for (int64_t i = 0; i < E; ++i) sj[i] = (aa[i] - p0[i]) * c + pj[i];
      }
    }

    // The per-layer input, through the corrected active stream, into the other streams.
    for (int64_t i = 0; i < TE; ++i) b.xb[i] = S[i] * l.altup_correct_scale[i % E];
    linear(pool, l.pl_inp_gate, nullptr, b.xb, T, b.pl_gate, b);
    for (int t = 0; t < T; ++t) {
      ops::geglu_f16_table_inplace(b.pl_gate + int64_t(t) * P, b.pl_inp + (int64_t(t) * hp.n_layer + il) * P, P);
    }
    linear(pool, l.pl_proj, nullptr, b.pl_gate, T, b.tmp, b);
    ops::rms_norm(b.tmp, l.pl_post_norm, T, E, hp.rms_eps, b.tmp);
    for (int64_t k = 1; k < A; ++k) ops::add_inplace(S + k * TE, b.tmp, TE);
    for (int64_t k = 0; k < A; ++k) add_control_vector(cfg, il, S + k * TE, T, E);
    if (!observe(cfg, "l_out", il, S, E, T)) return aborted();
  }

  // Back to one stream: the mean of S_0 and the other streams projected back at S_0's magnitude.
  std::memcpy(b.x, S, sizeof(float) * size_t(TE));
  for (int64_t k = 1; k < A; ++k) {
    linear(pool, w.altup_unembd_proj[size_t(k - 1)], nullptr, S + k * TE, T, b.tmp, b);
    rescale_to(b.tmp, S, T, E);
    ops::add_inplace(b.x, b.tmp, TE);
  }
  ops::scale_inplace(b.x, 1.0f / float(A), TE);
  return write_outputs(model, fb, cfg, pool, b);
}

}  // namespace loom::detail

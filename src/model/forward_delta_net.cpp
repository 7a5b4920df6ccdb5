// qwen35's Gated DeltaNet mixer (Qwen3.5's linear-attention layers), as the reference computes it:
//   qkv = Wqkv · h;  z = Wz · h;  β = σ(Wβ · h);  g = softplus(Wα · h + dt_bias) · a     (a < 0, per value head)
//   qkv = silu(conv1d_causal(qkv))                depthwise over q, k and v together, no bias
//   q, k = L2-normalised per key head: x / sqrt(Σx² + eps)
//   o = gated delta rule (ops/delta_net.h) per value head, value head h reading key head h mod Hk,
//       scale 1/sqrt(S)
//   y = RMSNorm(o per head, ssm_norm) ⊙ silu(z);  out = Wout · y
// qwen3next (hp.delta_kv_interleaved, delta_ba_fused): value head h reads key head h / (Hv / Hk), and
// β and α come from one projection ssm_ba, per key head its β rows then its α rows.
// The conv state and the [S][S] matrix per value head live in the sequence's recurrent row.
// Prompts run the rule's step form token by token, as llama.cpp's CPU backend does (its fused
// gated_delta_net op), so a sequence's result does not depend on how its tokens are split into
// micro-batches or which other sequences share them.
#include <cmath>

#include "model/forward_internal.h"
#include "ops/delta_net.h"
#include "ops/ssm.h"

namespace loom::model::detail {
namespace {

// The mixer's per-token inputs, carved from b.ssm_xz: qkv [T][Cc], z [T][Di], β [T][Hv], g [T][Hv].
struct DeltaInputs {
  float* qkv;
  float* z;
  float* beta;
  float* g;
};

DeltaInputs carve_inputs(const ModelHparams& hp, int T, Buffers& b) {
  DeltaInputs d;
  d.qkv = b.ssm_xz;
  d.z = d.qkv + int64_t(T) * hp.ssm_conv_channels();
  d.beta = d.z + int64_t(T) * hp.ssm_d_inner;
  d.g = d.beta + int64_t(T) * hp.ssm_dt_rank;
  return d;
}

// qkv = Wqkv · h, z = Wz · h, and the raw β and α (into g) of the T rows of b.xb.
void project_inputs(const ModelHparams& hp, const LayerWeights& l, ThreadPool& pool, int T, const DeltaInputs& d,
                    Buffers& b) {
  const int64_t Hv = hp.ssm_dt_rank, Hk = hp.ssm_n_group;
  linear(pool, l.ssm_in, nullptr, b.xb, T, d.qkv, b);
  linear(pool, l.ssm_z, nullptr, b.xb, T, d.z, b);
  if (!hp.delta_ba_fused) {
    linear(pool, l.ssm_beta, nullptr, b.xb, T, d.beta, b);
    linear(pool, l.ssm_alpha, nullptr, b.xb, T, d.g, b);
    return;
  }
  // qwen3next: [T][2·Hv] rows of per key head (r = Hv / Hk) β ×r then α ×r, through b.ssm_y
  // (free until the rule's output; Di = Hv·S ≥ 2·Hv) into β [T][Hv] and α [T][Hv].
  const int64_t r = Hv / Hk;
  linear(pool, l.ssm_beta, nullptr, b.xb, T, b.ssm_y, b);
  for (int t = 0; t < T; ++t) {
    const float* ba = b.ssm_y + int64_t(t) * 2 * Hv;
    for (int64_t kh = 0; kh < Hk; ++kh) {
      for (int64_t j = 0; j < r; ++j) {
        d.beta[t * Hv + kh * r + j] = ba[kh * 2 * r + j];
        d.g[t * Hv + kh * r + j] = ba[kh * 2 * r + r + j];
      }
    }
  }
}

// silu(conv1d_causal(qkv)) of each run into b.ssm_xc, continuing the run's conv state in st.
void convolve_qkv(const ModelHparams& hp, const LayerWeights& l, const ForwardBatch& fb, const RecurrentLayerView& st,
                  ThreadPool& pool, const float* qkv, Buffers& b) {
  const int64_t Cc = hp.ssm_conv_channels();
  for_run_channels(pool, fb.n_seq_runs, Cc, [&](int r, int64_t c0, int64_t c1) {
    const int t0 = fb.seq_start[r];
    ops::SsmConv p;
    p.n_tokens = fb.seq_start[r + 1] - t0;
    p.d_conv = int(hp.ssm_d_conv);
    p.x = qkv + int64_t(t0) * Cc;
    p.x_stride = Cc;
    p.w = l.ssm_conv;
    p.state = st.conv + int64_t(fb.state_dst[r]) * fb.rs->conv_row;
    p.y = b.ssm_xc + int64_t(t0) * Cc;
    p.y_stride = Cc;
    ops::ssm_conv(p, c0, c1);
  });
}

// Per token: β = σ(β), g = softplus(α + dt_bias) · a, and the q and k heads (the first 2·Hk heads
// of S channels of b.ssm_xc) L2-normalised.
void gates_and_qk_norm(const ModelHparams& hp, const LayerWeights& l, int T, const DeltaInputs& d, Buffers& b) {
  const int64_t S = hp.ssm_d_state, Hv = hp.ssm_dt_rank, Hk = hp.ssm_n_group, Cc = hp.ssm_conv_channels();
  for (int t = 0; t < T; ++t) {
    for (int64_t h = 0; h < Hv; ++h) {
      float& bt = d.beta[t * Hv + h];
      bt = 1.0f / (1.0f + std::exp(-bt));
      float& gt = d.g[t * Hv + h];
      gt = ops::softplus(gt + l.ssm_dt_b[h]) * l.ssm_a[h];
    }
    for (int64_t j = 0; j < 2 * Hk; ++j) {
      float* x = b.ssm_xc + int64_t(t) * Cc + j * S;
      float ss = 0.0f;
      for (int64_t i = 0; i < S; ++i) ss += x[i] * x[i];
      const float inv = 1.0f / std::sqrt(ss + hp.rms_eps);
      for (int64_t i = 0; i < S; ++i) x[i] *= inv;
    }
  }
}

// The gated delta rule of value heads [h0, h1) of run r into b.ssm_y, each head carrying its
// [S][S] state (in st) through the run's tokens.
void delta_rule_heads(const ModelHparams& hp, const ForwardBatch& fb, const RecurrentLayerView& st, const DeltaInputs& d,
                      int r, int64_t h0, int64_t h1, Buffers& b) {
  const int64_t Di = hp.ssm_d_inner, S = hp.ssm_d_state, Hv = hp.ssm_dt_rank, Hk = hp.ssm_n_group,
                Cc = hp.ssm_conv_channels();
  const int t0 = fb.seq_start[r];
  ops::DeltaNet p;
  p.n_tokens = fb.seq_start[r + 1] - t0;
  p.head_dim = int(S);
  p.n_k_heads = Hk;
  p.q = b.ssm_xc + int64_t(t0) * Cc;
  p.k = p.q + Hk * S;
  p.qk_stride = Cc;
  p.v = p.q + 2 * Hk * S;
  p.v_stride = Cc;
  p.g = d.g + int64_t(t0) * Hv;
  p.beta = d.beta + int64_t(t0) * Hv;
  p.gb_stride = Hv;
  p.state = st.ssm + int64_t(fb.state_dst[r]) * fb.rs->ssm_row;
  p.out = b.ssm_y + int64_t(t0) * Di;
  p.out_stride = Di;
  p.scale = 1.0f / std::sqrt(float(S));
  if (!hp.delta_kv_interleaved) {
    ops::delta_net(p, h0, h1);
    return;
  }
  // qwen3next: value head h reads key head h / (Hv / Hk); each head as a one-head problem.
  for (int64_t h = h0; h < h1; ++h) {
    ops::DeltaNet ph = p;
    ph.n_k_heads = 1;
    ph.q = p.q + h / (Hv / Hk) * S;
    ph.k = p.k + h / (Hv / Hk) * S;
    ph.v = p.v + h * S;
    ph.g = p.g + h;
    ph.beta = p.beta + h;
    ph.state = p.state + h * S * S;
    ph.out = p.out + h * S;
    ops::delta_net(ph, 0, 1);
  }
}

}  // namespace

Status delta_net_block(const Model& model, const ForwardBatch& fb, const ForwardConfig& cfg, ThreadPool& pool, int il,
                       Buffers& b) {
  const ModelHparams& hp = model.hparams();
  const LayerWeights& l = model.weights().layers[size_t(il)];
  const RecurrentView& rs = *fb.rs;
  const RecurrentLayerView& st = rs.layers[size_t(il)];
  const int T = fb.n_tokens;
  const int64_t Di = hp.ssm_d_inner, S = hp.ssm_d_state, Hv = hp.ssm_dt_rank, Cc = hp.ssm_conv_channels();
  const DeltaInputs d = carve_inputs(hp, T, b);

  project_inputs(hp, l, pool, T, d, b);
  take_state_rows(fb, rs, st);
  convolve_qkv(hp, l, fb, st, pool, d.qkv, b);
  if (!observe(cfg, "conv_output_silu", il, b.ssm_xc, Cc, T)) return aborted();
  gates_and_qk_norm(hp, l, T, d, b);

  // One work item per (run, value head).
  pool.parallel_for(int64_t(fb.n_seq_runs) * Hv, [&](int64_t lo, int64_t hi) {
    for (int64_t it = lo; it < hi;) {
      const int r = int(it / Hv);
      const int64_t h0 = it % Hv, h1 = std::min<int64_t>(Hv, h0 + (hi - it));
      delta_rule_heads(hp, fb, st, d, r, h0, h1, b);
      it += h1 - h0;
    }
  });
  if (!observe(cfg, "attn_output", il, b.ssm_y, Di, T)) return aborted();

  // RMSNorm per head, times silu(z): z = silu(z) · norm(o).
  ops::rms_norm(b.ssm_y, l.ssm_norm, int64_t(T) * Hv, S, hp.rms_eps, b.ssm_y);
  ops::swiglu_inplace(d.z, b.ssm_y, int64_t(T) * Di);
  linear(pool, l.ssm_out, nullptr, d.z, T, b.tmp, b);
  return Status::ok();
}

}  // namespace loom::model::detail

// Mamba-1 (arch "mamba") and Mamba-2 ("mamba2"): a stack of selective state-space blocks instead
// of attention + FFN.
//   x = embed(tokens)
//   per layer: h = RMSNorm(x)
//              x += ssm_block(h);  x += cvec[layer]
//   logits = Wout_lm · RMSNorm(x)   (only for output rows)
// ssm_block, the mixer (also the recurrent layers of hybrids, forward_decoder.cpp):
//   Mamba-1:   [u | z] = Win · h                              u, z: [d_inner]
//              u = silu(conv1d_causal(u) + b_conv)            depthwise, d_conv taps, per sequence
//              [dt_r | B | C] = Wx · u                        [dt_rank], [d_state], [d_state]
//              dt = Wdt · dt_r + b_dt                         (Falcon-Mamba: RMSNorm of dt_r, B, C first)
//              y = scan(u, dt, A, B, C) + D ⊙ u, gated by silu(z)   (ops/ssm.h)
//              out = Wout · y
//   Mamba-2:   [z | xBC | dt] = Win · h; xBC = silu(conv1d_causal(xBC) + b) over x, B and C together;
//              dt = dt + b_dt per head; y = scan with one decay per head, B and C per group,
//              + D[head] ⊙ x, gated by silu(z), then RMSNorm per group (weight ssm_norm); out = Wout · y
// The conv and SSM states of each sequence live in the context's recurrent state rows: a run of
// tokens of one sequence continues the state of its source row and leaves it in its destination.
#include <algorithm>
#include <cstring>

#include "model/forward_internal.h"
#include "ops/ops.h"
#include "ops/ssm.h"

namespace loom::model::detail {

void take_state_rows(const ForwardBatch& fb, const RecurrentView& rs, const RecurrentLayerView& st) {
  for (int r = 0; r < fb.n_seq_runs; ++r) {
    const int src = fb.state_src[r], dst = fb.state_dst[r];
    if (src == dst) continue;
    for (auto [base, n] : {std::pair{st.conv, rs.conv_row}, std::pair{st.ssm, rs.ssm_row}}) {
      if (n == 0) continue;
      float* d = base + int64_t(dst) * n;
      if (src < 0) std::fill(d, d + n, 0.0f);
      else std::memcpy(d, base + int64_t(src) * n, sizeof(float) * size_t(n));
    }
  }
}

namespace {

// The sizes of the mixer: d_inner Di, d_state S, dt_rank R (Mamba-2: heads H = R, groups G),
// conv channels Cc, the in-projection's row width XZ and Mamba-1's x-projection width XDB.
struct SsmShape {
  int64_t Di, S, R, XDB, H, G, Cc, XZ;
  bool v2;
  explicit SsmShape(const ModelHparams& hp)
      : Di(hp.ssm_d_inner),
        S(hp.ssm_d_state),
        R(hp.ssm_dt_rank),
        XDB(R + 2 * S),
        H(R),
        G(hp.ssm_n_group),
        Cc(hp.ssm_conv_channels()),
        XZ(hp.is_mamba2() ? Di + Cc + H : 2 * Di),
        v2(hp.is_mamba2()) {}
};

// silu(conv1d_causal(u) + b_conv) of each run into b.ssm_xc, continuing the run's conv state in
// st: Mamba-1 convolves x (the first Di columns of b.ssm_xz), Mamba-2 x|B|C (after z).
void convolve_input(const ModelHparams& hp, const SsmShape& sh, const LayerWeights& l, const ForwardBatch& fb,
                    const RecurrentLayerView& st, ThreadPool& pool, Buffers& b) {
  const int64_t conv_in = sh.v2 ? sh.Di : 0;
  for_run_channels(pool, fb.n_seq_runs, sh.Cc, [&](int r, int64_t c0, int64_t c1) {
    const int t0 = fb.seq_start[r];
    ops::SsmConv p;
    p.n_tokens = fb.seq_start[r + 1] - t0;
    p.d_conv = int(hp.ssm_d_conv);
    p.x = b.ssm_xz + int64_t(t0) * sh.XZ + conv_in;
    p.x_stride = sh.XZ;
    p.w = l.ssm_conv;
    p.b = l.ssm_conv_b;
    p.state = st.conv + int64_t(fb.state_dst[r]) * fb.rs->conv_row;
    p.y = b.ssm_xc + int64_t(t0) * sh.Cc;
    p.y_stride = sh.Cc;
    ops::ssm_conv(p, c0, c1);
  });
}

// The T tokens' steps softplus(dt) into b.ssm_dt: Mamba-2's per head dt + b_dt; Mamba-1's
// Wdt · dt_r + b_dt ([dt_r | B | C] = Wx · u into b.ssm_xdb; Falcon-Mamba: RMSNorm of dt_r, B, C first).
void time_steps(const ModelHparams& hp, const SsmShape& sh, const LayerWeights& l, ThreadPool& pool, int T, Buffers& b) {
  const int64_t Di = sh.Di, S = sh.S, R = sh.R, XDB = sh.XDB, H = sh.H;
  if (sh.v2) {
    for (int t = 0; t < T; ++t) {
      const float* dt = b.ssm_xz + t * sh.XZ + Di + sh.Cc;
      for (int64_t h = 0; h < H; ++h) b.ssm_dt[t * H + h] = dt[h] + l.ssm_dt_b[h];
    }
  } else {
    linear(pool, l.ssm_x, nullptr, b.ssm_xc, T, b.ssm_xdb, b);  // [T][R + 2·S]
    for (int t = 0; t < T; ++t) std::memcpy(b.ssm_dtr + t * R, b.ssm_xdb + t * XDB, sizeof(float) * size_t(R));
    if (hp.ssm_dt_b_c_rms) {
      ops::rms_norm(b.ssm_dtr, nullptr, T, R, hp.rms_eps, b.ssm_dtr);
      for (int t = 0; t < T; ++t) {
        float* bc = b.ssm_xdb + t * XDB + R;
        ops::rms_norm(bc, nullptr, 2, S, hp.rms_eps, bc);  // B and C, each over d_state
      }
    }
    linear(pool, l.ssm_dt, nullptr, b.ssm_dtr, T, b.ssm_dt, b);  // [T][Di]
    ops::add_bias(b.ssm_dt, l.ssm_dt_b, T, Di);
  }
  ops::softplus_inplace(b.ssm_dt, T * (sh.v2 ? H : Di));  // the steps, in vectors
}

// y = scan(x, dt, A, B, C) of each run into b.ssm_y, continuing the run's SSM state in st.
void selective_scan(const SsmShape& sh, const LayerWeights& l, const ForwardBatch& fb, const RecurrentLayerView& st,
                    ThreadPool& pool, Buffers& b) {
  const int64_t Di = sh.Di, S = sh.S, H = sh.H, G = sh.G, Cc = sh.Cc, XDB = sh.XDB;
  const bool v2 = sh.v2;
  for_run_channels(pool, fb.n_seq_runs, Di, [&](int r, int64_t c0, int64_t c1) {
    const int t0 = fb.seq_start[r];
    ops::SsmScan p;
    p.n_tokens = fb.seq_start[r + 1] - t0;
    p.d_state = int(S);
    p.x = b.ssm_xc + int64_t(t0) * Cc;
    p.x_stride = Cc;
    p.dt = b.ssm_dt + int64_t(t0) * (v2 ? H : Di);
    p.dt_stride = v2 ? H : Di;
    p.dt_is_step = true;
    p.A = l.ssm_a;
    p.B = v2 ? b.ssm_xc + int64_t(t0) * Cc + Di : b.ssm_xdb + int64_t(t0) * XDB + sh.R;
    p.C = p.B + (v2 ? G * S : S);
    p.bc_stride = v2 ? Cc : XDB;
    p.state = st.ssm + int64_t(fb.state_dst[r]) * fb.rs->ssm_row;
    p.y = b.ssm_y + int64_t(t0) * Di;
    p.y_stride = Di;
    if (v2) {
      p.head_dim = Di / H;
      p.group_channels = Di / G;
    }
    ops::ssm_scan(p, c0, c1);
  });
}

// y = (y + D ⊙ x) · silu(z), by token rows in vectors (the scan's own D and z would take them
// one channel at a time); Mamba-2: then RMSNorm over each group of Di / G channels (weight ssm_norm).
void skip_gate_and_norm(const ModelHparams& hp, const SsmShape& sh, const LayerWeights& l, ThreadPool& pool, int T,
                        Buffers& b) {
  const int64_t Di = sh.Di, G = sh.G;
  pool.parallel_for(T, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      float* y = b.ssm_y + t * Di;
      const float* x = b.ssm_xc + t * sh.Cc;
      float* z = b.ssm_xz + t * sh.XZ + (sh.v2 ? 0 : Di);
      const int64_t hd = sh.v2 ? Di / sh.H : 1;
      for (int64_t c = 0; c < Di; ++c) y[c] += l.ssm_d[c / hd] * x[c];
      ops::swiglu_inplace(z, y, Di);  // z = silu(z) · y
      std::memcpy(y, z, sizeof(float) * size_t(Di));
    }
  });
  if (sh.v2 && l.ssm_norm) {
    for (int t = 0; t < T; ++t) {
      for (int64_t g = 0; g < G; ++g) {
        float* y = b.ssm_y + t * Di + g * (Di / G);
        ops::rms_norm_row(y, l.ssm_norm + g * (Di / G), Di / G, hp.rms_eps, y);
      }
    }
  }
}

}  // namespace

Status ssm_block(const Model& model, const ForwardBatch& fb, const ForwardConfig& cfg, ThreadPool& pool, int il,
                 Buffers& b) {
  const ModelHparams& hp = model.hparams();
  const LayerWeights& l = model.weights().layers[size_t(il)];
  const RecurrentView& rs = *fb.rs;
  const RecurrentLayerView& st = rs.layers[size_t(il)];
  const int T = fb.n_tokens;
  const SsmShape sh(hp);

  linear(pool, l.ssm_in, nullptr, b.xb, T, b.ssm_xz, b);  // [T][XZ]
  take_state_rows(fb, rs, st);
  convolve_input(hp, sh, l, fb, st, pool, b);
  if (!observe(cfg, "ssm_conv", il, b.ssm_xc, sh.Cc, T)) return aborted();
  time_steps(hp, sh, l, pool, T, b);
  selective_scan(sh, l, fb, st, pool, b);
  skip_gate_and_norm(hp, sh, l, pool, T, b);
  if (!observe(cfg, "ssm_out", il, b.ssm_y, sh.Di, T)) return aborted();
  linear(pool, l.ssm_out, nullptr, b.ssm_y, T, b.tmp, b);  // [T][E]
  return Status::ok();
}

Status forward_mamba(const Model& model, const ForwardBatch& fb, ForwardScratch& scratch, ThreadPool& pool,
                     const ForwardConfig& cfg) {
  const ModelHparams& hp = model.hparams();
  const ModelWeights& w = model.weights();
  const int T = fb.n_tokens;
  const int64_t E = hp.n_embd;
  Buffers b = carve(model, scratch, TensorType::F32, pool.size());

  embed_tokens(model, fb, cfg, pool, b);
  if (!observe(cfg, "inp_embd", -1, b.x, E, T)) return aborted();

  for (int il = 0; il < int(hp.n_layer); ++il) {
    if (cfg.abort_cb && cfg.abort_cb(cfg.abort_data)) return aborted();
    ops::rms_norm(b.x, w.layers[size_t(il)].attn_norm, T, E, hp.rms_eps, b.xb);
    if (!observe(cfg, "attn_norm", il, b.xb, E, T)) return aborted();
    LOOM_RETURN_IF_ERROR(ssm_block(model, fb, cfg, pool, il, b));
    ops::add_inplace(b.x, b.tmp, T * E);
    add_control_vector(cfg, il, b.x, T, E);
    if (!observe(cfg, "l_out", il, b.x, E, T)) return aborted();
  }
  return write_outputs(model, fb, cfg, pool, b);
}

}  // namespace loom::model::detail

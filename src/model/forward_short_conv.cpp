// lfm2's gated short-convolution mixer (the recurrent layers of LFM2 / LFM2.5):
//   [B | C | x] = Win · h                       three blocks of n_embd
//   y = C ⊙ conv1d_causal(B ⊙ x)                depthwise, L taps (shortconv.l_cache), no bias, no activation
//   out = Wout · y
// The conv state (the last L - 1 values of B ⊙ x per channel) lives in the sequence's recurrent row.
#include "model/forward_internal.h"
#include "ops/ssm.h"

namespace loom::model::detail {

Status short_conv_block(const Model& model, const ForwardBatch& fb, const ForwardConfig& cfg, ThreadPool& pool, int il,
                        Buffers& b) {
  const ModelHparams& hp = model.hparams();
  const LayerWeights& l = model.weights().layers[size_t(il)];
  const RecurrentView& rs = *fb.rs;
  const RecurrentLayerView& st = rs.layers[size_t(il)];
  const int T = fb.n_tokens;
  const int64_t E = hp.n_embd;

  linear(pool, l.ssm_in, nullptr, b.xb, T, b.ssm_xz, b);  // [T][3E]: B, C, x
  take_state_rows(fb, rs, st);
  for (int t = 0; t < T; ++t) {
    const float* bcx = b.ssm_xz + int64_t(t) * 3 * E;
    float* bx = b.ssm_y + int64_t(t) * E;
    for (int64_t c = 0; c < E; ++c) bx[c] = bcx[c] * bcx[2 * E + c];
  }
  for_run_channels(pool, fb.n_seq_runs, E, [&](int r, int64_t c0, int64_t c1) {
    const int t0 = fb.seq_start[r];
    ops::SsmConv p;
    p.n_tokens = fb.seq_start[r + 1] - t0;
    p.d_conv = int(hp.ssm_d_conv);
    p.x = b.ssm_y + int64_t(t0) * E;
    p.x_stride = E;
    p.w = l.ssm_conv;
    p.state = st.conv + int64_t(fb.state_dst[r]) * rs.conv_row;
    p.y = b.ssm_xc + int64_t(t0) * E;
    p.y_stride = E;
    p.silu = false;
    ops::ssm_conv(p, c0, c1);
  });
  if (!observe(cfg, "shortconv_conv", il, b.ssm_xc, E, T)) return aborted();
  for (int t = 0; t < T; ++t) {
    const float* c = b.ssm_xz + int64_t(t) * 3 * E + E;
    float* y = b.ssm_xc + int64_t(t) * E;
    for (int64_t i = 0; i < E; ++i) y[i] *= c[i];
  }
  linear(pool, l.ssm_out, nullptr, b.ssm_xc, T, b.tmp, b);
  return Status::ok();
}

}  // namespace loom::model::detail

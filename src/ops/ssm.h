// Selective state-space ops (Mamba-1): the causal depthwise convolution and the selective scan
// over the tokens of one sequence, each carrying its state from call to call. Channel ranges
// [c0, c1) let a caller split the channels of one sequence across threads; a channel's result
// never depends on the range it is computed in, nor on how many tokens one call covers (a
// prompt in one call, in chunks or token by token gives the same bits).
#pragma once

#include <cstdint>

namespace loom::ops {

// y[t][c] = silu(b[c] + Σ_k w[c][k] · window_t[c][k]), window_t = the last d_conv inputs of
// channel c up to token t, oldest first: the state's d_conv - 1 values, then x[0..t][c]. The
// state keeps the last d_conv - 1 inputs afterwards. silu = false leaves the sum as it is (the
// short-conv blocks of lfm2).
struct SsmConv {
  int n_tokens = 0;
  int d_conv = 0;
  const float* x = nullptr;  // [n_tokens][x_stride], channel c in column c
  int64_t x_stride = 0;
  const float* w = nullptr;  // [n_ch][d_conv]
  const float* b = nullptr;  // [n_ch], or null
  float* state = nullptr;    // [n_ch][d_conv - 1], updated
  float* y = nullptr;        // [n_tokens][y_stride] (may not alias x)
  int64_t y_stride = 0;
  bool silu = true;
};
void ssm_conv(const SsmConv& p, int64_t c0, int64_t c1);

// Per channel c and token t (Mamba-1, one decay per state element):
//   d = softplus(dt[t][c]) (= dt when dt > 20, as the reference), u = x[t][c] · d
//   s[c][n] = s[c][n] · exp(d · A[c][n]) + B[t][n] · u           n = 0 .. d_state-1
//   y[t][c] = (Σ_n s[c][n] · C[t][n] + D[c] · x[t][c]) · silu(z[t][c])
// Mamba-2 (head_dim > 0): the channels of head h = c / head_dim share one step dt[t][h], one
// decay exp(d · A[h]) and D[h]; B and C are per group of group_channels channels (their values
// for channel c start at (c / group_channels) · d_state).
// D and z are optional (a null D adds nothing, a null z multiplies by 1). A must be <= 0.
struct SsmScan {
  int n_tokens = 0;
  int d_state = 0;
  const float* x = nullptr;  // [n_tokens][x_stride]
  int64_t x_stride = 0;
  const float* dt = nullptr;  // [n_tokens][dt_stride] before softplus
  int64_t dt_stride = 0;
  const float* A = nullptr;  // [n_ch][d_state]
  const float* B = nullptr;  // token t's d_state values at B + t·bc_stride
  const float* C = nullptr;  // the same for C
  int64_t bc_stride = 0;
  const float* D = nullptr;  // [n_ch], or null
  const float* z = nullptr;  // [n_tokens][z_stride], or null
  int64_t z_stride = 0;
  float* state = nullptr;  // [n_ch][d_state], updated
  float* y = nullptr;      // [n_tokens][y_stride]
  int64_t y_stride = 0;
  bool dt_is_step = false;     // dt already holds softplus(dt) (softplus_inplace)
  int64_t head_dim = 0;        // Mamba-2: channels per head (0: Mamba-1)
  int64_t group_channels = 0;  // Mamba-2: channels per B/C group (0: one group)
};
void ssm_scan(const SsmScan& p, int64_t c0, int64_t c1);

// softplus as the reference computes it: x > 20 ? x : log(1 + e^x).
float softplus(float x);
// x[i] = softplus(x[i]) (vectorised; the scan's steps for a whole micro-batch at once).
void softplus_inplace(float* x, int64_t n);

namespace detail {
// The inputs of channel c at token t: its x, its step d = softplus(dt), its head (the index of
// dt, D and a Mamba-2 A), the decay row (Mamba-1) or decay value (Mamba-2), B and C.
struct ScanStep {
  float x, d, u, decay;  // u = x·d; decay = exp(d·A[head]) (Mamba-2 only)
  int64_t head;
  const float* A;  // Mamba-1: [d_state]; Mamba-2: null
  const float* B;
  const float* C;
};
ScanStep scan_step(const SsmScan& p, int64_t c, int t);
// The same step for another channel of the same head (Mamba-2: only x and u differ).
inline ScanStep channel_step(ScanStep st, const SsmScan& p, int64_t c, int t) {
  st.x = p.x[int64_t(t) * p.x_stride + c];
  st.u = st.x * st.d;
  return st;
}
// Channels [c, end) that share c's step: its head's channels in [c, c1) (Mamba-1: c alone).
inline int64_t head_end(const SsmScan& p, int64_t c, int64_t c1) {
  if (p.head_dim <= 0) return c + 1;
  const int64_t e = (c / p.head_dim + 1) * p.head_dim;
  return e < c1 ? e : c1;
}
// States [n0, n1) of one step: s[n] = s[n]·decay_n + B[n]·u with decay_n = exp(d·A[n]) or the
// step's decay; returns Σ s[n]·C[n] summed in order (the scalar twin, and the vector kernel's tail).
float scan_states(float* s, const ScanStep& st, int n0, int n1);
// y[t][c] from the state sum: + D[head]·x, times silu(z[t][c]).
void scan_output(const SsmScan& p, int64_t c, int t, const ScanStep& st, float sum);
}  // namespace detail

namespace ref {
// Scalar twins of ssm_scan, ssm_conv and softplus_inplace (the SIMD kernels' ground truth).
void ssm_scan(const SsmScan& p, int64_t c0, int64_t c1);
void ssm_conv(const SsmConv& p, int64_t c0, int64_t c1);
void softplus_inplace(float* x, int64_t n);
}  // namespace ref

}  // namespace loom::ops

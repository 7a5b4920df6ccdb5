// The gated delta rule (Gated DeltaNet's recurrence) over the tokens of one sequence, in its step
// form: each token updates a [S][S] matrix per value head and reads it out. A head's result never
// depends on how many tokens one call covers (a prompt in one call, in chunks or token by token
// gives the same bits) nor on the head range it is computed in.
#pragma once

#include <cstdint>

namespace loom::ops {

// For value head h (its key head kh = h mod n_k_heads, the reference's tiling) and token t, with
// M the head's state (row j = value channel j, column i = key channel i), q and k L2-normalised:
//   M ← exp(g[t][h]) · M
//   δ[j] = β[t][h] · (v[j] - Σ_i M[j][i] · k[i])
//   M[j][i] += δ[j] · k[i]
//   out[j] = scale · Σ_i M[j][i] · q[i]
// computed row by row (decay, read-out of k, write, read-out of q in one pass over a row).
struct DeltaNet {
  int n_tokens = 0;
  int head_dim = 0;  // S: channels of every key and value head
  int64_t n_k_heads = 0;
  const float* q = nullptr;  // token t's key head kh at q + t·qk_stride + kh·S
  const float* k = nullptr;
  int64_t qk_stride = 0;
  const float* v = nullptr;  // token t's value head h at v + t·v_stride + h·S
  int64_t v_stride = 0;
  const float* g = nullptr;     // [n_tokens][gb_stride]: log of the decay (<= 0), per value head
  const float* beta = nullptr;  // [n_tokens][gb_stride]: write strength
  int64_t gb_stride = 0;
  float* state = nullptr;  // [value heads][S][S], updated
  float* out = nullptr;    // token t's head h at out + t·out_stride + h·S
  int64_t out_stride = 0;
  float scale = 1.0f;
};
void delta_net(const DeltaNet& p, int64_t h0, int64_t h1);

namespace ref {
// Scalar twin of delta_net (the SIMD kernel's ground truth).
void delta_net(const DeltaNet& p, int64_t h0, int64_t h1);
}  // namespace ref

namespace detail {
void delta_net_simd(const DeltaNet& p, int64_t h0, int64_t h1);
}  // namespace detail

}  // namespace loom::ops

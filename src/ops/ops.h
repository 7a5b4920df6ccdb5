// Element-wise and row-wise float ops over activations. Shapes are in the comments; all
// buffers are dense row-major float arrays. These know nothing of models.
#pragma once

#include <cstdint>

#include "ops/tensor_view.h"

namespace loom::ops {

// out[i] = x[i] / sqrt(mean(x^2) + eps) * (w ? w[i] : 1), for one row of n.
void rms_norm_row(const float* x, const float* w, int64_t n, float eps, float* out);
// Same for n_rows rows of length n (w shared by all rows).
void rms_norm(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* out);

// LayerNorm: out = (x - mean) / sqrt(var + eps) * w + b (w, b may be null), one row of n.
void layer_norm_row(const float* x, const float* w, const float* b, int64_t n, float eps, float* out);

// Adds a bias row b [n] to each of n_rows rows of x.
void add_bias(float* x, const float* b, int64_t n_rows, int64_t n);
// x[i] = c * tanh(x[i] / c)
void softcap_inplace(float* x, float c, int64_t n);
// GELU, tanh approximation (as the reference uses): 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))
float gelu(float x);
void gelu_inplace(float* x, int64_t n);
// gate[i] = gelu(gate[i]) * up[i]  (GeGLU)
void geglu_inplace(float* gate, const float* up, int64_t n);
// GeGLU as ggml's CPU backend computes it: gelu read from a table of f16 results indexed by the
// f16 rounding of the input (0 at or below -10, the input itself at or above 10). Within one f16
// step of geglu_inplace; used where the reference's rounding matters for conformance (T5).
void geglu_f16_table_inplace(float* gate, const float* up, int64_t n);

// x[i] = x[i] > 0 ? x[i] : 0  (ReLU, as ggml: NaN becomes 0)
void relu_inplace(float* x, int64_t n);

// x[i] += y[i]
void add_inplace(float* x, const float* y, int64_t n);
// x[i] *= s
void scale_inplace(float* x, float s, int64_t n);
// x · sigmoid(x), computed from e^(-|x|) so it never overflows; silu(-inf) = -0.
float silu(float x);
// gate[i] = silu(gate[i]) * up[i]  (SwiGLU; vectorised, agrees with silu() to ~1e-7 relative)
void swiglu_inplace(float* gate, const float* up, int64_t n);
// gpt-oss's clamped SwiGLU: with g = min(gate[i], limit) and u = clamp(up[i], -limit, limit),
// gate[i] = g · σ(alpha · g) · (u + 1). The gate is clamped from above only, the up value both
// ways; NaN passes through. gpt-oss uses alpha 1.702, limit 7.
void swiglu_oai_inplace(float* gate, const float* up, int64_t n, float alpha, float limit);
// In-place softmax over n values; -inf entries become 0. Returns the max.
float softmax_inplace(float* x, int64_t n);

// Row r of a table in any supported type, dequantized to float (token embedding lookup).
void get_row(const TensorView& table, int64_t r, float* out);

enum class RopeMode { kNormal, kNeox };  // pairs (2i, 2i+1) vs (i, i + n_rot/2)

struct RopeParams {
  int n_rot = 0;  // rotated dimensions per head (<= head_dim)
  float freq_base = 10000.f;
  float freq_scale = 1.f;  // positions are multiplied by this (linear scaling)
  RopeMode mode = RopeMode::kNormal;
  // YaRN (ext_factor > 0): blend interpolated and extrapolated angles per dimension between the
  // correction dims given by beta_fast/beta_slow rotations over n_ctx_orig, and scale magnitudes.
  float ext_factor = 0.f;
  float attn_factor = 1.f;
  float beta_fast = 32.f;
  float beta_slow = 1.f;
  int n_ctx_orig = 0;
  // Per-pair divisors of the rotation frequency, [n_rot/2] (Phi-3 LongRoPE's long/short
  // factors): pair i turns by pos · freq_scale · base^(-2i/n_rot) / freq_factors[i], in both
  // modes. Null: none (all 1).
  const float* freq_factors = nullptr;

  bool operator==(const RopeParams&) const = default;
};

inline constexpr int kMaxRopeDims = 1024;

// Rotates x [n_tokens][n_heads][head_dim] in place; pos [n_tokens].
void rope(float* x, const int32_t* pos, int n_tokens, int n_heads, int head_dim, const RopeParams& p);

// rope in two steps, for callers that rotate several tensors at the same positions (a layer's
// queries and keys, the layers that share a rotation): the table of cos/sin per token and pair
// (times the magnitude scale), cs [n_tokens][rope_dims(p, head_dim)], then the rotation with it.
// The same arithmetic as rope.
int rope_dims(const RopeParams& p, int head_dim);
void rope_table(const int32_t* pos, int n_tokens, int head_dim, const RopeParams& p, float* cs);
void rope_apply(float* x, const float* cs, int n_tokens, int n_heads, int head_dim, const RopeParams& p);

}  // namespace loom::ops

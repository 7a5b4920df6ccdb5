#include "ops/ops.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <vector>

#include "base/half.h"

#include "base/simd.h"
#include "ops/vec_math.h"
#include "quant/quant.h"

namespace loom::ops {

namespace {
double sum_squares(const float* x, int64_t n) {
  if (simd_enabled()) return detail::sum_squares_simd(x, n);
  double ss = 0;  // double: rows are long and values large in some models
  for (int64_t i = 0; i < n; ++i) ss += double(x[i]) * x[i];
  return ss;
}
}  // namespace

void rms_norm_row(const float* x, const float* w, int64_t n, float eps, float* out) {
  const float inv = float(1.0 / std::sqrt(sum_squares(x, n) / double(n) + eps));
  if (simd_enabled()) {
    detail::scale_row_simd(x, w, inv, n, out);
  } else if (w) {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv;
  }
}

void rms_norm(const float* x, const float* w, int64_t n_rows, int64_t n, float eps, float* out) {
  for (int64_t r = 0; r < n_rows; ++r) rms_norm_row(x + r * n, w, n, eps, out + r * n);
}

void layer_norm_row(const float* x, const float* w, const float* b, int64_t n, float eps, float* out) {
  double mean = 0;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= double(n);
  double var = 0;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= double(n);
  const float inv = float(1.0 / std::sqrt(var + eps));
  for (int64_t i = 0; i < n; ++i) {
    float v = float(x[i] - mean) * inv;
    if (w) v *= w[i];
    if (b) v += b[i];
    out[i] = v;
  }
}

void add_bias(float* x, const float* b, int64_t n_rows, int64_t n) {
  for (int64_t r = 0; r < n_rows; ++r) add_inplace(x + r * n, b, n);
}

void softcap_inplace(float* x, float c, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = c * std::tanh(x[i] / c);
}

float gelu(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + 0.044715f * x * x)));
}

void gelu_inplace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = gelu(x[i]);
}

void geglu_inplace(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) gate[i] = gelu(gate[i]) * up[i];
}

void relu_inplace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

namespace {

// gelu(f16 value h) rounded to f16, for every h: ggml's ggml_table_gelu_f16.
const uint16_t* gelu_f16_table() {
  static const std::vector<uint16_t> table = [] {
    std::vector<uint16_t> t(1 << 16);
    for (uint32_t h = 0; h < t.size(); ++h) {
      const float x = f16_to_f32(uint16_t(h));
      t[h] = f32_to_f16(0.5f * x * (1.0f + std::tanh(0.79788456080286535587989211986876f * x * (1.0f + 0.044715f * x * x))));
    }
    return t;
  }();
  return table.data();
}

}  // namespace

void geglu_f16_table_inplace(float* gate, const float* up, int64_t n) {
  const uint16_t* table = gelu_f16_table();
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    if (x <= -10.0f) gate[i] = 0.0f;
    else if (x >= 10.0f) gate[i] = x * up[i];
    else gate[i] = f16_to_f32(table[f32_to_f16(x)]) * up[i];
  }
}

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void scale_inplace(float* x, float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

float silu(float x) {
  const float t = std::exp(-std::fabs(x));
  return std::max(x, -std::numeric_limits<float>::max()) * ((x < 0.0f ? t : 1.0f) / (1.0f + t));
}

void swiglu_inplace(float* gate, const float* up, int64_t n) {
  if (simd_enabled()) {
    detail::swiglu_simd(gate, up, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) gate[i] = silu(gate[i]) * up[i];
}

void swiglu_oai_inplace(float* gate, const float* up, int64_t n, float alpha, float limit) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    gate[i] = g / (1.0f + std::exp(-alpha * g)) * (u + 1.0f);
  }
}

float softmax_inplace(float* x, int64_t n) {
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, x[i]);
  if (mx == -std::numeric_limits<float>::infinity()) {
    std::fill(x, x + n, 0.0f);
    return mx;
  }
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float e = x[i] == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(x[i] - mx);
    x[i] = e;
    sum += e;
  }
  const float inv = float(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
  return mx;
}

void get_row(const TensorView& table, int64_t r, float* out) {
  assert(r >= 0 && r < table.rows);
  quant::dequantize_row(table.type, table.row(r), out, table.cols);
}

namespace {
// Dimension (pair index scale) at which a rotation completes n_rotations over n_ctx_orig.
double yarn_corr_dim(int n_rot, int n_ctx_orig, double n_rotations, double base) {
  return n_rot * std::log(n_ctx_orig / (n_rotations * 2 * M_PI)) / (2 * std::log(base));
}
}  // namespace

int rope_dims(const RopeParams& p, int head_dim) {
  const int n_rot = p.n_rot > 0 ? std::min(p.n_rot, head_dim) : head_dim;
  return n_rot / 2 * 2;
}

void rope_table(const int32_t* pos, int n_tokens, int head_dim, const RopeParams& p, float* cs) {
  const int n_rot = rope_dims(p, head_dim);
  const int half = n_rot / 2;
  double corr_lo = 0, corr_hi = 0;
  float mscale = p.attn_factor;
  if (p.ext_factor != 0.0f) {
    const int n_orig = p.n_ctx_orig > 0 ? p.n_ctx_orig : 4096;
    corr_lo = std::max(0.0, std::floor(yarn_corr_dim(n_rot, n_orig, p.beta_fast, p.freq_base)));
    corr_hi = std::min(double(n_rot - 1), std::ceil(yarn_corr_dim(n_rot, n_orig, p.beta_slow, p.freq_base)));
    mscale *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
  }
  // theta is formed in double so long positions keep full float precision.
  for (int t = 0; t < n_tokens; ++t) {
    float* c = cs + size_t(t) * size_t(n_rot);
    for (int i = 0; i < half; ++i) {
      double inv_freq = std::pow(double(p.freq_base), -2.0 * i / n_rot);
      if (p.freq_factors) inv_freq /= double(p.freq_factors[i]);
      const double extrap = double(pos[t]) * inv_freq;
      double theta = extrap * p.freq_scale;
      if (p.ext_factor != 0.0f) {
        const double y = (i - corr_lo) / std::max(0.001, corr_hi - corr_lo);
        const double ramp = (1.0 - std::min(1.0, std::max(0.0, y))) * p.ext_factor;
        theta = theta * (1 - ramp) + extrap * ramp;
      }
      c[2 * i] = float(std::cos(theta)) * mscale;
      c[2 * i + 1] = float(std::sin(theta)) * mscale;
    }
  }
}

void rope_apply(float* x, const float* cs, int n_tokens, int n_heads, int head_dim, const RopeParams& p) {
  const int n_rot = rope_dims(p, head_dim);
  const int half = n_rot / 2;
  for (int t = 0; t < n_tokens; ++t) {
    const float* c = cs + size_t(t) * size_t(n_rot);
    for (int h = 0; h < n_heads; ++h) {
      float* v = x + (int64_t(t) * n_heads + h) * head_dim;
      if (p.mode == RopeMode::kNormal) {
        for (int i = 0; i < half; ++i) {
          const float x0 = v[2 * i], x1 = v[2 * i + 1];
          v[2 * i] = x0 * c[2 * i] - x1 * c[2 * i + 1];
          v[2 * i + 1] = x0 * c[2 * i + 1] + x1 * c[2 * i];
        }
      } else {
        for (int i = 0; i < half; ++i) {
          const float x0 = v[i], x1 = v[i + half];
          v[i] = x0 * c[2 * i] - x1 * c[2 * i + 1];
          v[i + half] = x0 * c[2 * i + 1] + x1 * c[2 * i];
        }
      }
    }
  }
}

void rope(float* x, const int32_t* pos, int n_tokens, int n_heads, int head_dim, const RopeParams& p) {
  float cs[kMaxRopeDims];  // one token's table on the stack: no allocation on the decode path
  assert(rope_dims(p, head_dim) <= kMaxRopeDims);
  for (int t = 0; t < n_tokens; ++t) {
    rope_table(pos + t, 1, head_dim, p, cs);
    rope_apply(x + int64_t(t) * n_heads * head_dim, cs, 1, n_heads, head_dim, p);
  }
}

}  // namespace loom::ops

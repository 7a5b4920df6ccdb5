// Reference quantizers of the k-quant weight formats Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS and
// IQ4_NL, as
// llama-quantize runs them without an importance matrix. They reproduce ggml's reference
// quantizers operation for operation (float arithmetic in the same order, no FMA contraction,
// rounding to nearest even, f16 scales rounded to nearest even), so the bytes equal those of
// llama.cpp's files; tests/quant checks that on the golden models' tensors.
//
// Each super-block is fitted in two stages: every sub-block gets its own float scale (and
// minimum) from a small search, then those are quantized to 4/6/8 bits against one f16 super
// scale, and finally the elements are re-rounded against the scales actually stored.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/half.h"
#include "quant/blocks.h"
#include "quant/kernels.h"

namespace loom::quant::detail::kref {
namespace {

// Smallest group magnitude treated as nonzero (ggml's GROUP_MAX_EPS).
constexpr float kGroupEps = 1e-15f;

// Round to nearest, ties to even: ggml's nearest_int (blocks.h), also where v is out of range or
// not finite (a tiny sub-block's scale has an infinite reciprocal), so that those rows give
// ggml's bytes on every platform rather than whatever the hardware's float-to-int conversion does.
inline int rint_even(float v) { return nearest_int_ggml(v); }
inline int clampi(int v, int lo, int hi) { return std::max(lo, std::min(hi, v)); }

// Asymmetric fit of n values to levels 0..nmax: x ~ scale * L - min_out with min_out >= 0
// (the minimum is never above zero). Starting from the plain min/max grid, nstep + 1 candidate
// grids with nmax + rmin + rdelta * is steps over the range are tried; each one's weighted
// least-squares scale and offset are kept when its weighted error (absolute or squared) is lower.
float fit_affine(int n, int nmax, const float* x, const float* w, uint8_t* L, float* min_out, float rmin, float rdelta,
                 int nstep, bool abs_error) {
  float lo = x[0], hi = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (lo > 0) lo = 0;
  if (hi == lo) {
    std::fill(L, L + n, uint8_t(0));
    *min_out = -lo;
    return 0.0f;
  }
  auto err_of = [&](float s, float m, const uint8_t* q) {
    float e = 0.0f;
    for (int i = 0; i < n; ++i) {
      float diff = s * float(q[i]) + m - x[i];
      diff = abs_error ? std::fabs(diff) : diff * diff;
      e += w[i] * diff;
    }
    return e;
  };
  float iscale = float(nmax) / (hi - lo);
  float scale = 1.0f / iscale;
  float min = lo;
  for (int i = 0; i < n; ++i) L[i] = uint8_t(clampi(rint_even(iscale * (x[i] - lo)), 0, nmax));
  float best = err_of(scale, min, L);
  if (nstep < 1) {
    *min_out = -min;
    return scale;
  }
  uint8_t cand[32];
  // Note: each candidate grid is laid over [min, hi] with the best minimum found so far.
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * float(is) + float(nmax)) / (hi - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = clampi(rint_even(iscale * (x[i] - min)), 0, nmax);
      cand[i] = uint8_t(l);
      const float wl = w[i] * float(l);
      sum_l += wl;
      sum_l2 += wl * float(l);
      sum_xl += wl * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det > 0) {
      float s = (sum_w * sum_xl - sum_x * sum_l) / det;
      float m = (sum_l2 * sum_x - sum_l * sum_xl) / det;
      if (m > 0) {
        m = 0;
        s = sum_xl / sum_l2;
      }
      const float e = err_of(s, m, cand);
      if (e < best) {
        std::copy(cand, cand + n, L);
        best = e;
        scale = s;
        min = m;
      }
    }
  }
  *min_out = -min;
  return scale;
}

// The value of largest magnitude (the first one on ties), with its sign: the symmetric fits
// scale from it.
float largest_magnitude(int n, const float* x) {
  float amax = 0.0f, vmax = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      vmax = x[i];
    }
  }
  return vmax;
}

// Symmetric fit of n values to levels -nmax..nmax-1 (stored + nmax), weights x^2: the scale
// from the value of largest magnitude, then 18 nearby grids, keeping the one with the best
// weighted least-squares fit (Q6_K's sub-blocks).
float fit_symmetric(int n, int nmax, const float* x, int8_t* L) {
  const float vmax = largest_magnitude(n, x);
  if (std::fabs(vmax) < kGroupEps) {
    std::fill(L, L + n, int8_t(0));
    return 0.0f;
  }
  auto sums = [&](float iscale, float* slx, float* sl2, bool store) {
    float a = 0.0f, b = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = clampi(rint_even(iscale * x[i]), -nmax, nmax - 1);
      if (store) L[i] = int8_t(l + nmax);
      const float w = x[i] * x[i];
      a += w * x[i] * float(l);
      b += w * float(l) * float(l);
    }
    *slx = a;
    *sl2 = b;
  };
  float sumlx, suml2;
  sums(float(-nmax) / vmax, &sumlx, &suml2, true);
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    const float iscale = -(float(nmax) + 0.1f * float(is)) / vmax;
    sums(iscale, &sumlx, &suml2, false);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      sums(iscale, &sumlx, &suml2, true);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Symmetric fit for Q3_K's sub-blocks (levels -nmax..nmax-1, stored + nmax): start from the
// largest-magnitude grid, then up to 5 passes of coordinate descent moving single levels while
// the weighted (x^2) least-squares fit improves.
float fit_symmetric_descent(int n, int nmax, const float* x, int8_t* L) {
  const float vmax = largest_magnitude(n, x);
  if (std::fabs(vmax) < kGroupEps) {
    std::fill(L, L + n, int8_t(0));
    return 0.0f;
  }
  const float iscale = float(-nmax) / vmax;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = clampi(rint_even(iscale * x[i]), -nmax, nmax - 1);
    L[i] = int8_t(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * float(l);
    suml2 += w * float(l) * float(l);
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      float slx = sumlx - w * x[i] * float(L[i]);
      if (slx > 0) {
        float sl2 = suml2 - w * float(L[i]) * float(L[i]);
        const int nl = clampi(rint_even(x[i] * sl2 / slx), -nmax, nmax - 1);
        if (nl != L[i]) {
          slx += w * x[i] * float(nl);
          sl2 += w * float(nl) * float(nl);
          if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = int8_t(nl);
            sumlx = slx;
            suml2 = sl2;
            ++changed;
          }
        }
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = int8_t(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// 2-bit levels of elements e, e+32, e+64, e+96 of each 128-element half into one byte.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t* p = L + 128 * h + l;
      qs[32 * h + l] = uint8_t(p[0] | p[32] << 2 | p[64] << 4 | p[96] << 6);
    }
  }
}

void quant_q2_k(const float* x, BlockQ2_K& b) {
  uint8_t L[kSuper];
  float scales[16], mins[16], w[16];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 16; ++j) {
    for (int l = 0; l < 16; ++l) w[l] = std::fabs(x[16 * j + l]);
    scales[j] = fit_affine(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], -0.5f, 0.1f, 15, true);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  if (max_scale > 0) {
    const float is = 15.0f / max_scale;
    for (int j = 0; j < 16; ++j) b.scales[j] = uint8_t(rint_even(is * scales[j]));
    b.d = f32_to_f16(max_scale / 15.0f);
  } else {
    std::memset(b.scales, 0, 16);
    b.d = f32_to_f16(0.0f);
  }
  if (max_min > 0) {
    const float is = 15.0f / max_min;
    for (int j = 0; j < 16; ++j) b.scales[j] = uint8_t(b.scales[j] | rint_even(is * mins[j]) << 4);
    b.dmin = f32_to_f16(max_min / 15.0f);
  } else {
    b.dmin = f32_to_f16(0.0f);
  }
  for (int j = 0; j < 16; ++j) {
    const float d = f16_to_f32(b.d) * float(b.scales[j] & 0x0f);
    if (d == 0.0f) continue;
    const float dm = f16_to_f32(b.dmin) * float(b.scales[j] >> 4);
    for (int l = 0; l < 16; ++l) {
      L[16 * j + l] = uint8_t(clampi(rint_even((x[16 * j + l] + dm) / d), 0, 3));
    }
  }
  pack_2bit(L, b.qs);
}

void quant_q3_k(const float* x, BlockQ3_K& b) {
  int8_t L[kSuper];
  float scales[16];
  float amax = 0.0f, max_scale = 0.0f;
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit_symmetric_descent(16, 4, x + 16 * j, L + 16 * j);
    if (std::fabs(scales[j]) > amax) {
      amax = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  std::memset(b.scales, 0, 12);
  if (max_scale != 0.0f) {
    const float is = -32.0f / max_scale;
    for (int j = 0; j < 16; ++j) {
      const int8_t q = int8_t(rint_even(is * scales[j]));
      const int l = clampi(q, -32, 31) + 32;
      if (j < 8) b.scales[j] = uint8_t(l & 0x0f);
      else b.scales[j - 8] = uint8_t(b.scales[j - 8] | (l & 0x0f) << 4);
      b.scales[8 + j % 4] = uint8_t(b.scales[8 + j % 4] | (l >> 4) << (2 * (j / 4)));
    }
    b.d = f32_to_f16(1.0f / is);
  } else {
    b.d = f32_to_f16(0.0f);
  }
  for (int j = 0; j < 16; ++j) {
    const float d = f16_to_f32(b.d) * float(q3k_scale(b.scales, j) - 32);
    if (d == 0.0f) continue;
    for (int l = 0; l < 16; ++l) L[16 * j + l] = int8_t(clampi(rint_even(x[16 * j + l] / d), -4, 3) + 4);
  }
  // Level bit 2 goes to hmask: element e sets bit e / 32 of byte e % 32.
  std::memset(b.hmask, 0, 32);
  uint8_t low[kSuper];
  for (int e = 0; e < kSuper; ++e) {
    int l = L[e];
    if (l > 3) {
      b.hmask[e % 32] = uint8_t(b.hmask[e % 32] | 1 << (e / 32));
      l -= 4;
    }
    low[e] = uint8_t(l);
  }
  pack_2bit(low, b.qs);
}

// Q4_K / Q5_K: 8 sub-blocks of 32 with 6-bit scales and mins.
void pack_k4_scales(const uint8_t* ls, const uint8_t* lm, uint8_t* s) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      s[j] = ls[j];
      s[j + 4] = lm[j];
    } else {
      s[j + 4] = uint8_t((ls[j] & 0x0f) | (lm[j] & 0x0f) << 4);
      s[j - 4] = uint8_t(s[j - 4] | (ls[j] >> 4) << 6);
      s[j] = uint8_t(s[j] | (lm[j] >> 4) << 6);
    }
  }
}

// Shared by Q4_K (nmax 15) and Q5_K (nmax 31): returns the levels (0..nmax) in L.
void quant_q45_k(const float* x, int nmax, float rmin, int nstep, uint16_t* d_out, uint16_t* dmin_out, uint8_t* scales_out,
                 uint8_t* L) {
  float scales[8], mins[8], w[32];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0.0f;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32.0f);
    for (int l = 0; l < 32; ++l) w[l] = av_x + std::fabs(xs[l]);
    scales[j] = fit_affine(32, nmax, xs, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = std::min<uint8_t>(63, uint8_t(rint_even(inv_scale * scales[j])));
    lm[j] = std::min<uint8_t>(63, uint8_t(rint_even(inv_min * mins[j])));
  }
  pack_k4_scales(ls, lm, scales_out);
  *d_out = f32_to_f16(max_scale / 63.0f);
  *dmin_out = f32_to_f16(max_min / 63.0f);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    k4_scale_min(scales_out, j, &sc, &m);
    const float d = f16_to_f32(*d_out) * float(sc);
    if (d == 0.0f) continue;
    const float dm = f16_to_f32(*dmin_out) * float(m);
    for (int l = 0; l < 32; ++l) {
      L[32 * j + l] = uint8_t(clampi(rint_even((x[32 * j + l] + dm) / d), 0, nmax));
    }
  }
}

void quant_q4_k(const float* x, BlockQ4_K& b) {
  uint8_t L[kSuper];
  quant_q45_k(x, 15, -1.0f, 20, &b.d, &b.dmin, b.scales, L);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) b.qs[32 * c + l] = uint8_t(L[64 * c + l] | L[64 * c + 32 + l] << 4);
  }
}

void quant_q5_k(const float* x, BlockQ5_K& b) {
  uint8_t L[kSuper];
  quant_q45_k(x, 31, -0.5f, 15, &b.d, &b.dmin, b.scales, L);
  std::memset(b.qh, 0, 32);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int lo = L[64 * c + l], hi = L[64 * c + 32 + l];
      b.qh[l] = uint8_t(b.qh[l] | (lo >> 4) << (2 * c) | (hi >> 4) << (2 * c + 1));
      b.qs[32 * c + l] = uint8_t((lo & 0x0f) | (hi & 0x0f) << 4);
    }
  }
}

void quant_q6_k(const float* x, BlockQ6_K& b) {
  int8_t L[kSuper];
  float scales[16];
  float amax = 0.0f, max_scale = 0.0f;
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit_symmetric(16, 32, x + 16 * j, L + 16 * j);
    if (std::fabs(scales[j]) > amax) {
      amax = std::fabs(scales[j]);
      max_scale = scales[j];
    }
  }
  if (amax < kGroupEps) {
    std::memset(&b, 0, sizeof(b));
    return;
  }
  const float is = -128.0f / max_scale;
  b.d = f32_to_f16(1.0f / is);
  for (int j = 0; j < 16; ++j) b.scales[j] = int8_t(std::min(127, rint_even(is * scales[j])));
  for (int j = 0; j < 16; ++j) {
    const float d = f16_to_f32(b.d) * float(b.scales[j]);
    if (d == 0.0f) continue;
    for (int l = 0; l < 16; ++l) L[16 * j + l] = int8_t(clampi(rint_even(x[16 * j + l] / d), -32, 31) + 32);
  }
  for (int h = 0; h < 2; ++h) {
    uint8_t* ql = b.ql + 64 * h;
    uint8_t* qh = b.qh + 32 * h;
    const int8_t* p = L + 128 * h;
    for (int l = 0; l < 32; ++l) {
      ql[l] = uint8_t((p[l] & 0x0f) | (p[l + 64] & 0x0f) << 4);
      ql[l + 32] = uint8_t((p[l + 32] & 0x0f) | (p[l + 96] & 0x0f) << 4);
      qh[l] = uint8_t(p[l] >> 4 | (p[l + 32] >> 4) << 2 | (p[l + 64] >> 4) << 4 | (p[l + 96] >> 4) << 6);
    }
  }
}

// ---- IQ4_NL / IQ4_XS ------------------------------------------------------------------------

// Index of the IQ4_NL level nearest to v (the lower one unless the upper is strictly nearer).
int nearest_iq4_level(float v) {
  const int8_t* t = kIq4nlValues;
  if (v <= float(t[0])) return 0;
  if (v >= float(t[15])) return 15;
  int lo = 0, hi = 15;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (v < float(t[mid])) hi = mid;
    else lo = mid;
  }
  return v - float(t[hi - 1]) < float(t[hi]) - v ? hi - 1 : hi;
}

// Best scale of one 32-element group on the non-linear grid, weights x^2: starting from
// the value of largest magnitude mapped onto -127 (the first level), then 15 nearby grids
// (first level -127 + k, k = -7..7); returns 0 for an all-zero group.
float fit_iq4_group(const float* x) {
  float amax = 0.0f, vmax = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      vmax = x[j];
    }
  }
  if (amax < kGroupEps) return 0.0f;
  const float first = float(kIq4nlValues[0]);
  auto sums = [&](float id, float* sqx, float* sq2) {
    float a = 0.0f, b = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float q = float(kIq4nlValues[nearest_iq4_level(id * x[j])]);
      const float w = x[j] * x[j];
      a += w * q * x[j];
      b += w * q * q;
    }
    *sqx = a;
    *sq2 = b;
  };
  float sumqx, sumq2;
  sums(1.0f / (-vmax / first), &sumqx, &sumq2);
  float d = sumq2 > 0 ? sumqx / sumq2 : 0.0f;
  float best = d * sumqx;
  for (int k = -7; k <= 7; ++k) {
    sums(float(k + kIq4nlValues[0]) / vmax, &sumqx, &sumq2);
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

void pack_iq4_nibbles(const uint8_t* L, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = uint8_t(L[j] | L[16 + j] << 4);
}

void quant_iq4_nl(const float* x, BlockIQ4_NL& b) {
  const float d = fit_iq4_group(x);
  b.d = f32_to_f16(d);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;  // with the f32 scale, as ggml
  uint8_t L[32];
  for (int j = 0; j < 32; ++j) L[j] = uint8_t(nearest_iq4_level(id * x[j]));
  pack_iq4_nibbles(L, b.qs);
}

void quant_iq4_xs(const float* x, BlockIQ4_XS& b) {
  float scales[8];
  float amax = 0.0f, max_scale = 0.0f;
  for (int s = 0; s < 8; ++s) {
    scales[s] = fit_iq4_group(x + 32 * s);
    if (std::fabs(scales[s]) > amax) {
      amax = std::fabs(scales[s]);
      max_scale = scales[s];
    }
  }
  const float d = -max_scale / 32.0f;
  b.d = f32_to_f16(d);
  b.scales_h = 0;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int s = 0; s < 8; ++s) {
    int l = clampi(rint_even(id * scales[s]), -32, 31);
    const float dl = d * float(l);
    const float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
    uint8_t L[32];
    for (int j = 0; j < 32; ++j) L[j] = uint8_t(nearest_iq4_level(idl * x[32 * s + j]));
    pack_iq4_nibbles(L, b.qs + 16 * s);
    l += 32;
    if (s % 2 == 0) b.scales_l[s / 2] = uint8_t(l & 0x0f);
    else b.scales_l[s / 2] = uint8_t(b.scales_l[s / 2] | (l & 0x0f) << 4);
    b.scales_h = uint16_t(b.scales_h | (l >> 4) << (2 * s));
  }
}

template <class Block, int kN, void (*Quant)(const float*, Block&)>
void quant_blocks(const float* src, void* dst, int64_t nb) {
  float x[kN];
  for (int64_t i = 0; i < nb; ++i) {
    for (int j = 0; j < kN; ++j) x[j] = load_f32(src + i * kN, j);
    Block b;
    std::memset(&b, 0, sizeof(b));
    Quant(x, b);
    store_block(dst, i, b);
  }
}

}  // namespace
}  // namespace loom::quant::detail::kref

// ---- the weight quantizers' entry points (kernels.h), n elements ------------------------------

namespace loom::quant::detail::scalar {

#define LOOM_WEIGHT_QUANT(t, Block, block, fn)                       \
  void quantize_##t(const float* src, void* dst, int64_t n) {        \
    kref::quant_blocks<Block, block, kref::fn>(src, dst, n / block); \
  }
LOOM_WEIGHT_QUANT(q2_k, BlockQ2_K, kSuper, quant_q2_k)
LOOM_WEIGHT_QUANT(q3_k, BlockQ3_K, kSuper, quant_q3_k)
LOOM_WEIGHT_QUANT(q4_k, BlockQ4_K, kSuper, quant_q4_k)
LOOM_WEIGHT_QUANT(q5_k, BlockQ5_K, kSuper, quant_q5_k)
LOOM_WEIGHT_QUANT(q6_k, BlockQ6_K, kSuper, quant_q6_k)
LOOM_WEIGHT_QUANT(iq4_xs, BlockIQ4_XS, kSuper, quant_iq4_xs)
LOOM_WEIGHT_QUANT(iq4_nl, BlockIQ4_NL, kBlock, quant_iq4_nl)
#undef LOOM_WEIGHT_QUANT

}  // namespace loom::quant::detail::scalar

// Scalar references of the super-block formats (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS weights,
// Q8_K activations) and of IQ4_NL. Layouts: blocks.h.
//
// Every weight super-block is first decoded into 256 integer levels plus 16 integer scales and
// mins (one per 16 elements; formats with 32-element sub-blocks repeat theirs). Then
//   dequantization: x = (d * scale) * level - (dmin * min)   (float ops in ggml's order, no FMA)
//   dot with Q8_K:  d_a * d * sum_s scale_s * sum_{e in s} level_e a_e
//                   - d_a * dmin * sum_s min_s * bsums_s       (integer sums are exact)
// so both paths share one decoder per format.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/half.h"
#include "quant/blocks.h"
#include "quant/kernels.h"

namespace loom::quant::detail::kref {
namespace {

struct Decoded {
  int q[kSuper];
  int scale[16];
  int min[16];
  float d;
  float dmin;
  bool has_min;
};

void decode_q2_k(const BlockQ2_K& b, Decoded& o) {
  for (int h = 0; h < 2; ++h) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) o.q[128 * h + 32 * j + l] = (b.qs[32 * h + l] >> (2 * j)) & 3;
    }
  }
  for (int s = 0; s < 16; ++s) {
    o.scale[s] = b.scales[s] & 0x0f;
    o.min[s] = b.scales[s] >> 4;
  }
  o.d = f16_to_f32(b.d);
  o.dmin = f16_to_f32(b.dmin);
  o.has_min = true;
}

void decode_q3_k(const BlockQ3_K& b, Decoded& o) {
  for (int h = 0; h < 2; ++h) {
    for (int j = 0; j < 4; ++j) {
      for (int l = 0; l < 32; ++l) {
        const int low = (b.qs[32 * h + l] >> (2 * j)) & 3;
        const int high = (b.hmask[l] >> (4 * h + j)) & 1;
        o.q[128 * h + 32 * j + l] = low + 4 * high - 4;
      }
    }
  }
  for (int s = 0; s < 16; ++s) {
    o.scale[s] = q3k_scale(b.scales, s) - 32;
    o.min[s] = 0;
  }
  o.d = f16_to_f32(b.d);
  o.dmin = 0.0f;
  o.has_min = false;
}

// Q4_K and Q5_K share everything but the 5th bit (qh == nullptr for Q4_K).
void decode_q45_k(uint16_t d, uint16_t dmin, const uint8_t* scales, const uint8_t* qh, const uint8_t* qs, Decoded& o) {
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      int lo = qs[32 * c + l] & 0x0f, hi = qs[32 * c + l] >> 4;
      if (qh) {
        lo |= ((qh[l] >> (2 * c)) & 1) << 4;
        hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
      }
      o.q[64 * c + l] = lo;
      o.q[64 * c + 32 + l] = hi;
    }
  }
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    k4_scale_min(scales, j, &sc, &m);
    o.scale[2 * j] = o.scale[2 * j + 1] = sc;
    o.min[2 * j] = o.min[2 * j + 1] = m;
  }
  o.d = f16_to_f32(d);
  o.dmin = f16_to_f32(dmin);
  o.has_min = true;
}

void decode_q6_k(const BlockQ6_K& b, Decoded& o) {
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    int* q = o.q + 128 * h;
    for (int l = 0; l < 32; ++l) {
      q[l] = ((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4) - 32;
      q[l + 32] = ((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) - 32;
      q[l + 64] = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
      q[l + 96] = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
    }
  }
  for (int s = 0; s < 16; ++s) {
    o.scale[s] = b.scales[s];
    o.min[s] = 0;
  }
  o.d = f16_to_f32(b.d);
  o.dmin = 0.0f;
  o.has_min = false;
}

void decode_iq4_xs(const BlockIQ4_XS& b, Decoded& o) {
  for (int s = 0; s < 8; ++s) {
    const uint8_t* qs = b.qs + 16 * s;
    for (int l = 0; l < 16; ++l) {
      o.q[32 * s + l] = kIq4nlValues[qs[l] & 0x0f];
      o.q[32 * s + 16 + l] = kIq4nlValues[qs[l] >> 4];
    }
    o.scale[2 * s] = o.scale[2 * s + 1] = iq4xs_scale(b.scales_l, b.scales_h, s) - 32;
    o.min[2 * s] = o.min[2 * s + 1] = 0;
  }
  o.d = f16_to_f32(b.d);
  o.dmin = 0.0f;
  o.has_min = false;
}

// Q8_K as a weight (not produced for models, but dequantizable): scale 1, so d * 1 = d exactly.
void decode_q8_k(const BlockQ8_K& b, Decoded& o) {
  for (int e = 0; e < kSuper; ++e) o.q[e] = b.qs[e];
  for (int s = 0; s < 16; ++s) {
    o.scale[s] = 1;
    o.min[s] = 0;
  }
  o.d = b.d;
  o.dmin = 0.0f;
  o.has_min = false;
}

template <class Block>
Block block_at(const void* row, int64_t i) {
  return load_block<Block>(row, i);
}

// Decoders of super-block i of a row, one per format.
void decode_q2_k_at(const void* row, int64_t i, Decoded& o) { decode_q2_k(block_at<BlockQ2_K>(row, i), o); }
void decode_q3_k_at(const void* row, int64_t i, Decoded& o) { decode_q3_k(block_at<BlockQ3_K>(row, i), o); }
void decode_q4_k_at(const void* row, int64_t i, Decoded& o) {
  const auto b = block_at<BlockQ4_K>(row, i);
  decode_q45_k(b.d, b.dmin, b.scales, nullptr, b.qs, o);
}
void decode_q5_k_at(const void* row, int64_t i, Decoded& o) {
  const auto b = block_at<BlockQ5_K>(row, i);
  decode_q45_k(b.d, b.dmin, b.scales, b.qh, b.qs, o);
}
void decode_q6_k_at(const void* row, int64_t i, Decoded& o) { decode_q6_k(block_at<BlockQ6_K>(row, i), o); }
void decode_iq4_xs_at(const void* row, int64_t i, Decoded& o) { decode_iq4_xs(block_at<BlockIQ4_XS>(row, i), o); }
void decode_q8_k_at(const void* row, int64_t i, Decoded& o) { decode_q8_k(block_at<BlockQ8_K>(row, i), o); }

using DecodeFn = void (*)(const void* row, int64_t i, Decoded& o);

void dequant_iq4_nl(const void* src, float* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const auto b = load_block<BlockIQ4_NL>(src, i);
    const float d = f16_to_f32(b.d);
    float* y = dst + i * kBlock;
    for (int j = 0; j < 16; ++j) {
      store_f32(y, j, d * float(kIq4nlValues[b.qs[j] & 0x0f]));
      store_f32(y, j + 16, d * float(kIq4nlValues[b.qs[j] >> 4]));
    }
  }
}

// Q8_K activation quantization: scale from the element of largest magnitude (the first one on
// ties; NaNs are skipped) with its sign, so that it maps to -127; round to nearest even (ggml's
// nearest_int); bsums of each 16 values.
void quant_q8_k(const float* src, void* dst, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * kSuper;
    BlockQ8_K b;
    float amax = 0.0f, vmax = 0.0f;
    for (int j = 0; j < kSuper; ++j) {
      const float v = load_f32(x, j);
      if (std::fabs(v) > amax) {
        amax = std::fabs(v);
        vmax = v;
      }
    }
    if (amax == 0.0f) {
      b.d = 0.0f;
      std::memset(b.qs, 0, sizeof(b.qs));
      std::memset(b.bsums, 0, sizeof(b.bsums));
    } else {
      const float iscale = -127.0f / vmax;
      for (int j = 0; j < kSuper; ++j) {
        // Levels are at most 127 in magnitude (ggml clamps at 127). The clamps are written so
        // that inputs ggml leaves undefined (NaN, inf, a scale overflowing on subnormals) give
        // the same bytes as the AVX2 kernel: NaN and +inf -> 127, -inf -> -128.
        const float r = std::nearbyint(iscale * load_f32(x, j));
        b.qs[j] = int8_t(!(r < 127.0f) ? 127 : r > -128.0f ? int(r) : -128);
      }
      for (int k = 0; k < 16; ++k) {
        int s = 0;
        for (int j = 0; j < 16; ++j) s += b.qs[16 * k + j];
        b.bsums[k] = int16_t(s);
      }
      b.d = 1.0f / iscale;
    }
    store_block(dst, i, b);
  }
}

float dot_iq4_nl(int64_t nb, const void* w, const void* a) {
  float sum = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    const auto bw = load_block<BlockIQ4_NL>(w, i);
    const auto ba = load_block<BlockQ8_0>(a, i);
    int s = 0;
    for (int j = 0; j < 16; ++j) {
      s += kIq4nlValues[bw.qs[j] & 0x0f] * ba.qs[j] + kIq4nlValues[bw.qs[j] >> 4] * ba.qs[j + 16];
    }
    sum += float(s) * (f16_to_f32(bw.d) * f16_to_f32(ba.d));
  }
  return sum;
}

template <DecodeFn decode>
void dequantize_super(const void* src, float* dst, int64_t nb) {
  Decoded o;
  for (int64_t i = 0; i < nb; ++i) {
    decode(src, i, o);
    float* y = dst + i * kSuper;
    for (int s = 0; s < 16; ++s) {
      const float dl = o.d * float(o.scale[s]);
      const float ml = o.dmin * float(o.min[s]);
      for (int l = 0; l < 16; ++l) {
        const int e = 16 * s + l;
        const float v = dl * float(o.q[e]);
        store_f32(y, e, o.has_min ? v - ml : v);
      }
    }
  }
}

template <DecodeFn decode>
float vec_dot_super(int64_t nb, const void* w, const void* a) {
  float sum = 0.0f;
  Decoded o;
  for (int64_t i = 0; i < nb; ++i) {
    decode(w, i, o);
    const auto ba = load_block<BlockQ8_K>(a, i);
    int isum = 0, msum = 0;
    for (int s = 0; s < 16; ++s) {
      int p = 0;
      for (int l = 0; l < 16; ++l) p += o.q[16 * s + l] * ba.qs[16 * s + l];
      isum += o.scale[s] * p;
      msum += o.min[s] * ba.bsums[s];
    }
    sum += (ba.d * o.d) * float(isum);
    if (o.has_min) sum -= (ba.d * o.dmin) * float(msum);
  }
  return sum;
}

}  // namespace
}  // namespace loom::quant::detail::kref

// ---- one entry point per type and operation (kernels.h), n elements -------------------------

namespace loom::quant::detail::scalar {

#define LOOM_SUPER_ROWS(t)                                               \
  void dequantize_##t(const void* src, float* dst, int64_t n) {          \
    kref::dequantize_super<kref::decode_##t##_at>(src, dst, n / kSuper); \
  }                                                                      \
  float vec_dot_##t(int64_t n, const void* w, const void* a) {           \
    return kref::vec_dot_super<kref::decode_##t##_at>(n / kSuper, w, a); \
  }
LOOM_SUPER_ROWS(q2_k)
LOOM_SUPER_ROWS(q3_k)
LOOM_SUPER_ROWS(q4_k)
LOOM_SUPER_ROWS(q5_k)
LOOM_SUPER_ROWS(q6_k)
LOOM_SUPER_ROWS(iq4_xs)
LOOM_SUPER_ROWS(q8_k)
#undef LOOM_SUPER_ROWS

void quantize_q8_k(const float* src, void* dst, int64_t n) { kref::quant_q8_k(src, dst, n / kSuper); }

void dequantize_iq4_nl(const void* src, float* dst, int64_t n) { kref::dequant_iq4_nl(src, dst, n / kBlock); }
float vec_dot_iq4_nl(int64_t n, const void* w, const void* a) { return kref::dot_iq4_nl(n / kBlock, w, a); }

}  // namespace loom::quant::detail::scalar

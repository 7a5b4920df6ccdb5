// Scalar references of the IQ1/IQ2/IQ3 formats (layouts and formulas: iq_ref.h).
//
// Each block is decoded into 256 signed integer levels (grid level with its sign; IQ1: the grid's
// -1/0/1), one scale field s per group of 8 elements and, for IQ1, one delta sign per group.
// Dequantization and the dot product then apply the format's float formula:
//   dequantize  x = db * level (db = d * (0.5 + s) * 1/4, d * (0.5 + s) * 1/2 or d * (1 + 2 s),
//               multiplied in that order; multiplying by the signed level equals ggml's
//               db * |level| * (+-1) bit for bit, -0 included), IQ1: x = dl * (level + delta).
//   dot         exact integer sums of level * activation weighted by 2 s + 1, one float
//               multiply-add per block with (d * d_a), the row's factor at the end.
#include "quant/iq_ref.h"

#include <cstring>

#include "base/half.h"
#include "quant/blocks.h"
#include "quant/iq_grids.h"

namespace loom::quant {
namespace {

using detail::BlockQ8_K;
using detail::load_block;
using detail::store_f32;
using namespace iq;

constexpr int kGroups = kSuperIq / 8;

struct Decoded {
  int8_t q[kSuperIq];
  uint8_t s[kGroups];     // scale field of each group of 8 elements
  int8_t delta[kGroups];  // IQ1: +1 or -1 per group
  uint16_t d;             // f16 block scale
};

// 8 levels of a grid entry with sign bits applied (bit j set: element j negated).
inline void put_signed(int8_t* q, uint64_t entry, uint8_t signs) {
  for (int j = 0; j < 8; ++j) {
    const int v = int((entry >> (8 * j)) & 0xff);
    q[j] = int8_t((signs >> j) & 1 ? -v : v);
  }
}
inline void put_signed4(int8_t* q, uint32_t entry, uint8_t signs) {
  for (int j = 0; j < 4; ++j) {
    const int v = int((entry >> (8 * j)) & 0xff);
    q[j] = int8_t((signs >> j) & 1 ? -v : v);
  }
}
inline uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void decode_iq2_xxs(const uint8_t* blk, Decoded& o) {
  const auto b = load_block<BlockIQ2_XXS>(blk, 0);
  const auto* qs = reinterpret_cast<const uint8_t*>(b.qs);
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t v = u32_at(qs + 8 * ib + 4);
    for (int l = 0; l < 4; ++l) {
      put_signed(o.q + 32 * ib + 8 * l, kIq2xxsGrid[qs[8 * ib + l]], kSignsIq2xs.v[(v >> (7 * l)) & 127]);
      o.s[4 * ib + l] = uint8_t(v >> 28);
    }
  }
  o.d = b.d;
}

void decode_iq2_xs(const uint8_t* blk, Decoded& o) {
  const auto b = load_block<BlockIQ2_XS>(blk, 0);
  for (int ib = 0; ib < 8; ++ib) {
    for (int l = 0; l < 4; ++l) {
      const uint16_t v = b.qs[4 * ib + l];
      put_signed(o.q + 32 * ib + 8 * l, kIq2xsGrid[v & 511], kSignsIq2xs.v[v >> 9]);
      o.s[4 * ib + l] = uint8_t(l < 2 ? b.scales[ib] & 0x0f : b.scales[ib] >> 4);
    }
  }
  o.d = b.d;
}

void decode_iq2_s(const uint8_t* blk, Decoded& o) {
  const auto b = load_block<BlockIQ2_S>(blk, 0);
  for (int ib = 0; ib < 8; ++ib) {
    for (int l = 0; l < 4; ++l) {
      const int idx = b.qs[4 * ib + l] | ((b.qh[ib] >> (2 * l)) & 3) << 8;
      put_signed(o.q + 32 * ib + 8 * l, kIq2sGrid[idx], b.qs[32 + 4 * ib + l]);
      o.s[4 * ib + l] = uint8_t(l < 2 ? b.scales[ib] & 0x0f : b.scales[ib] >> 4);
    }
  }
  o.d = b.d;
}

void decode_iq3_xxs(const uint8_t* blk, Decoded& o) {
  const auto b = load_block<BlockIQ3_XXS>(blk, 0);
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t v = u32_at(b.qs + 64 + 4 * ib);
    for (int l = 0; l < 4; ++l) {
      const uint8_t signs = kSignsIq2xs.v[(v >> (7 * l)) & 127];
      int8_t* q = o.q + 32 * ib + 8 * l;
      put_signed4(q, kIq3xxsGrid[b.qs[8 * ib + 2 * l]], signs);
      put_signed4(q + 4, kIq3xxsGrid[b.qs[8 * ib + 2 * l + 1]], uint8_t(signs >> 4));
      o.s[4 * ib + l] = uint8_t(v >> 28);
    }
  }
  o.d = b.d;
}

void decode_iq3_s(const uint8_t* blk, Decoded& o) {
  const auto b = load_block<BlockIQ3_S>(blk, 0);
  for (int ib = 0; ib < 8; ++ib) {
    const int s = (b.scales[ib / 2] >> (4 * (ib % 2))) & 0x0f;
    for (int l = 0; l < 4; ++l) {
      const int k0 = 2 * l, k1 = 2 * l + 1;
      const int i0 = b.qs[8 * ib + k0] | ((b.qh[ib] >> k0) & 1) << 8;
      const int i1 = b.qs[8 * ib + k1] | ((b.qh[ib] >> k1) & 1) << 8;
      const uint8_t signs = b.signs[4 * ib + l];
      int8_t* q = o.q + 32 * ib + 8 * l;
      put_signed4(q, kIq3sGrid[i0], signs);
      put_signed4(q + 4, kIq3sGrid[i1], uint8_t(signs >> 4));
      o.s[4 * ib + l] = uint8_t(s);
    }
  }
  o.d = b.d;
}

void decode_iq1_s(const uint8_t* blk, Decoded& o) {
  const auto b = load_block<BlockIQ1_S>(blk, 0);
  for (int ib = 0; ib < 8; ++ib) {
    const uint16_t h = b.qh[ib];
    for (int l = 0; l < 4; ++l) {
      const int idx = b.qs[4 * ib + l] | ((h >> (3 * l)) & 7) << 8;
      put_signed(o.q + 32 * ib + 8 * l, kIq1sGrid[idx], 0);
      o.s[4 * ib + l] = uint8_t((h >> 12) & 7);
      o.delta[4 * ib + l] = int8_t(h & 0x8000 ? -1 : 1);
    }
  }
  o.d = b.d;
}

void decode_iq1_m(const uint8_t* blk, Decoded& o) {
  const auto b = load_block<BlockIQ1_M>(blk, 0);
  uint16_t sc[4];
  std::memcpy(sc, b.scales, 8);
  for (int ib = 0; ib < 8; ++ib) {
    for (int l = 0; l < 4; ++l) {
      const uint8_t h = b.qh[2 * ib + l / 2];
      const int hn = l % 2 ? h >> 4 : h & 0x0f;  // 3 index bits, then the delta bit
      put_signed(o.q + 32 * ib + 8 * l, kIq1sGrid[b.qs[4 * ib + l] | (hn & 7) << 8], 0);
      o.s[4 * ib + l] = uint8_t((sc[ib / 2] >> (6 * (ib % 2) + 3 * (l / 2))) & 7);
      o.delta[4 * ib + l] = int8_t(hn & 8 ? -1 : 1);
    }
  }
  o.d = iq1m_d_bits(b.scales);
}

// How a format turns (d, s) into the float scale of a group, and its dot's final factor.
enum class Kind { kIq2, kIq3xxs, kIq3s, kIq1 };

template <Kind K>
inline float group_scale(float d, int s) {
  if constexpr (K == Kind::kIq2) return d * (0.5f + float(s)) * 0.25f;
  if constexpr (K == Kind::kIq3xxs) return d * (0.5f + float(s)) * 0.5f;
  return d * float(1 + 2 * s);  // IQ3_S; IQ1's dl
}

template <Kind K, int kBytes, void (*Decode)(const uint8_t*, Decoded&)>
void dequantize(const void* src, float* dst, int64_t n) {
  const int64_t nb = n / kSuperIq;
  Decoded o;
  for (int64_t i = 0; i < nb; ++i) {
    Decode(static_cast<const uint8_t*>(src) + i * kBytes, o);
    const float d = f16_to_f32(o.d);
    float* y = dst + i * kSuperIq;
    for (int g = 0; g < kGroups; ++g) {
      const float db = group_scale<K>(d, o.s[g]);
      for (int j = 0; j < 8; ++j) {
        const int e = 8 * g + j;
        if constexpr (K == Kind::kIq1) {
          const float delta = o.delta[g] < 0 ? -kIq1sDelta : kIq1sDelta;  // = kIq1mDelta
          store_f32(y, e, db * (float(o.q[e]) + delta));
        } else {
          store_f32(y, e, db * float(o.q[e]));
        }
      }
    }
  }
}

template <Kind K, int kBytes, void (*Decode)(const uint8_t*, Decoded&), bool kDeltaFromBsums>
float vec_dot(int64_t n, const void* w, const void* a) {
  static_assert(sizeof(BlockQ8_K) == 292);
  const int64_t nb = n / kSuperIq;
  Decoded o;
  float sumf = 0.0f;
  for (int64_t i = 0; i < nb; ++i) {
    Decode(static_cast<const uint8_t*>(w) + i * kBytes, o);
    const auto y = load_block<BlockQ8_K>(a, i);
    int32_t isum = 0, isum_delta = 0;
    for (int g = 0; g < kGroups; ++g) {
      const int ls = 2 * o.s[g] + 1;
      int32_t dot = 0, sum_a = 0;
      for (int j = 0; j < 8; ++j) {
        dot += int32_t(o.q[8 * g + j]) * y.qs[8 * g + j];
        if constexpr (K == Kind::kIq1) sum_a += y.qs[8 * g + j];
      }
      isum += ls * dot;
      if constexpr (K == Kind::kIq1 && !kDeltaFromBsums) isum_delta += ls * o.delta[g] * sum_a;
    }
    if constexpr (K == Kind::kIq1) {
      // IQ1_S: ggml weights the activations' bsums (one per 16 elements) by the sub-block's
      // scale and delta sign; IQ1_M (above) sums the activations of each group itself.
      if constexpr (kDeltaFromBsums) {
        for (int ib = 0; ib < 8; ++ib) {
          const int ls = 2 * o.s[4 * ib] + 1;
          isum_delta += ls * o.delta[4 * ib] * (y.bsums[2 * ib] + y.bsums[2 * ib + 1]);
        }
      }
      sumf += f16_to_f32(o.d) * y.d * (float(isum) + kIq1sDelta * float(isum_delta));
    } else {
      const float d = f16_to_f32(o.d) * y.d;
      sumf += d * float(isum);
    }
  }
  if constexpr (K == Kind::kIq2) return 0.125f * sumf;
  if constexpr (K == Kind::kIq3xxs) return 0.25f * sumf;
  return sumf;
}

}  // namespace

namespace ref {

void dequantize_row_iq2_xxs(const void* src, float* dst, int64_t n) {
  dequantize<Kind::kIq2, sizeof(BlockIQ2_XXS), decode_iq2_xxs>(src, dst, n);
}
void dequantize_row_iq2_xs(const void* src, float* dst, int64_t n) {
  dequantize<Kind::kIq2, sizeof(BlockIQ2_XS), decode_iq2_xs>(src, dst, n);
}
void dequantize_row_iq2_s(const void* src, float* dst, int64_t n) {
  dequantize<Kind::kIq2, sizeof(BlockIQ2_S), decode_iq2_s>(src, dst, n);
}
void dequantize_row_iq3_xxs(const void* src, float* dst, int64_t n) {
  dequantize<Kind::kIq3xxs, sizeof(BlockIQ3_XXS), decode_iq3_xxs>(src, dst, n);
}
void dequantize_row_iq3_s(const void* src, float* dst, int64_t n) {
  dequantize<Kind::kIq3s, sizeof(BlockIQ3_S), decode_iq3_s>(src, dst, n);
}
void dequantize_row_iq1_s(const void* src, float* dst, int64_t n) {
  dequantize<Kind::kIq1, sizeof(BlockIQ1_S), decode_iq1_s>(src, dst, n);
}
void dequantize_row_iq1_m(const void* src, float* dst, int64_t n) {
  dequantize<Kind::kIq1, sizeof(BlockIQ1_M), decode_iq1_m>(src, dst, n);
}

float vec_dot_iq2_xxs_q8_k(int64_t n, const void* w, const void* a) {
  return vec_dot<Kind::kIq2, sizeof(BlockIQ2_XXS), decode_iq2_xxs, false>(n, w, a);
}
float vec_dot_iq2_xs_q8_k(int64_t n, const void* w, const void* a) {
  return vec_dot<Kind::kIq2, sizeof(BlockIQ2_XS), decode_iq2_xs, false>(n, w, a);
}
float vec_dot_iq2_s_q8_k(int64_t n, const void* w, const void* a) {
  return vec_dot<Kind::kIq2, sizeof(BlockIQ2_S), decode_iq2_s, false>(n, w, a);
}
float vec_dot_iq3_xxs_q8_k(int64_t n, const void* w, const void* a) {
  return vec_dot<Kind::kIq3xxs, sizeof(BlockIQ3_XXS), decode_iq3_xxs, false>(n, w, a);
}
float vec_dot_iq3_s_q8_k(int64_t n, const void* w, const void* a) {
  return vec_dot<Kind::kIq3s, sizeof(BlockIQ3_S), decode_iq3_s, false>(n, w, a);
}
float vec_dot_iq1_s_q8_k(int64_t n, const void* w, const void* a) {
  return vec_dot<Kind::kIq1, sizeof(BlockIQ1_S), decode_iq1_s, true>(n, w, a);
}
float vec_dot_iq1_m_q8_k(int64_t n, const void* w, const void* a) {
  return vec_dot<Kind::kIq1, sizeof(BlockIQ1_M), decode_iq1_m, false>(n, w, a);
}

}  // namespace ref
}  // namespace loom::quant

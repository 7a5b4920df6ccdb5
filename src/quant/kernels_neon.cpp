// AArch64 int8 dot products with the ARMv8.2 dotprod instruction (SDOT: four int8 products
// summed into each int32 lane, vdotq_s32): Q4_0, Q5_0, Q8_0, IQ4_NL against Q8_0 activations
// (vec_dot and vec_dot_tile) and Q4_K, Q6_K against Q8_K (vec_dot). Every function carries the
// target attribute instead of the file being compiled with -march=armv8.2-a+dotprod, so the
// binary still runs on ARMv8.0 CPUs; quant.cpp calls in here only when
// cpu_features().neon_dotprod, and before the Highway kernels (kernels_hwy.cpp), which cover the
// other types and CPUs without dotprod.
//
// Exactness contract with the references (as kernels_avx2.cpp): the same integer block sums
// (exact: |level| <= 128 and activations within [-128, 127], so the int32 lanes cannot
// overflow) and the same scale products, float accumulation in another order: agreement to
// rounding; the 32-element types' vec_dot is their 1 x 1 tile (bit-identical with every tile
// shape). All loads are unaligned (vld1 of bytes).
#if defined(__aarch64__)

#include <arm_neon.h>

#include <cstring>

#include "quant/blocks.h"
#include "quant/kernels.h"

// GCC 12 declares the dotprod intrinsics under target("arch=armv8.2-a+dotprod") and refuses to
// inline them into functions with target("+dotprod") alone ("target specific option mismatch").
#define LOOM_DOTPROD __attribute__((target("arch=armv8.2-a+dotprod")))

namespace loom::quant::detail::neon {
namespace {

inline float f16(const uint8_t* p) {
  __fp16 h;
  std::memcpy(&h, p, 2);
  return float(h);
}
inline float f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
inline const int8_t* i8(const uint8_t* p) { return reinterpret_cast<const int8_t*>(p); }

// ---- 32-element block formats: the 32 signed levels of a block as two int8x16 (elements
// 0..15 and 16..31) -----------------------------------------------------------------------

struct Q8_0 {
  static constexpr int kBytes = sizeof(BlockQ8_0);
  static inline void levels(const uint8_t* b, int8x16_t& lo, int8x16_t& hi) {
    lo = vld1q_s8(i8(b + 2));
    hi = vld1q_s8(i8(b + 18));
  }
};

struct Q4_0 {
  static constexpr int kBytes = sizeof(BlockQ4_0);
  static inline void levels(const uint8_t* b, int8x16_t& lo, int8x16_t& hi) {
    const uint8x16_t q = vld1q_u8(b + 2);
    lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))), vdupq_n_s8(8));
    hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
  }
};

struct Q5_0 {
  static constexpr int kBytes = sizeof(BlockQ5_0);
  // 16 bits of qh -> 16 bytes, 0xff where the element's bit is set.
  static inline uint8x16_t expand(uint32_t bits16) {
    const uint8x16_t v = vcombine_u8(vdup_n_u8(uint8_t(bits16)), vdup_n_u8(uint8_t(bits16 >> 8)));
    static const uint8_t kSel[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    return vtstq_u8(v, vld1q_u8(kSel));
  }
  static inline void levels(const uint8_t* b, int8x16_t& lo, int8x16_t& hi) {
    uint32_t qh;
    std::memcpy(&qh, b + 2, 4);
    const uint8x16_t q = vld1q_u8(b + 6);
    // (nibble | bit << 4) - 16: the nibble where the bit is set, else nibble | 0xf0 (as int8).
    const uint8x16_t m16 = vdupq_n_u8(0xf0);
    lo = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q, vdupq_n_u8(0x0f)), vbicq_u8(m16, expand(qh & 0xffff))));
    hi = vreinterpretq_s8_u8(vorrq_u8(vshrq_n_u8(q, 4), vbicq_u8(m16, expand(qh >> 16))));
  }
};

struct IQ4_NL {
  static constexpr int kBytes = sizeof(BlockIQ4_NL);
  static inline void levels(const uint8_t* b, int8x16_t& lo, int8x16_t& hi) {
    const int8x16_t table = vld1q_s8(kIq4nlValues);
    const uint8x16_t q = vld1q_u8(b + 2);
    lo = vqtbl1q_s8(table, vandq_u8(q, vdupq_n_u8(0x0f)));
    hi = vqtbl1q_s8(table, vshrq_n_u8(q, 4));
  }
};

// ---- tiles: RN activation rows x RM weight rows, one accumulator per pair ------------------
// Per pair: acc += (d_w * d_a) * isum per block, blocks in order in one chain, then one lane sum.
// This is *the* dot of these types: vec_dot is the 1 x 1 tile, so a pair's result does not
// depend on the tile that computes it (batch invariance); the other pairs of a tile (1 x 4 for
// one activation row) hide the latency of each chain.

template <class Fmt, int RN, int RM>
LOOM_DOTPROD void tile_sym(int64_t nb, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* out, size_t os) {
  constexpr int kA = sizeof(BlockQ8_0);
  float32x4_t acc[RN][RM];
  for (int i = 0; i < RN; ++i)
    for (int j = 0; j < RM; ++j) acc[i][j] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    int8x16_t lo[RM], hi[RM];
    float dw[RM];
    for (int j = 0; j < RM; ++j) {
      const uint8_t* wb = w + size_t(j) * ws + b * Fmt::kBytes;
      Fmt::levels(wb, lo[j], hi[j]);
      dw[j] = f16(wb);
    }
    for (int i = 0; i < RN; ++i) {
      const uint8_t* ab = a + size_t(i) * as + b * kA;
      const int8x16_t ylo = vld1q_s8(i8(ab + 2)), yhi = vld1q_s8(i8(ab + 18));
      const float da = f16(ab);
      for (int j = 0; j < RM; ++j) {
        const int32x4_t p = vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo[j], ylo), hi[j], yhi);
        acc[i][j] = vfmaq_n_f32(acc[i][j], vcvtq_f32_s32(p), dw[j] * da);
      }
    }
  }
  for (int i = 0; i < RN; ++i)
    for (int j = 0; j < RM; ++j) out[size_t(i) * os + size_t(j)] = vaddvq_f32(acc[i][j]);
}

template <class Fmt>
void tile_loop(int64_t nb, const uint8_t* w, size_t ws, int nw, const uint8_t* a, size_t as, int na, float* out, size_t os) {
  static constexpr TileFn fns[kTileA][kTileW] = {{tile_sym<Fmt, 1, 1>, tile_sym<Fmt, 1, 2>},
                                                 {tile_sym<Fmt, 2, 1>, tile_sym<Fmt, 2, 2>},
                                                 {tile_sym<Fmt, 3, 1>, tile_sym<Fmt, 3, 2>},
                                                 {tile_sym<Fmt, 4, 1>, tile_sym<Fmt, 4, 2>}};
  static constexpr TileFn row_fns[kTileW1] = {tile_sym<Fmt, 1, 1>, tile_sym<Fmt, 1, 2>, tile_sym<Fmt, 1, 3>,
                                              tile_sym<Fmt, 1, 4>};
  run_register_tiles(fns, row_fns, nb, w, ws, nw, a, as, na, out, os);
}

// vec_dot of the tile types: the 1 x 1 tile (bit-identical with every tile shape).
template <class Fmt>
LOOM_DOTPROD float dot_tile1(int64_t nb, const uint8_t* w, const uint8_t* a) {
  float out;
  tile_sym<Fmt, 1, 1>(nb, w, 0, a, 0, &out, 1);
  return out;
}

// ---- super-block formats against Q8_K ------------------------------------------------------

constexpr int kQ8KQs = 4, kQ8KBsums = 4 + kSuper;

LOOM_DOTPROD float dot_q4_k(int64_t nb, const uint8_t* w, const uint8_t* a) {
  float32x4_t acc = vdupq_n_f32(0.0f);
  float mins = 0.0f;
  const uint8x16_t m4 = vdupq_n_u8(0x0f);
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* x = w + i * int64_t(sizeof(BlockQ4_K));
    const uint8_t* y = a + i * int64_t(sizeof(BlockQ8_K));
    int msum = 0;
    int32x4_t isum = vdupq_n_s32(0);
    for (int c = 0; c < 4; ++c) {
      int sc0, m0, sc1, m1;
      k4_scale_min(x + 4, 2 * c, &sc0, &m0);
      k4_scale_min(x + 4, 2 * c + 1, &sc1, &m1);
      int16_t bs[4];
      std::memcpy(bs, y + kQ8KBsums + 8 * c, 8);
      msum += m0 * (bs[0] + bs[1]) + m1 * (bs[2] + bs[3]);
      const uint8x16_t q0 = vld1q_u8(x + 16 + 32 * c), q1 = vld1q_u8(x + 32 + 32 * c);
      const uint8_t* yq = y + kQ8KQs + 64 * c;
      int32x4_t plo = vdotq_s32(vdupq_n_s32(0), vreinterpretq_s8_u8(vandq_u8(q0, m4)), vld1q_s8(i8(yq)));
      plo = vdotq_s32(plo, vreinterpretq_s8_u8(vandq_u8(q1, m4)), vld1q_s8(i8(yq + 16)));
      int32x4_t phi = vdotq_s32(vdupq_n_s32(0), vreinterpretq_s8_u8(vshrq_n_u8(q0, 4)), vld1q_s8(i8(yq + 32)));
      phi = vdotq_s32(phi, vreinterpretq_s8_u8(vshrq_n_u8(q1, 4)), vld1q_s8(i8(yq + 48)));
      isum = vmlaq_n_s32(isum, plo, sc0);
      isum = vmlaq_n_s32(isum, phi, sc1);
    }
    const float dy = f32(y);
    acc = vfmaq_n_f32(acc, vcvtq_f32_s32(isum), dy * f16(x));
    mins += (dy * f16(x + 2)) * float(msum);
  }
  return vaddvq_f32(acc) - mins;
}

LOOM_DOTPROD float dot_q6_k(int64_t nb, const uint8_t* w, const uint8_t* a) {
  float32x4_t acc = vdupq_n_f32(0.0f);
  const uint8x16_t m4 = vdupq_n_u8(0x0f), m3 = vdupq_n_u8(0x03);
  const int8x16_t k32 = vdupq_n_s8(32);
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* x = w + i * int64_t(sizeof(BlockQ6_K));
    const uint8_t* y = a + i * int64_t(sizeof(BlockQ8_K));
    const int8_t* sc = i8(x + 192);
    int32x4_t isum = vdupq_n_s32(0);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = x + 64 * h;
      const uint8_t* qh = x + 128 + 32 * h;
      const uint8_t* yq = y + kQ8KQs + 128 * h;
      for (int m = 0; m < 2; ++m) {  // elements l = 16 m .. 16 m + 15 of each group of 32
        const uint8x16_t qa = vld1q_u8(ql + 16 * m), qb = vld1q_u8(ql + 32 + 16 * m);
        const uint8x16_t hb = vld1q_u8(qh + 16 * m);
        const uint8x16_t u0 = vorrq_u8(vandq_u8(qa, m4), vshlq_n_u8(vandq_u8(hb, m3), 4));
        const uint8x16_t u1 = vorrq_u8(vandq_u8(qb, m4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 2), m3), 4));
        const uint8x16_t u2 = vorrq_u8(vshrq_n_u8(qa, 4), vshlq_n_u8(vandq_u8(vshrq_n_u8(hb, 4), m3), 4));
        const uint8x16_t u3 = vorrq_u8(vshrq_n_u8(qb, 4), vshlq_n_u8(vshrq_n_u8(hb, 6), 4));
        const int s = 8 * h + m;  // scale of group k is sc[s + 2 k]
        const int32x4_t z = vdupq_n_s32(0);
        isum = vmlaq_n_s32(isum, vdotq_s32(z, vsubq_s8(vreinterpretq_s8_u8(u0), k32), vld1q_s8(i8(yq + 16 * m))), sc[s]);
        isum = vmlaq_n_s32(isum, vdotq_s32(z, vsubq_s8(vreinterpretq_s8_u8(u1), k32), vld1q_s8(i8(yq + 32 + 16 * m))),
                           sc[s + 2]);
        isum = vmlaq_n_s32(isum, vdotq_s32(z, vsubq_s8(vreinterpretq_s8_u8(u2), k32), vld1q_s8(i8(yq + 64 + 16 * m))),
                           sc[s + 4]);
        isum = vmlaq_n_s32(isum, vdotq_s32(z, vsubq_s8(vreinterpretq_s8_u8(u3), k32), vld1q_s8(i8(yq + 96 + 16 * m))),
                           sc[s + 6]);
      }
    }
    acc = vfmaq_n_f32(acc, vcvtq_f32_s32(isum), f32(y) * f16(x + 208));
  }
  return vaddvq_f32(acc);
}

}  // namespace

// One entry point per type and operation (kernels.h); type_traits.cpp puts them in the table.
#define LOOM_U8(p) static_cast<const uint8_t*>(p)
#define LOOM_NEON_BLOCKS(t, Fmt)                                                                                            \
  float vec_dot_##t(int64_t n, const void* w, const void* a) { return dot_tile1<Fmt>(n / kBlock, LOOM_U8(w), LOOM_U8(a)); } \
  void vec_dot_tile_##t(int64_t n, const void* w, size_t w_stride, int n_rows_w, const void* a, size_t a_stride,            \
                        int n_rows_a, float* out, size_t out_stride) {                                                      \
    tile_loop<Fmt>(n / kBlock, LOOM_U8(w), w_stride, n_rows_w, LOOM_U8(a), a_stride, n_rows_a, out, out_stride);            \
  }
LOOM_NEON_BLOCKS(q4_0, Q4_0)
LOOM_NEON_BLOCKS(q5_0, Q5_0)
LOOM_NEON_BLOCKS(q8_0, Q8_0)
LOOM_NEON_BLOCKS(iq4_nl, IQ4_NL)
#undef LOOM_NEON_BLOCKS
float vec_dot_q4_k(int64_t n, const void* w, const void* a) { return dot_q4_k(n / kSuper, LOOM_U8(w), LOOM_U8(a)); }
float vec_dot_q6_k(int64_t n, const void* w, const void* a) { return dot_q6_k(n / kSuper, LOOM_U8(w), LOOM_U8(a)); }
#undef LOOM_U8

}  // namespace loom::quant::detail::neon

#endif  // __aarch64__

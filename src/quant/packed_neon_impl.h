// The AArch64 packed GEMM kernels, written once and compiled three times by packed_neon.cpp:
// plain NEON (ARMv8.0: every AArch64 core), dotprod (SDOT, ARMv8.2+) and i8mm (SMMLA, ARMv8.6 /
// optional from 8.2). Internal to packed_neon.cpp, which defines before each inclusion:
//   LOOM_PN_NS     the namespace of this copy (inside loom::quant::detail)
//   LOOM_PN_ATTR   its target attribute (empty for the plain copy): each copy holds only the
//                  instructions of its own feature level, and is called only where
//                  cpu_features() has that level
//   LOOM_PN_LEVEL  0 plain, 1 dotprod, 2 i8mm
//
// The layout is the x86 one (packed.h): a 64-byte chunk holds 4 consecutive weights of each of a
// group's 16 rows, i.e. 4 q registers of 4 rows each, lane r of register R = 4 bytes of row 4R + r.
// That is exactly the operand of the indexed SDOT (`sdot v.4s, w.16b, x.4b[j]`): 4 row dots of 4
// weights against element group j of an activation register, no horizontal reduction; the two
// registers of an activation block (elements 0..15, 16..31) feed all 16 rows of a tile.
//
//  - sdot_pass (levels 0, 1): NA activation rows x the rows of registers [R0, R0 + NR); per
//    32-column block and register an exact int32 sum per row (SDOT; plain NEON: SMULL, SMULL2,
//    ADDP, SADALP of the same bytes — every partial sum fits int16: 2 · 128 · 127 < 2^15), then
//    acc = fma(float(isum), d_w · d_a, acc) as every x86 kernel does. Decode (NA = 1, 2) takes all
//    16 rows in one pass; NA = 4 takes two passes of 8 rows (32 accumulators would spill).
//  - mmla_pass (level 2): SMMLA multiplies a 2 x 8 int8 matrix (2 weight rows x 8 columns) by an
//    8 x 2 one (8 columns x 2 activation rows) into a 2 x 2 int32 block: twice SDOT's products per
//    instruction. A weight register is made of two chunks by one ZIP1/ZIP2 of 32-bit lanes
//    (chunk 2c and 2c + 1 hold columns 8c..8c+7 of every row: zip1 gives rows 4R, 4R + 1, zip2
//    rows 4R + 2, 4R + 3), an activation register of 8 columns of two rows (their 8-byte halves
//    combined). The accumulators hold [w0·a0, w0·a1, w1·a0, w1·a1]; the scale products are
//    formed in that arrangement ([dw0, dw0, dw1, dw1] · [da0, da1, da0, da1]: the same products
//    d_w · d_a) and the same fma per output, so an output's bits do not depend on whether SDOT
//    or SMMLA computed it (batch invariance: runs of 1 row take SDOT, runs of 2 and 4 SMMLA).
//    Deinterleaved (UZP1/UZP2) once per group at the store.
// Every integer sum is exact, so every copy gives the same bits as the others (and as the x86
// kernels, which apply the same float operations), and the reference's result to float rounding.
#if !defined(LOOM_PN_NS) || !defined(LOOM_PN_LEVEL)
#error "packed_neon_impl.h is included by packed_neon.cpp only"
#endif

#define LOOM_PN LOOM_PN_ATTR inline __attribute__((always_inline))

namespace loom::quant::detail::LOOM_PN_NS {
namespace {

constexpr int kLevel = LOOM_PN_LEVEL;

// ---- helpers ---------------------------------------------------------------------------------

template <int... I, typename F>
LOOM_PN void unroll_impl(std::integer_sequence<int, I...>, F&& f) {
  (f(std::integral_constant<int, I>{}), ...);
}
// f(std::integral_constant<int, i>) for i = 0..N-1: lane indices must be constants.
template <int N, typename F>
LOOM_PN void unroll(F&& f) {
  unroll_impl(std::make_integer_sequence<int, N>{}, f);
}

// acc + per lane r: Σ_k w[4r + k] · x[4J + k] (SDOT by element; plain NEON: widening products of
// the broadcast group, pairwise sums).
template <int J>
LOOM_PN int32x4_t dot_lane(int32x4_t acc, int8x16_t w, int8x16_t x) {
#if LOOM_PN_LEVEL >= 1
  return vdotq_laneq_s32(acc, w, x, J);
#else
  const int8x16_t xb = vreinterpretq_s8_s32(vdupq_laneq_s32(vreinterpretq_s32_s8(x), J));
  const int16x8_t lo = vmull_s8(vget_low_s8(w), vget_low_s8(xb));
  const int16x8_t hi = vmull_high_s8(w, xb);
  return vpadalq_s16(acc, vpaddq_s16(lo, hi));
#endif
}

LOOM_PN float f32_at(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
LOOM_PN int32_t i32_at(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
// 4 f16 at p (rows 4R..4R+3 of a d[16] array) as floats (FCVTL: base AArch64).
LOOM_PN float32x4_t f16x4(const uint8_t* p) { return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p)))); }

// The 16 bits of a chunk mask (ChunkMask) that belong to register R, as 16 bytes: 16 where the
// bit is set (byte i of the register <-> bit i), else 0.
LOOM_PN uint8x16_t fifth_bits(const uint8_t* mask16) {
  static constexpr uint8_t kSel[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const uint8x16_t v = vcombine_u8(vdup_n_u8(mask16[0]), vdup_n_u8(mask16[1]));
  return vandq_u8(vtstq_u8(v, vld1q_u8(kSel)), vdupq_n_u8(16));
}

// Stores 4 outputs of rows r0..r0+3 (those below valid).
LOOM_PN void store4(float* o, float32x4_t v, int r0, int valid) {
  if (r0 + 4 <= valid) {
    vst1q_f32(o + r0, v);
    return;
  }
  float tmp[4];
  vst1q_f32(tmp, v);
  for (int k = 0; r0 + k < valid; ++k) o[r0 + k] = tmp[k];
}

// ---- the 32-column block types ---------------------------------------------------------------

// What a 32-column block type's tile holds beyond Q4_0's (PackedLayout).
struct Blocks32 {
  bool nibbles, has_min, fifth_bit, lut;
};
constexpr Blocks32 blocks32_of(const PackedLayout& L) { return Blocks32{L.nibbles, L.has_min, L.fifth_bit, L.lut}; }

// The tile geometry of a 32-column block type as constants (PackedLayout's, which the kernels
// would otherwise read at run time: GCC then computes every chunk address with CSELs).
template <Blocks32 F>
struct Geo {
  static constexpr size_t kQ = F.has_min ? 64 : 32;                  // q_offset()
  static constexpr size_t kQh = kQ + 64 * (F.nibbles ? 4 : 8);       // qh_offset()
  static constexpr size_t kTile = kQh + (F.fifth_bit ? 64 : 0);       // tile_bytes
  // i8mm's USDOT / USMMLA take Q8_0's stored bytes (level + 128) as unsigned: bias 128, no XOR.
  static constexpr bool kUnsignedQ8 = !F.nibbles && LOOM_PN_LEVEL >= 2;
  static constexpr int32_t kBias = kUnsignedQ8 ? 128 : !F.nibbles || F.lut || F.has_min ? 0 : F.fifth_bit ? 16 : 8;
};
template <Blocks32 F>
constexpr bool geo_matches(const PackedLayout& L) {
  return Geo<F>::kQ == L.q_offset() && Geo<F>::kQh == L.qh_offset() && Geo<F>::kTile == L.tile_bytes &&
         (Geo<F>::kBias == L.bias || (!Geo<F>::kUnsignedQ8 && (!F.nibbles || F.lut)));
}
static_assert(geo_matches<blocks32_of(kLayoutQ4_0)>(kLayoutQ4_0) && geo_matches<blocks32_of(kLayoutQ4_1)>(kLayoutQ4_1) &&
              geo_matches<blocks32_of(kLayoutQ5_0)>(kLayoutQ5_0) && geo_matches<blocks32_of(kLayoutQ5_1)>(kLayoutQ5_1) &&
              geo_matches<blocks32_of(kLayoutQ8_0)>(kLayoutQ8_0) && geo_matches<blocks32_of(kLayoutIQ4_NL)>(kLayoutIQ4_NL));

// The IQ4_NL levels as signed bytes (kIq4nlBiased - 128): TBL decodes a nibble to its level.
alignas(16) inline constexpr int8_t kIq4nlSigned[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                       1,    13,   25,  38,  53,  69,  89,  113};

// Geo::kBias is the bias the integer sums start from (-bias · Σ q): the levels are kept as stored
// (nibbles, nibble + 16 · fifth bit), so Q4_0's 8 and Q5_0's 16 come off there; Q8_0's bytes are
// made signed (XOR 0x80) for SDOT and taken as they are (bias 128) by i8mm's USDOT / USMMLA;
// IQ4_NL's table is signed, the types with a minimum have bias 0.

// Register R's weights of chunk c of a tile: lo and hi as signed bytes (nibble types: the low
// nibbles are elements 4c.., the high ones 16 + 4c..; Q8_0: lo only, elements 4c..).
template <Blocks32 F>
LOOM_PN void decode(const uint8_t* tile, int c, int R, int8x16_t& lo, int8x16_t& hi) {
  const uint8x16_t raw = vld1q_u8(tile + Geo<F>::kQ + 64 * size_t(c) + 16 * size_t(R));
  if constexpr (!F.nibbles) {
    lo = vreinterpretq_s8_u8(veorq_u8(raw, vdupq_n_u8(0x80)));
    hi = lo;
    return;
  } else {
    uint8x16_t l = vandq_u8(raw, vdupq_n_u8(0x0f)), h = vshrq_n_u8(raw, 4);
    if constexpr (F.fifth_bit) {
      const uint8_t* mask = tile + Geo<F>::kQh + 16 * size_t(c) + 2 * size_t(R);
      l = vorrq_u8(l, fifth_bits(mask));
      h = vorrq_u8(h, fifth_bits(mask + 8));
    }
    if constexpr (F.lut) {
      const int8x16_t table = vld1q_s8(kIq4nlSigned);
      lo = vqtbl1q_s8(table, l);
      hi = vqtbl1q_s8(table, h);
    } else {
      lo = vreinterpretq_s8_u8(l);
      hi = vreinterpretq_s8_u8(h);
    }
  }
}

// NA activation rows against the rows of registers [R0, R0 + NR) of one group (sdot_pass in the
// file comment).
template <int NA, Blocks32 F, int R0, int NR>
LOOM_PN_ATTR void sdot_pass(const uint8_t* grp, int64_t nb, const uint8_t* act,
                            size_t act_stride, float* out, size_t out_stride, int valid) {
  float32x4_t acc[NA][NR];
  for (int a = 0; a < NA; ++a) {
    for (int R = 0; R < NR; ++R) acc[a][R] = vdupq_n_f32(0.0f);
  }
  constexpr int32_t bias = Geo<F>::kBias;
  constexpr size_t tile_bytes = Geo<F>::kTile;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* tile = grp + size_t(b) * tile_bytes;
    if constexpr (R0 == 0) prefetch_ahead(tile, tile_bytes);
    const uint8_t* ab[NA];
    int8x16_t xl[NA], xh[NA];
    int32x4_t isum[NA][NR];
    for (int a = 0; a < NA; ++a) {
      ab[a] = act + size_t(a) * act_stride + size_t(b) * sizeof(PackedActBlock);
      xl[a] = vld1q_s8(reinterpret_cast<const int8_t*>(ab[a] + 8));
      xh[a] = vld1q_s8(reinterpret_cast<const int8_t*>(ab[a] + 24));
      const int32x4_t init = vdupq_n_s32(F.has_min ? 0 : -bias * i32_at(ab[a] + 4));
      for (int R = 0; R < NR; ++R) isum[a][R] = init;
    }
    if constexpr (F.nibbles) {
      unroll<4>([&](auto cc) LOOM_PN_ATTR {
        constexpr int C = decltype(cc)::value;
#pragma GCC unroll 4
        for (int R = 0; R < NR; ++R) {
          int8x16_t lo, hi;
          decode<F>(tile, C, R0 + R, lo, hi);
          for (int a = 0; a < NA; ++a) {
            isum[a][R] = dot_lane<C>(isum[a][R], lo, xl[a]);
            isum[a][R] = dot_lane<C>(isum[a][R], hi, xh[a]);
          }
        }
      });
    } else {
      unroll<8>([&](auto cc) LOOM_PN_ATTR {
        constexpr int C = decltype(cc)::value;
#pragma GCC unroll 4
        for (int R = 0; R < NR; ++R) {
#if LOOM_PN_LEVEL >= 2
          const uint8x16_t u = vld1q_u8(tile + Geo<F>::kQ + 64 * size_t(C) + 16 * size_t(R0 + R));
          for (int a = 0; a < NA; ++a) isum[a][R] = vusdotq_laneq_s32(isum[a][R], u, C < 4 ? xl[a] : xh[a], C & 3);
#else
          int8x16_t w, unused;
          decode<F>(tile, C, R0 + R, w, unused);
          for (int a = 0; a < NA; ++a) isum[a][R] = dot_lane<C & 3>(isum[a][R], w, C < 4 ? xl[a] : xh[a]);
#endif
        }
      });
    }
#pragma GCC unroll 4
    for (int R = 0; R < NR; ++R) {
      const float32x4_t dw = f16x4(tile + 8 * size_t(R0 + R));
      float32x4_t mw = vdupq_n_f32(0.0f);
      if constexpr (F.has_min) mw = f16x4(tile + PackedLayout::kScaleBytes + 8 * size_t(R0 + R));
      for (int a = 0; a < NA; ++a) {
        acc[a][R] = vfmaq_f32(acc[a][R], vcvtq_f32_s32(isum[a][R]), vmulq_n_f32(dw, f32_at(ab[a])));
        if constexpr (F.has_min) acc[a][R] = vfmaq_f32(acc[a][R], mw, vdupq_n_f32(f32_at(ab[a] + 4)));
      }
    }
  }
  for (int a = 0; a < NA; ++a) {
    for (int R = 0; R < NR; ++R) store4(out + size_t(a) * out_stride, acc[a][R], 4 * (R0 + R), valid);
  }
}

#if LOOM_PN_LEVEL >= 2
// 2 NP activation rows (NP pairs) against the rows of registers [R0, R0 + NR) (mmla_pass in the
// file comment). acc[p][2R + z]: activation pair p, rows 4R + 2z, 4R + 2z + 1.
template <int NP, Blocks32 F, int R0, int NR>
LOOM_PN_ATTR void mmla_pass(const uint8_t* grp, int64_t nb, const uint8_t* act,
                            size_t act_stride, float* out, size_t out_stride, int valid) {
  float32x4_t acc[NP][2 * NR];
  for (int p = 0; p < NP; ++p) {
    for (int k = 0; k < 2 * NR; ++k) acc[p][k] = vdupq_n_f32(0.0f);
  }
  constexpr int32_t bias = Geo<F>::kBias;
  constexpr size_t tile_bytes = Geo<F>::kTile;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* tile = grp + size_t(b) * tile_bytes;
    if constexpr (R0 == 0) prefetch_ahead(tile, tile_bytes);
    // Columns 8m..8m+7 of the pair's two rows, and the pair's scales [da0, da1, da0, da1].
    int8x16_t x[NP][4];
    float32x4_t da[NP], sa[NP];
    int32x4_t isum[NP][2 * NR];
    for (int p = 0; p < NP; ++p) {
      const uint8_t* a0 = act + size_t(2 * p) * act_stride + size_t(b) * sizeof(PackedActBlock);
      const uint8_t* a1 = a0 + act_stride;
      for (int m = 0; m < 4; ++m) {
        x[p][m] = vcombine_s8(vld1_s8(reinterpret_cast<const int8_t*>(a0 + 8 + 8 * m)),
                              vld1_s8(reinterpret_cast<const int8_t*>(a1 + 8 + 8 * m)));
      }
      const float32x2_t d2 = {f32_at(a0), f32_at(a1)};
      da[p] = vcombine_f32(d2, d2);
      const float32x2_t s2 = {f32_at(a0 + 4), f32_at(a1 + 4)};
      sa[p] = vcombine_f32(s2, s2);
      const int32x2_t i2 = {-bias * i32_at(a0 + 4), -bias * i32_at(a1 + 4)};
      const int32x4_t init = F.has_min ? vdupq_n_s32(0) : vcombine_s32(i2, i2);
      for (int k = 0; k < 2 * NR; ++k) isum[p][k] = init;
    }
    const uint8_t* q = tile + Geo<F>::kQ;
#pragma GCC unroll 4
    for (int R = 0; R < NR; ++R) {
      const size_t roff = 16 * size_t(R0 + R);
      if constexpr (!F.nibbles) {
        // Chunks 2m, 2m + 1: columns 8m..8m+7.
        for (int m = 0; m < 4; ++m) {
          const uint32x4_t c0 = vreinterpretq_u32_u8(vld1q_u8(q + 128 * size_t(m) + roff));
          const uint32x4_t c1 = vreinterpretq_u32_u8(vld1q_u8(q + 128 * size_t(m) + 64 + roff));
          const uint8x16_t u0 = vreinterpretq_u8_u32(vzip1q_u32(c0, c1)), u1 = vreinterpretq_u8_u32(vzip2q_u32(c0, c1));
          for (int p = 0; p < NP; ++p) {
            isum[p][2 * R] = vusmmlaq_s32(isum[p][2 * R], u0, x[p][m]);
            isum[p][2 * R + 1] = vusmmlaq_s32(isum[p][2 * R + 1], u1, x[p][m]);
          }
        }
      } else {
        // Chunks 2h, 2h + 1: low nibbles columns 8h..8h+7, high nibbles 16 + 8h...
        for (int h = 0; h < 2; ++h) {
          int8x16_t lo[2], hi[2];  // rows 4R, 4R + 1 (zip1) and 4R + 2, 4R + 3 (zip2)
          if constexpr (F.fifth_bit) {
            int8x16_t l0, h0, l1, h1;
            decode<F>(tile, 2 * h, R0 + R, l0, h0);
            decode<F>(tile, 2 * h + 1, R0 + R, l1, h1);
            auto zip = [](int8x16_t u, int8x16_t v, int z) LOOM_PN_ATTR {
              const int32x4_t a = vreinterpretq_s32_s8(u), b = vreinterpretq_s32_s8(v);
              return vreinterpretq_s8_s32(z == 0 ? vzip1q_s32(a, b) : vzip2q_s32(a, b));
            };
            for (int z = 0; z < 2; ++z) {
              lo[z] = zip(l0, l1, z);
              hi[z] = zip(h0, h1, z);
            }
          } else {
            const uint32x4_t c0 = vreinterpretq_u32_u8(vld1q_u8(q + 128 * size_t(h) + roff));
            const uint32x4_t c1 = vreinterpretq_u32_u8(vld1q_u8(q + 128 * size_t(h) + 64 + roff));
            const uint8x16_t zz[2] = {vreinterpretq_u8_u32(vzip1q_u32(c0, c1)), vreinterpretq_u8_u32(vzip2q_u32(c0, c1))};
            for (int z = 0; z < 2; ++z) {
              const uint8x16_t l = vandq_u8(zz[z], vdupq_n_u8(0x0f)), hh = vshrq_n_u8(zz[z], 4);
              if constexpr (F.lut) {
                const int8x16_t table = vld1q_s8(kIq4nlSigned);
                lo[z] = vqtbl1q_s8(table, l);
                hi[z] = vqtbl1q_s8(table, hh);
              } else {
                lo[z] = vreinterpretq_s8_u8(l);
                hi[z] = vreinterpretq_s8_u8(hh);
              }
            }
          }
          for (int p = 0; p < NP; ++p) {
            for (int z = 0; z < 2; ++z) {
              isum[p][2 * R + z] = vmmlaq_s32(isum[p][2 * R + z], lo[z], x[p][h]);
              isum[p][2 * R + z] = vmmlaq_s32(isum[p][2 * R + z], hi[z], x[p][2 + h]);
            }
          }
        }
      }
    }
    for (int R = 0; R < NR; ++R) {
      const float32x4_t dw = f16x4(tile + 8 * size_t(R0 + R));
      const float32x4_t dz[2] = {vzip1q_f32(dw, dw), vzip2q_f32(dw, dw)};  // [d0, d0, d1, d1], [d2, d2, d3, d3]
      float32x4_t mz[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
      if constexpr (F.has_min) {
        const float32x4_t mw = f16x4(tile + PackedLayout::kScaleBytes + 8 * size_t(R0 + R));
        mz[0] = vzip1q_f32(mw, mw);
        mz[1] = vzip2q_f32(mw, mw);
      }
      for (int p = 0; p < NP; ++p) {
        for (int z = 0; z < 2; ++z) {
          float32x4_t& A = acc[p][2 * R + z];
          A = vfmaq_f32(A, vcvtq_f32_s32(isum[p][2 * R + z]), vmulq_f32(dz[z], da[p]));
          if constexpr (F.has_min) A = vfmaq_f32(A, mz[z], sa[p]);
        }
      }
    }
  }
  for (int p = 0; p < NP; ++p) {
    for (int R = 0; R < NR; ++R) {
      // [r0a0, r0a1, r1a0, r1a1], [r2a0, r2a1, r3a0, r3a1] -> [r0a0 .. r3a0], [r0a1 .. r3a1].
      const float32x4_t e = vuzp1q_f32(acc[p][2 * R], acc[p][2 * R + 1]);
      const float32x4_t o = vuzp2q_f32(acc[p][2 * R], acc[p][2 * R + 1]);
      store4(out + size_t(2 * p) * out_stride, e, 4 * (R0 + R), valid);
      store4(out + size_t(2 * p + 1) * out_stride, o, 4 * (R0 + R), valid);
    }
  }
}
#endif  // LOOM_PN_LEVEL >= 2

// One run of na (4, 2, 1) activation rows against one group.
template <Blocks32 F>
void blocks32_run(int na, const uint8_t* grp, const PackedLayout&, int64_t nb, const uint8_t* a, size_t as, float* o,
                  size_t os, int valid) {
#if LOOM_PN_LEVEL >= 2
  if (na == 4) {
    mmla_pass<2, F, 0, 2>(grp, nb, a, as, o, os, valid);
    mmla_pass<2, F, 2, 2>(grp, nb, a, as, o, os, valid);
    return;
  }
  if (na == 2) return mmla_pass<1, F, 0, 4>(grp, nb, a, as, o, os, valid);
#else
  if (na == 4) {
    sdot_pass<4, F, 0, 2>(grp, nb, a, as, o, os, valid);
    sdot_pass<4, F, 2, 2>(grp, nb, a, as, o, os, valid);
    return;
  }
  if (na == 2) return sdot_pass<2, F, 0, 4>(grp, nb, a, as, o, os, valid);
#endif
  sdot_pass<1, F, 0, 4>(grp, nb, a, as, o, os, valid);
}

template <Blocks32 F>
void run_blocks32(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                  size_t act_stride, int n, float* out, size_t out_stride) {
  packed_gemm_loop(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride, 4, blocks32_run<F>);
}

// ---- Q4_K against Q8_K ---------------------------------------------------------------------

// NA activation rows against the rows of registers [R0, R0 + NR) of one group of Q4_K tiles
// (PackedQ4K). One 32-column sub-block j at a time (half-pair j / 2, its low nibbles for even j,
// high for odd): chunk c's 4 columns against activation lane c of the sub-block's two registers
// (SDOT by element), the sub-block's exact sum weighted by its 6-bit scale (MLA); the mins against
// the activation's sub-block sums (bsums) once per super-block, then the floats as the x86 kernels
// apply them: acc = fma(d_a, fma(d, isum, -(dmin · msum)), acc).
template <int NA, int R0, int NR>
LOOM_PN_ATTR void q4k_pass(const uint8_t* grp, int64_t cols, const uint8_t* act, size_t act_stride, float* out,
                           size_t out_stride, int valid) {
  float32x4_t acc[NA][NR];
  for (int a = 0; a < NA; ++a) {
    for (int R = 0; R < NR; ++R) acc[a][R] = vdupq_n_f32(0.0f);
  }
  const int64_t ns = cols / PackedQ4K::kCols;
  for (int64_t sb = 0; sb < ns; ++sb) {
    const uint8_t* tile = grp + size_t(sb) * PackedQ4K::kTileBytes;
    if constexpr (R0 == 0) prefetch_ahead(tile, PackedQ4K::kTileBytes);
    const uint8_t* ab[NA];
    int32x4_t isum[NA][NR], msum[NA][NR];
    for (int a = 0; a < NA; ++a) {
      ab[a] = act + size_t(a) * act_stride + size_t(sb) * sizeof(BlockQ8_K);
      for (int R = 0; R < NR; ++R) isum[a][R] = msum[a][R] = vdupq_n_s32(0);
    }
    for (int j = 0; j < 8; ++j) {
      const uint8_t* q = tile + PackedQ4K::kQs + 512 * size_t(j / 2);
      const int shift = 4 * (j & 1);
      int8x16_t xa[NA], xb[NA];
      int32x4_t sub[NA][NR];
      for (int a = 0; a < NA; ++a) {
        xa[a] = vld1q_s8(reinterpret_cast<const int8_t*>(ab[a] + 4 + 32 * j));
        xb[a] = vld1q_s8(reinterpret_cast<const int8_t*>(ab[a] + 4 + 32 * j + 16));
        for (int R = 0; R < NR; ++R) sub[a][R] = vdupq_n_s32(0);
      }
      const int8x16_t shv = vdupq_n_s8(int8_t(-shift));
      unroll<8>([&](auto cc) LOOM_PN_ATTR {
        constexpr int C = decltype(cc)::value;
        for (int R = 0; R < NR; ++R) {
          const uint8x16_t raw = vld1q_u8(q + 64 * C + 16 * size_t(R0 + R));
          const int8x16_t w = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(raw, shv), vdupq_n_u8(0x0f)));
          for (int a = 0; a < NA; ++a) sub[a][R] = dot_lane<C & 3>(sub[a][R], w, C < 4 ? xa[a] : xb[a]);
        }
      });
      for (int R = 0; R < NR; ++R) {
        const int32x4_t sc = vreinterpretq_s32_u32(
            vmovl_u16(vget_low_u16(vmovl_u8(vld1_u8(tile + PackedQ4K::kSc + 16 * size_t(j) + 4 * size_t(R0 + R))))));
        const int32x4_t m = vreinterpretq_s32_u32(
            vmovl_u16(vget_low_u16(vmovl_u8(vld1_u8(tile + PackedQ4K::kM + 16 * size_t(j) + 4 * size_t(R0 + R))))));
        for (int a = 0; a < NA; ++a) {
          int16_t bs[2];
          std::memcpy(bs, ab[a] + 4 + 256 + 4 * j, 4);
          isum[a][R] = vmlaq_s32(isum[a][R], sub[a][R], sc);
          msum[a][R] = vmlaq_n_s32(msum[a][R], m, int32_t(bs[0]) + int32_t(bs[1]));
        }
      }
    }
    for (int R = 0; R < NR; ++R) {
      const float32x4_t d = f16x4(tile + PackedQ4K::kD + 8 * size_t(R0 + R));
      const float32x4_t dmin = f16x4(tile + PackedQ4K::kDmin + 8 * size_t(R0 + R));
      for (int a = 0; a < NA; ++a) {
        const float32x4_t t =
            vfmaq_f32(vnegq_f32(vmulq_f32(dmin, vcvtq_f32_s32(msum[a][R]))), d, vcvtq_f32_s32(isum[a][R]));
        acc[a][R] = vfmaq_f32(acc[a][R], vdupq_n_f32(f32_at(ab[a])), t);
      }
    }
  }
  for (int a = 0; a < NA; ++a) {
    for (int R = 0; R < NR; ++R) store4(out + size_t(a) * out_stride, acc[a][R], 4 * (R0 + R), valid);
  }
}

void q4k_run(int64_t cols, int na, const uint8_t* grp, const uint8_t* a, size_t as, float* o, size_t os, int valid) {
  switch (na) {
    case 4:
      q4k_pass<4, 0, 1>(grp, cols, a, as, o, os, valid);
      q4k_pass<4, 1, 1>(grp, cols, a, as, o, os, valid);
      q4k_pass<4, 2, 1>(grp, cols, a, as, o, os, valid);
      q4k_pass<4, 3, 1>(grp, cols, a, as, o, os, valid);
      return;
    case 2:
      q4k_pass<2, 0, 2>(grp, cols, a, as, o, os, valid);
      q4k_pass<2, 2, 2>(grp, cols, a, as, o, os, valid);
      return;
    default: q4k_pass<1, 0, 4>(grp, cols, a, as, o, os, valid);
  }
}

void run_q4k(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
             size_t act_stride, int n, float* out, size_t out_stride) {
  auto kernel = [cols](int na, const uint8_t* grp, const PackedLayout&, int64_t, const uint8_t* a, size_t as, float* o,
                       size_t os, int valid) { q4k_run(cols, na, grp, a, as, o, os, valid); };
  packed_gemm_loop(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride, 4, kernel);
}

}  // namespace

// Every type packed_neon_has_kernel names; the others must not get here.
void packed_gemm(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                 const void* act, size_t act_stride, int n, float* out, size_t out_stride) {
  constexpr Blocks32 kQ40 = blocks32_of(kLayoutQ4_0), kQ80 = blocks32_of(kLayoutQ8_0), kIq4 = blocks32_of(kLayoutIQ4_NL),
                     kQ50 = blocks32_of(kLayoutQ5_0), kQ41 = blocks32_of(kLayoutQ4_1), kQ51 = blocks32_of(kLayoutQ5_1);
  switch (t) {
    case TensorType::Q4_0: return run_blocks32<kQ40>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::Q8_0: return run_blocks32<kQ80>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::IQ4_NL: return run_blocks32<kIq4>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::Q5_0: return run_blocks32<kQ50>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::Q4_1: return run_blocks32<kQ41>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::Q5_1: return run_blocks32<kQ51>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::Q4_K: return run_q4k(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    default: break;
  }
}

}  // namespace loom::quant::detail::LOOM_PN_NS

#undef LOOM_PN

// The AArch64 packed GEMM kernels, written once and compiled three times by packed_neon.cpp:
// plain NEON (ARMv8.0: every AArch64 core), dotprod (SDOT, ARMv8.2+) and i8mm (SMMLA, ARMv8.6 /
// optional from 8.2). Internal to packed_neon.cpp, which defines before each inclusion:
//   LOOM_PN_NS     the namespace of this copy (inside loom::quant::detail)
//   LOOM_PN_ATTR   its target attribute (empty for the plain copy): each copy holds only the
//                  instructions of its own feature level, and is called only where
//                  cpu_features() has that level
//   LOOM_PN_LEVEL  0 plain, 1 dotprod, 2 i8mm
// and LOOM_PN_FHM_ATTR, the target attribute of the FMLAL (FEAT_FHM) F16 kernel, which only the
// plain copy compiles (every copy calls it where cpu_features().neon_fhm: F16 / BF16 section).
//
// The layout is the x86 one (packed.h): a 64-byte chunk holds 4 consecutive weights of each of a
// group's 16 rows, i.e. 4 q registers of 4 rows each, lane r of register R = 4 bytes of row 4R + r.
// That is exactly the operand of the indexed SDOT (`sdot v.4s, w.16b, x.4b[j]`): 4 row dots of 4
// weights against element group j of an activation register, no horizontal reduction; the two
// registers of an activation block (elements 0..15, 16..31) feed all 16 rows of a tile.
//
// Activation rows come in runs of 8 (i8mm), 4, 2 and 1; the runs of 2 or more read the rows'
// panels (packed_act_panels.h: per block the d and sums of 4 rows as vectors, then per pair of
// rows 4 registers of 8 columns of both rows), the single rows the per-row format.
//  - sdot_pass (all levels; single rows) and sdot_panels (levels 0, 1; runs of 2 and 4): NA
//    activation rows x the rows of registers [R0, R0 + NR); per 32-column block and register an
//    exact int32 sum per row (SDOT; plain NEON: SMULL, SMULL2, ADDP, SADALP of the same bytes —
//    every partial sum fits int16: 2 · 128 · 127 < 2^15), then acc = fma(float(isum), d_w · d_a,
//    acc) as every x86 kernel does. Single rows and pairs take all 16 rows in one pass; runs of 4
//    take two passes of 8 rows (32 accumulators would spill).
//  - mmla_pass (level 2; runs of 2, 4 and 8): SMMLA multiplies a 2 x 8 int8 matrix (2 weight rows x 8 columns) by an
//    8 x 2 one (8 columns x 2 activation rows) into a 2 x 2 int32 block: twice SDOT's products per
//    instruction. A weight register is made of two chunks by one ZIP1/ZIP2 of 32-bit lanes
//    (chunk 2c and 2c + 1 hold columns 8c..8c+7 of every row: zip1 gives rows 4R, 4R + 1, zip2
//    rows 4R + 2, 4R + 3), an activation register of 8 columns of two rows (a panel register as
//    it is stored). The accumulators hold [w0·a0, w0·a1, w1·a0, w1·a1]; the scale products are
//    formed in that arrangement ([dw0, dw0, dw1, dw1] · [da0, da1, da0, da1]: the same products
//    d_w · d_a) and the same fma per output, so an output's bits do not depend on whether SDOT
//    or SMMLA computed it (batch invariance: runs of 1 row take SDOT, longer runs SMMLA).
//    Deinterleaved (UZP1/UZP2) once per group at the store.
//  - q4k_pass (all levels) and q4k_mmla (level 2; runs of 8) for the super-block nibble types
//    (Q4_K, Q5_K, IQ4_XS) against Q8_K rows; q4k_mmla is mmla_pass's arrangement with the
//    activation registers zipped from the pair's rows, and applies q4k_pass's float operations
//    per output to the same exact integer sums.
// Every integer sum is exact, so every copy gives the same bits as the others (and as the x86
// kernels, which apply the same float operations), and the reference's result to float rounding.
#if !defined(LOOM_PN_NS) || !defined(LOOM_PN_LEVEL)
#error "packed_neon_impl.h is included by packed_neon.cpp only"
#endif

#define LOOM_PN LOOM_PN_ATTR inline __attribute__((always_inline))
// GCC's scheduling before register allocation (on at -O2 for AArch64) gathers each accumulator's
// SDOTs back to back in sdot_panels, which an in-order core (Cortex-A55) then waits on, and costs
// spills; without it the source's order stays: consecutive SDOTs go to different accumulators
// (llvm-mca's Cortex-A55 model: 8.1 -> 4.8 cycles per unit for Q4_0, docs/arm.md).
#if defined(__clang__)
#define LOOM_PN_NO_PRESCHED
#else
#define LOOM_PN_NO_PRESCHED __attribute__((optimize("no-schedule-insns")))
#endif

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
LOOM_PN float32x4_t f16x4(const uint8_t* p) {
  return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(reinterpret_cast<const uint16_t*>(p))));
}

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

// What a 32-column block type's tile holds beyond Q4_0's (PackedLayout): lut says the nibbles
// index a table, mxfp4 which one (MXFP4's, else IQ4_NL's), as in the x86 copies.
struct Blocks32 {
  bool nibbles, has_min, fifth_bit, lut, mxfp4;
};
constexpr Blocks32 blocks32_of(const PackedLayout& L) { return Blocks32{L.nibbles, L.has_min, L.fifth_bit, L.lut, L.mxfp4}; }

// The tile geometry of a 32-column block type as constants (PackedLayout's, which the kernels
// would otherwise read at run time: GCC then computes every chunk address with CSELs).
template <Blocks32 F>
struct Geo {
  static constexpr size_t kQ = F.has_min ? 64 : 32;              // q_offset()
  static constexpr size_t kQh = kQ + 64 * (F.nibbles ? 4 : 8);   // qh_offset()
  static constexpr size_t kTile = kQh + (F.fifth_bit ? 64 : 0);  // tile_bytes
  static constexpr int32_t kBias = !F.nibbles || F.lut || F.has_min ? 0 : F.fifth_bit ? 16 : 8;
};
template <Blocks32 F>
constexpr bool geo_matches(const PackedLayout& L) {
  return Geo<F>::kQ == L.q_offset() && Geo<F>::kQh == L.qh_offset() && Geo<F>::kTile == L.tile_bytes &&
         (Geo<F>::kBias == L.bias || (F.nibbles && F.lut));
}
static_assert(geo_matches<blocks32_of(kLayoutQ4_0)>(kLayoutQ4_0) && geo_matches<blocks32_of(kLayoutQ4_1)>(kLayoutQ4_1) &&
              geo_matches<blocks32_of(kLayoutQ5_0)>(kLayoutQ5_0) && geo_matches<blocks32_of(kLayoutQ5_1)>(kLayoutQ5_1) &&
              geo_matches<blocks32_of(kLayoutQ8_0)>(kLayoutQ8_0) && geo_matches<blocks32_of(kLayoutIQ4_NL)>(kLayoutIQ4_NL) &&
              geo_matches<blocks32_of(kLayoutMXFP4)>(kLayoutMXFP4));

// The IQ4_NL levels as signed bytes (kIq4nlBiased - 128): TBL decodes a nibble to its level.
alignas(16) inline constexpr int8_t kIq4nlSigned[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                        1,    13,   25,  38,  53,  69,  89,  113};
// MXFP4's levels as signed bytes (kMxfp4Biased - 128: twice the E2M1 values, the tile's f16 d
// being 2^(e - 128)).
alignas(16) inline constexpr int8_t kMxfp4Signed[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
constexpr bool signed_is_biased_minus_128(const int8_t* s, const uint8_t* b) {
  for (int i = 0; i < 16; ++i) {
    if (s[i] != b[i] - 128) return false;
  }
  return true;
}
static_assert(signed_is_biased_minus_128(kIq4nlSigned, kIq4nlBiased) &&
              signed_is_biased_minus_128(kMxfp4Signed, kMxfp4Biased));
// The signed table a lut type's nibbles go through (TBL).
template <Blocks32 F>
constexpr const int8_t* signed_table() {
  return F.mxfp4 ? kMxfp4Signed : kIq4nlSigned;
}

// Geo::kBias is the bias the integer sums start from (-bias · Σ q): the levels are kept as stored
// (nibbles, nibble + 16 · fifth bit), so Q4_0's 8 and Q5_0's 16 come off there; Q8_0's bytes are
// its signed levels on AArch64 (packed_layout.h), the IQ4_NL and MXFP4 tables are signed (the
// layouts' bias 128 is that of the biased tables the x86 VNNI kernels use: Σ (u - 128) · q is
// Σ u · q - 128 Σ q exactly), the types with a minimum have bias 0.

// Register R's weights of chunk c of a tile: lo and hi as signed bytes (nibble types: the low
// nibbles are elements 4c.., the high ones 16 + 4c..; Q8_0: lo only, elements 4c..).
template <Blocks32 F>
LOOM_PN void decode(const uint8_t* tile, int c, int R, int8x16_t& lo, int8x16_t& hi) {
  const uint8x16_t raw = vld1q_u8(tile + Geo<F>::kQ + 64 * size_t(c) + 16 * size_t(R));
  if constexpr (!F.nibbles) {
    static_assert(kLayoutQ8_0.bias == 0, "AArch64 stores Q8_0's levels as they are (packed_layout.h)");
    lo = vreinterpretq_s8_u8(raw);
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
      const int8x16_t table = vld1q_s8(signed_table<F>());
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
LOOM_PN_ATTR void sdot_pass(const uint8_t* grp, int64_t nb, const uint8_t* act, size_t act_stride, float* out,
                            size_t out_stride, int valid) {
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
        // All low nibbles first, then all high ones: consecutive SDOTs into different
        // accumulators (an in-order core such as Cortex-A55 stalls on back-to-back dependent ones).
        int8x16_t lo[NR], hi[NR];
#pragma GCC unroll 4
        for (int R = 0; R < NR; ++R) decode<F>(tile, C, R0 + R, lo[R], hi[R]);
        for (int a = 0; a < NA; ++a) {
#pragma GCC unroll 4
          for (int R = 0; R < NR; ++R) isum[a][R] = dot_lane<C>(isum[a][R], lo[R], xl[a]);
        }
        for (int a = 0; a < NA; ++a) {
#pragma GCC unroll 4
          for (int R = 0; R < NR; ++R) isum[a][R] = dot_lane<C>(isum[a][R], hi[R], xh[a]);
        }
      });
    } else {
      unroll<8>([&](auto cc) LOOM_PN_ATTR {
        constexpr int C = decltype(cc)::value;
#pragma GCC unroll 4
        for (int R = 0; R < NR; ++R) {
          int8x16_t w, unused;
          decode<F>(tile, C, R0 + R, w, unused);
          for (int a = 0; a < NA; ++a) isum[a][R] = dot_lane<C & 3>(isum[a][R], w, C < 4 ? xl[a] : xh[a]);
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
// SMMLA's weight operands of register R, chunks 2h and 2h + 1 (columns 8h..8h+7 in the low
// nibbles, 16 + 8h.. in the high ones) of a nibble type: one ZIP of 32-bit lanes gives rows 4R,
// 4R + 1 (zip1) and 4R + 2, 4R + 3 (zip2), 8 columns each.
template <Blocks32 F>
LOOM_PN void mmla_weights(const uint8_t* tile, int h, int R, int8x16_t lo[2], int8x16_t hi[2]) {
  auto zip = [](int8x16_t u, int8x16_t v, int z) LOOM_PN_ATTR {
    const int32x4_t a = vreinterpretq_s32_s8(u), b = vreinterpretq_s32_s8(v);
    return vreinterpretq_s8_s32(z == 0 ? vzip1q_s32(a, b) : vzip2q_s32(a, b));
  };
  if constexpr (F.fifth_bit) {
    int8x16_t l0, h0, l1, h1;
    decode<F>(tile, 2 * h, R, l0, h0);
    decode<F>(tile, 2 * h + 1, R, l1, h1);
    for (int z = 0; z < 2; ++z) {
      lo[z] = zip(l0, l1, z);
      hi[z] = zip(h0, h1, z);
    }
  } else {
    const uint8_t* q = tile + Geo<F>::kQ + 128 * size_t(h) + 16 * size_t(R);
    const uint32x4_t c0 = vreinterpretq_u32_u8(vld1q_u8(q)), c1 = vreinterpretq_u32_u8(vld1q_u8(q + 64));
    const uint8x16_t zz[2] = {vreinterpretq_u8_u32(vzip1q_u32(c0, c1)), vreinterpretq_u8_u32(vzip2q_u32(c0, c1))};
    for (int z = 0; z < 2; ++z) {
      const uint8x16_t l = vandq_u8(zz[z], vdupq_n_u8(0x0f)), hh = vshrq_n_u8(zz[z], 4);
      if constexpr (F.lut) {
        const int8x16_t table = vld1q_s8(signed_table<F>());
        lo[z] = vqtbl1q_s8(table, l);
        hi[z] = vqtbl1q_s8(table, hh);
      } else {
        lo[z] = vreinterpretq_s8_u8(l);
        hi[z] = vreinterpretq_s8_u8(hh);
      }
    }
  }
}
#endif  // LOOM_PN_LEVEL >= 2

// ---- runs of activation rows in panels (packed_act_panels.h) ----------------------------------

// A run of NA (2, 4 or 8) activation rows reads panels of K rows: one of 2, one of 4, or two of 4.
template <int NA>
struct RunPanels {
  static constexpr int K = NA >= 4 ? 4 : 2;
  static constexpr int kPairs = NA / 2;
};
// Block b of the panel holding run row a (a panel of K rows at act + a / K · K · act_stride).
LOOM_PN const uint8_t* panel_block(const uint8_t* act, size_t act_stride, int K, int a, int64_t b) {
  return act + size_t(a / K) * size_t(K) * act_stride + ActPanel::block(K, b);
}
// The K words (d or sums) at p of a panel of K rows as 4 lanes: K = 2 repeats rows 0, 1.
LOOM_PN uint32x4_t panel_words(const uint8_t* p, int K) {
  if (K == 4) return vld1q_u32(reinterpret_cast<const uint32_t*>(p));
  const uint32x2_t v = vld1_u32(reinterpret_cast<const uint32_t*>(p));
  return vcombine_u32(v, v);
}
// Pair p's two words of a panel's 4 lanes, repeated: [w2p, w2p+1, w2p, w2p+1] (SMMLA's columns).
LOOM_PN uint32x4_t pair_words(uint32x4_t w, int p) {
  const uint64x2_t v = vreinterpretq_u64_u32(w);
  return vreinterpretq_u32_u64(p == 0 ? vdupq_laneq_u64(v, 0) : vdupq_laneq_u64(v, 1));
}

// NA (2, 4, 8) activation rows in panels against the rows of registers [R0, R0 + NR) of one group
// (levels 0, 1: sdot_pass's arithmetic). A panel register holds 8 columns of two rows, so SDOT by
// element against lane 2 j2 + (c & 1) takes chunk c's 4 columns of the pair's row j2: each
// activation register feeds both rows of its pair, one load per 16 bytes.
template <int NA, Blocks32 F, int R0, int NR, bool kPrefetch>
LOOM_PN_ATTR LOOM_PN_NO_PRESCHED void sdot_panels(const uint8_t* grp, int64_t nb, const uint8_t* act, size_t act_stride,
                                                  float* out, size_t out_stride, int valid) {
  constexpr int K = RunPanels<NA>::K;
  float32x4_t acc[NA][NR];
  for (int a = 0; a < NA; ++a) {
    for (int R = 0; R < NR; ++R) acc[a][R] = vdupq_n_f32(0.0f);
  }
  constexpr size_t tile_bytes = Geo<F>::kTile;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* tile = grp + size_t(b) * tile_bytes;
    if constexpr (kPrefetch && R0 == 0) prefetch_ahead(tile, tile_bytes);
    int32x4_t isum[NA][NR];
    float32x4_t d[NA / K], s[NA / K];  // each panel's d and sums (or s)
    int32x4_t init[NA / K];
    for (int k = 0; k < NA / K; ++k) {
      const uint8_t* pb = panel_block(act, act_stride, K, K * k, b);
      d[k] = vreinterpretq_f32_u32(panel_words(pb, K));
      s[k] = vreinterpretq_f32_u32(panel_words(pb + 4 * K, K));
      init[k] = vmulq_n_s32(vreinterpretq_s32_f32(s[k]), -Geo<F>::kBias);
    }
    unroll<NA>([&](auto aa) LOOM_PN_ATTR {
      constexpr int A = decltype(aa)::value;
      const int32x4_t i0 = F.has_min || Geo<F>::kBias == 0 ? vdupq_n_s32(0) : vdupq_laneq_s32(init[A / K], A % K);
      for (int R = 0; R < NR; ++R) isum[A][R] = i0;
    });
    // Register m of every pair, and chunk c's weights of register R against it.
    auto x_of = [&](int q, int m) LOOM_PN_ATTR {
      return vld1q_s8(reinterpret_cast<const int8_t*>(panel_block(act, act_stride, K, 2 * q, b) + 8 * K +
                                                      64 * ((2 * q) % K / 2) + 16 * m));
    };
    auto dots = [&](auto cc, const int8x16_t* w, const int8x16_t* x) LOOM_PN_ATTR {
      constexpr int C = decltype(cc)::value;
      unroll<NA>([&](auto aa) LOOM_PN_ATTR {
        constexpr int A = decltype(aa)::value;
#pragma GCC unroll 4
        for (int R = 0; R < NR; ++R) isum[A][R] = dot_lane<2 * (A % 2) + (C & 1)>(isum[A][R], w[R], x[A / 2]);
      });
    };
    if constexpr (F.nibbles) {
      for (int h = 0; h < 2; ++h) {
        int8x16_t xl[NA / 2], xh[NA / 2];  // columns 8h.., 16 + 8h..
        for (int q = 0; q < NA / 2; ++q) {
          xl[q] = x_of(q, h);
          xh[q] = x_of(q, 2 + h);
        }
        unroll<2>([&](auto cc) LOOM_PN_ATTR {
          constexpr int C = decltype(cc)::value;
          int8x16_t lo[NR], hi[NR];
#pragma GCC unroll 4
          for (int R = 0; R < NR; ++R) decode<F>(tile, 2 * h + C, R0 + R, lo[R], hi[R]);
          dots(cc, lo, xl);
          dots(cc, hi, xh);
        });
      }
    } else {
      for (int m = 0; m < 4; ++m) {
        int8x16_t x[NA / 2];
        for (int q = 0; q < NA / 2; ++q) x[q] = x_of(q, m);
        unroll<2>([&](auto cc) LOOM_PN_ATTR {
          int8x16_t w[NR], unused;
#pragma GCC unroll 4
          for (int R = 0; R < NR; ++R) decode<F>(tile, 2 * m + decltype(cc)::value, R0 + R, w[R], unused);
          dots(cc, w, x);
        });
      }
    }
#pragma GCC unroll 4
    for (int R = 0; R < NR; ++R) {
      const float32x4_t dw = f16x4(tile + 8 * size_t(R0 + R));
      float32x4_t mw = vdupq_n_f32(0.0f);
      if constexpr (F.has_min) mw = f16x4(tile + PackedLayout::kScaleBytes + 8 * size_t(R0 + R));
      unroll<NA>([&](auto aa) LOOM_PN_ATTR {
        constexpr int A = decltype(aa)::value;
        acc[A][R] = vfmaq_f32(acc[A][R], vcvtq_f32_s32(isum[A][R]), vmulq_laneq_f32(dw, d[A / K], A % K));
        if constexpr (F.has_min) acc[A][R] = vfmaq_laneq_f32(acc[A][R], mw, s[A / K], A % K);
      });
    }
  }
#pragma GCC unroll 8
  for (int a = 0; a < NA; ++a) {
#pragma GCC unroll 4
    for (int R = 0; R < NR; ++R) store4(out + size_t(a) * out_stride, acc[a][R], 4 * (R0 + R), valid);
  }
}

#if LOOM_PN_LEVEL >= 2
// NP activation pairs in panels against the rows of registers [R0, R0 + NR) (mmla_pass in the
// file comment). acc[q][2R + z]: pair q, rows 4R + 2z, 4R + 2z + 1. A panel register is already
// SMMLA's 8 columns of the pair's two rows, and the pair's d and sums are one half of the panel's.
template <int NP, Blocks32 F, int R0, int NR, bool kPrefetch>
LOOM_PN_ATTR void mmla_pass(const uint8_t* grp, int64_t nb, const uint8_t* act, size_t act_stride, float* out,
                            size_t out_stride, int valid) {
  constexpr int K = RunPanels<2 * NP>::K;
  float32x4_t acc[NP][2 * NR];
  for (int p = 0; p < NP; ++p) {
    for (int k = 0; k < 2 * NR; ++k) acc[p][k] = vdupq_n_f32(0.0f);
  }
  constexpr int32_t bias = Geo<F>::kBias;
  constexpr size_t tile_bytes = Geo<F>::kTile;
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* tile = grp + size_t(b) * tile_bytes;
    if constexpr (kPrefetch && R0 == 0) prefetch_ahead(tile, tile_bytes);
    // Pair p's rows' {d, sum (or s)}: [d0, d1, d0, d1], [sum0, sum1, sum0, sum1].
    const uint8_t* pb[NP];
    float32x4_t da[NP], sa[NP];
    int32x4_t isum[NP][2 * NR];
    uint32x4_t init4[NP];  // the panel's -bias · sums
    for (int p = 0; p < NP; ++p) {
      const uint8_t* head = panel_block(act, act_stride, K, 2 * p, b);
      const int pp = (2 * p) % K / 2;  // the pair within its panel
      pb[p] = head + 64 * size_t(pp);
      const uint32x4_t s4 = panel_words(head + 4 * K, K);
      if (pp == 0) init4[p] = vreinterpretq_u32_s32(vmulq_n_s32(vreinterpretq_s32_u32(s4), -bias));
      else init4[p] = init4[p - 1];
      da[p] = vreinterpretq_f32_u32(pair_words(panel_words(head, K), pp));
      sa[p] = vreinterpretq_f32_u32(pair_words(s4, pp));
      const int32x4_t init = F.has_min || bias == 0 ? vdupq_n_s32(0) : vreinterpretq_s32_u32(pair_words(init4[p], pp));
      for (int k = 0; k < 2 * NR; ++k) isum[p][k] = init;
    }
    // Register m of pair p: columns 8m..8m+7 of its two rows.
    auto x_of = [&](int p, int m) LOOM_PN_ATTR { return vld1q_s8(reinterpret_cast<const int8_t*>(pb[p] + 8 * K + 16 * m)); };
    const uint8_t* q = tile + Geo<F>::kQ;
    if constexpr (!F.nibbles) {
      // Chunks 2m, 2m + 1: columns 8m..8m+7.
      for (int m = 0; m < 4; ++m) {
        int8x16_t x[NP];
        for (int p = 0; p < NP; ++p) x[p] = x_of(p, m);
#pragma GCC unroll 4
        for (int R = 0; R < NR; ++R) {
          const size_t roff = 16 * size_t(R0 + R);
          const uint32x4_t c0 = vreinterpretq_u32_u8(vld1q_u8(q + 128 * size_t(m) + roff));
          const uint32x4_t c1 = vreinterpretq_u32_u8(vld1q_u8(q + 128 * size_t(m) + 64 + roff));
          const int8x16_t w0 = vreinterpretq_s8_u32(vzip1q_u32(c0, c1)), w1 = vreinterpretq_s8_u32(vzip2q_u32(c0, c1));
          for (int p = 0; p < NP; ++p) {
            isum[p][2 * R] = vmmlaq_s32(isum[p][2 * R], w0, x[p]);
            isum[p][2 * R + 1] = vmmlaq_s32(isum[p][2 * R + 1], w1, x[p]);
          }
        }
      }
    } else {
      // Chunks 2h, 2h + 1: low nibbles columns 8h..8h+7, high nibbles 16 + 8h...
      for (int h = 0; h < 2; ++h) {
        int8x16_t xl[NP], xh[NP];
        for (int p = 0; p < NP; ++p) {
          xl[p] = x_of(p, h);
          xh[p] = x_of(p, 2 + h);
        }
#pragma GCC unroll 4
        for (int R = 0; R < NR; ++R) {
          int8x16_t lo[2], hi[2];  // rows 4R, 4R + 1 (zip1) and 4R + 2, 4R + 3 (zip2)
          mmla_weights<F>(tile, h, R0 + R, lo, hi);
          for (int p = 0; p < NP; ++p) {
            for (int z = 0; z < 2; ++z) {
              isum[p][2 * R + z] = vmmlaq_s32(isum[p][2 * R + z], lo[z], xl[p]);
              isum[p][2 * R + z] = vmmlaq_s32(isum[p][2 * R + z], hi[z], xh[p]);
            }
          }
        }
      }
    }
#pragma GCC unroll 4
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
#pragma GCC unroll 8
  for (int p = 0; p < NP; ++p) {
#pragma GCC unroll 4
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

// One run of na (8, 4, 2, 1) activation rows against one group; kPrefetch on the group's first
// run only (the others find its tiles in the cache).
template <Blocks32 F, bool kPrefetch>
void blocks32_run(int na, const uint8_t* grp, int64_t nb, const uint8_t* a, size_t as, float* o, size_t os, int valid) {
#if LOOM_PN_LEVEL >= 2
  if (na == 8) {
    mmla_pass<4, F, 0, 1, kPrefetch>(grp, nb, a, as, o, os, valid);
    mmla_pass<4, F, 1, 1, kPrefetch>(grp, nb, a, as, o, os, valid);
    mmla_pass<4, F, 2, 1, kPrefetch>(grp, nb, a, as, o, os, valid);
    mmla_pass<4, F, 3, 1, kPrefetch>(grp, nb, a, as, o, os, valid);
    return;
  }
  if (na == 4) {
    mmla_pass<2, F, 0, 2, kPrefetch>(grp, nb, a, as, o, os, valid);
    mmla_pass<2, F, 2, 2, kPrefetch>(grp, nb, a, as, o, os, valid);
    return;
  }
  if (na == 2) return mmla_pass<1, F, 0, 4, kPrefetch>(grp, nb, a, as, o, os, valid);
#else
  if (na == 4) {
    sdot_panels<4, F, 0, 2, kPrefetch>(grp, nb, a, as, o, os, valid);
    sdot_panels<4, F, 2, 2, kPrefetch>(grp, nb, a, as, o, os, valid);
    return;
  }
  if (na == 2) return sdot_panels<2, F, 0, 4, kPrefetch>(grp, nb, a, as, o, os, valid);
#endif
  sdot_pass<1, F, 0, 4>(grp, nb, a, as, o, os, valid);
}

// packed_gemm_loop's walk with runs of up to kMaxRun rows, which the panels of a batch follow
// (runs of 8 and 4 start at multiples of 4, then one of 2, then one of 1). SMMLA takes 8 rows (4
// pairs) against 4 weight rows per pass: each weight register, which costs a load and a ZIP, then
// feeds 4 SMMLAs, and the activation registers cost a load each (8 weight rows x 4 activation
// rows: 3.8 instructions per unit for Q4_0, against 3.6). SDOT takes 4 rows against 8 weight rows:
// its 8 rows x 4 (8 accumulators and 8 block sums per pass) kept GCC's allocation spill-free.
constexpr int kMaxRun = LOOM_PN_LEVEL >= 2 ? 8 : 4;

template <Blocks32 F>
void run_blocks32(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                  size_t act_stride, int n, float* out, size_t out_stride) {
  const int64_t nb = cols / kPackBlock;
  const size_t group_bytes = packed_group_stride(t, cols);
  const auto* a = static_cast<const uint8_t*>(act);
  for (int64_t g = g0; g < g1; ++g) {
    const int valid = int(rows - g * 16 < 16 ? rows - g * 16 : 16);
    const uint8_t* grp = static_cast<const uint8_t*>(packed) + size_t(g) * group_bytes;
    int i = 0;
    for (int na = kMaxRun; na >= 1; na /= 2) {
      for (; i + na <= n; i += na) {
        float* o = out + size_t(i) * out_stride + size_t(g * 16);
        if (i == 0) blocks32_run<F, true>(na, grp, nb, a, act_stride, o, out_stride, valid);
        else blocks32_run<F, false>(na, grp, nb, a + size_t(i) * act_stride, act_stride, o, out_stride, valid);
      }
    }
  }
}

// ---- the super-block types against Q8_K -----------------------------------------------------

// Q4_K's nibble arrangement (PackedQ4K), and the two types that share it.
enum class Nib256 { kQ4K, kQ5K, kIQ4XS };

// The tile offsets of a Nib256 type.
template <Nib256 K>
struct Nib256Geo {
  static constexpr bool kQ5 = K == Nib256::kQ5K, kIq4 = K == Nib256::kIQ4XS;
  static constexpr size_t kTile = kQ5 ? PackedQ5K::kTileBytes : kIq4 ? PackedIQ4XS::kTileBytes : PackedQ4K::kTileBytes;
  static constexpr size_t kQs = kIq4 ? PackedIQ4XS::kQs : PackedQ4K::kQs;
  static constexpr size_t kSc = kIq4 ? PackedIQ4XS::kSc : PackedQ4K::kSc;
};

// NA activation rows against the rows of registers [R0, R0 + NR) of one group of Q4_K (Q5_K,
// IQ4_XS) tiles. One half-pair g at a time: each chunk loaded once, its low nibbles (sub-block 2g)
// and high nibbles (2g + 1) against activation lane c of the sub-blocks' registers (SDOT by
// element), each sub-block's exact sum weighted by its scale (MLA); the mins against the
// activation's sub-block sums (bsums) once per super-block, then the floats as the x86 kernels
// apply them: acc = fma(d_a, fma(d, isum, -(dmin · msum)), acc) (IQ4_XS: fma(d_a, d · isum, acc)).
// Q5_K: the fifth bits (chunk masks after the nibbles) add 16. IQ4_XS: TBL to the signed table
// values, signed scales, no mins.
template <int NA, int R0, int NR, Nib256 K>
LOOM_PN_ATTR void q4k_pass(const uint8_t* grp, int64_t cols, const uint8_t* act, size_t act_stride, float* out,
                           size_t out_stride, int valid) {
  using G = Nib256Geo<K>;
  constexpr bool kQ5 = G::kQ5, kIq4 = G::kIq4;
  constexpr size_t kTile = G::kTile, kQs = G::kQs, kSc = G::kSc;
  float32x4_t acc[NA][NR];
  for (int a = 0; a < NA; ++a) {
    for (int R = 0; R < NR; ++R) acc[a][R] = vdupq_n_f32(0.0f);
  }
  const int64_t ns = cols / PackedQ4K::kCols;
  for (int64_t sb = 0; sb < ns; ++sb) {
    const uint8_t* tile = grp + size_t(sb) * kTile;
    if constexpr (R0 == 0) prefetch_ahead(tile, kTile);
    const uint8_t* ab[NA];
    int32x4_t isum[NA][NR], msum[NA][NR];
    for (int a = 0; a < NA; ++a) {
      ab[a] = act + size_t(a) * act_stride + size_t(sb) * sizeof(BlockQ8_K);
      for (int R = 0; R < NR; ++R) isum[a][R] = msum[a][R] = vdupq_n_s32(0);
    }
    for (int g = 0; g < 4; ++g) {
      // Sub-blocks 2g (low nibbles) and 2g + 1 (high nibbles) of the same chunks.
      const uint8_t* q = tile + kQs + 512 * size_t(g);
      int8x16_t x[NA][4];  // columns 64g + 16i .. + 15
      int32x4_t sub[NA][NR][2];
      for (int a = 0; a < NA; ++a) {
        for (int i = 0; i < 4; ++i) x[a][i] = vld1q_s8(reinterpret_cast<const int8_t*>(ab[a] + 4 + 64 * g + 16 * i));
        for (int R = 0; R < NR; ++R) sub[a][R][0] = sub[a][R][1] = vdupq_n_s32(0);
      }
      unroll<8>([&](auto cc) LOOM_PN_ATTR {
        constexpr int C = decltype(cc)::value;
#pragma GCC unroll 4
        for (int R = 0; R < NR; ++R) {
          const uint8x16_t raw = vld1q_u8(q + 64 * C + 16 * size_t(R0 + R));
          uint8x16_t u[2] = {vandq_u8(raw, vdupq_n_u8(0x0f)), vshrq_n_u8(raw, 4)};
          if constexpr (kQ5) {
            const uint8_t* mask = tile + PackedQ5K::kQh + 128 * size_t(g) + 16 * C + 2 * size_t(R0 + R);
            u[0] = vorrq_u8(u[0], fifth_bits(mask));
            u[1] = vorrq_u8(u[1], fifth_bits(mask + 8));
          }
          for (int h = 0; h < 2; ++h) {
            int8x16_t w;
            if constexpr (kIq4) w = vqtbl1q_s8(vld1q_s8(kIq4nlSigned), u[h]);
            else w = vreinterpretq_s8_u8(u[h]);
            for (int a = 0; a < NA; ++a) sub[a][R][h] = dot_lane<C & 3>(sub[a][R][h], w, x[a][2 * h + C / 4]);
          }
        }
      });
#pragma GCC unroll 4
      for (int R = 0; R < NR; ++R) {
        for (int h = 0; h < 2; ++h) {
          const int j = 2 * g + h;
          const uint8_t* scp = tile + kSc + 16 * size_t(j) + 4 * size_t(R0 + R);
          int32x4_t sc;
          if constexpr (kIq4) sc = vmovl_s16(vget_low_s16(vmovl_s8(vld1_s8(reinterpret_cast<const int8_t*>(scp)))));
          else sc = vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(vmovl_u8(vld1_u8(scp)))));
          int32x4_t m = vdupq_n_s32(0);
          if constexpr (!kIq4) {
            m = vreinterpretq_s32_u32(
                vmovl_u16(vget_low_u16(vmovl_u8(vld1_u8(tile + PackedQ4K::kM + 16 * size_t(j) + 4 * size_t(R0 + R))))));
          }
          for (int a = 0; a < NA; ++a) {
            isum[a][R] = vmlaq_s32(isum[a][R], sub[a][R][h], sc);
            if constexpr (!kIq4) {
              int16_t bs[2];
              std::memcpy(bs, ab[a] + 4 + 256 + 4 * j, 4);
              msum[a][R] = vmlaq_n_s32(msum[a][R], m, int32_t(bs[0]) + int32_t(bs[1]));
            }
          }
        }
      }
    }
#pragma GCC unroll 4
    for (int R = 0; R < NR; ++R) {
      const float32x4_t d = f16x4(tile + PackedQ4K::kD + 8 * size_t(R0 + R));
      float32x4_t dmin = vdupq_n_f32(0.0f);
      if constexpr (!kIq4) dmin = f16x4(tile + PackedQ4K::kDmin + 8 * size_t(R0 + R));
      for (int a = 0; a < NA; ++a) {
        float32x4_t t;
        if constexpr (kIq4) t = vmulq_f32(d, vcvtq_f32_s32(isum[a][R]));
        else t = vfmaq_f32(vnegq_f32(vmulq_f32(dmin, vcvtq_f32_s32(msum[a][R]))), d, vcvtq_f32_s32(isum[a][R]));
        acc[a][R] = vfmaq_f32(acc[a][R], vdupq_n_f32(f32_at(ab[a])), t);
      }
    }
  }
  for (int a = 0; a < NA; ++a) {
    for (int R = 0; R < NR; ++R) store4(out + size_t(a) * out_stride, acc[a][R], 4 * (R0 + R), valid);
  }
}

#if LOOM_PN_LEVEL >= 2
// ---- Q4_K (Q5_K, IQ4_XS) with SMMLA: runs of 8 activation rows ---------------------------------

// Q5_K's fifth bits of q4k_mmla_weights' w[m][z] (16 or 0 per byte). LD4 of halfwords over the
// chunk masks of chunks 4i..4i+3 (64 bytes) leaves register R's 2-byte mask of chunk c and nibble
// half h in halfword 2c + h (byte z: rows 2z and 2z + 1 in its low and high 4 bits), so the mask
// bytes of chunks 2m and 2m + 1 are bytes 8m + 2h + z and 4 further: EXT brings them to 0 and 4,
// TBL spreads them over the zipped register's bytes (0..3, 8..11 and 4..7, 12..15), CMTST tests
// each byte's bit.
LOOM_PN void q5k_mmla_fifth(const uint8_t* tile, int j, int i, int R, uint8x16_t f[2][2]) {
  alignas(16) static constexpr uint8_t kSpread[16] = {0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4};
  alignas(16) static constexpr uint8_t kSel[16] = {1, 2, 4, 8, 1, 2, 4, 8, 16, 32, 64, 128, 16, 32, 64, 128};
  const uint16x8x4_t mv =
      vld4q_u16(reinterpret_cast<const uint16_t*>(tile + PackedQ5K::kQh + 128 * size_t(j / 2) + 64 * size_t(i)));
  const uint8x16_t bytes = vreinterpretq_u8_u16(mv.val[R]);
  const uint8x16_t spread = vld1q_u8(kSpread), sel = vld1q_u8(kSel);
  auto ext = [&](int n) LOOM_PN_ATTR {
    switch (n) {
      case 0: return bytes;
      case 1: return vextq_u8(bytes, bytes, 1);
      case 2: return vextq_u8(bytes, bytes, 2);
      case 3: return vextq_u8(bytes, bytes, 3);
      case 8: return vextq_u8(bytes, bytes, 8);
      case 9: return vextq_u8(bytes, bytes, 9);
      case 10: return vextq_u8(bytes, bytes, 10);
      default: return vextq_u8(bytes, bytes, 11);
    }
  };
  for (int m = 0; m < 2; ++m) {
    for (int z = 0; z < 2; ++z) {
      const uint8x16_t b = vqtbl1q_u8(ext(8 * m + 2 * (j % 2) + z), spread);
      f[m][z] = vandq_u8(vtstq_u8(b, sel), vdupq_n_u8(16));
    }
  }
}

// SMMLA's weight operands of register R for columns 16i..16i+15 of sub-block j (half-pair j / 2:
// low nibbles for even j, high ones for odd j) from chunks c[k] = chunk 4i + k of R: w[m][z] =
// columns 16i + 8m..+7 of rows 4R + 2z, 4R + 2z + 1 (chunks 2m, 2m + 1 zipped as in mmla_weights).
template <Nib256 K>
LOOM_PN void q4k_mmla_weights(const uint8x16_t c[4], const uint8_t* tile, int j, int i, int R, int8x16_t w[2][2]) {
  using G = Nib256Geo<K>;
  const int h = j % 2;
  auto nib = [h](uint8x16_t v) LOOM_PN_ATTR { return h == 0 ? vandq_u8(v, vdupq_n_u8(0x0f)) : vshrq_n_u8(v, 4); };
  uint8x16_t u[2][2], f[2][2];
  for (int m = 0; m < 2; ++m) {
    const uint32x4_t a = vreinterpretq_u32_u8(c[2 * m]), b = vreinterpretq_u32_u8(c[2 * m + 1]);
    u[m][0] = vreinterpretq_u8_u32(vzip1q_u32(a, b));
    u[m][1] = vreinterpretq_u8_u32(vzip2q_u32(a, b));
  }
  if constexpr (G::kQ5) q5k_mmla_fifth(tile, j, i, R, f);
  for (int m = 0; m < 2; ++m) {
    for (int z = 0; z < 2; ++z) {
      uint8x16_t v = nib(u[m][z]);
      if constexpr (G::kQ5) v = vorrq_u8(v, f[m][z]);
      if constexpr (G::kIq4) w[m][z] = vqtbl1q_s8(vld1q_s8(kIq4nlSigned), v);
      else w[m][z] = vreinterpretq_s8_u8(v);
    }
  }
}

// One step of q4k_mmla: columns 16i..16i+15 of sub-block j, register R against NP pairs of
// activation rows (row a's Q8_K block at ab + a · as), into the running sums S[p][z]. Written in
// the order an in-order core (Cortex-A510) wants, which GCC keeps (LOOM_PN_NO_PRESCHED): loads a
// few instructions before their use, and SMMLAs into the same accumulator 4 apart.
template <int NP, Nib256 K>
LOOM_PN void q4k_mmla_step(const uint8_t* tile, int j, int i, int R, const uint8_t* ab, size_t as, int32x4_t (*S)[2]) {
  const uint8_t* q = tile + Nib256Geo<K>::kQs + 512 * size_t(j / 2) + 64 * size_t(4 * i) + 16 * size_t(R);
  uint8x16_t c[4];
  for (int k = 0; k < 4; ++k) c[k] = vld1q_u8(q + 64 * k);
  const size_t off = offsetof(BlockQ8_K, qs) + 32 * size_t(j) + 16 * size_t(i);
  int64x2_t r[NP][2];  // pair p's rows' 16 bytes
  auto load = [&](int p) LOOM_PN_ATTR {
    r[p][0] = vreinterpretq_s64_u8(vld1q_u8(ab + size_t(2 * p) * as + off));
    r[p][1] = vreinterpretq_s64_u8(vld1q_u8(ab + size_t(2 * p + 1) * as + off));
  };
  for (int p = 0; p < NP && p < 2; ++p) load(p);
  int8x16_t w[2][2];
  q4k_mmla_weights<K>(c, tile, j, i, R, w);
  // Pairs two at a time: the next two pairs' loads between the first pairs' SMMLAs of columns
  // 0..7 (m = 0) and 8..15 (m = 1).
  for (int p0 = 0; p0 < NP; p0 += 2) {
    const int np = NP - p0 < 2 ? NP - p0 : 2;
    int8x16_t x[2][2];  // [pair][m]: columns 8m..8m+7 of both rows
    for (int p = 0; p < np; ++p) {
      x[p][0] = vreinterpretq_s8_s64(vzip1q_s64(r[p0 + p][0], r[p0 + p][1]));
      x[p][1] = vreinterpretq_s8_s64(vzip2q_s64(r[p0 + p][0], r[p0 + p][1]));
    }
    for (int m = 0; m < 2; ++m) {
      for (int p = 0; p < np; ++p) {
        for (int z = 0; z < 2; ++z) S[p0 + p][z] = vmmlaq_s32(S[p0 + p][z], w[m][z], x[p][m]);
      }
      if (m == 0) {
        for (int p = p0 + 2; p < NP && p < p0 + 4; ++p) load(p);
      }
    }
  }
}

// q4k_mmla keeps one running sum per output over a super-block, S_j = sub_0 + .. + sub_j (SMMLA
// accumulates on: no zeroing per sub-block), and isum = Σ_j sc_j · sub_j as Σ_j S_j · (sc_j -
// sc_j+1) with sc_8 = 0, exactly (wrapping int32 arithmetic, whose result fits). This gives register
// R's sc_j - sc_j+1 (int8: scales 0..63, IQ4_XS's -32..31) in SMMLA's arrangement:
// d[z] = [Δ(4R + 2z), Δ(4R + 2z), Δ(4R + 2z + 1), Δ(4R + 2z + 1)].
template <Nib256 K>
LOOM_PN void q4k_mmla_dscale(const uint8_t* tile, int j, int R, int32x4_t d[2]) {
  // 8 bytes from row 4R's (the 4 beyond are the next register's or the mins, unused).
  const int8_t* p = reinterpret_cast<const int8_t*>(tile + Nib256Geo<K>::kSc + 16 * size_t(j) + 4 * size_t(R));
  int8x8_t s = vld1_s8(p);
  if (j < 7) s = vsub_s8(s, vld1_s8(p + 16));
  const int16x8_t w = vmovl_s8(vzip1_s8(s, s));
  d[0] = vmovl_s16(vget_low_s16(w));
  d[1] = vmovl_high_s16(w);
}

// Register R's mins as SMMLA weight operands: mz[z] = [m_0..7 of row 4R + 2z, of row 4R + 2z + 1]
// (LD4 of 32-bit words: lane j of word R holds m_j of rows 4R..4R+3; TBL gathers the bytes).
LOOM_PN void q4k_mins8(const uint8_t* tile, int R, int8x16_t mz[2]) {
  alignas(16) static constexpr uint8_t kIdx[2][16] = {{0, 4, 8, 12, 16, 20, 24, 28, 1, 5, 9, 13, 17, 21, 25, 29},
                                                      {2, 6, 10, 14, 18, 22, 26, 30, 3, 7, 11, 15, 19, 23, 27, 31}};
  const uint32x4x4_t lo = vld4q_u32(reinterpret_cast<const uint32_t*>(tile + PackedQ4K::kM));
  const uint32x4x4_t hi = vld4q_u32(reinterpret_cast<const uint32_t*>(tile + PackedQ4K::kM + 64));
  const uint8x16x2_t t = {{vreinterpretq_u8_u32(lo.val[R]), vreinterpretq_u8_u32(hi.val[R])}};
  for (int z = 0; z < 2; ++z) mz[z] = vreinterpretq_s8_u8(vqtbl2q_u8(t, vld1q_u8(kIdx[z])));
}

// A pair's sub-block sums bsum_j (the sums of the Q8_K block's bsums 2j, 2j + 1; |bsum_j| <= 4096)
// as SMMLA activation operands, bsum = 128 · hi + lo: hi (-32..31) and lo (0..127) of row 0's 8
// sub-blocks, then row 1's.
LOOM_PN void q4k_bsum8(const uint8_t* a0, const uint8_t* a1, int8x16_t& hi, int8x16_t& lo) {
  auto sums = [](const uint8_t* a) LOOM_PN_ATTR {
    const int16_t* bp = reinterpret_cast<const int16_t*>(a + offsetof(BlockQ8_K, bsums));
    return vpaddq_s16(vld1q_s16(bp), vld1q_s16(bp + 8));
  };
  const int16x8_t b0 = sums(a0), b1 = sums(a1);
  hi = vshrn_high_n_s16(vshrn_n_s16(b0, 7), b1, 7);
  lo = vandq_s8(vuzp1q_s8(vreinterpretq_s8_s16(b0), vreinterpretq_s8_s16(b1)), vdupq_n_s8(0x7f));
}

// The end of a super-block in q4k_mmla: the mins' sums, then q4k_pass's float operations per
// output in SMMLA's arrangement ([d0, d0, d1, d1] · [da0, da1, da0, da1]: the same products).
template <int NP, Nib256 K>
LOOM_PN void q4k_mmla_finish(const uint8_t* tile, int R, const uint8_t* ab, size_t as, const int32x4_t (*isum)[2],
                             float (*acc)[2][4]) {
  constexpr bool kIq4 = K == Nib256::kIQ4XS;
  const float32x4_t d = f16x4(tile + PackedQ4K::kD + 8 * size_t(R));
  const float32x4_t dz[2] = {vzip1q_f32(d, d), vzip2q_f32(d, d)};
  float32x4_t mz[2] = {d, d};
  int8x16_t mw[2];
  if constexpr (!kIq4) {
    const float32x4_t dmin = f16x4(tile + PackedQ4K::kDmin + 8 * size_t(R));
    mz[0] = vzip1q_f32(dmin, dmin);
    mz[1] = vzip2q_f32(dmin, dmin);
    q4k_mins8(tile, R, mw);
  }
  for (int p = 0; p < NP; ++p) {
    const uint8_t* a0 = ab + size_t(2 * p) * as;
    float32x2_t dv = vld1_dup_f32(reinterpret_cast<const float*>(a0));
    dv = vld1_lane_f32(reinterpret_cast<const float*>(a0 + as), dv, 1);
    const float32x4_t da = vcombine_f32(dv, dv);
    int32x4_t ms[2] = {isum[p][0], isum[p][0]};
    if constexpr (!kIq4) {  // Σ_j m_j · bsum_j = 128 · Σ_j m_j · hi_j + Σ_j m_j · lo_j
      int8x16_t hi, lo;
      q4k_bsum8(a0, a0 + as, hi, lo);
      for (int z = 0; z < 2; ++z) {
        ms[z] = vmmlaq_s32(vshlq_n_s32(vmmlaq_s32(vdupq_n_s32(0), mw[z], hi), 7), mw[z], lo);
      }
    }
    for (int z = 0; z < 2; ++z) {
      const float32x4_t fi = vcvtq_f32_s32(isum[p][z]);
      float32x4_t t;
      if constexpr (kIq4) t = vmulq_f32(dz[z], fi);
      else t = vfmaq_f32(vnegq_f32(vmulq_f32(mz[z], vcvtq_f32_s32(ms[z]))), dz[z], fi);
      vst1q_f32(acc[p][z], vfmaq_f32(vld1q_f32(acc[p][z]), da, t));
    }
  }
}

// NP activation pairs against the 4 rows of register R of one group of Q4_K (Q5_K, IQ4_XS)
// tiles with SMMLA, accumulators as mmla_pass's (pair p, rows 4R + 2z, 4R + 2z + 1). A pair's
// activation registers are its two rows' Q8_K bytes zipped (ZIP1/ZIP2 of 64-bit lanes), 16
// columns at a time. Integer sums: q4k_mmla_dscale; floats: q4k_mmla_finish (q4k_pass's).
template <int NP, int R, Nib256 K>
LOOM_PN_ATTR LOOM_PN_NO_PRESCHED void q4k_mmla(const uint8_t* grp, int64_t cols, const uint8_t* act, size_t act_stride,
                                               float* out, size_t out_stride, int valid) {
  using G = Nib256Geo<K>;
  // The float sums live in memory (read and written once per super-block): in registers they
  // would leave too few for the integer sums, and GCC spills inside the sub-block loop.
  float acc[NP][2][4] = {};
  const int64_t ns = cols / PackedQ4K::kCols;
  for (int64_t sb = 0; sb < ns; ++sb) {
    const uint8_t* tile = grp + size_t(sb) * G::kTile;
    if constexpr (R == 0) prefetch_ahead(tile, G::kTile);
    const uint8_t* ab = act + size_t(sb) * sizeof(BlockQ8_K);  // activation row a at ab + a · act_stride
    int32x4_t S[NP][2], isum[NP][2];
    for (int p = 0; p < NP; ++p) S[p][0] = S[p][1] = isum[p][0] = isum[p][1] = vdupq_n_s32(0);
    unroll<8>([&](auto jj) LOOM_PN_ATTR {
      constexpr int J = decltype(jj)::value;
      // GCC keeps the half-pair's zipped chunks from the low nibbles' sub-block for the high
      // ones' (8 registers; it spills 3 of the integer sums around them instead: fewer
      // instructions than loading and zipping the chunks again).
      for (int i = 0; i < 2; ++i) q4k_mmla_step<NP, K>(tile, J, i, R, ab, act_stride, S);
      int32x4_t ds[2];
      q4k_mmla_dscale<K>(tile, J, R, ds);
      for (int p = 0; p < NP; ++p) {
        for (int z = 0; z < 2; ++z) isum[p][z] = vmlaq_s32(isum[p][z], S[p][z], ds[z]);
      }
    });
    q4k_mmla_finish<NP, K>(tile, R, ab, act_stride, isum, acc);
  }
#pragma GCC unroll 8
  for (int p = 0; p < NP; ++p) {
    const float32x4_t a0 = vld1q_f32(acc[p][0]), a1 = vld1q_f32(acc[p][1]);
    store4(out + size_t(2 * p) * out_stride, vuzp1q_f32(a0, a1), 4 * R, valid);
    store4(out + size_t(2 * p + 1) * out_stride, vuzp2q_f32(a0, a1), 4 * R, valid);
  }
}
#endif  // LOOM_PN_LEVEL >= 2

// Q6_K (PackedQ6K): per sub-block s of 16 columns, chunks 4s..4s+3 against lanes 0..3 of the
// activation register of those columns (SDOT by element: levels 0..63 as they are stored), the
// sum weighted by the signed scale (MLA); the levels' bias 32 comes off once per super-block as
// 32 · Σ_s sc_s · bsum_s. Floats as the x86 kernels: acc = fma(d · d_a, float(isum), acc).
template <int NA, int R0, int NR>
LOOM_PN_ATTR void q6k_pass(const uint8_t* grp, int64_t cols, const uint8_t* act, size_t act_stride, float* out,
                           size_t out_stride, int valid) {
  float32x4_t acc[NA][NR];
  for (int a = 0; a < NA; ++a) {
    for (int R = 0; R < NR; ++R) acc[a][R] = vdupq_n_f32(0.0f);
  }
  const int64_t ns = cols / PackedQ6K::kCols;
  for (int64_t sb = 0; sb < ns; ++sb) {
    const uint8_t* tile = grp + size_t(sb) * PackedQ6K::kTileBytes;
    if constexpr (R0 == 0) prefetch_ahead(tile, PackedQ6K::kTileBytes);
    const uint8_t* ab[NA];
    int32x4_t isum[NA][NR], bsum[NA][NR];
    for (int a = 0; a < NA; ++a) {
      ab[a] = act + size_t(a) * act_stride + size_t(sb) * sizeof(BlockQ8_K);
      for (int R = 0; R < NR; ++R) isum[a][R] = bsum[a][R] = vdupq_n_s32(0);
    }
    for (int s = 0; s < 16; ++s) {
      const uint8_t* q = tile + PackedQ6K::kQs + 256 * size_t(s);
      int8x16_t x[NA];
      int32x4_t sub[NA][NR];
      for (int a = 0; a < NA; ++a) {
        x[a] = vld1q_s8(reinterpret_cast<const int8_t*>(ab[a] + 4 + 16 * s));
        for (int R = 0; R < NR; ++R) sub[a][R] = vdupq_n_s32(0);
      }
      unroll<4>([&](auto cc) LOOM_PN_ATTR {
        constexpr int C = decltype(cc)::value;
#pragma GCC unroll 4
        for (int R = 0; R < NR; ++R) {
          const int8x16_t w = vreinterpretq_s8_u8(vld1q_u8(q + 64 * C + 16 * size_t(R0 + R)));
          for (int a = 0; a < NA; ++a) sub[a][R] = dot_lane<C>(sub[a][R], w, x[a]);
        }
      });
#pragma GCC unroll 4
      for (int R = 0; R < NR; ++R) {
        const int32x4_t sc = vmovl_s16(vget_low_s16(vmovl_s8(
            vld1_s8(reinterpret_cast<const int8_t*>(tile + PackedQ6K::kSc + 16 * size_t(s) + 4 * size_t(R0 + R))))));
        for (int a = 0; a < NA; ++a) {
          int16_t bs;
          std::memcpy(&bs, ab[a] + 4 + 256 + 2 * s, 2);
          isum[a][R] = vmlaq_s32(isum[a][R], sub[a][R], sc);
          bsum[a][R] = vmlaq_n_s32(bsum[a][R], sc, int32_t(bs));
        }
      }
    }
#pragma GCC unroll 4
    for (int R = 0; R < NR; ++R) {
      const float32x4_t d = f16x4(tile + PackedQ6K::kD + 8 * size_t(R0 + R));
      for (int a = 0; a < NA; ++a) {
        const int32x4_t total = vsubq_s32(isum[a][R], vshlq_n_s32(bsum[a][R], 5));
        acc[a][R] = vfmaq_f32(acc[a][R], vmulq_n_f32(d, f32_at(ab[a])), vcvtq_f32_s32(total));
      }
    }
  }
  for (int a = 0; a < NA; ++a) {
    for (int R = 0; R < NR; ++R) store4(out + size_t(a) * out_stride, acc[a][R], 4 * (R0 + R), valid);
  }
}

// Runs of 8 activation rows (kMaxNa 8: the i8mm copy's Q4_K, Q5_K, IQ4_XS, with q4k_mmla) and of
// 4 in 4 passes of 4 weight rows, runs of 2 in 2 passes of 8, single rows over all 16 (the
// accumulators of a pass stay in registers). Runs of 4 stay with SDOT: q4k_mmla over 2 pairs
// does fewer instructions but models more cycles on out-of-order cores (docs/arm.md), and they
// are one run per group at most.
template <template <int, int, int> class P, int kMaxNa>
void super_run(int64_t cols, int na, const uint8_t* grp, const uint8_t* a, size_t as, float* o, size_t os, int valid) {
  if constexpr (kMaxNa == 8) {
    if (na == 8) {
      P<8, 0, 1>::run(grp, cols, a, as, o, os, valid);
      P<8, 1, 1>::run(grp, cols, a, as, o, os, valid);
      P<8, 2, 1>::run(grp, cols, a, as, o, os, valid);
      P<8, 3, 1>::run(grp, cols, a, as, o, os, valid);
      return;
    }
  }
  switch (na) {
    case 4:
      P<4, 0, 1>::run(grp, cols, a, as, o, os, valid);
      P<4, 1, 1>::run(grp, cols, a, as, o, os, valid);
      P<4, 2, 1>::run(grp, cols, a, as, o, os, valid);
      P<4, 3, 1>::run(grp, cols, a, as, o, os, valid);
      return;
    case 2:
      P<2, 0, 2>::run(grp, cols, a, as, o, os, valid);
      P<2, 2, 2>::run(grp, cols, a, as, o, os, valid);
      return;
    default: P<1, 0, 4>::run(grp, cols, a, as, o, os, valid);
  }
}
template <Nib256 K>
struct Q4KPass {
  template <int NA, int R0, int NR>
  struct P {
    static void run(const uint8_t* g, int64_t c, const uint8_t* a, size_t as, float* o, size_t os, int v) {
#if LOOM_PN_LEVEL >= 2
      if constexpr (NA == 8) q4k_mmla<4, R0, K>(g, c, a, as, o, os, v);
      else q4k_pass<NA, R0, NR, K>(g, c, a, as, o, os, v);
#else
      q4k_pass<NA, R0, NR, K>(g, c, a, as, o, os, v);
#endif
    }
  };
};
template <int NA, int R0, int NR>
struct Q6KPass {
  static void run(const uint8_t* g, int64_t c, const uint8_t* a, size_t as, float* o, size_t os, int v) {
    q6k_pass<NA, R0, NR>(g, c, a, as, o, os, v);
  }
};

template <template <int, int, int> class P, int kMaxNa = 4>
void run_super(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
               size_t act_stride, int n, float* out, size_t out_stride) {
  auto kernel = [cols](int na, const uint8_t* grp, const PackedLayout&, int64_t, const uint8_t* a, size_t as, float* o,
                       size_t os, int valid) { super_run<P, kMaxNa>(cols, na, grp, a, as, o, os, valid); };
  packed_gemm_loop(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride, kMaxNa, kernel);
}

// ---- F16 / BF16 -------------------------------------------------------------------------------

// NA activation rows (f32, rounded through the weight type) against one group of F16 (BF16)
// tiles: column c of a tile is 16 weights, one per row (4 registers after FCVTL / SHLL), applied
// to the rows' x[c] by FMLA by element. One FMA chain per output over the columns in order
// whatever NA (batch invariance); no FP16 arithmetic, so every AArch64 core runs it. Where the
// core has FEAT_FHM, F16 takes f16_fhm_pass instead (the same bits; below).
// Every index of acc below is a constant (folds over index sequences, no loops): GCC's early
// scalar replacement runs before loops are unrolled, and an array indexed in a loop stays in
// memory, stored to on every iteration (4 to 16 stores per 4 columns before).
template <int K>
LOOM_PN void f16_row(float32x4_t (&acc)[4], float32x4_t w0, float32x4_t w1, float32x4_t w2, float32x4_t w3, float32x4_t x) {
  acc[0] = vfmaq_laneq_f32(acc[0], w0, x, K);
  acc[1] = vfmaq_laneq_f32(acc[1], w1, x, K);
  acc[2] = vfmaq_laneq_f32(acc[2], w2, x, K);
  acc[3] = vfmaq_laneq_f32(acc[3], w3, x, K);
}
// Column K of 4 (at col4), widened, for the NA rows.
template <bool kBf16, int NA, int K, int... A>
LOOM_PN void f16_column(std::integer_sequence<int, A...>, float32x4_t (&acc)[NA][4], const uint8_t* col4,
                        const float32x4_t (&xv)[NA]) {
  const uint8_t* col = col4 + 32 * K;
  const uint16x8_t h0 = vld1q_u16(reinterpret_cast<const uint16_t*>(col));
  const uint16x8_t h1 = vld1q_u16(reinterpret_cast<const uint16_t*>(col + 16));
  float32x4_t w0, w1, w2, w3;
  if constexpr (kBf16) {
    w0 = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h0), 16));
    w1 = vreinterpretq_f32_u32(vshll_high_n_u16(h0, 16));
    w2 = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h1), 16));
    w3 = vreinterpretq_f32_u32(vshll_high_n_u16(h1, 16));
  } else {
    w0 = vcvt_f32_f16(vget_low_f16(vreinterpretq_f16_u16(h0)));
    w1 = vcvt_high_f32_f16(vreinterpretq_f16_u16(h0));
    w2 = vcvt_f32_f16(vget_low_f16(vreinterpretq_f16_u16(h1)));
    w3 = vcvt_high_f32_f16(vreinterpretq_f16_u16(h1));
  }
  (f16_row<K>(acc[A], w0, w1, w2, w3, xv[A]), ...);
}
template <bool kBf16, int NA, int... K>
LOOM_PN void f16_columns(std::integer_sequence<int, K...>, float32x4_t (&acc)[NA][4], const uint8_t* col4,
                         const float32x4_t (&xv)[NA]) {
  (f16_column<kBf16, NA, K>(std::make_integer_sequence<int, NA>{}, acc, col4, xv), ...);
}
template <int A, int NA>
LOOM_PN void f16_act_row(float32x4_t (&xv)[NA], const uint8_t* act, size_t act_stride, int64_t c) {
  xv[A] = vld1q_f32(reinterpret_cast<const float*>(act + size_t(A) * act_stride) + c);
}
template <int NA, int... A>
LOOM_PN void f16_act(std::integer_sequence<int, A...>, float32x4_t (&xv)[NA], const uint8_t* act, size_t act_stride,
                     int64_t c) {
  (f16_act_row<A>(xv, act, act_stride, c), ...);
}
template <int NA, int... I>
LOOM_PN void f16_store(std::integer_sequence<int, I...>, const float32x4_t (&acc)[NA][4], float* out, size_t out_stride,
                       int valid) {
  (store4(out + size_t(I / 4) * out_stride, acc[I / 4][I % 4], 4 * (I % 4), valid), ...);
}

template <int NA, bool kBf16>
LOOM_PN_ATTR void f16_pass(const uint8_t* grp, int64_t cols, const uint8_t* act, size_t act_stride, float* out,
                           size_t out_stride, int valid) {
  float32x4_t acc[NA][4] = {};
  for (int64_t c0 = 0; c0 < cols; c0 += 32) {
    const uint8_t* tile = grp + size_t(c0) * 32;  // 32 columns x 16 rows x 2 bytes
    prefetch_ahead(tile, 1024);
    for (int c4 = 0; c4 < 32; c4 += 4) {
      float32x4_t xv[NA];
      f16_act<NA>(std::make_integer_sequence<int, NA>{}, xv, act, act_stride, c0 + c4);
      f16_columns<kBf16, NA>(std::make_integer_sequence<int, 4>{}, acc, tile + 32 * size_t(c4), xv);
    }
  }
  f16_store<NA>(std::make_integer_sequence<int, 4 * NA>{}, acc, out, out_stride, valid);
}

#if LOOM_PN_LEVEL == 0
// F16 by FMLAL / FMLAL2 by element (FEAT_FHM; compiled once, in the plain copy, with its own target
// attribute, and called from every copy where cpu_features().neon_fhm): acc + w · x with the f16
// product exact in f32 (11 x 11 significant bits; 2^-48 .. 2^32) and one rounding, i.e.
// fma(float(w), float(x), acc) — with the default FPCR (FZ = FZ16 = 0: f16 subnormals are
// operands like the others) the same bits as f16_pass's FCVTL + FMLA, in the same order per
// output. The activations are f16 values held as f32, so FCVTN / FCVTN2 give them back exactly
// (once per 8 columns per row, shared by the 16 rows); the weights need no widening: FMLAL takes
// rows 4R..4R+3 from the low half of a column's register, FMLAL2 rows 4R+4..4R+7 from the high
// half. The indexed operand must lie in v0..v15, which NA <= 4 registers leave room for.
#define LOOM_PN_FHM LOOM_PN_FHM_ATTR inline __attribute__((always_inline))
// Constant indices only, as in f16_pass.
template <int K>
LOOM_PN_FHM void fhm_row(float32x4_t (&acc)[4], float16x8_t h0, float16x8_t h1, float16x8_t xh) {
  acc[0] = vfmlalq_laneq_low_f16(acc[0], h0, xh, K);
  acc[1] = vfmlalq_laneq_high_f16(acc[1], h0, xh, K);
  acc[2] = vfmlalq_laneq_low_f16(acc[2], h1, xh, K);
  acc[3] = vfmlalq_laneq_high_f16(acc[3], h1, xh, K);
}
// Column K of 8 (at col8) for the NA rows: 4 FMLAL / FMLAL2 per row, the activation's lane K.
template <int NA, int K, int... A>
LOOM_PN_FHM void fhm_column(std::integer_sequence<int, A...>, float32x4_t (&acc)[NA][4], const uint8_t* col8,
                            const float16x8_t (&xh)[NA]) {
  const uint8_t* col = col8 + 32 * K;
  const float16x8_t h0 = vreinterpretq_f16_u16(vld1q_u16(reinterpret_cast<const uint16_t*>(col)));
  const float16x8_t h1 = vreinterpretq_f16_u16(vld1q_u16(reinterpret_cast<const uint16_t*>(col + 16)));
  (fhm_row<K>(acc[A], h0, h1, xh[A]), ...);
}
template <int NA, int... K>
LOOM_PN_FHM void fhm_columns(std::integer_sequence<int, K...>, float32x4_t (&acc)[NA][4], const uint8_t* col8,
                             const float16x8_t (&xh)[NA]) {
  (fhm_column<NA, K>(std::make_integer_sequence<int, NA>{}, acc, col8, xh), ...);
}
// Columns c..c+7 of row A as f16 (FCVTN, FCVTN2: exact, the values are f16). One function per
// row: Clang does not expand a parameter pack inside its intrinsics' statement-expression macros.
template <int A, int NA>
LOOM_PN_FHM void fhm_act_row(float16x8_t (&xh)[NA], const uint8_t* act, size_t act_stride, int64_t c) {
  const float* x = reinterpret_cast<const float*>(act + size_t(A) * act_stride) + c;
  xh[A] = vcvt_high_f16_f32(vcvt_f16_f32(vld1q_f32(x)), vld1q_f32(x + 4));
}
template <int NA, int... A>
LOOM_PN_FHM void fhm_act(std::integer_sequence<int, A...>, float16x8_t (&xh)[NA], const uint8_t* act, size_t act_stride,
                         int64_t c) {
  (fhm_act_row<A>(xh, act, act_stride, c), ...);
}
template <int NA>
LOOM_PN_FHM_ATTR void f16_fhm_pass(const uint8_t* grp, int64_t cols, const uint8_t* act, size_t act_stride, float* out,
                                   size_t out_stride, int valid) {
  float32x4_t acc[NA][4] = {};
  for (int64_t c0 = 0; c0 < cols; c0 += 32) {
    const uint8_t* tile = grp + size_t(c0) * 32;  // 32 columns x 16 rows x 2 bytes
    prefetch_ahead(tile, 1024);
    for (int c8 = 0; c8 < 32; c8 += 8) {
      float16x8_t xh[NA];
      fhm_act<NA>(std::make_integer_sequence<int, NA>{}, xh, act, act_stride, c0 + c8);
      fhm_columns<NA>(std::make_integer_sequence<int, 8>{}, acc, tile + 32 * size_t(c8), xh);
    }
  }
  f16_store<NA>(std::make_integer_sequence<int, 4 * NA>{}, acc, out, out_stride, valid);
}
#undef LOOM_PN_FHM

void run_f16_fhm(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                 size_t act_stride, int n, float* out, size_t out_stride) {
  auto kernel = [cols](int na, const uint8_t* grp, const PackedLayout&, int64_t, const uint8_t* a, size_t as, float* o,
                       size_t os, int valid) {
    if (na == 4) return f16_fhm_pass<4>(grp, cols, a, as, o, os, valid);
    if (na == 2) return f16_fhm_pass<2>(grp, cols, a, as, o, os, valid);
    f16_fhm_pass<1>(grp, cols, a, as, o, os, valid);
  };
  packed_gemm_loop(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride, 4, kernel);
}
#endif

template <bool kBf16>
void run_f16(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
             size_t act_stride, int n, float* out, size_t out_stride) {
  auto kernel = [cols](int na, const uint8_t* grp, const PackedLayout&, int64_t, const uint8_t* a, size_t as, float* o,
                       size_t os, int valid) {
    if (na == 4) return f16_pass<4, kBf16>(grp, cols, a, as, o, os, valid);
    if (na == 2) return f16_pass<2, kBf16>(grp, cols, a, as, o, os, valid);
    f16_pass<1, kBf16>(grp, cols, a, as, o, os, valid);
  };
  packed_gemm_loop(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride, 4, kernel);
}

}  // namespace

// Every type packed_neon_has_kernel names; the others must not get here.
void packed_gemm(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                 size_t act_stride, int n, float* out, size_t out_stride) {
  constexpr Blocks32 kQ40 = blocks32_of(kLayoutQ4_0), kQ80 = blocks32_of(kLayoutQ8_0), kIq4 = blocks32_of(kLayoutIQ4_NL),
                     kQ50 = blocks32_of(kLayoutQ5_0), kQ41 = blocks32_of(kLayoutQ4_1), kQ51 = blocks32_of(kLayoutQ5_1),
                     kMxfp4 = blocks32_of(kLayoutMXFP4);
  switch (t) {
    case TensorType::Q4_0: return run_blocks32<kQ40>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::Q8_0: return run_blocks32<kQ80>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::IQ4_NL: return run_blocks32<kIq4>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::MXFP4: return run_blocks32<kMxfp4>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::Q5_0: return run_blocks32<kQ50>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::Q4_1: return run_blocks32<kQ41>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::Q5_1: return run_blocks32<kQ51>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::Q4_K:
      return run_super<Q4KPass<Nib256::kQ4K>::P, kMaxRun>(t, rows, cols, packed, g0, g1, act, act_stride, n, out,
                                                          out_stride);
    case TensorType::Q5_K:
      return run_super<Q4KPass<Nib256::kQ5K>::P, kMaxRun>(t, rows, cols, packed, g0, g1, act, act_stride, n, out,
                                                          out_stride);
    case TensorType::IQ4_XS:
      return run_super<Q4KPass<Nib256::kIQ4XS>::P, kMaxRun>(t, rows, cols, packed, g0, g1, act, act_stride, n, out,
                                                            out_stride);
    case TensorType::Q6_K: return run_super<Q6KPass>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::F16:
      // FMLAL where the core has it (the plain copy's, whichever copy runs): the same bits.
      if (cpu_features().neon_fhm) {
        return packed_gemm_f16_neon_fhm(rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
      }
      return run_f16<false>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    case TensorType::BF16: return run_f16<true>(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    default: break;
  }
}

#if LOOM_PN_LEVEL == 0
// The two F16 kernels by name (packed.h), whatever the CPU picks: FCVTL + FMLA (every core) and
// FMLAL (FEAT_FHM only).
void f16_fcvtl(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act, size_t act_stride,
               int n, float* out, size_t out_stride) {
  run_f16<false>(TensorType::F16, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
}
void f16_fhm(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act, size_t act_stride,
             int n, float* out, size_t out_stride) {
  run_f16_fhm(TensorType::F16, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
}
#endif

}  // namespace loom::quant::detail::LOOM_PN_NS

#undef LOOM_PN
#undef LOOM_PN_NO_PRESCHED

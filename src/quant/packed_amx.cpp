// Packed GEMM with AMX-INT8 tiles for prompt batches: 16 activation rows x 16 weight rows per
// tile product. The 32-column block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL), per block b:
//   A = 16 activation rows' int8 quants (from a panel: the rows' blocks rearranged so that one A
//       tile is 512 contiguous bytes)
//   B = the group's weights as signed levels in VNNI order (8 rows of 64 bytes: row j holds
//       elements 4j..4j+3 of each of the 16 weight rows = the packed chunks, unpacked/unbiased)
//   C = A·B via TDPBSSD (int32, exact), then acc[i] += float(C[i]) * (d_w[0..15] * d_a[i]) (and
//       for Q4_1 / Q5_1 += m_w · s_a[i]), the 16 accumulators in registers across all blocks.
// Q4_K and Q5_K: see their section below.
// Activation rows beyond the last multiple of 16 go to the AVX-512 VNNI kernel. Both compute
// every output with the same operations (the exact block integer, then one FMA per block with
// the same scale product, blocks in order), so a row's result does not depend on whether it
// falls in a run of 16 or in the remainder: bit for bit the VNNI kernel's (batch invariance).
// (F16 has no AMX path: TDPBF16PS's accumulation order is the hardware's, which the 1-row FMA
// kernel cannot reproduce, and it was not faster than that kernel at 512 rows either.)
// The activation rows are copied into panels and the accumulators stay in tile registers: an A
// tile loaded from the rows in place touches 16 lines 1-5 KiB apart, and waiting for those loads
// dominated the kernel (perf; the figures are in CHANGELOG).
// Only called when cpu_features().has_amx_int8_set(); see packed.h for the layout.
#if defined(__x86_64__)

#include <immintrin.h>

#include <cstring>
#include <vector>

#include "quant/blocks.h"
#include "quant/packed.h"
#include "quant/packed_layout.h"

// GCC 12's false "(may be) used uninitialized" inside its own AVX-512 headers (see packed_avx512.cpp).
#if defined(__GNUC__) && !defined(__clang__)  // clang has no such warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#define LOOM_AMX __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8")))

namespace loom::quant::detail {
namespace {

// Tile register numbers are literal tokens below: GCC's tile intrinsics are macros that paste
// them into the assembly.

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Tile shapes are per-thread state, loaded once per thread (int8 blocks of 32 columns).
enum class TileShapes { kNone, kInt8 };

LOOM_AMX void configure_thread(TileShapes want) {
  thread_local TileShapes current = TileShapes::kNone;
  if (current == want) return;
  TileConfig cfg;
  for (int t = 0; t < 2; ++t) {  // C: 16 x 16 int32
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  for (int t = 4; t < 6; ++t) {  // A: 16 activation rows x one 32-column block of int8
    cfg.colsb[t] = 32;
    cfg.rows[t] = 16;
  }
  for (int t = 6; t < 8; ++t) {  // B: K / 4 = 8 rows of 16 weight rows x 4 bytes
    cfg.colsb[t] = 64;
    cfg.rows[t] = 8;
  }
  // GCC 12 does not treat LDTILECFG as reading its operand and drops the stores above without
  // this barrier (the tiles then stay unconfigured and the first TILELOADD faults).
  __asm__ __volatile__("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
  current = want;
}

// Adds `add` to the bytes of w whose bit is set in the chunk mask at p (packed_layout.h).
LOOM_AMX inline __m512i add_masked(__m512i w, const uint8_t* p, __m512i add) {
  uint64_t m;
  std::memcpy(&m, p, 8);
  return _mm512_mask_add_epi8(w, _cvtu64_mask64(m), w, add);
}

// The 16 weight rows of one tile (a 32-column block type, PackedLayout L) as signed levels in VNNI
// order (8 rows of 64 bytes): the unsigned level minus the bias (the types with a minimum have
// bias 0: their levels 0..31 are signed bytes as they are), or the IQ4_NL table value.
LOOM_AMX inline void weights_vnni(const uint8_t* tile, const PackedLayout& L, uint8_t* dst) {
  const uint8_t* q = tile + L.q_offset();
  if (!L.nibbles) {  // Q8_0: the byte is the int8 + 128
    const __m512i flip = _mm512_set1_epi8(char(0x80));
    for (int j = 0; j < 8; ++j) _mm512_store_si512(dst + 64 * j, _mm512_xor_si512(_mm512_loadu_si512(q + 64 * j), flip));
    return;
  }
  const __m512i m4 = _mm512_set1_epi8(0x0f), sixteen = _mm512_set1_epi8(16), bias = _mm512_set1_epi8(char(L.bias));
  const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
  for (int j = 0; j < 4; ++j) {
    const __m512i c = _mm512_loadu_si512(q + 64 * j);
    __m512i lo = _mm512_and_si512(c, m4), hi = _mm512_and_si512(_mm512_srli_epi16(c, 4), m4);
    if (L.fifth_bit) {  // chunk masks (packed_layout.h)
      lo = add_masked(lo, tile + L.qh_offset() + 16 * size_t(j), sixteen);
      hi = add_masked(hi, tile + L.qh_offset() + 16 * size_t(j) + 8, sixteen);
    }
    if (L.lut) {
      lo = _mm512_shuffle_epi8(lut, lo);
      hi = _mm512_shuffle_epi8(lut, hi);
    } else {
      lo = _mm512_sub_epi8(lo, bias);
      hi = _mm512_sub_epi8(hi, bias);
    }
    _mm512_store_si512(dst + 64 * j, lo);
    _mm512_store_si512(dst + 64 * (j + 4), hi);
  }
}

// Bytes of one decoded block in group_vnni's buffer (a multiple of 64: tile loads stay aligned).
constexpr size_t kVnniBlock = 512 + 64;

// The activations of 16 rows rearranged for the tile loads: per 32-column block, the rows' 32
// quants one after the other (one A tile at stride 32: 8 cache lines of one page, where the rows'
// own blocks are 16 lines a row apart), then their 16 scales and their 16 second words (Q4_1 /
// Q5_1: Q8_1's s, PackedActBlock).
struct alignas(64) PanelBlock {
  int8_t q[16][32];
  float d[16];
  float s[16];
};
static_assert(sizeof(PanelBlock) == 640);

// Rows [0, 16) of act (packed activation rows, act_stride apart) as nb PanelBlocks.
LOOM_AMX void build_panel(const uint8_t* act, size_t act_stride, int64_t nb, PanelBlock* panel) {
  for (int i = 0; i < 16; ++i) {
    const uint8_t* row = act + size_t(i) * act_stride;
    for (int64_t b = 0; b < nb; ++b) {
      std::memcpy(&panel[b].d[i], row + size_t(b) * sizeof(PackedActBlock), 4);
      std::memcpy(&panel[b].s[i], row + size_t(b) * sizeof(PackedActBlock) + 4, 4);
      std::memcpy(panel[b].q[i], row + size_t(b) * sizeof(PackedActBlock) + 8, 32);
    }
  }
}

// One tile product into C tile tc from A tile ta (16 rows, 32 apart) and B tile tb, with the
// product instruction dp (_tile_dpbssd / _tile_dpbsud); tile numbers are literal (the intrinsics
// paste them into the assembly). Two sets of tiles (0, 4, 6 and 1, 5, 7) alternate so that the
// next product's loads need not wait for this one.
#define LOOM_AMX_PRODUCT(dp, tc, ta, tb, wv, a) \
  do {                                          \
    _tile_loadd(tb, (wv), 64);                  \
    _tile_loadd(ta, (a), 32);                   \
    _tile_zero(tc);                             \
    dp(tc, ta, tb);                             \
  } while (0)

// 16 activation rows against one group of 16 weight rows, over all nb blocks: the 16 output rows
// accumulate in registers. Software pipeline, three blocks in flight: in step b the product of
// block b is computed while block b - 1's (computed in the other C tile) is stored to a buffer,
// and the float epilogue works on block b - 2, stored a step earlier (a TILESTORED waits for
// its product, and a vector load right after TILESTORED of the same bytes would wait for it).
template <bool kMin>
LOOM_AMX void chunk_tiles(const uint8_t* wv, int64_t nb, const PanelBlock* panel, float* out, size_t out_stride, int valid) {
  alignas(64) int32_t cbuf[2][16][16];
  __m512 acc[16];  // kept in registers: every loop over them is unrolled
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb + 2; ++b) {
    if (b < nb) {
      const int8_t* a = panel[b].q[0];
      if (b & 1) LOOM_AMX_PRODUCT(_tile_dpbssd, 1, 5, 7, wv + size_t(b) * kVnniBlock, a);
      else LOOM_AMX_PRODUCT(_tile_dpbssd, 0, 4, 6, wv + size_t(b) * kVnniBlock, a);
    }
    if (b >= 1 && b <= nb) {
      if (b & 1) _tile_stored(0, cbuf[0], 64);  // block b - 1 (even)
      else _tile_stored(1, cbuf[1], 64);
    }
    if (b < 2) continue;
    const int64_t pb = b - 2;                                    // the block whose product is in memory
    const uint8_t* scales = wv + size_t(pb) * kVnniBlock + 512;  // d[16], then m[16]
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales)));
    const float* da = panel[pb].d;
    __m512 mw = _mm512_setzero_ps();
    if constexpr (kMin) mw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(scales + 32)));
    int32_t(*cb)[16] = cbuf[pb & 1];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      const __m512 ci = _mm512_cvtepi32_ps(_mm512_load_si512(cb[i]));
      acc[i] = _mm512_fmadd_ps(ci, _mm512_mul_ps(dw, _mm512_set1_ps(da[i])), acc[i]);
      if constexpr (kMin) acc[i] = _mm512_fmadd_ps(mw, _mm512_set1_ps(panel[pb].s[i]), acc[i]);
    }
  }
  const __mmask16 mask = __mmask16((1u << valid) - 1u);
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) _mm512_mask_storeu_ps(out + size_t(i) * out_stride, mask, acc[i]);
}
// All blocks of one group decoded once per call and reused by every chunk of activation rows
// (written well before the tile loads read it): per block kVnniBlock bytes, the signed VNNI levels
// then the tile's f16 d[16] and m[16], so the kernel streams one compact buffer (Q8_0's tiles are
// 544 bytes apart: reading the scales from them missed L1).
LOOM_AMX void group_vnni(const uint8_t* grp, const PackedLayout& L, int64_t nb, uint8_t* dst) {
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* tile = grp + size_t(b) * L.tile_bytes;
    uint8_t* out = dst + size_t(b) * kVnniBlock;
    weights_vnni(tile, L, out);
    std::memcpy(out + 512, tile, L.has_min ? 64 : 32);
  }
}

// ---- Q4_K / Q5_K / IQ4_XS (super-blocks of 8 sub-blocks of 32 columns, Q8_K activations) ------
// Per sub-block, C = A·B via TDPBSUD (activations signed, levels unsigned; IQ4_XS: TDPBSSD on
// the signed table values) is an exact int32, weighted by the sub-block scales into isum
// (VPMULLD); per super-block msum = Σ_j m_j · Σ a over sub-block j (VPDPWSSD on int16 pairs; not
// for IQ4_XS), then the float steps of the AVX-512 kernel exactly: acc += d_a · (d · isum -
// dmin · msum) (IQ4_XS: acc += d_a · (d · isum)). Integers are exact in any order, so a row's
// result is bit for bit the VNNI kernel's, whatever run it falls in.
enum class Super32 { kQ4K, kQ5K, kIQ4XS };
constexpr size_t tile_bytes_of(Super32 k) {
  return k == Super32::kQ5K ? PackedQ5K::kTileBytes : k == Super32::kIQ4XS ? PackedIQ4XS::kTileBytes : PackedQ4K::kTileBytes;
}

// One group's super-block decoded for the tile products: its 8 sub-blocks as levels in VNNI order
// (unsigned; IQ4_XS: the signed table values) (sub-block 2g = the low nibbles of half-pair g's 8 chunks, 2g + 1 the high ones:
// already 8 rows of 64 bytes each), and its mins as int16 pairs (lane r of mins[p] = m_2p of row
// r | m_2p+1 << 16).
struct alignas(64) SuperVnni {
  uint8_t b[8][512];
  int32_t mins[4][16];
};

// 16 activation rows' Q8_K super-block for the tile loads: each sub-block's 16 x 32 quants
// contiguous, the rows' sums over sub-blocks 2p, 2p + 1 as int16 pairs, and their d.
struct alignas(64) PanelSuper {
  int8_t q[8][16][32];
  int32_t bs[4][16];
  float d[16];
};

template <Super32 K>
LOOM_AMX void group_vnni_q4k(const uint8_t* grp, int64_t ns, SuperVnni* dst) {
  constexpr bool kQ5 = K == Super32::kQ5K, kIq4 = K == Super32::kIQ4XS;
  const __m512i m4 = _mm512_set1_epi8(0x0f), sixteen = _mm512_set1_epi8(16);
  const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
  constexpr size_t tile_bytes = tile_bytes_of(K);
  constexpr size_t kQs = kIq4 ? PackedIQ4XS::kQs : PackedQ4K::kQs;
  for (int64_t sb = 0; sb < ns; ++sb) {
    const uint8_t* tile = grp + size_t(sb) * tile_bytes;
    for (int g = 0; g < 4; ++g) {
      for (int c = 0; c < 8; ++c) {
        const __m512i chunk = _mm512_loadu_si512(tile + kQs + 512 * g + 64 * c);
        __m512i lo = _mm512_and_si512(chunk, m4), hi = _mm512_and_si512(_mm512_srli_epi16(chunk, 4), m4);
        if constexpr (kQ5) {
          lo = add_masked(lo, tile + PackedQ5K::kQh + 128 * g + 16 * c, sixteen);
          hi = add_masked(hi, tile + PackedQ5K::kQh + 128 * g + 16 * c + 8, sixteen);
        }
        if constexpr (kIq4) {
          lo = _mm512_shuffle_epi8(lut, lo);
          hi = _mm512_shuffle_epi8(lut, hi);
        }
        _mm512_store_si512(dst[sb].b[2 * g] + 64 * c, lo);
        _mm512_store_si512(dst[sb].b[2 * g + 1] + 64 * c, hi);
      }
    }
    if constexpr (!kIq4) {
      for (int pr = 0; pr < 4; ++pr) {
        const __m512i m0 =
            _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + PackedQ4K::kM + 16 * (2 * pr))));
        const __m512i m1 = _mm512_cvtepu8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + PackedQ4K::kM + 16 * (2 * pr + 1))));
        _mm512_store_si512(dst[sb].mins[pr], _mm512_or_si512(m0, _mm512_slli_epi32(m1, 16)));
      }
    }
  }
}

// Rows [0, 16) of act (Q8_K rows, act_stride apart) as ns PanelSupers.
LOOM_AMX void build_panel_q8k(const uint8_t* act, size_t act_stride, int64_t ns, PanelSuper* panel) {
  for (int i = 0; i < 16; ++i) {
    for (int64_t sb = 0; sb < ns; ++sb) {
      const uint8_t* blk = act + size_t(i) * act_stride + size_t(sb) * sizeof(BlockQ8_K);
      std::memcpy(&panel[sb].d[i], blk, 4);
      for (int j = 0; j < 8; ++j) std::memcpy(panel[sb].q[j][i], blk + 4 + 32 * j, 32);
      int16_t bs[16];
      std::memcpy(bs, blk + 4 + 256, 32);
      for (int pr = 0; pr < 4; ++pr) {
        const auto s0 = uint16_t(int16_t(bs[4 * pr] + bs[4 * pr + 1])),
                   s1 = uint16_t(int16_t(bs[4 * pr + 2] + bs[4 * pr + 3]));
        panel[sb].bs[pr][i] = int32_t(uint32_t(s0) | uint32_t(s1) << 16);
      }
    }
  }
}

// 16 activation rows against one group, all super-blocks; the sub-block products flow through
// the same two-tile pipeline as chunk_tiles, isum in registers, acc in memory (per super-block).
template <Super32 K>
LOOM_AMX void chunk_tiles_q4k(const uint8_t* grp, const SuperVnni* wv, int64_t ns, const PanelSuper* panel, float* out,
                              size_t out_stride, int valid) {
  constexpr bool kIq4 = K == Super32::kIQ4XS;
  constexpr size_t tile_bytes = tile_bytes_of(K);
  alignas(64) int32_t cbuf[2][16][16];
  alignas(64) float acc[16][16] = {};
  __m512i isum[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) isum[i] = _mm512_setzero_si512();
  const int64_t S = ns * 8;
  for (int64_t s = 0; s < S + 2; ++s) {
    if (s < S) {
      const uint8_t* b = wv[s / 8].b[s % 8];
      const int8_t* a = panel[s / 8].q[s % 8][0];
      if constexpr (kIq4) {
        if (s & 1) LOOM_AMX_PRODUCT(_tile_dpbssd, 1, 5, 7, b, a);
        else LOOM_AMX_PRODUCT(_tile_dpbssd, 0, 4, 6, b, a);
      } else {
        if (s & 1) LOOM_AMX_PRODUCT(_tile_dpbsud, 1, 5, 7, b, a);
        else LOOM_AMX_PRODUCT(_tile_dpbsud, 0, 4, 6, b, a);
      }
    }
    if (s >= 1 && s <= S) {
      if (s & 1) _tile_stored(0, cbuf[0], 64);  // sub-block s - 1 (even)
      else _tile_stored(1, cbuf[1], 64);
    }
    if (s < 2) continue;
    const int64_t ps = s - 2, sb = ps / 8;
    const int j = int(ps % 8);
    const uint8_t* tile = grp + size_t(sb) * tile_bytes;
    const __m512i sc =
        kIq4 ? _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + PackedIQ4XS::kSc + 16 * j)))
             : _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(tile + PackedQ4K::kSc + 16 * j)));
    int32_t(*cb)[16] = cbuf[ps & 1];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) isum[i] = _mm512_add_epi32(isum[i], _mm512_mullo_epi32(_mm512_load_si512(cb[i]), sc));
    if (j != 7) continue;
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + PackedQ4K::kD)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(tile + PackedQ4K::kDmin)));
    const SuperVnni& w = wv[sb];
    const PanelSuper& ap = panel[sb];
    if constexpr (kIq4) {
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        _mm512_store_ps(acc[i], _mm512_fmadd_ps(_mm512_set1_ps(ap.d[i]), _mm512_mul_ps(d, _mm512_cvtepi32_ps(isum[i])),
                                                _mm512_load_ps(acc[i])));
        isum[i] = _mm512_setzero_si512();
      }
      continue;
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      __m512i msum = _mm512_setzero_si512();
      for (int pr = 0; pr < 4; ++pr)
        msum = _mm512_dpwssd_epi32(msum, _mm512_load_si512(w.mins[pr]), _mm512_set1_epi32(ap.bs[pr][i]));
      const __m512 t = _mm512_fmsub_ps(d, _mm512_cvtepi32_ps(isum[i]), _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(msum)));
      _mm512_store_ps(acc[i], _mm512_fmadd_ps(_mm512_set1_ps(ap.d[i]), t, _mm512_load_ps(acc[i])));
      isum[i] = _mm512_setzero_si512();
    }
  }
  const __mmask16 mask = __mmask16((1u << valid) - 1u);
  for (int i = 0; i < 16; ++i) _mm512_mask_storeu_ps(out + size_t(i) * out_stride, mask, _mm512_load_ps(acc[i]));
}
#undef LOOM_AMX_PRODUCT

}  // namespace

void packed_gemm_amx(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                     size_t act_stride, int n, float* out, size_t out_stride) {
  const int n16 = n / 16 * 16;
  if (n16 > 0) {
    configure_thread(TileShapes::kInt8);
    const PackedLayout L = PackedLayout::of(t);
    const int64_t nb = cols / kPackBlock;
    const size_t group_bytes = size_t(nb) * L.tile_bytes;
    const auto* p = static_cast<const uint8_t*>(packed);
    const auto* a = static_cast<const uint8_t*>(act);
    // Per thread, grown on first use: one group decoded (nb x kVnniBlock bytes) and the
    // activation panels of all n16 rows (built once per call, read by every group).
    thread_local std::vector<uint8_t> vnni;
    thread_local std::vector<PanelBlock> panels;
    if (vnni.size() < size_t(nb) * kVnniBlock + 64) vnni.resize(size_t(nb) * kVnniBlock + 64);
    if (panels.size() < size_t(n16 / 16) * size_t(nb)) panels.resize(size_t(n16 / 16) * size_t(nb));
    uint8_t* wv = vnni.data() + (64 - reinterpret_cast<uintptr_t>(vnni.data()) % 64) % 64;
    for (int i = 0; i < n16; i += 16)
      build_panel(a + size_t(i) * act_stride, act_stride, nb, &panels[size_t(i / 16) * size_t(nb)]);
    for (int64_t g = g0; g < g1; ++g) {
      const uint8_t* grp = p + size_t(g) * group_bytes;
      const int valid = int(rows - g * 16 < 16 ? rows - g * 16 : 16);
      group_vnni(grp, L, nb, wv);
      for (int i = 0; i < n16; i += 16) {
        float* o = out + size_t(i) * out_stride + size_t(g * 16);
        if (L.has_min) chunk_tiles<true>(wv, nb, &panels[size_t(i / 16) * size_t(nb)], o, out_stride, valid);
        else chunk_tiles<false>(wv, nb, &panels[size_t(i / 16) * size_t(nb)], o, out_stride, valid);
      }
    }
  }
  if (n16 < n) {
    packed_gemm_avx512(t, rows, cols, packed, g0, g1, static_cast<const uint8_t*>(act) + size_t(n16) * act_stride,
                       act_stride, n - n16, out + size_t(n16) * out_stride, out_stride);
  }
}

void packed_gemm_amx_q4k(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                         const void* act, size_t act_stride, int n, float* out, size_t out_stride) {
  const Super32 k = t == TensorType::Q5_K ? Super32::kQ5K : t == TensorType::IQ4_XS ? Super32::kIQ4XS : Super32::kQ4K;
  const int n16 = n / 16 * 16;
  if (n16 > 0) {
    configure_thread(TileShapes::kInt8);
    const int64_t ns = cols / PackedQ4K::kCols;
    const size_t group_bytes = packed_group_stride(t, cols);
    const auto* p = static_cast<const uint8_t*>(packed);
    const auto* a = static_cast<const uint8_t*>(act);
    thread_local std::vector<SuperVnni> vnni;  // one group, grown on first use
    thread_local std::vector<PanelSuper> panels;
    if (vnni.size() < size_t(ns)) vnni.resize(size_t(ns));
    if (panels.size() < size_t(n16 / 16) * size_t(ns)) panels.resize(size_t(n16 / 16) * size_t(ns));
    for (int i = 0; i < n16; i += 16)
      build_panel_q8k(a + size_t(i) * act_stride, act_stride, ns, &panels[size_t(i / 16) * size_t(ns)]);
    for (int64_t g = g0; g < g1; ++g) {
      const uint8_t* grp = p + size_t(g) * group_bytes;
      const int valid = int(rows - g * 16 < 16 ? rows - g * 16 : 16);
      switch (k) {
        case Super32::kQ4K: group_vnni_q4k<Super32::kQ4K>(grp, ns, vnni.data()); break;
        case Super32::kQ5K: group_vnni_q4k<Super32::kQ5K>(grp, ns, vnni.data()); break;
        case Super32::kIQ4XS: group_vnni_q4k<Super32::kIQ4XS>(grp, ns, vnni.data()); break;
      }
      for (int i = 0; i < n16; i += 16) {
        float* o = out + size_t(i) * out_stride + size_t(g * 16);
        const PanelSuper* ap = &panels[size_t(i / 16) * size_t(ns)];
        switch (k) {
          case Super32::kQ4K: chunk_tiles_q4k<Super32::kQ4K>(grp, vnni.data(), ns, ap, o, out_stride, valid); break;
          case Super32::kQ5K: chunk_tiles_q4k<Super32::kQ5K>(grp, vnni.data(), ns, ap, o, out_stride, valid); break;
          case Super32::kIQ4XS: chunk_tiles_q4k<Super32::kIQ4XS>(grp, vnni.data(), ns, ap, o, out_stride, valid); break;
        }
      }
    }
  }
  if (n16 < n) {
    const uint8_t* rest = static_cast<const uint8_t*>(act) + size_t(n16) * act_stride;
    auto* rest_gemm = k == Super32::kQ5K     ? packed_gemm_q5k_avx512
                      : k == Super32::kIQ4XS ? packed_gemm_iq4xs_avx512
                                             : packed_gemm_q4k_avx512;
    rest_gemm(rows, cols, packed, g0, g1, rest, act_stride, n - n16, out + size_t(n16) * out_stride, out_stride);
  }
}

}  // namespace loom::quant::detail

#endif  // __x86_64__

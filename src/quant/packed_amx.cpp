// Packed GEMM with AMX-INT8 tiles for prompt batches: 16 activation rows x 16 weight rows per
// tile product. Per 32-column block b:
//   A = 16 activation rows' int8 quants (from a panel: the rows' blocks rearranged so that one A
//       tile is 512 contiguous bytes)
//   B = the group's weights as signed levels in VNNI order (8 rows of 64 bytes: row j holds
//       elements 4j..4j+3 of each of the 16 weight rows = the packed chunks, unpacked/unbiased)
//   C = A·B via TDPBSSD (int32, exact), then acc[i] += float(C[i]) * (d_w[0..15] * d_a[i]), the
//       16 accumulators in registers across all blocks.
// Activation rows beyond the last multiple of 16 go to the AVX-512 VNNI kernel. Both compute
// every output with the same operations (the exact block integer, then one FMA per block with
// the same scale product, blocks in order), so a row's result does not depend on whether it
// falls in a run of 16 or in the remainder: bit for bit the VNNI kernel's (batch invariance).
// (F16 has no AMX path: TDPBF16PS's accumulation order is the hardware's, which the 1-row FMA
// kernel cannot reproduce, and it was not faster than that kernel at 512 rows either.)
// Measured (perf): with the activation rows read in place (16 lines 1-5 KiB apart per A tile)
// and accumulators in memory for 2 x 2 tiles, most of the time went to waiting for the A tile
// loads; the panel and register accumulators made pp512 of the 500M Q4_0 model 1.18x faster.
// Only called when cpu_features().has_amx_int8_set(); see packed.h for the layout.
#if defined(__x86_64__)

#include <immintrin.h>

#include <cstring>
#include <vector>

#include "quant/packed.h"
#include "quant/packed_layout.h"

#if defined(__GNUC__) && !defined(__clang__)  // clang has no such warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#define LOOM_AMX \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8")))

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

// The 16 weight rows of one tile as signed levels in VNNI order (8 rows of 64 bytes).
template <bool kNibbles>
LOOM_AMX inline void weights_vnni(const uint8_t* q, uint8_t* dst) {
  if constexpr (kNibbles) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), eight = _mm512_set1_epi8(8);
    for (int j = 0; j < 4; ++j) {
      const __m512i c = _mm512_loadu_si512(q + 64 * j);
      _mm512_store_si512(dst + 64 * j, _mm512_sub_epi8(_mm512_and_si512(c, m4), eight));
      _mm512_store_si512(dst + 64 * (j + 4), _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(c, 4), m4), eight));
    }
  } else {
    const __m512i bias = _mm512_set1_epi8(char(0x80));
    for (int j = 0; j < 8; ++j) _mm512_store_si512(dst + 64 * j, _mm512_xor_si512(_mm512_loadu_si512(q + 64 * j), bias));
  }
}

// One block's tile product into C tile tc from A tile ta and B tile tb (literal numbers: the
// intrinsics paste them into the assembly); two sets of tiles (0, 4, 6 and 1, 5, 7) alternate so
// that the next block's loads and product need not wait for this one.
#define LOOM_AMX_BLOCK_PRODUCT(tc, ta, tb, wv, a, a_stride) \
  do {                                                      \
    _tile_loadd(tb, (wv), 64);                              \
    _tile_loadd(ta, (a), long(a_stride));                   \
    _tile_zero(tc);                                         \
    _tile_dpbssd(tc, ta, tb);                               \
  } while (0)

// The activations of 16 rows rearranged for the tile loads: per 32-column block, the rows' 32
// quants one after the other (one A tile at stride 32: 8 cache lines of one page, where the rows'
// own blocks are 16 lines a row apart) and then their 16 scales.
struct alignas(64) PanelBlock {
  int8_t q[16][32];
  float d[16];
};
static_assert(sizeof(PanelBlock) == 576);

// Rows [0, 16) of act (packed activation rows, act_stride apart) as nb PanelBlocks.
LOOM_AMX void build_panel(const uint8_t* act, size_t act_stride, int64_t nb, PanelBlock* panel) {
  for (int i = 0; i < 16; ++i) {
    const uint8_t* row = act + size_t(i) * act_stride;
    for (int64_t b = 0; b < nb; ++b) {
      std::memcpy(&panel[b].d[i], row + size_t(b) * sizeof(PackedActBlock), 4);
      std::memcpy(panel[b].q[i], row + size_t(b) * sizeof(PackedActBlock) + 8, 32);
    }
  }
}

// 16 activation rows against one group of 16 weight rows, over all nb blocks: the 16 output rows
// accumulate in registers. Software pipeline, three blocks in flight: in step b the product of
// block b is computed while block b - 1's (computed in the other C tile) is stored to a buffer,
// and the float epilogue works on block b - 2, stored a step earlier (a TILESTORED waits for
// its product, and a vector load right after TILESTORED of the same bytes would wait for it).
LOOM_AMX void chunk_tiles(const uint8_t* grp, const uint8_t* wv, size_t tile_bytes, int64_t nb, const PanelBlock* panel,
                          float* out, size_t out_stride, int valid) {
  alignas(64) int32_t cbuf[2][16][16];
  __m512 acc[16];  // kept in registers: every loop over them is unrolled
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb + 2; ++b) {
    if (b < nb) {
      const int8_t* a = panel[b].q[0];
      if (b & 1) LOOM_AMX_BLOCK_PRODUCT(1, 5, 7, wv + size_t(b) * 512, a, 32);
      else LOOM_AMX_BLOCK_PRODUCT(0, 4, 6, wv + size_t(b) * 512, a, 32);
    }
    if (b >= 1 && b <= nb) {
      if (b & 1) _tile_stored(0, cbuf[0], 64);  // block b - 1 (even)
      else _tile_stored(1, cbuf[1], 64);
    }
    if (b < 2) continue;
    const int64_t pb = b - 2;  // the block whose product is in memory
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp + size_t(pb) * tile_bytes)));
    const float* da = panel[pb].d;
    int32_t (*cb)[16] = cbuf[pb & 1];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      const __m512 ci = _mm512_cvtepi32_ps(_mm512_load_si512(cb[i]));
      acc[i] = _mm512_fmadd_ps(ci, _mm512_mul_ps(dw, _mm512_set1_ps(da[i])), acc[i]);
    }
  }
  const __mmask16 mask = __mmask16((1u << valid) - 1u);
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) _mm512_mask_storeu_ps(out + size_t(i) * out_stride, mask, acc[i]);
}
#undef LOOM_AMX_BLOCK_PRODUCT

// All blocks of one group as signed VNNI levels (nb x 512 bytes), decoded once per call and
// reused by every chunk of activation rows; written well before the tile loads read it.
template <bool kNibbles>
LOOM_AMX void group_vnni(const uint8_t* grp, size_t tile_bytes, int64_t nb, uint8_t* dst) {
  for (int64_t b = 0; b < nb; ++b) {
    weights_vnni<kNibbles>(grp + size_t(b) * tile_bytes + PackedLayout::kScaleBytes, dst + size_t(b) * 512);
  }
}

}  // namespace

void packed_gemm_amx(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                     const void* act, size_t act_stride, int n, float* out, size_t out_stride) {
  const int n16 = n / 16 * 16;
  if (n16 > 0) {
    configure_thread(TileShapes::kInt8);
    const PackedLayout L = PackedLayout::of(t);
    const int64_t nb = cols / kPackBlock;
    const size_t group_bytes = size_t(nb) * L.tile_bytes;
    const auto* p = static_cast<const uint8_t*>(packed);
    const auto* a = static_cast<const uint8_t*>(act);
    // Per thread, grown on first use: one group's weights in VNNI order (nb x 512 bytes) and the
    // activation panels of all n16 rows (built once per call, read by every group).
    thread_local std::vector<uint8_t> vnni;
    thread_local std::vector<PanelBlock> panels;
    if (vnni.size() < size_t(nb) * 512 + 64) vnni.resize(size_t(nb) * 512 + 64);
    if (panels.size() < size_t(n16 / 16) * size_t(nb)) panels.resize(size_t(n16 / 16) * size_t(nb));
    uint8_t* wv = vnni.data() + (64 - reinterpret_cast<uintptr_t>(vnni.data()) % 64) % 64;
    for (int i = 0; i < n16; i += 16) build_panel(a + size_t(i) * act_stride, act_stride, nb, &panels[size_t(i / 16) * size_t(nb)]);
    for (int64_t g = g0; g < g1; ++g) {
      const uint8_t* grp = p + size_t(g) * group_bytes;
      const int valid = int(rows - g * 16 < 16 ? rows - g * 16 : 16);
      if (L.nibbles) group_vnni<true>(grp, L.tile_bytes, nb, wv);
      else group_vnni<false>(grp, L.tile_bytes, nb, wv);
      for (int i = 0; i < n16; i += 16) {
        chunk_tiles(grp, wv, L.tile_bytes, nb, &panels[size_t(i / 16) * size_t(nb)],
                    out + size_t(i) * out_stride + size_t(g * 16), out_stride, valid);
      }
    }
  }
  if (n16 < n) {
    packed_gemm_avx512(t, rows, cols, packed, g0, g1, static_cast<const uint8_t*>(act) + size_t(n16) * act_stride,
                       act_stride, n - n16, out + size_t(n16) * out_stride, out_stride);
  }
}

}  // namespace loom::quant::detail

#endif  // __x86_64__

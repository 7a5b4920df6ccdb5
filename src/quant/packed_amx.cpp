// Packed GEMM with AMX-INT8 tiles for prompt batches: 16 activation rows x 16 weight rows per
// tile product. Per 32-column block b:
//   A = 16 activation rows' int8 quants (read in place from the PackedActBlocks, stride = row)
//   B = the group's weights as signed levels in VNNI order (8 rows of 64 bytes: row j holds
//       elements 4j..4j+3 of each of the 16 weight rows = the packed chunks, unpacked/unbiased)
//   C = A·B via TDPBSSD (int32, exact), then acc[i] += float(C[i]) * (d_w[0..15] * d_a[i]).
// Activation rows beyond the last multiple of 16 go to the AVX-512 VNNI kernel. Both compute
// every output with the same operations (the exact block integer, then one FMA per block with
// the same scale product, blocks in order), so a row's result does not depend on whether it
// falls in a run of 16 or in the remainder: bit for bit the VNNI kernel's (batch invariance).
// (F16 has no AMX path: TDPBF16PS's accumulation order is the hardware's, which the 1-row FMA
// kernel cannot reproduce, and it was not faster than that kernel at 512 rows either.)
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
  for (int t = 0; t < 4; ++t) {  // C: 16 x 16 int32
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

// NC chunks of 16 activation rows against NG groups of 16 weight rows (NC, NG in {1, 2}): up to
// four independent tile products per block keep the tile unit busy while the float epilogue of
// the previous ones runs. Accumulators live in an L1 buffer (4 x 16 x 16 floats do not fit in
// registers).
template <int NG, int NC>
LOOM_AMX void block_tiles(const uint8_t* const* grp, const uint8_t* const* wvnni, size_t tile_bytes, int64_t nb,
                          const uint8_t* act, size_t act_stride, float* out, size_t out_stride, const int* valid) {
  // Software pipeline: block b's tile products are stored to cbuf[b & 1] while the float
  // epilogue works on block b - 1, whose tile stores have long completed (a vector load right
  // after TILESTORED of the same bytes would wait for it).
  alignas(64) int32_t cbuf[2][NG * NC][16][16];
  alignas(64) float acc[NG * NC][16][16] = {};
  for (int64_t b = 0; b <= nb; ++b) {
    if (b < nb) {
      const uint8_t* ablk = act + size_t(b) * sizeof(PackedActBlock);
      int32_t (*cb)[16][16] = cbuf[b & 1];
      // Tiles: C 0..3 (index g * NC + c), A 4..5 (chunk c), B 6..7 (group g).
      _tile_loadd(6, wvnni[0] + size_t(b) * 512, 64);
      if constexpr (NG == 2) _tile_loadd(7, wvnni[NG - 1] + size_t(b) * 512, 64);
      _tile_loadd(4, ablk + 8, long(act_stride));
      if constexpr (NC == 2) _tile_loadd(5, ablk + 16 * act_stride + 8, long(act_stride));
      _tile_zero(0);
      _tile_dpbssd(0, 4, 6);
      _tile_stored(0, cb[0], 64);
      if constexpr (NC == 2) {
        _tile_zero(1);
        _tile_dpbssd(1, 5, 6);
        _tile_stored(1, cb[1], 64);
      }
      if constexpr (NG == 2) {
        _tile_zero(2);
        _tile_dpbssd(2, 4, 7);
        _tile_stored(2, cb[NC], 64);
        if constexpr (NC == 2) {
          _tile_zero(3);
          _tile_dpbssd(3, 5, 7);
          _tile_stored(3, cb[3], 64);
        }
      }
    }
    if (b == 0) continue;
    const int64_t pb = b - 1;  // the block whose products are ready
    const size_t woff = size_t(pb) * tile_bytes;
    const uint8_t* ablk = act + size_t(pb) * sizeof(PackedActBlock);
    for (int g = 0; g < NG; ++g) {
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp[g] + woff)));
      for (int c = 0; c < NC; ++c) {
        const uint8_t* ac = ablk + size_t(16 * c) * act_stride;
        int32_t (*cb)[16] = cbuf[pb & 1][g * NC + c];
        float (*ab)[16] = acc[g * NC + c];
        for (int i = 0; i < 16; ++i) {
          float da;
          std::memcpy(&da, ac + size_t(i) * act_stride, 4);
          const __m512 ci = _mm512_cvtepi32_ps(_mm512_load_si512(cb[i]));
          _mm512_store_ps(ab[i], _mm512_fmadd_ps(ci, _mm512_mul_ps(dw, _mm512_set1_ps(da)), _mm512_load_ps(ab[i])));
        }
      }
    }
  }
  for (int g = 0; g < NG; ++g) {
    const __mmask16 mask = __mmask16((1u << valid[g]) - 1u);
    for (int c = 0; c < NC; ++c) {
      for (int i = 0; i < 16; ++i) {
        _mm512_mask_storeu_ps(out + size_t(16 * c + i) * out_stride + size_t(16 * g), mask,
                              _mm512_load_ps(acc[g * NC + c][i]));
      }
    }
  }
}

void run_tiles(int ng, int nc, const uint8_t* const* grp, const uint8_t* const* wv, size_t tile_bytes, int64_t nb,
               const uint8_t* act, size_t act_stride, float* out, size_t out_stride, const int* valid) {
  if (ng == 2 && nc == 2) block_tiles<2, 2>(grp, wv, tile_bytes, nb, act, act_stride, out, out_stride, valid);
  else if (ng == 2) block_tiles<2, 1>(grp, wv, tile_bytes, nb, act, act_stride, out, out_stride, valid);
  else if (nc == 2) block_tiles<1, 2>(grp, wv, tile_bytes, nb, act, act_stride, out, out_stride, valid);
  else block_tiles<1, 1>(grp, wv, tile_bytes, nb, act, act_stride, out, out_stride, valid);
}

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
    thread_local std::vector<uint8_t> vnni;  // grown on first use: 2 groups x nb x 512 bytes
    if (vnni.size() < size_t(nb) * 1024 + 64) vnni.resize(size_t(nb) * 1024 + 64);
    uint8_t* vbase = vnni.data() + (64 - reinterpret_cast<uintptr_t>(vnni.data()) % 64) % 64;
    for (int64_t g = g0; g < g1; g += 2) {
      const int ng = g + 1 < g1 ? 2 : 1;
      const uint8_t* grp[2] = {p + size_t(g) * group_bytes, p + size_t(g + ng - 1) * group_bytes};
      const uint8_t* wv[2] = {vbase, vbase + size_t(nb) * 512 * size_t(ng - 1)};
      int valid[2];
      for (int k = 0; k < ng; ++k) {
        valid[k] = int(rows - (g + k) * 16 < 16 ? rows - (g + k) * 16 : 16);
        uint8_t* dst = vbase + size_t(nb) * 512 * size_t(k);
        if (L.nibbles) group_vnni<true>(grp[k], L.tile_bytes, nb, dst);
        else group_vnni<false>(grp[k], L.tile_bytes, nb, dst);
      }
      for (int i = 0; i < n16; i += 32) {
        const int nc = i + 32 <= n16 ? 2 : 1;
        const uint8_t* ai = a + size_t(i) * act_stride;
        float* o = out + size_t(i) * out_stride + size_t(g * 16);
        run_tiles(ng, nc, grp, wv, L.tile_bytes, nb, ai, act_stride, o, out_stride, valid);
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

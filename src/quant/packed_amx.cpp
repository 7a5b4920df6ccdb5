// Packed GEMM with AMX-INT8 tiles for prompt batches: 16 activation rows x 16 weight rows per
// tile product. Per 32-column block b:
//   A = 16 activation rows' int8 quants (read in place from the PackedActBlocks, stride = row)
//   B = the group's weights as signed levels in VNNI order (8 rows of 64 bytes: row j holds
//       elements 4j..4j+3 of each of the 16 weight rows = the packed chunks, unpacked/unbiased)
//   C = A·B via TDPBSSD (int32, exact), then acc[i] += float(C[i]) * (d_w[0..15] * d_a[i]).
// Activation rows beyond the last multiple of 16 go to the AVX-512 VNNI kernel.
// Only called when cpu_features().has_amx_int8_set(); see packed.h for the layout.
#if defined(__x86_64__)

#include <immintrin.h>

#include <cstring>
#include <vector>

#include "quant/packed.h"
#include "quant/packed_layout.h"

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define LOOM_AMX \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8,amx-bf16")))

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

// Tile shapes are per-thread state. Two shape sets are used (int8 blocks of 32 columns, bf16
// pairs over 32 columns); each thread loads the one it needs when it differs from the last.
enum class TileShapes { kNone, kInt8, kBf16 };

LOOM_AMX void configure_thread(TileShapes want) {
  thread_local TileShapes current = TileShapes::kNone;
  if (current == want) return;
  TileConfig cfg;
  if (want == TileShapes::kInt8) {
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
  } else {
    for (int t = 0; t < 8; ++t) {  // every tile 16 rows x 64 bytes (C f32, A and B bf16 pairs)
      cfg.colsb[t] = 64;
      cfg.rows[t] = 16;
    }
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

// ---- F16 weights through AMX-BF16 ------------------------------------------------------------
//
// An f16 value has 11 significant bits, a bf16 8: every f16 weight w (and every activation x,
// already rounded through f16) is exactly hi + lo with hi = w truncated to bf16 and lo = w - hi
// (at most 3 significant bits, exact in bf16). TDPBF16PS multiplies bf16 pairs exactly into f32
// sums, so w·x = hi_w·hi_x + hi_w·lo_x + lo_w·hi_x + lo_w·lo_x is computed with four tile products
// and no per-block scales: C tiles accumulate over all columns. Results agree with the FMA
// kernel to f32 summation rounding.

namespace {

// hi/lo bf16 halves of 16 floats, as the high 16 bits of each 32-bit lane.
LOOM_AMX inline void split_bf16(__m512 v, __m512i* hi, __m512i* lo) {
  const __m512i bits = _mm512_castps_si512(v);
  const __m512i mask = _mm512_set1_epi32(int(0xffff0000u));
  const __m512i h = _mm512_and_si512(bits, mask);
  const __m512 rest = _mm512_sub_ps(v, _mm512_castsi512_ps(h));
  *hi = h;
  *lo = _mm512_and_si512(_mm512_castps_si512(rest), mask);
}

// Activation rows [0, 16) of one chunk -> per 32-column block: A_hi then A_lo, each 16 rows x 32
// bf16 (1 KiB), blocks one after the other.
LOOM_AMX void act_tiles_bf16(const uint8_t* act, size_t act_stride, int64_t cols, uint16_t* dst) {
  const int64_t nb = cols / 32;
  for (int64_t b = 0; b < nb; ++b) {
    uint16_t* hi = dst + size_t(b) * 1024;
    uint16_t* lo = hi + 512;
    for (int i = 0; i < 16; ++i) {
      const float* x = reinterpret_cast<const float*>(act + size_t(i) * act_stride) + b * 32;
      for (int h = 0; h < 2; ++h) {
        __m512i vh, vl;
        split_bf16(_mm512_loadu_ps(x + 16 * h), &vh, &vl);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(hi + i * 32 + 16 * h), _mm512_cvtepi32_epi16(_mm512_srli_epi32(vh, 16)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(lo + i * 32 + 16 * h), _mm512_cvtepi32_epi16(_mm512_srli_epi32(vl, 16)));
      }
    }
  }
}

// One group's weights -> per 32-column block: B_hi then B_lo in VNNI order (row j: the 16
// weight rows' elements at columns 2j, 2j+1 as bf16 pairs), 1 KiB each.
LOOM_AMX void weight_tiles_bf16(const uint8_t* grp, int64_t cols, uint16_t* dst) {
  const int64_t nb = cols / 32;
  for (int64_t b = 0; b < nb; ++b) {
    auto* hi = reinterpret_cast<uint8_t*>(dst + size_t(b) * 1024);
    uint8_t* lo = hi + 1024;
    for (int j = 0; j < 16; ++j) {
      const int64_t c = b * 32 + 2 * j;
      const __m512 w0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp + 32 * size_t(c))));
      const __m512 w1 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp + 32 * size_t(c + 1))));
      __m512i h0, l0, h1, l1;
      split_bf16(w0, &h0, &l0);
      split_bf16(w1, &h1, &l1);
      // Lane r: low half = column 2j, high half = column 2j + 1.
      _mm512_storeu_si512(hi + 64 * j, _mm512_or_si512(_mm512_srli_epi32(h0, 16), h1));
      _mm512_storeu_si512(lo + 64 * j, _mm512_or_si512(_mm512_srli_epi32(l0, 16), l1));
    }
  }
}

// Two chunks of 16 activation rows (tiles 4-7) against one group (B tiles 2, 3), C in 0 and 1.
template <int NC>
LOOM_AMX void f16_tiles(const uint16_t* wt, const uint16_t* at0, const uint16_t* at1, int64_t nb, float* out,
                        size_t out_stride, int valid) {
  _tile_zero(0);
  if constexpr (NC == 2) _tile_zero(1);
  for (int64_t b = 0; b < nb; ++b) {
    const uint16_t* w = wt + size_t(b) * 1024;
    _tile_loadd(2, w, 64);
    _tile_loadd(3, w + 512, 64);
    const uint16_t* a0 = at0 + size_t(b) * 1024;
    _tile_loadd(4, a0, 64);
    _tile_loadd(5, a0 + 512, 64);
    _tile_dpbf16ps(0, 4, 2);
    _tile_dpbf16ps(0, 4, 3);
    _tile_dpbf16ps(0, 5, 2);
    _tile_dpbf16ps(0, 5, 3);
    if constexpr (NC == 2) {
      const uint16_t* a1 = at1 + size_t(b) * 1024;
      _tile_loadd(6, a1, 64);
      _tile_loadd(7, a1 + 512, 64);
      _tile_dpbf16ps(1, 6, 2);
      _tile_dpbf16ps(1, 6, 3);
      _tile_dpbf16ps(1, 7, 2);
      _tile_dpbf16ps(1, 7, 3);
    }
  }
  alignas(64) float cbuf[16][16];
  const __mmask16 mask = __mmask16((1u << valid) - 1u);
  for (int c = 0; c < NC; ++c) {
    if (c == 0) _tile_stored(0, cbuf, 64);
    else _tile_stored(1, cbuf, 64);
    for (int i = 0; i < 16; ++i) _mm512_mask_storeu_ps(out + size_t(16 * c + i) * out_stride, mask, _mm512_load_ps(cbuf[i]));
  }
}

}  // namespace

void packed_gemm_f16_amx(int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                         size_t act_stride, int n, float* out, size_t out_stride) {
  const int n16 = n / 16 * 16;
  if (n16 > 0) {
    configure_thread(TileShapes::kBf16);
    const int64_t nb = cols / 32;
    // Per-thread conversion buffers, grown on first use (a prompt's shapes repeat every layer).
    thread_local std::vector<uint16_t> acts, wts;
    if (acts.size() < size_t(n16 / 16) * size_t(nb) * 1024) acts.resize(size_t(n16 / 16) * size_t(nb) * 1024);
    if (wts.size() < size_t(nb) * 1024) wts.resize(size_t(nb) * 1024);
    const auto* a = static_cast<const uint8_t*>(act);
    for (int i = 0; i < n16; i += 16) {
      act_tiles_bf16(a + size_t(i) * act_stride, act_stride, cols, acts.data() + size_t(i / 16) * size_t(nb) * 1024);
    }
    const size_t group_bytes = packed_group_bytes(TensorType::F16, cols);
    for (int64_t g = g0; g < g1; ++g) {
      const int valid = int(rows - g * 16 < 16 ? rows - g * 16 : 16);
      weight_tiles_bf16(static_cast<const uint8_t*>(packed) + size_t(g) * group_bytes, cols, wts.data());
      for (int i = 0; i < n16; i += 32) {
        const uint16_t* at0 = acts.data() + size_t(i / 16) * size_t(nb) * 1024;
        float* o = out + size_t(i) * out_stride + size_t(g * 16);
        if (i + 32 <= n16) f16_tiles<2>(wts.data(), at0, at0 + size_t(nb) * 1024, nb, o, out_stride, valid);
        else f16_tiles<1>(wts.data(), at0, nullptr, nb, o, out_stride, valid);
      }
    }
  }
  if (n16 < n) {
    packed_gemm_f16_avx512(rows, cols, packed, g0, g1, static_cast<const uint8_t*>(act) + size_t(n16) * act_stride,
                           act_stride, n - n16, out + size_t(n16) * out_stride, out_stride);
  }
}

}  // namespace loom::quant::detail

#endif  // __x86_64__

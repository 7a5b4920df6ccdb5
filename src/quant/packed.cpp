// Packed (row-interleaved) weights: layout, packing, activation quantization, the scalar
// reference GEMM, and the run-time dispatch to the SIMD kernels (packed_amx.cpp,
// packed_avx512.cpp, packed_avx2.cpp; packed_neon.cpp on AArch64). See packed.h for the layout.
#include "quant/packed.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/cpu.h"
#include "base/half.h"
#include "quant/blocks.h"
#include "quant/kernels.h"
#include "quant/packed_act_panels.h"
#include "quant/packed_layout.h"
#include "quant/quant.h"
#include "quant/small_types.h"

namespace loom::quant {

bool can_pack(TensorType t) { return type_traits(t).packable(); }

bool can_pack_data(TensorType t, const void* src, size_t src_row_bytes, int64_t rows, int64_t cols) {
  if (!can_pack(t) || cols % 32 != 0) return false;
  if (t != TensorType::MXFP4) return true;
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = static_cast<const uint8_t*>(src) + size_t(r) * src_row_bytes;
    for (int64_t b = 0; b < cols / 32; ++b) {
      const uint8_t* blk = row + 17 * size_t(b);
      if (blk[0] >= 104 && blk[0] <= 143) continue;  // the usual case, checked inline
      if (detail::mxfp4_tile_scale(blk) < 0) return false;
    }
  }
  return true;
}

bool packed_kernels_available(TensorType t) {
  const PackedTraits& p = type_traits(t).packed;
  const CpuFeatures& f = cpu_features();
  return (p.avx512 && f.has_avx512_vnni_set()) || (p.avxvnni && f.has_avx_vnni_set()) || (p.avx2 && f.has_avx2_set()) ||
         (p.neon_i8mm && f.neon_i8mm) || (p.neon_dot && f.neon_dotprod) || (p.neon && f.simd);
}

size_t packed_group_bytes(TensorType t, int64_t cols) { return detail::packed_group_stride(t, cols); }

size_t packed_size(TensorType t, int64_t rows, int64_t cols) {
  const int64_t groups = (rows + kPackRows - 1) / kPackRows;
  return size_t(groups) * packed_group_bytes(t, cols);
}

namespace {

using detail::PackedIQ4XS;
using detail::PackedQ2K;
using detail::PackedQ3K;
using detail::PackedQ4K;
using detail::PackedQ5K;
using detail::PackedQ6K;

using detail::PackJob;

// Calls f(tile, r, row, sb) for every source row r of every group in [g0, g1) and every
// super-block sb: tile is the group's 256-column tile sb (tile_bytes each), row the source row
// (padding rows are skipped: the zeroed tile gives them scale 0).
template <typename F>
void for_each_super_row(const PackJob& j, size_t tile_bytes, F&& f) {
  for (int64_t g = j.g0; g < j.g1; ++g) {
    for (int64_t sb = 0; sb < j.cols / 256; ++sb) {
      uint8_t* tile = j.group(g) + size_t(sb) * tile_bytes;
      for (int r = 0; r < kPackRows; ++r) {
        if (const uint8_t* row = j.row(g, r)) f(tile, r, row, sb);
      }
    }
  }
}

}  // namespace

// ---- the pack functions of the table (packed_layout.h) --------------------------------------

namespace detail {

void pack_q6k(const PackJob& j) {
  for_each_super_row(j, PackedQ6K::kTileBytes, [&](uint8_t* tile, int r, const uint8_t* row, int64_t sb) {
    const uint8_t* blk = row + size_t(sb) * 210;
    const uint8_t* ql = blk;
    const uint8_t* qh = blk + 128;
    std::memcpy(tile + PackedQ6K::kD + 2 * r, blk + 208, 2);
    for (int k = 0; k < 16; ++k) tile[PackedQ6K::kSc + 16 * k + r] = blk[192 + k];
    // The row's 256 levels in element order (see BlockQ6_K in blocks.h: for half h and l < 32,
    // element 128 h + 32 part + l), then 4 at a time into the row's lane of each chunk.
    uint8_t level[256];
    for (int h = 0; h < 2; ++h) {
      for (int part = 0; part < 4; ++part) {
        for (int l = 0; l < 32; ++l) {
          const uint8_t lq = ql[64 * h + l + (part & 1) * 32];
          const int lo4 = part < 2 ? (lq & 0x0f) : (lq >> 4);
          level[128 * h + 32 * part + l] = uint8_t(lo4 | ((qh[32 * h + l] >> (2 * part)) & 3) << 4);
        }
      }
    }
    for (int c = 0; c < 64; ++c) std::memcpy(tile + PackedQ6K::kQs + 64 * c + 4 * r, level + 4 * c, 4);
  });
}

// Q4_K and Q5_K (Q4_K's tile with the fifth bits after it; BlockQ5_K: d, dmin, scales, qh, qs).
template <bool q5>
static void pack_q45k(const PackJob& j) {
  const size_t tile_bytes = q5 ? PackedQ5K::kTileBytes : PackedQ4K::kTileBytes;
  const size_t src_block = q5 ? sizeof(detail::BlockQ5_K) : sizeof(detail::BlockQ4_K), qs_offset = q5 ? 48 : 16;
  for_each_super_row(j, tile_bytes, [&](uint8_t* tile, int r, const uint8_t* row, int64_t sb) {
    const uint8_t* blk = row + size_t(sb) * src_block;
    if (q5) {
      const uint8_t* qh = blk + 16;  // bit 2 gg (low nibble) / 2 gg + 1 (high) of qh[l], l < 32
      for (int gg = 0; gg < 4; ++gg) {
        for (int c = 0; c < 8; ++c) {
          uint8_t* mask = tile + PackedQ5K::kQh + 128 * gg + 16 * c;
          for (int k = 0; k < 4; ++k) {
            detail::ChunkMask::set(mask, r, k, qh[4 * c + k] >> (2 * gg));
            detail::ChunkMask::set(mask + 8, r, k, qh[4 * c + k] >> (2 * gg + 1));
          }
        }
      }
    }
    std::memcpy(tile + PackedQ4K::kD + 2 * r, blk, 2);
    std::memcpy(tile + PackedQ4K::kDmin + 2 * r, blk + 2, 2);
    for (int k = 0; k < 8; ++k) {
      int sc, m;
      detail::k4_scale_min(blk + 4, k, &sc, &m);
      tile[PackedQ4K::kSc + 16 * k + r] = uint8_t(sc);
      tile[PackedQ4K::kM + 16 * k + r] = uint8_t(m);
    }
    const uint8_t* qs = blk + qs_offset;
    for (int gg = 0; gg < 4; ++gg) {
      for (int c = 0; c < 8; ++c) std::memcpy(tile + PackedQ4K::kQs + 512 * gg + 64 * c + 4 * r, qs + 32 * gg + 4 * c, 4);
    }
  });
}

// IQ4_XS: sub-block s of the file is Q4_0's nibble order over qs + 16 s; the tile wants Q4_K's.
void pack_iq4xs(const PackJob& j) {
  for_each_super_row(j, PackedIQ4XS::kTileBytes, [&](uint8_t* tile, int r, const uint8_t* row, int64_t sb) {
    const auto b = detail::load_block<detail::BlockIQ4_XS>(row, sb);
    std::memcpy(tile + PackedIQ4XS::kD + 2 * r, &b.d, 2);
    for (int k = 0; k < 8; ++k) {
      tile[PackedIQ4XS::kSc + 16 * k + r] = uint8_t(int8_t(detail::iq4xs_scale(b.scales_l, b.scales_h, k) - 32));
    }
    // Sub-block s: element i < 16 is the low nibble of qs[16 s + i], i >= 16 the high nibble
    // of qs[16 s + i - 16]; the tile's half-pair gg holds sub-block 2 gg in its low nibbles and
    // 2 gg + 1 in its high ones, 4 columns a chunk.
    for (int gg = 0; gg < 4; ++gg) {
      const uint8_t* s0 = b.qs + 32 * gg;  // sub-block 2 gg
      const uint8_t* s1 = s0 + 16;         // sub-block 2 gg + 1
      for (int c = 0; c < 8; ++c) {
        uint8_t* dst = tile + PackedIQ4XS::kQs + 512 * gg + 64 * c + 4 * r;
        for (int k = 0; k < 4; ++k) {
          const int i = 4 * c + k;
          const int n0 = i < 16 ? s0[i] & 0x0f : s0[i - 16] >> 4, n1 = i < 16 ? s1[i] & 0x0f : s1[i - 16] >> 4;
          dst[k] = uint8_t(n0 | n1 << 4);
        }
      }
    }
  });
}

// Q2_K and Q3_K: element e = 128 h + 32 jj + l has its low 2 bits at (qs[32 h + l] >> 2 jj) & 3
// (and Q3_K its third at bit 4 h + jj of hmask[l]). The tile's chunk 4 G + q holds, in bits 2 p of
// lane r's byte k, column 64 G + 16 p + 4 q + k; Q3_K's third bits of plane p of that chunk are a
// chunk mask.
template <bool q3>
static void pack_q23k(const PackJob& j) {
  const size_t tile_bytes = q3 ? PackedQ3K::kTileBytes : PackedQ2K::kTileBytes;
  uint8_t low[256], high[256];
  for_each_super_row(j, tile_bytes, [&](uint8_t* tile, int r, const uint8_t* row, int64_t sb) {
    const uint8_t* qs;
    if (q3) {
      const auto b = detail::load_block<detail::BlockQ3_K>(row, sb);
      std::memcpy(tile + PackedQ3K::kD + 2 * r, &b.d, 2);
      for (int s = 0; s < 16; ++s) tile[PackedQ3K::kSc + 16 * s + r] = uint8_t(int8_t(detail::q3k_scale(b.scales, s) - 32));
      for (int h = 0; h < 2; ++h) {
        for (int jj = 0; jj < 4; ++jj) {
          for (int l = 0; l < 32; ++l) high[128 * h + 32 * jj + l] = uint8_t((b.hmask[l] >> (4 * h + jj)) & 1);
        }
      }
      qs = row + size_t(sb) * sizeof(detail::BlockQ3_K) + 32;
    } else {
      const uint8_t* blk = row + size_t(sb) * sizeof(detail::BlockQ2_K);
      std::memcpy(tile + PackedQ2K::kD + 2 * r, blk + 80, 2);
      std::memcpy(tile + PackedQ2K::kDmin + 2 * r, blk + 82, 2);
      for (int s = 0; s < 16; ++s) tile[PackedQ2K::kSm + 16 * s + r] = blk[s];
      qs = blk + 16;
    }
    for (int h = 0; h < 2; ++h) {
      for (int jj = 0; jj < 4; ++jj) {
        for (int l = 0; l < 32; ++l) low[128 * h + 32 * jj + l] = uint8_t((qs[32 * h + l] >> (2 * jj)) & 3);
      }
    }
    uint8_t* planes = tile + (q3 ? PackedQ3K::kQs : PackedQ2K::kQs);
    for (int c = 0; c < 16; ++c) {
      const int base = 64 * (c / 4) + 4 * (c % 4);  // column of plane 0, byte 0
      for (int k = 0; k < 4; ++k) {
        planes[64 * c + 4 * r + k] =
            uint8_t(low[base + k] | low[base + 16 + k] << 2 | low[base + 32 + k] << 4 | low[base + 48 + k] << 6);
      }
      if (!q3) continue;
      for (int p = 0; p < 4; ++p) {  // the 4 bits of row r in each plane's chunk mask
        const uint8_t* hb = high + base + 16 * p;
        tile[PackedQ3K::kQh + 32 * c + 8 * p + r / 2] |=
            uint8_t((hb[0] | hb[1] << 1 | hb[2] << 2 | hb[3] << 3) << (4 * (r % 2)));
      }
    }
  });
}

// F16 / BF16: column-major within the group: element (r, c) at 2 * (16 * c + r).
void pack_f16(const PackJob& j) {
  for (int64_t g = j.g0; g < j.g1; ++g) {
    uint8_t* grp = j.group(g);
    for (int r = 0; r < kPackRows; ++r) {
      const uint8_t* row = j.row(g, r);
      if (!row) continue;
      for (int64_t c = 0; c < j.cols; ++c) std::memcpy(grp + 2 * (16 * size_t(c) + size_t(r)), row + 2 * c, 2);
    }
  }
}

// The 32-column block types: d (and m), the quant bytes (Q8_0: + 128 as u8; nibbles unchanged),
// and for Q5_0 / Q5_1 the fifth bits of each chunk's elements as two chunk masks.
int32_t mxfp4_tile_scale(const uint8_t* block) {
  const int e = block[0];
  // 2^(e - 128) in f16: normal from e = 114 (2^-14), subnormal below.
  if (e >= 114 && e <= 143) return (e - 113) << 10;
  if (e >= 104 && e < 114) return 1 << (e - 104);
  uint64_t q[2];  // levels 0 and 8 are both 0: a block of them needs no scale
  std::memcpy(q, block + 1, 16);
  return ((q[0] | q[1]) & 0x7777777777777777ull) == 0 ? 0 : -1;
}

void pack_blocks32(const PackJob& j) {
  const PackedLayout& L = PackedLayout::of(j.t);
  const size_t block_bytes = size_t(row_bytes(j.t, 32));
  // GGUF: d, [m], [qh], qs (MXFP4: the E8M0 byte, qs).
  const size_t head = L.mxfp4 ? 1 : L.has_min ? 4 : 2, qh_bytes = L.fifth_bit ? 4 : 0;
  const uint8_t bias_byte = L.nibbles ? 0x00 : uint8_t(L.bias);  // Q8_0's int8 levels + 128 on x86-64
  for (int64_t g = j.g0; g < j.g1; ++g) {
    for (int64_t b = 0; b < j.cols / detail::kPackBlock; ++b) {
      uint8_t* tile = j.group(g) + size_t(b) * L.tile_bytes;
      uint8_t* q = tile + L.q_offset();
      for (int r = 0; r < kPackRows; ++r) {
        const uint8_t* row = j.row(g, r);
        if (!row) {
          for (int c = 0; c < L.chunks; ++c) std::memset(q + c * 64 + r * 4, bias_byte, 4);  // level 0
          continue;
        }
        const uint8_t* blk = row + size_t(b) * block_bytes;
        if (L.mxfp4) {
          // can_pack_data has checked the scale (a misfit would pack as 0).
          const uint16_t d = uint16_t(std::max<int32_t>(0, mxfp4_tile_scale(blk)));
          std::memcpy(tile + 2 * r, &d, 2);
        } else {
          std::memcpy(tile + 2 * r, blk, 2);
        }
        if (L.has_min) std::memcpy(tile + PackedLayout::kScaleBytes + 2 * r, blk + 2, 2);
        const uint8_t* qs = blk + head + qh_bytes;
        for (int c = 0; c < L.chunks; ++c) {
          uint32_t v;
          std::memcpy(&v, qs + 4 * c, 4);
          v ^= bias_byte * 0x01010101u;
          std::memcpy(q + c * 64 + r * 4, &v, 4);
        }
        if (L.fifth_bit) {
          // Chunk c's masks: elements 4 c.. (low nibbles) and 16 + 4 c.. (high), 4 bits of row r
          // at bit 4 r of each (ChunkMask).
          uint8_t qhb[4];
          std::memcpy(qhb, blk + head, 4);
          const uint32_t qh = detail::qh_bits(qhb);
          for (int c = 0; c < L.chunks; ++c) {
            uint8_t* mask = tile + L.qh_offset() + 16 * size_t(c);
            mask[r / 2] |= uint8_t(((qh >> (4 * c)) & 0xf) << (4 * (r % 2)));
            mask[8 + r / 2] |= uint8_t(((qh >> (16 + 4 * c)) & 0xf) << (4 * (r % 2)));
          }
        }
      }
    }
  }
}

void pack_q4k(const PackJob& j) { pack_q45k<false>(j); }
void pack_q5k(const PackJob& j) { pack_q45k<true>(j); }
void pack_q2k(const PackJob& j) { pack_q23k<false>(j); }
void pack_q3k(const PackJob& j) { pack_q23k<true>(j); }

}  // namespace detail

void pack_weights(TensorType t, const void* src, size_t src_row_bytes, int64_t rows, int64_t cols, void* dst, int64_t g0,
                  int64_t g1) {
  const PackJob j{t, static_cast<const uint8_t*>(src), src_row_bytes, rows, cols, static_cast<uint8_t*>(dst), g0, g1};
  // Zeroed first: padding rows get scale 0 (and the layouts' unused bits are 0).
  std::memset(j.group(g0), 0, size_t(g1 - g0) * packed_group_bytes(t, cols));
  type_traits(t).packed.pack(j);
}

size_t packed_act_row_bytes(TensorType t, int64_t cols) {
  switch (type_traits(t).packed.act) {
    case PackedAct::kF32: return sizeof(float) * size_t(cols);
    case PackedAct::kQ8K: return size_t(row_bytes(TensorType::Q8_K, cols));
    case PackedAct::kQ8_0Blocks:
    case PackedAct::kQ8_1Blocks: break;
  }
  return size_t(cols / detail::kPackBlock) * sizeof(detail::PackedActBlock);
}

void quantize_packed_act(TensorType t, const float* x, int64_t cols, void* dst) {
  const PackedAct act = type_traits(t).packed.act;
  if (act == PackedAct::kQ8K) {
    quantize_row(TensorType::Q8_K, x, dst, cols);
    return;
  }
  if (act == PackedAct::kF32) {
    // Round through the 16-bit type and widen back: one pass with the Highway kernels (the bits of
    // the two below), else quantize_row then dequantize_row in place from the end.
    auto* out = static_cast<float*>(dst);
    if (kernel_set_enabled(KernelSet::kHighway)) {
      detail::highway::round_row_half(t, x, out, cols);
      return;
    }
    auto* half = reinterpret_cast<uint16_t*>(static_cast<uint8_t*>(dst) + 2 * size_t(cols));
    quantize_row(t, x, half, cols);
    dequantize_row(t, half, out, cols);
    return;
  }
  // One dispatched Q8_0 (Q8_1) quantization of the whole row into the tail of dst, then an
  // in-place forward conversion: block b (34 bytes at 6·nb + 34·b; Q8_1: 36 at 4·nb + 36·b) is
  // read before block b (40 bytes at 40·b) is written, and 40·(b+1) <= 6·nb + 34·(b+1) (resp.
  // 4·nb + 36·(b+1)) for every b < nb, so no unread byte is overwritten.
  const int64_t nb = cols / detail::kPackBlock;
  auto* out = static_cast<uint8_t*>(dst);
  if (act == PackedAct::kQ8_1Blocks) {
    uint8_t* q81 = out + size_t(nb) * 4;
    quantize_row(TensorType::Q8_1, x, q81, cols);
    for (int64_t b = 0; b < nb; ++b) {
      const auto src = detail::load_block<detail::BlockQ8_1>(q81, b);
      detail::PackedActBlock blk;
      blk.d = f16_to_f32(src.d);
      blk.s = f16_to_f32(src.s);
      std::memcpy(blk.q, src.qs, 32);
      std::memcpy(out + size_t(b) * sizeof(blk), &blk, sizeof(blk));
    }
    return;
  }
#if defined(__x86_64__)
  if (cpu_features().has_avx2_set()) {
    detail::avx2::quantize_packed_act(x, nb, out);
    return;
  }
#endif
  uint8_t* q80 = out + size_t(nb) * 6;
  quantize_row(TensorType::Q8_0, x, q80, cols);
  for (int64_t b = 0; b < nb; ++b) {
    detail::PackedActBlock blk;
    const uint8_t* src = q80 + size_t(b) * 34;
    uint16_t dh;
    std::memcpy(&dh, src, 2);
    blk.d = f16_to_f32(dh);
    std::memcpy(blk.q, src + 2, 32);
    int32_t sum = 0;
    for (int8_t v : blk.q) sum += v;
    blk.sum = sum;
    std::memcpy(out + size_t(b) * sizeof(blk), &blk, sizeof(blk));
  }
}

void packed_gemm(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                 size_t act_stride, int n, float* out, size_t out_stride) {
#if defined(__x86_64__)
  const PackedTraits& p = type_traits(t).packed;
  const CpuFeatures& f = cpu_features();
  PackedGemmFn fn = nullptr;
  if (p.amx && f.has_amx_int8_set() && n >= 16) fn = p.amx;
  else if (p.avx512 && f.has_avx512_vnni_set()) fn = p.avx512;
  else if (p.avxvnni && f.has_avx_vnni_set()) fn = p.avxvnni;
  else if (p.avx2 && f.has_avx2_set()) fn = p.avx2;
  if (fn) return fn(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
#elif defined(__aarch64__)
  const PackedTraits& p = type_traits(t).packed;
  const CpuFeatures& f = cpu_features();
  PackedGemmFn fn = nullptr;
  if (p.neon_i8mm && f.neon_i8mm) fn = p.neon_i8mm;
  else if (p.neon_dot && f.neon_dotprod) fn = p.neon_dot;
  else if (p.neon && f.simd) fn = p.neon;
  if (fn) return fn(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
#endif
  ref::packed_gemm(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
}

// ---- the reference dots of the table (packed_layout.h) -------------------------------------
namespace detail {

// One output of the reference: weight row r of the group at grp against one activation row.
// Each type's function spells out its layout element by element.

float packed_ref_dot_q6k(TensorType, const uint8_t* grp, int r, const uint8_t* act, int64_t cols) {
  // Per super-block: d_w * d_a * Σ_s sc_s (Σ u·a - 32 Σ a) over sub-blocks s of 16 columns.
  using detail::PackedQ6K;
  float acc = 0.0f;
  for (int64_t sb = 0; sb < cols / PackedQ6K::kCols; ++sb) {
    const uint8_t* tile = grp + size_t(sb) * PackedQ6K::kTileBytes;
    detail::BlockQ8_K ab;
    std::memcpy(&ab, act + size_t(sb) * sizeof(ab), sizeof(ab));
    int32_t isum = 0;
    for (int sub = 0; sub < 16; ++sub) {
      int32_t dot = -32 * ab.bsums[sub];
      for (int e = 16 * sub; e < 16 * sub + 16; ++e) dot += tile[PackedQ6K::kQs + 64 * (e / 4) + 4 * r + (e % 4)] * ab.qs[e];
      isum += dot * int8_t(tile[PackedQ6K::kSc + 16 * sub + r]);
    }
    uint16_t dh;
    std::memcpy(&dh, tile + PackedQ6K::kD + 2 * r, 2);
    acc += ab.d * (f16_to_f32(dh) * float(isum));
  }
  return acc;
}

// Q4_K, Q5_K (a fifth bit from the masks after the nibbles adds 16 to a level) and IQ4_XS (the
// same nibble order; a nibble indexes the biased IQ4_NL table, signed scales, no mins).
template <bool q5, bool iq4>
static float dot_q4k(const uint8_t* grp, int r, const uint8_t* act, int64_t cols) {
  // Per super-block: d_a * (d_w * Σ_j sc_j Σ q·a  -  dmin_w * Σ_j m_j Σ a), integers inside
  // (IQ4_XS: q = table value + 128, and each sub-block's sum starts at -128 Σ a).
  using detail::PackedIQ4XS;
  using detail::PackedQ4K;
  using detail::PackedQ5K;
  const size_t tile_bytes = q5 ? PackedQ5K::kTileBytes : iq4 ? PackedIQ4XS::kTileBytes : PackedQ4K::kTileBytes;
  const size_t qs = iq4 ? PackedIQ4XS::kQs : PackedQ4K::kQs;
  float acc = 0.0f;
  for (int64_t sb = 0; sb < cols / PackedQ4K::kCols; ++sb) {
    const uint8_t* tile = grp + size_t(sb) * tile_bytes;
    detail::BlockQ8_K ab;
    std::memcpy(&ab, act + size_t(sb) * sizeof(ab), sizeof(ab));
    int32_t isum = 0, msum = 0;
    for (int gg = 0; gg < 4; ++gg) {
      const int j0 = 2 * gg, j1 = 2 * gg + 1;
      const int32_t a0 = ab.bsums[2 * j0] + ab.bsums[2 * j0 + 1], a1 = ab.bsums[2 * j1] + ab.bsums[2 * j1 + 1];
      int32_t lo = iq4 ? -128 * a0 : 0, hi = iq4 ? -128 * a1 : 0;
      for (int c = 0; c < 8; ++c) {
        for (int k = 0; k < 4; ++k) {
          const int byte = tile[qs + 512 * gg + 64 * c + 4 * r + k];
          const uint8_t* mask = tile + PackedQ5K::kQh + 128 * gg + 16 * c;
          int u_lo = (byte & 0x0f) | (q5 ? detail::ChunkMask::get(mask, r, k) << 4 : 0);
          int u_hi = (byte >> 4) | (q5 ? detail::ChunkMask::get(mask + 8, r, k) << 4 : 0);
          if (iq4) {
            u_lo = detail::kIq4nlBiased[u_lo];
            u_hi = detail::kIq4nlBiased[u_hi];
          }
          lo += u_lo * ab.qs[64 * gg + 4 * c + k];
          hi += u_hi * ab.qs[64 * gg + 32 + 4 * c + k];
        }
      }
      if (iq4) {
        isum += lo * int8_t(tile[PackedIQ4XS::kSc + 16 * j0 + r]) + hi * int8_t(tile[PackedIQ4XS::kSc + 16 * j1 + r]);
        continue;
      }
      isum += lo * tile[PackedQ4K::kSc + 16 * j0 + r] + hi * tile[PackedQ4K::kSc + 16 * j1 + r];
      msum += tile[PackedQ4K::kM + 16 * j0 + r] * a0 + tile[PackedQ4K::kM + 16 * j1 + r] * a1;
    }
    const float d = f16_to_f32(detail::load_u16(tile + PackedQ4K::kD, r));
    if (iq4) acc += ab.d * (d * float(isum));
    else acc += ab.d * (d * float(isum) - f16_to_f32(detail::load_u16(tile + PackedQ4K::kDmin, r)) * float(msum));
  }
  return acc;
}

// F16 / BF16 (bf16: the 16 bits are the top half of an f32).
static float dot_f16(const uint8_t* grp, int r, const uint8_t* act, int64_t cols, bool bf16) {
  float acc = 0.0f;
  for (int64_t c = 0; c < cols; ++c) {
    uint16_t h;
    float x;
    std::memcpy(&h, grp + 2 * (16 * size_t(c) + size_t(r)), 2);
    std::memcpy(&x, act + 4 * size_t(c), 4);
    acc += (bf16 ? bf16_to_f32(h) : f16_to_f32(h)) * x;
  }
  return acc;
}

// The 32-column block types: per block d_w * d_a * (Σ u·q - bias · Σ q), plus m_w * s_a for the
// types with a minimum.
float packed_ref_dot_blocks32(TensorType t, const uint8_t* grp, int r, const uint8_t* act, int64_t cols) {
  const PackedLayout& L = PackedLayout::of(t);
  float acc = 0.0f;
  for (int64_t b = 0; b < cols / detail::kPackBlock; ++b) {
    const uint8_t* tile = grp + size_t(b) * L.tile_bytes;
    detail::PackedActBlock ab;
    std::memcpy(&ab, act + size_t(b) * sizeof(ab), sizeof(ab));
    const uint8_t* q = tile + L.q_offset();
    int32_t isum = L.has_min ? 0 : -L.bias * ab.sum;
    for (int j = 0; j < L.chunks; ++j) {
      const uint8_t* mask = tile + L.qh_offset() + 16 * size_t(j);
      for (int k = 0; k < 4; ++k) {
        const int32_t byte = L.nibbles || L.bias ? int32_t(q[j * 64 + r * 4 + k]) : int32_t(int8_t(q[j * 64 + r * 4 + k]));
        if (!L.nibbles) {
          isum += byte * ab.q[4 * j + k];
          continue;
        }
        int32_t lo = byte & 0x0f, hi = byte >> 4;
        if (L.fifth_bit) {
          lo |= detail::ChunkMask::get(mask, r, k) << 4;
          hi |= detail::ChunkMask::get(mask + 8, r, k) << 4;
        }
        if (L.lut) {
          lo = detail::biased_table(L.mxfp4)[lo];
          hi = detail::biased_table(L.mxfp4)[hi];
        }
        isum += lo * ab.q[4 * j + k] + hi * ab.q[16 + 4 * j + k];
      }
    }
    acc += float(isum) * (f16_to_f32(detail::load_u16(tile, r)) * ab.d);
    if (L.has_min) acc += f16_to_f32(detail::load_u16(tile + PackedLayout::kScaleBytes, r)) * ab.s;
  }
  return acc;
}

// Q2_K: d_a (d_w Σ_s sc_s Σ u·q - dmin_w Σ_s m_s Σ q); Q3_K: d_w d_a Σ_s sc_s (Σ u·q - 4 Σ q),
// sub-blocks s of 16 columns, u from the 2-bit planes (and, for Q3_K, the third-bit plane).
static float dot_q23k(const uint8_t* grp, int r, const uint8_t* act, int64_t cols, bool q3) {
  using detail::PackedQ2K;
  using detail::PackedQ3K;
  const size_t tile_bytes = q3 ? PackedQ3K::kTileBytes : PackedQ2K::kTileBytes;
  float acc = 0.0f;
  for (int64_t sb = 0; sb < cols / 256; ++sb) {
    const uint8_t* tile = grp + size_t(sb) * tile_bytes;
    const uint8_t* qs = tile + (q3 ? PackedQ3K::kQs : PackedQ2K::kQs);
    detail::BlockQ8_K ab;
    std::memcpy(&ab, act + size_t(sb) * sizeof(ab), sizeof(ab));
    int32_t isum = 0, msum = 0;
    for (int s = 0; s < 16; ++s) {
      const int G = s / 4, p = s % 4;
      int32_t dot = q3 ? -4 * ab.bsums[s] : 0;
      for (int qd = 0; qd < 4; ++qd) {
        const int c = 4 * G + qd;
        for (int k = 0; k < 4; ++k) {
          const int hbit = q3 ? detail::ChunkMask::get(tile + PackedQ3K::kQh + 32 * c + 8 * p, r, k) : 0;
          const int u = ((qs[64 * c + 4 * r + k] >> (2 * p)) & 3) + 4 * hbit;
          dot += u * ab.qs[16 * s + 4 * qd + k];
        }
      }
      if (q3) {
        isum += dot * int8_t(tile[PackedQ3K::kSc + 16 * s + r]);
      } else {
        const int sm = tile[PackedQ2K::kSm + 16 * s + r];
        isum += dot * (sm & 0x0f);
        msum += (sm >> 4) * ab.bsums[s];
      }
    }
    if (q3) {
      acc += ab.d * (f16_to_f32(detail::load_u16(tile + PackedQ3K::kD, r)) * float(isum));
    } else {
      acc += ab.d * (f16_to_f32(detail::load_u16(tile + PackedQ2K::kD, r)) * float(isum) -
                     f16_to_f32(detail::load_u16(tile + PackedQ2K::kDmin, r)) * float(msum));
    }
  }
  return acc;
}

float packed_ref_dot_q4k(TensorType, const uint8_t* grp, int r, const uint8_t* act, int64_t cols) {
  return dot_q4k<false, false>(grp, r, act, cols);
}
float packed_ref_dot_q5k(TensorType, const uint8_t* grp, int r, const uint8_t* act, int64_t cols) {
  return dot_q4k<true, false>(grp, r, act, cols);
}
float packed_ref_dot_iq4xs(TensorType, const uint8_t* grp, int r, const uint8_t* act, int64_t cols) {
  return dot_q4k<false, true>(grp, r, act, cols);
}
float packed_ref_dot_q2k(TensorType, const uint8_t* grp, int r, const uint8_t* act, int64_t cols) {
  return dot_q23k(grp, r, act, cols, false);
}
float packed_ref_dot_q3k(TensorType, const uint8_t* grp, int r, const uint8_t* act, int64_t cols) {
  return dot_q23k(grp, r, act, cols, true);
}
float packed_ref_dot_f16(TensorType, const uint8_t* grp, int r, const uint8_t* act, int64_t cols) {
  return dot_f16(grp, r, act, cols, false);
}
float packed_ref_dot_bf16(TensorType, const uint8_t* grp, int r, const uint8_t* act, int64_t cols) {
  return dot_f16(grp, r, act, cols, true);
}

}  // namespace detail

namespace ref {

void packed_gemm(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1, const void* act,
                 size_t act_stride, int n, float* out, size_t out_stride) {
  const size_t group_bytes = packed_group_bytes(t, cols);
  const PackedRefDotFn dot = type_traits(t).packed.ref_dot;
  const auto* p = static_cast<const uint8_t*>(packed);
  const auto* a = static_cast<const uint8_t*>(act);
  // Panelled activations (packed_act_panels.h): each row back into the per-row format first.
  std::vector<uint8_t> unpanelled;
  if (detail::act_panels(t) && n > 1) {
    const size_t rb = packed_act_row_bytes(t, cols);
    unpanelled.resize(rb * size_t(n));
    for (int i = 0; i < n; ++i) {
      detail::act_panel_row(a, act_stride, n, i, cols / detail::kPackBlock, unpanelled.data() + size_t(i) * rb);
    }
    a = unpanelled.data();
    act_stride = rb;
  }
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* grp = p + size_t(g) * group_bytes;
    for (int r = 0; r < kPackRows && g * kPackRows + r < rows; ++r) {
      for (int i = 0; i < n; ++i) {
        out[size_t(i) * out_stride + size_t(g * kPackRows + r)] = dot(t, grp, r, a + size_t(i) * act_stride, cols);
      }
    }
  }
}

}  // namespace ref
}  // namespace loom::quant

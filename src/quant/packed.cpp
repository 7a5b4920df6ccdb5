// Packed (row-interleaved) weights: layout, packing, activation quantization, the scalar
// reference GEMM, and the run-time dispatch to the SIMD kernels (packed_avx512.cpp,
// packed_avxvnni.cpp). See packed.h for the layout.
#include "quant/packed.h"

#include <cstring>

#include "base/cpu.h"
#include "base/half.h"
#include "quant/blocks.h"
#include "quant/kernels.h"
#include "quant/packed_layout.h"
#include "quant/quant.h"

namespace loom::quant {

using detail::PackedLayout;

bool can_pack(TensorType t) {
  return t == TensorType::Q4_0 || t == TensorType::Q8_0 || t == TensorType::F16 || t == TensorType::Q4_K ||
         t == TensorType::Q5_K || t == TensorType::Q6_K;
}

namespace {
// The k-quants: 256-column super-blocks, Q8_K activations.
bool is_kquant(TensorType t) { return t == TensorType::Q4_K || t == TensorType::Q5_K || t == TensorType::Q6_K; }
}  // namespace

bool packed_kernels_available(TensorType t) {
  const CpuFeatures& f = cpu_features();
  if (t == TensorType::F16 || is_kquant(t)) return f.has_avx512_vnni_set();
  return can_pack(t) && (f.has_avx512_vnni_set() || f.has_avx_vnni_set());
}

size_t packed_group_bytes(TensorType t, int64_t cols) {
  if (t == TensorType::Q4_K) return size_t(cols / detail::PackedQ4K::kCols) * detail::PackedQ4K::kTileBytes;
  if (t == TensorType::Q5_K) return size_t(cols / detail::PackedQ5K::kCols) * detail::PackedQ5K::kTileBytes;
  if (t == TensorType::Q6_K) return size_t(cols / detail::PackedQ6K::kCols) * detail::PackedQ6K::kTileBytes;
  return size_t(cols / detail::kPackBlock) * PackedLayout::of(t).tile_bytes;
}

size_t packed_size(TensorType t, int64_t rows, int64_t cols) {
  const int64_t groups = (rows + kPackRows - 1) / kPackRows;
  return size_t(groups) * packed_group_bytes(t, cols);
}

void pack_weights(TensorType t, const void* src, size_t src_row_bytes, int64_t rows, int64_t cols,
                  void* dst, int64_t g0, int64_t g1) {
  const PackedLayout L = PackedLayout::of(t);
  const int64_t nb = cols / detail::kPackBlock;
  const size_t block_bytes = t == TensorType::Q4_0 ? 18 : 34;  // GGUF block: f16 d, then qs
  const size_t qs_bytes = block_bytes - 2;
  const uint8_t bias_byte = t == TensorType::Q8_0 ? 0x80 : 0x00;  // Q8_0: i8 -> u8 by +128
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  if (t == TensorType::Q6_K) {
    using detail::PackedQ6K;
    const int64_t ns = cols / PackedQ6K::kCols;
    for (int64_t g = g0; g < g1; ++g) {
      for (int64_t sb = 0; sb < ns; ++sb) {
        uint8_t* tile = d + size_t(g) * packed_group_bytes(t, cols) + size_t(sb) * PackedQ6K::kTileBytes;
        std::memset(tile, 0, PackedQ6K::kTileBytes);  // padding rows: d = 0
        for (int r = 0; r < kPackRows && g * kPackRows + r < rows; ++r) {
          const uint8_t* blk = s + size_t(g * kPackRows + r) * src_row_bytes + size_t(sb) * 210;
          const uint8_t* ql = blk;
          const uint8_t* qh = blk + 128;
          std::memcpy(tile + PackedQ6K::kD + 2 * r, blk + 208, 2);
          for (int j = 0; j < 16; ++j) tile[PackedQ6K::kSc + 16 * j + r] = blk[192 + j];
          for (int e = 0; e < 256; ++e) {
            // Element e of the block (see BlockQ6_K in blocks.h).
            const int h = e / 128, l = e % 32, part = (e % 128) / 32;
            const uint8_t lq = ql[64 * h + l + (part & 1) * 32];
            const int lo4 = part < 2 ? (lq & 0x0f) : (lq >> 4);
            const int hi2 = (qh[32 * h + l] >> (2 * part)) & 3;
            tile[PackedQ6K::kQs + 64 * (e / 4) + 4 * r + (e % 4)] = uint8_t(lo4 | (hi2 << 4));
          }
        }
      }
    }
    return;
  }
  if (t == TensorType::Q4_K || t == TensorType::Q5_K) {
    // Q5_K is Q4_K's tile with the fifth bits after it (BlockQ5_K: d, dmin, scales, qh, qs).
    using detail::PackedQ4K;
    using detail::PackedQ5K;
    const bool q5 = t == TensorType::Q5_K;
    const size_t tile_bytes = q5 ? PackedQ5K::kTileBytes : PackedQ4K::kTileBytes;
    const size_t src_block = q5 ? sizeof(detail::BlockQ5_K) : 144, qs_offset = q5 ? 48 : 16;
    const int64_t ns = cols / PackedQ4K::kCols;
    for (int64_t g = g0; g < g1; ++g) {
      for (int64_t sb = 0; sb < ns; ++sb) {
        uint8_t* tile = d + size_t(g) * packed_group_bytes(t, cols) + size_t(sb) * tile_bytes;
        std::memset(tile, 0, tile_bytes);  // padding rows: d = dmin = 0
        for (int r = 0; r < kPackRows && g * kPackRows + r < rows; ++r) {
          const uint8_t* blk = s + size_t(g * kPackRows + r) * src_row_bytes + size_t(sb) * src_block;
          if (q5) {
            const uint8_t* qh = blk + 16;  // bit 2 gg (low nibble) / 2 gg + 1 (high) of qh[l], l < 32
            for (int gg = 0; gg < 4; ++gg) {
              for (int c = 0; c < 8; ++c) {
                uint8_t bits = 0;
                for (int k = 0; k < 4; ++k) {
                  bits |= uint8_t(((qh[4 * c + k] >> (2 * gg)) & 1) << k);
                  bits |= uint8_t(((qh[4 * c + k] >> (2 * gg + 1)) & 1) << (4 + k));
                }
                tile[PackedQ5K::kQh + 128 * gg + 16 * c + r] = bits;
              }
            }
          }
          std::memcpy(tile + PackedQ4K::kD + 2 * r, blk, 2);
          std::memcpy(tile + PackedQ4K::kDmin + 2 * r, blk + 2, 2);
          for (int j = 0; j < 8; ++j) {
            int sc, m;
            detail::k4_scale_min(blk + 4, j, &sc, &m);
            tile[PackedQ4K::kSc + 16 * j + r] = uint8_t(sc);
            tile[PackedQ4K::kM + 16 * j + r] = uint8_t(m);
          }
          const uint8_t* qs = blk + qs_offset;
          for (int gg = 0; gg < 4; ++gg) {
            for (int c = 0; c < 8; ++c) std::memcpy(tile + PackedQ4K::kQs + 512 * gg + 64 * c + 4 * r, qs + 32 * gg + 4 * c, 4);
          }
        }
      }
    }
    return;
  }
  if (t == TensorType::F16) {
    // Column-major within the group: element (r, c) at 2 * (16 * c + r); padding rows are 0.
    for (int64_t g = g0; g < g1; ++g) {
      uint8_t* grp = d + size_t(g) * packed_group_bytes(t, cols);
      std::memset(grp, 0, packed_group_bytes(t, cols));
      for (int r = 0; r < kPackRows && g * kPackRows + r < rows; ++r) {
        const uint8_t* row = s + size_t(g * kPackRows + r) * src_row_bytes;
        for (int64_t c = 0; c < cols; ++c) std::memcpy(grp + 2 * (16 * size_t(c) + size_t(r)), row + 2 * c, 2);
      }
    }
    return;
  }
  for (int64_t g = g0; g < g1; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* tile = d + size_t(g) * packed_group_bytes(t, cols) + size_t(b) * L.tile_bytes;
      std::memset(tile, 0, L.tile_bytes);
      for (int r = 0; r < kPackRows; ++r) {
        const int64_t row = g * kPackRows + r;
        uint8_t* q = tile + PackedLayout::kScaleBytes;
        if (row >= rows) {
          // Padding row: scale 0, level 0.
          for (int j = 0; j < L.chunks; ++j) std::memset(q + j * 64 + r * 4, bias_byte, 4);
          continue;
        }
        const uint8_t* blk = s + size_t(row) * src_row_bytes + size_t(b) * block_bytes;
        std::memcpy(tile + 2 * r, blk, 2);
        const uint8_t* qs = blk + 2;
        for (int j = 0; j < L.chunks; ++j) {
          for (int k = 0; k < 4; ++k) {
            const size_t e = size_t(4 * j + k);
            q[j * 64 + r * 4 + k] = e < qs_bytes ? uint8_t(qs[e] ^ bias_byte) : bias_byte;
          }
        }
      }
    }
  }
}

size_t packed_act_row_bytes(TensorType t, int64_t cols) {
  if (t == TensorType::F16) return sizeof(float) * size_t(cols);
  if (is_kquant(t)) return size_t(row_bytes(TensorType::Q8_K, cols));
  return size_t(cols / detail::kPackBlock) * sizeof(detail::PackedActBlock);
}

void quantize_packed_act(TensorType t, const float* x, int64_t cols, void* dst) {
  if (is_kquant(t)) {
    quantize_row(TensorType::Q8_K, x, dst, cols);
    return;
  }
  if (t == TensorType::F16) {
    // Round through f16 (quantize_row's fast path), then widen back in place from the end.
    auto* out = static_cast<float*>(dst);
    auto* half = reinterpret_cast<uint16_t*>(static_cast<uint8_t*>(dst) + 2 * size_t(cols));
    quantize_row(TensorType::F16, x, half, cols);
    dequantize_row(TensorType::F16, half, out, cols);
    return;
  }
  // One dispatched Q8_0 quantization of the whole row into the tail of dst, then an in-place
  // forward conversion: block b (34 bytes at 6·nb + 34·b) is read before block b (40 bytes at
  // 40·b) is written, and 40·(b+1) <= 6·nb + 34·(b+1) for every b < nb, so no unread byte is
  // overwritten.
  const int64_t nb = cols / detail::kPackBlock;
  auto* out = static_cast<uint8_t*>(dst);
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

void packed_gemm(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                 const void* act, size_t act_stride, int n, float* out, size_t out_stride) {
#if defined(__x86_64__)
  const CpuFeatures& f = cpu_features();
  if (t == TensorType::Q6_K) {
    if (f.has_avx512_vnni_set()) {
      detail::packed_gemm_q6k_avx512(rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    } else {
      ref::packed_gemm(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    }
    return;
  }
  if (t == TensorType::Q4_K || t == TensorType::Q5_K) {
    if (f.has_avx512_vnni_set()) {
      (t == TensorType::Q4_K ? detail::packed_gemm_q4k_avx512 : detail::packed_gemm_q5k_avx512)(
          rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    } else {
      ref::packed_gemm(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    }
    return;
  }
  if (t == TensorType::F16) {
    if (f.has_avx512_vnni_set()) {
      detail::packed_gemm_f16_avx512(rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    } else {
      ref::packed_gemm(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    }
    return;
  }
  if (f.has_amx_int8_set() && n >= 16) {
    detail::packed_gemm_amx(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    return;
  }
  if (f.has_avx512_vnni_set()) {
    detail::packed_gemm_avx512(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    return;
  }
  if (f.has_avx_vnni_set()) {
    detail::packed_gemm_avxvnni(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
    return;
  }
#endif
  ref::packed_gemm(t, rows, cols, packed, g0, g1, act, act_stride, n, out, out_stride);
}

namespace ref {
namespace {

// One output of the reference: weight row r of the group at grp against one activation row.
// Each type's function spells out its layout element by element.

float dot_q6k(const uint8_t* grp, int r, const uint8_t* act, int64_t cols) {
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

// Q4_K, and Q5_K (q5: a fifth bit from the plane after the nibbles adds 16 to a level).
float dot_q4k(const uint8_t* grp, int r, const uint8_t* act, int64_t cols, bool q5) {
  // Per super-block: d_a * (d_w * Σ_j sc_j Σ q·a  -  dmin_w * Σ_j m_j Σ a), integers inside.
  using detail::PackedQ4K;
  using detail::PackedQ5K;
  const size_t tile_bytes = q5 ? PackedQ5K::kTileBytes : PackedQ4K::kTileBytes;
  float acc = 0.0f;
  for (int64_t sb = 0; sb < cols / PackedQ4K::kCols; ++sb) {
    const uint8_t* tile = grp + size_t(sb) * tile_bytes;
    detail::BlockQ8_K ab;
    std::memcpy(&ab, act + size_t(sb) * sizeof(ab), sizeof(ab));
    int32_t isum = 0, msum = 0;
    for (int gg = 0; gg < 4; ++gg) {
      int32_t lo = 0, hi = 0;
      for (int c = 0; c < 8; ++c) {
        for (int k = 0; k < 4; ++k) {
          const int byte = tile[PackedQ4K::kQs + 512 * gg + 64 * c + 4 * r + k];
          const int bits = q5 ? tile[PackedQ5K::kQh + 128 * gg + 16 * c + r] : 0;
          lo += ((byte & 0x0f) | (((bits >> k) & 1) << 4)) * ab.qs[64 * gg + 4 * c + k];
          hi += ((byte >> 4) | (((bits >> (4 + k)) & 1) << 4)) * ab.qs[64 * gg + 32 + 4 * c + k];
        }
      }
      const int j0 = 2 * gg, j1 = 2 * gg + 1;
      isum += lo * tile[PackedQ4K::kSc + 16 * j0 + r] + hi * tile[PackedQ4K::kSc + 16 * j1 + r];
      msum += tile[PackedQ4K::kM + 16 * j0 + r] * (ab.bsums[2 * j0] + ab.bsums[2 * j0 + 1]) +
              tile[PackedQ4K::kM + 16 * j1 + r] * (ab.bsums[2 * j1] + ab.bsums[2 * j1 + 1]);
    }
    uint16_t dh, mh;
    std::memcpy(&dh, tile + PackedQ4K::kD + 2 * r, 2);
    std::memcpy(&mh, tile + PackedQ4K::kDmin + 2 * r, 2);
    acc += ab.d * (f16_to_f32(dh) * float(isum) - f16_to_f32(mh) * float(msum));
  }
  return acc;
}

float dot_f16(const uint8_t* grp, int r, const uint8_t* act, int64_t cols) {
  float acc = 0.0f;
  for (int64_t c = 0; c < cols; ++c) {
    uint16_t h;
    float x;
    std::memcpy(&h, grp + 2 * (16 * size_t(c) + size_t(r)), 2);
    std::memcpy(&x, act + 4 * size_t(c), 4);
    acc += f16_to_f32(h) * x;
  }
  return acc;
}

// Q4_0 / Q8_0: per 32-column block d_w * d_a * (Σ u·q - bias · Σ q).
float dot_q8_blocks(TensorType t, const uint8_t* grp, int r, const uint8_t* act, int64_t cols) {
  const PackedLayout L = PackedLayout::of(t);
  float acc = 0.0f;
  for (int64_t b = 0; b < cols / detail::kPackBlock; ++b) {
    const uint8_t* tile = grp + size_t(b) * L.tile_bytes;
    uint16_t dh;
    std::memcpy(&dh, tile + 2 * r, 2);
    detail::PackedActBlock ab;
    std::memcpy(&ab, act + size_t(b) * sizeof(ab), sizeof(ab));
    const uint8_t* q = tile + PackedLayout::kScaleBytes;
    int32_t isum = -L.bias * ab.sum;
    for (int j = 0; j < L.chunks; ++j) {
      for (int k = 0; k < 4; ++k) {
        const int32_t byte = q[j * 64 + r * 4 + k];
        if (L.nibbles) {
          isum += (byte & 0x0f) * ab.q[4 * j + k];
          isum += (byte >> 4) * ab.q[16 + 4 * j + k];
        } else {
          isum += byte * ab.q[4 * j + k];
        }
      }
    }
    acc += float(isum) * (f16_to_f32(dh) * ab.d);
  }
  return acc;
}

}  // namespace

void packed_gemm(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                 const void* act, size_t act_stride, int n, float* out, size_t out_stride) {
  const size_t group_bytes = packed_group_bytes(t, cols);
  const auto* p = static_cast<const uint8_t*>(packed);
  const auto* a = static_cast<const uint8_t*>(act);
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* grp = p + size_t(g) * group_bytes;
    for (int r = 0; r < kPackRows && g * kPackRows + r < rows; ++r) {
      for (int i = 0; i < n; ++i) {
        const uint8_t* x = a + size_t(i) * act_stride;
        float v;
        switch (t) {
          case TensorType::Q6_K: v = dot_q6k(grp, r, x, cols); break;
          case TensorType::Q4_K: v = dot_q4k(grp, r, x, cols, false); break;
          case TensorType::Q5_K: v = dot_q4k(grp, r, x, cols, true); break;
          case TensorType::F16: v = dot_f16(grp, r, x, cols); break;
          default: v = dot_q8_blocks(t, grp, r, x, cols); break;
        }
        out[size_t(i) * out_stride + size_t(g * kPackRows + r)] = v;
      }
    }
  }
}

}  // namespace ref
}  // namespace loom::quant

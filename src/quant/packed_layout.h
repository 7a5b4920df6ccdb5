// Internal to src/quant: constants of the packed weight layout and activation blocks (packed.h
// describes them), shared by the reference and the SIMD kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/tensor_type.h"

namespace loom::quant::detail {

constexpr int kPackBlock = 32;  // columns per tile

// One 32-column block of one activation row.
struct PackedActBlock {
  float d;        // the Q8_0 scale (f16-rounded)
  int32_t sum;    // Σ q
  int8_t q[32];
};
static_assert(sizeof(PackedActBlock) == 40);

// Q4_K (per group of 16 rows and 256 columns, 2368 bytes): f16 d[16], f16 dmin[16],
// u8 sc[8][16], u8 m[8][16] (6-bit sub-block scales and mins, sub-block j row r at 16 j + r), then
// nibbles: for each 64-column half-pair g < 4, 8 chunks of 64 bytes, lane r of chunk c = bytes
// 32 g + 4 c .. + 3 of row r's qs (low nibbles: columns 64 g + 4 c.., sub-block 2 g; high nibbles:
// 64 g + 32 + 4 c.., sub-block 2 g + 1). Activations are plain Q8_K blocks.
struct PackedQ4K {
  static constexpr size_t kD = 0, kDmin = 32, kSc = 64, kM = 192, kQs = 320;
  static constexpr size_t kTileBytes = 320 + 4 * 8 * 64;  // 2368
  static constexpr int kCols = 256;
};

// Q5_K: Q4_K's tile (same offsets, nibbles are the low 4 bits of the 5-bit levels) followed by the
// fifth bits (2880 bytes): for each half-pair g < 4 and chunk c < 8, 16 bytes at kQh + 128 g + 16 c,
// byte r = row r's fifth bits of that chunk: bit k (k < 4) for column 64 g + 4 c + k (the low
// nibble's), bit 4 + k for column 64 g + 32 + 4 c + k (the high nibble's).
struct PackedQ5K : PackedQ4K {
  static constexpr size_t kQh = PackedQ4K::kTileBytes;
  static constexpr size_t kTileBytes = kQh + 4 * 8 * 16;  // 2880
};

// Q6_K (per group of 16 rows and 256 columns, 4384 bytes): f16 d[16], i8 sc[16][16] (sub-block
// of 16 columns s, row r at 16 s + r), then 64 chunks of 64 bytes: lane r of chunk c = the 6-bit
// levels (0..63, value + 32) of row r at columns 4c..4c+3, one per byte. Activations are Q8_K.
struct PackedQ6K {
  static constexpr size_t kD = 0, kSc = 32, kQs = 288;
  static constexpr size_t kTileBytes = 288 + 64 * 64;  // 4384
  static constexpr int kCols = 256;
};

struct PackedLayout {
  static constexpr size_t kScaleBytes = 32;  // f16 d[16]
  int chunks;         // 64-byte chunks of quants per tile
  bool nibbles;       // each byte holds two weights (low: element 4j+k, high: 16+4j+k)
  int32_t bias;       // level = unsigned byte (or nibble) - bias
  size_t tile_bytes;  // scales + quants

  static constexpr PackedLayout of(TensorType t) {
    if (t == TensorType::F16) return PackedLayout{0, false, 0, 32 * 16 * 2};  // no scales, no chunks
    return t == TensorType::Q4_0 ? PackedLayout{4, true, 8, kScaleBytes + 4 * 64}
                                 : PackedLayout{8, false, 128, kScaleBytes + 8 * 64};
  }
};

}  // namespace loom::quant::detail

namespace loom::quant::detail {

// Decode streams weights from DRAM faster with software prefetches a little ahead than with the
// hardware prefetchers alone (measured 7 -> 13-14 GB/s on one core for a 150 MB Q4_0 matrix):
// the kernels call this once per tile for the tile kPrefetchAhead bytes further on.
constexpr size_t kPrefetchAhead = 4096;
inline void prefetch_ahead(const uint8_t* tile, size_t tile_bytes) {
  for (size_t off = 0; off < tile_bytes; off += 64) __builtin_prefetch(tile + kPrefetchAhead + off, 0, 3);
}

// Calls f.template operator()<NA>() for the NA among kNas that equals na (kernels are templates
// on the number of activation rows they apply each decoded tile to).
template <int... kNas, typename F>
inline void with_na(int na, F&& f) {
  (void)((na == kNas ? (f.template operator()<kNas>(), true) : false) || ...);
}

// The loop every packed kernel shares: groups [g0, g1), and within a group the activation rows
// in runs of kMaxNa (then 4, 2, 1), so the group's tiles stay in L1 while activations stream by.
// kernel(na, group, tile_bytes, nb, act, act_stride, out, out_stride, valid_rows) computes one run.
template <typename Kernel>
inline void packed_gemm_loop(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0,
                             int64_t g1, const void* act, size_t act_stride, int n, float* out,
                             size_t out_stride, int max_na, Kernel&& kernel) {
  const PackedLayout L = PackedLayout::of(t);
  const int64_t nb = cols / kPackBlock;
  const size_t group_bytes = t == TensorType::Q4_K   ? size_t(cols / PackedQ4K::kCols) * PackedQ4K::kTileBytes
                            : t == TensorType::Q5_K ? size_t(cols / PackedQ5K::kCols) * PackedQ5K::kTileBytes
                            : t == TensorType::Q6_K ? size_t(cols / PackedQ6K::kCols) * PackedQ6K::kTileBytes
                                                    : size_t(nb) * L.tile_bytes;
  const auto* p = static_cast<const uint8_t*>(packed);
  const auto* a = static_cast<const uint8_t*>(act);
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t r0 = g * 16;
    const int valid = int(rows - r0 < 16 ? rows - r0 : 16);
    const uint8_t* grp = p + size_t(g) * group_bytes;
    int i = 0;
    for (int na = max_na; na >= 1; na /= 2) {
      for (; i + na <= n; i += na) {
        kernel(na, grp, L, nb, a + size_t(i) * act_stride, act_stride, out + size_t(i) * out_stride + size_t(r0),
               out_stride, valid);
      }
    }
  }
}

}  // namespace loom::quant::detail

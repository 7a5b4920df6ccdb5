// Internal to src/quant: constants of the packed weight layout and activation blocks (packed.h
// describes them), shared by the reference and the SIMD kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/tensor_type.h"
#include "quant/type_traits.h"

namespace loom::quant::detail {

constexpr int kPackBlock = 32;  // columns per tile

// One 32-column block of one activation row. Its second word is Σ q for the types whose levels
// carry a bias; for the types with a block minimum (Q4_1, Q5_1) it is Q8_1's s instead, the f16
// rounding of d · Σ q with the unrounded d, as llama.cpp's activations carry it.
struct PackedActBlock {
  float d;  // the Q8_0 (Q8_1) scale (f16-rounded)
  union {
    int32_t sum;  // Σ q
    float s;      // Q4_1 / Q5_1: Q8_1's s
  };
  int8_t q[32];
};
static_assert(sizeof(PackedActBlock) == 40);

// The 16 levels of IQ4_NL / IQ4_XS plus 128, as unsigned bytes (VPDPBUSD's unsigned operand):
// a nibble is decoded by one byte shuffle, and the bias 128 is taken off through Σ q.
inline constexpr uint8_t kIq4nlBiased[16] = {1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241};
// MXFP4's 16 levels (twice the E2M1 values: small_types.h kMxfp4Values) plus 128.
inline constexpr uint8_t kMxfp4Biased[16] = {128, 129, 130, 131, 132, 134, 136, 140, 128, 127, 126, 125, 124, 122, 120, 116};
// The biased table a layout's nibbles index (layouts with lut).
constexpr const uint8_t* biased_table(bool mxfp4) { return mxfp4 ? kMxfp4Biased : kIq4nlBiased; }

// An MXFP4 block's scale as the packed tile's f16 d: 2^(e - 128) (the table holds twice the E2M1
// values), which f16 holds exactly for e in 104..143 (2^-24 .. 2^15). Outside, a block whose levels
// are all zero contributes nothing whatever its scale (d 0); otherwise -1: the scale does not fit.
int32_t mxfp4_tile_scale(const uint8_t* block);

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
// fifth bits (2880 bytes): for each half-pair g < 4 and chunk c < 8, two chunk masks (ChunkMask)
// at kQh + 128 g + 16 c: the low nibbles' (columns 64 g + 4 c + k), then the high nibbles'
// (64 g + 32 + 4 c + k).
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

// IQ4_XS (2208 bytes): f16 d[16], i8 sc[8][16] (the 6-bit sub-block scale minus 32, sub-block j
// row r at 16 j + r), then nibbles arranged as Q4_K's (sub-block 2 g in the low nibbles of
// half-pair g, 2 g + 1 in the high ones); a nibble indexes kIq4nlValues. 1.5 % more bytes than
// the file's 136 per row and super-block.
struct PackedIQ4XS {
  static constexpr size_t kD = 0, kSc = 32, kQs = 160;
  static constexpr size_t kTileBytes = 160 + 4 * 8 * 64;  // 2208
  static constexpr int kCols = 256;
};

// Q2_K (1344 bytes, the file's 84 per row and super-block): f16 d[16], f16 dmin[16],
// u8 sm[16][16] (sub-block s of 16 columns, row r at 16 s + r: the file's byte, scale in the low
// nibble and min in the high one), then 16 chunks of 64 bytes of 2-bit levels: lane r of chunk
// 4 G + q holds in bits 2 p, 2 p + 1 of its byte k the level of row r at column
// 64 G + 16 p + 4 q + k (sub-block 4 G + p). Shifting a chunk right by 2 p and masking gives the
// "plane" p: 4 columns of sub-block 4 G + p per lane.
struct PackedQ2K {
  static constexpr size_t kD = 0, kDmin = 32, kSm = 64, kQs = 320;
  static constexpr size_t kTileBytes = 320 + 16 * 64;  // 1344
  static constexpr int kCols = 256;
};

// Q3_K (1824 bytes, 3.6 % more than the file's 110): f16 d[16], i8 sc[16][16] (scale minus 32),
// Q2_K's 16 chunks of low 2 bits, then the third bits: for chunk c, the chunk masks (ChunkMask)
// of its planes 0..3 at kQh + 32 c + 8 p. Level u = low + 4 · bit (0..7), value u - 4.
struct PackedQ3K {
  static constexpr size_t kD = 0, kSc = 32, kQs = 288, kQh = 288 + 16 * 64;
  static constexpr size_t kTileBytes = kQh + 16 * 32;  // 1824
  static constexpr int kCols = 256;
};

// A "chunk mask": one bit per byte of a 64-byte chunk (a little-endian u64, bit 4 r + k for byte k
// of row r's lane), so that a kernel loads it as an AVX-512 byte mask and adds a level's high bit
// (16 for the fifth bit of Q5_0/Q5_1/Q5_K, 4 for Q3_K's third) with one masked add.
struct ChunkMask {
  static void set(uint8_t* mask, int r, int k, int bit) { mask[r / 2] |= uint8_t((bit & 1) << (4 * (r % 2) + k)); }
  static int get(const uint8_t* mask, int r, int k) { return (mask[r / 2] >> (4 * (r % 2) + k)) & 1; }
};

// The 32-column block types' tiles (PackedLayout in type_traits.h; type_traits.cpp names them in
// the table, the kernels instantiate templates on them):
//   {chunks, nibbles, bias, tile_bytes, has_min, fifth_bit, lut}
inline constexpr PackedLayout kLayoutQ4_0{4, true, 8, 32 + 4 * 64, false, false, false};
inline constexpr PackedLayout kLayoutQ4_1{4, true, 0, 64 + 4 * 64, true, false, false};
inline constexpr PackedLayout kLayoutQ5_0{4, true, 16, 32 + 4 * 64 + 64, false, true, false};
inline constexpr PackedLayout kLayoutQ5_1{4, true, 0, 64 + 4 * 64 + 64, true, true, false};
// Q8_0's int8 levels are stored + 128 (as u8) on x86-64, VPDPBUSD's unsigned operand, and as they
// are on AArch64, the signed operand of SDOT and SMMLA (the dotprod kernels then need no XOR per 16
// bytes). A packed copy is made and read on the same machine (LOOM_PACK_CACHE keys on the build).
#if defined(__aarch64__)
inline constexpr int32_t kQ8_0PackedBias = 0;
#else
inline constexpr int32_t kQ8_0PackedBias = 128;
#endif
inline constexpr PackedLayout kLayoutQ8_0{8, false, kQ8_0PackedBias, 32 + 8 * 64, false, false, false};
inline constexpr PackedLayout kLayoutIQ4_NL{4, true, 128, 32 + 4 * 64, false, false, true};
inline constexpr PackedLayout kLayoutMXFP4{4, true, 128, 32 + 4 * 64, false, false, true, true};
// F16 / BF16: no scales, 32 columns x 16 rows of 16-bit floats.
inline constexpr PackedLayout kLayoutF16{0, false, 0, 32 * 16 * 2, false, false, false};

// Bytes of one group (16 rows, all columns) of a packed matrix of a packable type (0 for others).
inline size_t packed_group_stride(TensorType t, int64_t cols) {
  const PackedTraits& p = type_traits(t).packed;
  return p.tile_cols ? size_t(cols / p.tile_cols) * p.tile_bytes : 0;
}

// One packing job: rows [0, rows) of the source matrix, groups [g0, g1). group(g) is group g in
// dst; row(g, r) the source row r of group g, or null for a padding row (the groups are zeroed
// first: padding rows get scale 0).
struct PackJob {
  TensorType t;
  const uint8_t* src;
  size_t src_row_bytes;
  int64_t rows, cols;
  uint8_t* dst;
  int64_t g0, g1;

  const uint8_t* row(int64_t g, int r) const {
    const int64_t i = g * 16 + r;
    return i < rows ? src + size_t(i) * src_row_bytes : nullptr;
  }
  uint8_t* group(int64_t g) const { return dst + size_t(g) * packed_group_stride(t, cols); }
};

// The table's pack functions (packed.cpp): fill groups [job.g0, job.g1) of a zeroed copy.
void pack_blocks32(const PackJob& job);  // Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4 (PackedLayout::of)
void pack_f16(const PackJob& job);       // F16, BF16
void pack_q2k(const PackJob& job);
void pack_q3k(const PackJob& job);
void pack_q4k(const PackJob& job);
void pack_q5k(const PackJob& job);
void pack_q6k(const PackJob& job);
void pack_iq4xs(const PackJob& job);

// The table's reference dots (packed.cpp): weight row r of the group at grp against one
// activation row; each spells out its layout element by element.
float packed_ref_dot_blocks32(TensorType t, const uint8_t* grp, int r, const uint8_t* act, int64_t cols);
float packed_ref_dot_f16(TensorType t, const uint8_t* grp, int r, const uint8_t* act, int64_t cols);
float packed_ref_dot_bf16(TensorType t, const uint8_t* grp, int r, const uint8_t* act, int64_t cols);
float packed_ref_dot_q2k(TensorType t, const uint8_t* grp, int r, const uint8_t* act, int64_t cols);
float packed_ref_dot_q3k(TensorType t, const uint8_t* grp, int r, const uint8_t* act, int64_t cols);
float packed_ref_dot_q4k(TensorType t, const uint8_t* grp, int r, const uint8_t* act, int64_t cols);
float packed_ref_dot_q5k(TensorType t, const uint8_t* grp, int r, const uint8_t* act, int64_t cols);
float packed_ref_dot_q6k(TensorType t, const uint8_t* grp, int r, const uint8_t* act, int64_t cols);
float packed_ref_dot_iq4xs(TensorType t, const uint8_t* grp, int r, const uint8_t* act, int64_t cols);

}  // namespace loom::quant::detail

namespace loom::quant::detail {

// Decode streams weights from DRAM faster with software prefetches a little ahead than with the
// hardware prefetchers alone: the kernels call this once per tile for the tile kPrefetchAhead
// bytes further on. Into L2 (PREFETCHT1), not L1: a prefetch into L1 holds one of the core's few
// L1 fill buffers until its line arrives, and with the buffers full the decode kernel stalls on
// the instruction after the prefetch (bench/README and CHANGELOG have the measurements).
constexpr size_t kPrefetchAhead = 4096;
inline void prefetch_ahead(const uint8_t* tile, size_t tile_bytes) {
  for (size_t off = 0; off < tile_bytes; off += 64) __builtin_prefetch(tile + kPrefetchAhead + off, 0, 2);
}

// The prefetch of a decode kernel that walks ng groups side by side, then the next ng: the same
// tile of the next ng groups, the bytes it reads next. A group of a small matrix (F16 at 384
// columns: 12 KiB) is hardly longer than kPrefetchAhead, so prefetch_ahead would leave the first
// tiles of every round to the hardware prefetchers: 30M F16 decode on one AMD Zen 5 core went
// 27.5 -> 31 GB/s with this one.
inline void prefetch_next_groups(const uint8_t* tile, size_t group_bytes, int ng, size_t tile_bytes) {
  for (int g = 0; g < ng; ++g) {
    const uint8_t* next = tile + size_t(g + ng) * group_bytes;
    for (size_t off = 0; off < tile_bytes; off += 64) __builtin_prefetch(next + off, 0, 2);
  }
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
inline void packed_gemm_loop(TensorType t, int64_t rows, int64_t cols, const void* packed, int64_t g0, int64_t g1,
                             const void* act, size_t act_stride, int n, float* out, size_t out_stride, int max_na,
                             Kernel&& kernel) {
  const PackedLayout L = PackedLayout::of(t);
  const int64_t nb = cols / kPackBlock;
  const size_t group_bytes = packed_group_stride(t, cols);
  const auto* p = static_cast<const uint8_t*>(packed);
  const auto* a = static_cast<const uint8_t*>(act);
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t r0 = g * 16;
    const int valid = int(rows - r0 < 16 ? rows - r0 : 16);
    const uint8_t* grp = p + size_t(g) * group_bytes;
    int i = 0;
    for (int na = max_na; na >= 1; na /= 2) {
      for (; i + na <= n; i += na) {
        kernel(na, grp, L, nb, a + size_t(i) * act_stride, act_stride, out + size_t(i) * out_stride + size_t(r0), out_stride,
               valid);
      }
    }
  }
}

}  // namespace loom::quant::detail

// Internal to src/quant: byte-exact GGUF/ggml block layouts of the 32-element legacy formats and
// helpers for reading and writing them (and floats) through possibly unaligned pointers.
//
// Every block starts with its f16 scale(s); all multi-byte fields are little-endian. Element j of
// a block (0 <= j < 32) is stored as follows:
//   Q4_0 {f16 d; u8 qs[16]}                x = (nibble - 8) * d
//   Q4_1 {f16 d; f16 m; u8 qs[16]}         x = nibble * d + m
//   Q5_0 {f16 d; u8 qh[4]; u8 qs[16]}      x = ((nibble | bit << 4) - 16) * d
//   Q5_1 {f16 d; f16 m; u8 qh[4]; u8 qs[16]}  x = (nibble | bit << 4) * d + m
//   Q8_0 {f16 d; i8 qs[32]}                x = qs[j] * d
//   Q8_1 {f16 d; f16 s; i8 qs[32]}         x = qs[j] * d, s = d * sum(qs) (used by dot products)
// Nibbles: element j < 16 is the low nibble of qs[j], element j + 16 the high nibble of qs[j].
// 5th bits: qh read as a little-endian uint32; bit j belongs to element j (all 32 elements).
//
// IQ4_NL {f16 d; u8 qs[16]} (32 elements) uses the same nibble order as Q4_0; a nibble is an index
// into kIq4nlValues: x = d * kIq4nlValues[nibble].
//
// Super-block formats (kSuper = 256 elements; see the struct comments below for element order):
// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS (weights) and Q8_K (activations).
#pragma once

#include <cstdint>
#include <cstring>

namespace loom::quant::detail {

constexpr int kBlock = 32;  // elements per block of every format here

struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[16];
};
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[16];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockQ8_0 {
  uint16_t d;
  int8_t qs[32];
};
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t qs[32];
};

// The structs have no padding on any ABI loom targets, so sizeof equals the GGUF block size.
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);

// ---- 256-element super-block formats -------------------------------------------------------
constexpr int kSuper = 256;

// Q2_K: 16 sub-blocks of 16 elements. scales[s]: low nibble = scale, high nibble = min, of
// sub-block s. x = d * (scales[s] & 15) * q - dmin * (scales[s] >> 4), q in 0..3.
// Element e = 128 h + 32 j + l (h < 2, j < 4, l < 32): q = (qs[32 h + l] >> 2 j) & 3, s = e / 16.
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d;
  uint16_t dmin;
};
// Q3_K: 16 sub-blocks of 16, 6-bit signed scales (stored + 32) packed in 12 bytes (see
// q3k_scale). Element e = 128 h + 32 j + l: low 2 bits (qs[32 h + l] >> 2 j) & 3, as Q2_K; high
// bit (hmask[l] >> (4 h + j)) & 1; level q = low + 4 * high - 4 (-4..3). x = d * (sc_s - 32) * q.
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d;
};
// Q4_K: 8 sub-blocks of 32, 6-bit scale and min per sub-block packed in 12 bytes (see
// k4_scale_min). Element e = 64 c + l (c < 4, l < 32) is the low nibble of qs[32 c + l]
// (sub-block 2c), e = 64 c + 32 + l its high nibble (sub-block 2c + 1).
// x = d * sc_s * q - dmin * m_s.
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
// Q5_K: Q4_K plus a 5th bit: element 64 c + l has bit (qh[l] >> 2c) & 1, 64 c + 32 + l has
// (qh[l] >> (2c + 1)) & 1, worth 16.
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
// Q6_K: 16 sub-blocks of 16, int8 scales. For half h (128 elements, ql + 64 h, qh + 32 h) and
// l < 32: element l = low nibble of ql[l] | bits 0-1 of qh[l] << 4; l + 32 = low nibble of
// ql[l + 32] | bits 2-3; l + 64 = high nibble of ql[l] | bits 4-5; l + 96 = high nibble of
// ql[l + 32] | bits 6-7. x = d * scales[e / 16] * (q - 32).
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d;
};
// Q8_K: activations. x = d * qs[e]; bsums[k] = sum of qs[16 k .. 16 k + 15].
struct BlockQ8_K {
  float d;
  int8_t qs[256];
  int16_t bsums[16];
};
// IQ4_XS: 8 sub-blocks of 32 with 6-bit scales: low 4 bits in scales_l (nibble s % 2 of byte
// s / 2), high 2 bits at bits 2s of scales_h. Sub-block s has Q4_0's nibble order over qs + 16 s.
// x = d * (ls - 32) * kIq4nlValues[nibble].
struct BlockIQ4_XS {
  uint16_t d;
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[16];
};

static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockIQ4_NL) == 18);

// The 16 levels of IQ4_NL / IQ4_XS.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// Scale and min (6 bits each) of sub-block j < 8 of Q4_K / Q5_K: bytes 0-3 hold scales 0-3 in
// their low 6 bits, bytes 4-7 mins 0-3; for j >= 4 the low 4 bits are the nibbles of byte 4 + j
// (scale low, min high) and the top 2 bits come from bits 6-7 of bytes j - 4 (scale) and j (min).
inline void k4_scale_min(const uint8_t* q, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// Stored scale (0..63, value + 32) of sub-block j < 16 of Q3_K: low 4 bits are nibble j / 8 of
// byte j % 8, high 2 bits are bits 2 (j / 4) of byte 8 + j % 4.
inline int q3k_scale(const uint8_t* s, int j) {
  const int lo = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4);
  const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return lo | hi << 4;
}

// 6-bit scale (0..63, value + 32) of sub-block s < 8 of IQ4_XS.
inline int iq4xs_scale(const uint8_t* scales_l, uint16_t scales_h, int s) {
  return ((scales_l[s / 2] >> (4 * (s % 2))) & 0x0f) | ((scales_h >> (2 * s)) & 3) << 4;
}

// Rows may start at any byte address (tensor data inside a mapped file, scratch buffers), so
// blocks are copied in and out with memcpy rather than dereferenced in place; compilers turn
// these copies into plain unaligned loads.
template <class Block>
inline Block load_block(const void* row, int64_t i) {
  Block b;
  std::memcpy(&b, static_cast<const uint8_t*>(row) + i * int64_t(sizeof(Block)), sizeof(Block));
  return b;
}
template <class Block>
inline void store_block(void* row, int64_t i, const Block& b) {
  std::memcpy(static_cast<uint8_t*>(row) + i * int64_t(sizeof(Block)), &b, sizeof(Block));
}

// Float and u16 element access for rows that may be misaligned even for their element type.
inline float load_f32(const float* p, int64_t i) {
  float v;
  std::memcpy(&v, reinterpret_cast<const uint8_t*>(p) + i * 4, 4);
  return v;
}
inline void store_f32(float* p, int64_t i, float v) { std::memcpy(reinterpret_cast<uint8_t*>(p) + i * 4, &v, 4); }
inline uint16_t load_u16(const void* p, int64_t i) {
  uint16_t v;
  std::memcpy(&v, static_cast<const uint8_t*>(p) + i * 2, 2);
  return v;
}
inline void store_u16(void* p, int64_t i, uint16_t v) { std::memcpy(static_cast<uint8_t*>(p) + i * 2, &v, 2); }
inline uint32_t qh_bits(const uint8_t (&qh)[4]) {
  return uint32_t(qh[0]) | uint32_t(qh[1]) << 8 | uint32_t(qh[2]) << 16 | uint32_t(qh[3]) << 24;
}

// Float-to-integer conversions of ggml's reference quantizers, the same on every platform. A
// block whose largest magnitude is tiny (a scale that is subnormal or zero in f32) has a
// reciprocal scale of infinity, so x * id is +-inf or NaN. C and C++ leave converting those to
// an integer undefined, and the hardware differs: x86-64's cvttss2si gives INT32_MIN (the
// "integer indefinite"), AArch64's fcvtzs saturates (and gives 0 for NaN).
//
// trunc_x86: a C cast (int)v, (int8_t)v or (uint8_t)v of ggml's code as it runs on x86-64, where
// llama.cpp's files and the goldens are made (the narrow casts keep the low byte of this value).
inline int32_t trunc_x86(float v) {
  if (!(v >= -2147483648.0f && v < 2147483648.0f)) return INT32_MIN;
  return int32_t(v);
}
// ggml's nearest_int: adds 1.5 * 2^23 and reads the low mantissa bits, i.e. rounds to nearest even
// for |v| < 2^22; for larger or non-finite v it returns what those bits happen to be (no float to
// integer conversion, so no platform dependence; every caller clamps or narrows the result).
inline int nearest_int_ggml(float v) {
  const float t = v + 12582912.0f;
  int32_t bits;
  std::memcpy(&bits, &t, 4);
  return (bits & 0x007fffff) - 0x00400000;
}

}  // namespace loom::quant::detail

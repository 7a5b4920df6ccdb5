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
#pragma once

#include <cstdint>
#include <cstring>

namespace loom::quant::detail {

constexpr int kBlock = 32;  // elements per block of every format here

struct BlockQ4_0 { uint16_t d; uint8_t qs[16]; };
struct BlockQ4_1 { uint16_t d; uint16_t m; uint8_t qs[16]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };
struct BlockQ5_1 { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[16]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[32]; };
struct BlockQ8_1 { uint16_t d; uint16_t s; int8_t qs[32]; };

// The structs have no padding on any ABI loom targets, so sizeof equals the GGUF block size.
static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);

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
inline void store_f32(float* p, int64_t i, float v) {
  std::memcpy(reinterpret_cast<uint8_t*>(p) + i * 4, &v, 4);
}
inline uint16_t load_u16(const void* p, int64_t i) {
  uint16_t v;
  std::memcpy(&v, static_cast<const uint8_t*>(p) + i * 2, 2);
  return v;
}
inline void store_u16(void* p, int64_t i, uint16_t v) {
  std::memcpy(static_cast<uint8_t*>(p) + i * 2, &v, 2);
}
inline uint32_t qh_bits(const uint8_t (&qh)[4]) {
  return uint32_t(qh[0]) | uint32_t(qh[1]) << 8 | uint32_t(qh[2]) << 16 | uint32_t(qh[3]) << 24;
}

}  // namespace loom::quant::detail

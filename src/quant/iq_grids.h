// Tables of the IQ1/IQ2/IQ3 weight formats (GGUF types IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
// IQ1_S, IQ1_M), the same values as ggml-common.h of llama.cpp.
//
// A grid entry packs one group's levels little-endian (byte j = element j):
//   kIq2xxsGrid[256], kIq2xsGrid[512], kIq2sGrid[1024]: 8 unsigned levels each, from
//       {0x08, 0x19, 0x2b}; the stored signs (one bit per element) negate them.
//   kIq3xxsGrid[256]: 4 unsigned levels from {4, 12, 20, 28, 36, 44, 52, 62}.
//   kIq3sGrid[512]:   4 unsigned levels from {1, 3, ..., 15}.
//   kIq1sGrid[2048]:  8 signed levels from {-1, 0, 1} (as int8 bytes), to which the format adds
//       a shared +-delta (kIq1sDelta, kIq1mDelta).
// Entries are distinct and in ascending order of their levels read from element 7 down to
// element 0 (the order of the integer codes llama.cpp builds them from).
//
// Signs of IQ2_XXS / IQ2_XS / IQ3_XXS: 7 stored bits give the signs of elements 0..6; element 7's
// sign is the parity of those 7 (an even count of negatives per group of 8). kSignsIq2xs expands
// the 7 bits to the 8-bit mask (bit j set: element j is negated); kMaskIq2xs[j] = 1 << j.
#pragma once

#include <cstdint>

namespace loom::quant::iq {

alignas(64) extern const uint64_t kIq2xxsGrid[256];
alignas(64) extern const uint64_t kIq2xsGrid[512];
alignas(64) extern const uint64_t kIq2sGrid[1024];
alignas(64) extern const uint32_t kIq3xxsGrid[256];
alignas(64) extern const uint32_t kIq3sGrid[512];
alignas(64) extern const uint64_t kIq1sGrid[2048];

// Sign byte of 7 stored sign bits: the bits themselves plus bit 7 = their parity.
constexpr uint8_t sign_byte(unsigned bits7) {
  unsigned p = bits7 ^ (bits7 >> 4);
  p ^= p >> 2;
  p ^= p >> 1;
  return uint8_t((bits7 & 127u) | (p & 1u) << 7);
}

struct SignTable {
  uint8_t v[128];
};
constexpr SignTable make_sign_table() {
  SignTable t{};
  for (unsigned i = 0; i < 128; ++i) t.v[i] = sign_byte(i);
  return t;
}
alignas(64) inline constexpr SignTable kSignsIq2xs = make_sign_table();

inline constexpr uint8_t kMaskIq2xs[8] = {1, 2, 4, 8, 16, 32, 64, 128};

// IQ1_S / IQ1_M: every level of a group is shifted by +delta, or by -delta where the group's
// delta bit is set.
inline constexpr float kIq1sDelta = 0.125f;
inline constexpr float kIq1mDelta = 0.125f;

}  // namespace loom::quant::iq

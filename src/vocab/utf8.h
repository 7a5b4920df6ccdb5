// Small UTF-8 helpers shared by the tokenizers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace loom::vocab {

// Length of the UTF-8 sequence announced by its first byte, the way llama.cpp splits text into
// symbols: judged from the top four bits only, so a stray continuation byte (0x80..0xBF) counts
// as one byte and 0xF8..0xFF as four. No validation: tokenizers must split invalid input the
// same way llama.cpp does, not reject it.
inline size_t utf8_seq_len(uint8_t first_byte) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[first_byte >> 4];
}

// Replaces every ill-formed part of `s` with U+FFFD (EF BF BD), one replacement per maximal
// subpart, as the WHATWG/Unicode "substitution of maximal subparts" practice does (what
// JavaScript's TextDecoder and Python's errors="replace" do). Valid UTF-8 comes back unchanged.
// Golden detokenizations were made with that replacement, so tests compare through this.
std::string sanitize_utf8(std::string_view s);

// True when `s` is well-formed UTF-8 (no surrogates, no overlongs, nothing above U+10FFFF).
bool is_valid_utf8(std::string_view s);

}  // namespace loom::vocab

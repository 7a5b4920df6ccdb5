#include "vocab/unicode.h"

#include <algorithm>

namespace loom::vocab::unicode {

std::vector<uint32_t> decode_lenient(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  size_t i = 0;
  auto cont = [&](size_t k) { return i + k < s.size() && (uint8_t(s[i + k]) & 0xC0) == 0x80; };
  while (i < s.size()) {
    const uint8_t b = uint8_t(s[i]);
    if (b < 0x80) {
      out.push_back(b);
      i += 1;
    } else if ((b & 0xE0) == 0xC0 && b >= 0xC0 && cont(1)) {
      out.push_back((uint32_t(b & 0x1F) << 6) | (uint8_t(s[i + 1]) & 0x3F));
      i += 2;
    } else if ((b & 0xF0) == 0xE0 && cont(1) && cont(2)) {
      out.push_back((uint32_t(b & 0x0F) << 12) | (uint32_t(uint8_t(s[i + 1]) & 0x3F) << 6) | (uint8_t(s[i + 2]) & 0x3F));
      i += 3;
    } else if ((b & 0xF8) == 0xF0 && cont(1) && cont(2) && cont(3)) {
      const uint32_t cp = (uint32_t(b & 0x07) << 18) | (uint32_t(uint8_t(s[i + 1]) & 0x3F) << 12) |
                          (uint32_t(uint8_t(s[i + 2]) & 0x3F) << 6) | (uint8_t(s[i + 3]) & 0x3F);
      if (cp > 0x10FFFF) {
        out.push_back(kReplacement);
        i += 1;
      } else {
        out.push_back(cp);
        i += 4;
      }
    } else {
      out.push_back(kReplacement);
      i += 1;
    }
  }
  return out;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | ((cp >> 18) & 0x07)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

uint8_t flags(uint32_t cp) {
  using unicode_tables::kCategoryRunCount;
  using unicode_tables::kCategoryRuns;
  if (cp > 0x10FFFF) return 0;
  // Last run starting at or before cp.
  const uint32_t key = (cp << 8) | 0xFF;
  const uint32_t* it = std::upper_bound(kCategoryRuns, kCategoryRuns + kCategoryRunCount, key);
  return it == kCategoryRuns ? 0 : uint8_t(*(it - 1) & 0xFF);
}

namespace {
uint32_t lookup(const CodepointPair* table, size_t count, uint32_t cp) {
  const CodepointPair* end = table + count;
  const CodepointPair* it = std::lower_bound(table, end, cp, [](const CodepointPair& p, uint32_t v) { return p.from < v; });
  return it != end && it->from == cp ? it->to : cp;
}
}  // namespace

uint32_t nfd_first(uint32_t cp) {
  // Hangul syllables decompose algorithmically; the first jamo is the leading consonant.
  if (cp >= 0xAC00 && cp <= 0xD7A3) return 0x1100 + (cp - 0xAC00) / 588;
  return lookup(unicode_tables::kNfdFirst, unicode_tables::kNfdFirstCount, cp);
}

uint32_t to_lower(uint32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  return lookup(unicode_tables::kLowercase, unicode_tables::kLowercaseCount, cp);
}

}  // namespace loom::vocab::unicode

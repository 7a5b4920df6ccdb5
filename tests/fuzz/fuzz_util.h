// Shared pieces of the fuzz targets (tests/fuzz/README.md): locating test data, splitting an input
// into the values a target needs, and a check that aborts (a finding) whatever NDEBUG says.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

// An invariant of the code under test failed: libFuzzer reports the abort as a crash.
#define LOOM_FUZZ_CHECK(cond)                                                             \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      std::fprintf(stderr, "fuzz check failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

namespace loom::fuzz {

// $LOOM_SHARED/rel, else ../shared/rel beside the repository. Aborts with a message when the file
// is missing: a target without its data would fuzz nothing.
std::string shared_file(const std::string& rel);
// LOOM_SOURCE_DIR/rel (the repository's own test data).
std::string source_file(const std::string& rel);

// Reads an input front to back; past the end every read gives zeros / empty text.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  size_t left() const { return size_t(end_ - p_); }
  uint8_t u8() { return p_ < end_ ? *p_++ : 0; }
  uint32_t u32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= uint32_t(u8()) << (8 * i);
    return v;
  }
  // Up to n bytes.
  std::string_view bytes(size_t n) {
    n = n < left() ? n : left();
    std::string_view s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  // The bytes up to the next `sep` (consumed, not returned) or to the end.
  std::string_view until(std::string_view sep) {
    const std::string_view rest(reinterpret_cast<const char*>(p_), left());
    const size_t at = rest.find(sep);
    if (at == std::string_view::npos) {
      p_ = end_;
      return rest;
    }
    p_ += at + sep.size();
    return rest.substr(0, at);
  }
  std::string_view rest() { return bytes(left()); }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace loom::fuzz

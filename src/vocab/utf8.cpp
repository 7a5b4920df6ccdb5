#include "vocab/utf8.h"

namespace loom::vocab {

namespace {

// Decoder state of the WHATWG UTF-8 decoder: how many continuation bytes are still needed and
// the range the next one must fall in (narrower than 80..BF right after E0, ED, F0 and F4, which
// is what rules out overlongs, surrogates and code points above U+10FFFF).
struct Utf8Scan {
  int needed = 0;
  uint8_t lower = 0x80;
  uint8_t upper = 0xBF;
};

// Calls emit_valid(begin, len) for each well-formed sequence and emit_bad() for each maximal
// ill-formed subpart, in order.
template <typename Valid, typename Bad>
void scan_utf8(std::string_view s, Valid&& emit_valid, Bad&& emit_bad) {
  Utf8Scan st;
  size_t seq_start = 0;
  size_t i = 0;
  while (i < s.size()) {
    const uint8_t b = static_cast<uint8_t>(s[i]);
    if (st.needed == 0) {
      seq_start = i;
      if (b <= 0x7F) {
        emit_valid(i, 1);
      } else if (b >= 0xC2 && b <= 0xDF) {
        st.needed = 1;
      } else if (b >= 0xE0 && b <= 0xEF) {
        if (b == 0xE0) st.lower = 0xA0;
        if (b == 0xED) st.upper = 0x9F;
        st.needed = 2;
      } else if (b >= 0xF0 && b <= 0xF4) {
        if (b == 0xF0) st.lower = 0x90;
        if (b == 0xF4) st.upper = 0x8F;
        st.needed = 3;
      } else {
        emit_bad();
      }
      ++i;
      continue;
    }
    if (b < st.lower || b > st.upper) {
      // The sequence so far is a maximal subpart; this byte starts afresh (not consumed).
      st = Utf8Scan{};
      emit_bad();
      continue;
    }
    st.lower = 0x80;
    st.upper = 0xBF;
    ++i;
    if (static_cast<int>(i - seq_start) == st.needed + 1) {
      emit_valid(seq_start, i - seq_start);
      st = Utf8Scan{};
    }
  }
  if (st.needed != 0) emit_bad();  // truncated sequence at the end
}

}  // namespace

std::string sanitize_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  scan_utf8(
      s, [&](size_t pos, size_t len) { out.append(s.data() + pos, len); }, [&] { out.append("\xEF\xBF\xBD"); });
  return out;
}

bool is_valid_utf8(std::string_view s) {
  bool ok = true;
  scan_utf8(
      s, [](size_t, size_t) {}, [&] { ok = false; });
  return ok;
}

}  // namespace loom::vocab

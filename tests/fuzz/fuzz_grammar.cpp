// GBNF parser and matcher. Input: grammar text, then "\xff\xff", then text pieces separated by
// "\xff" (a byte that never occurs in UTF-8). The grammar parses or is refused with a Status; a
// parsed grammar is fed the pieces one by one, and for each piece the token filter
// (mark_accepted, what sampling uses) must agree with accept_text (what accepting a token does);
// a refused piece leaves the matcher unchanged; an operation past the matcher's work budget
// (an ambiguous grammar) ends the input.
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "sample/grammar.h"

using namespace loom;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Input in(data, size);
  const std::string_view gbnf = in.until("\xff\xff");
  auto g = Grammar::parse(gbnf);
  if (!g) {
    LOOM_FUZZ_CHECK(!g.status().message().empty());
    return 0;
  }
  (void)(*g)->to_string();
  GrammarMatcher m(*g);
  std::vector<std::vector<GrammarMatcher::Candidate>> scratch;
  int steps = 0;
  while (in.left() > 0 && ++steps <= 64 && !m.is_dead()) {
    const std::string_view piece = in.until("\xff");
    if (piece.empty()) continue;
    // The filter's answer for this piece as a candidate token.
    const sample::DecodedText d = decode_utf8_partial(piece, m.partial());
    int filter = -1;  // -1: not a candidate (invalid UTF-8)
    if (d.partial.n_remain >= 0) {
      std::vector<GrammarMatcher::Candidate> one{{0, d.cps.data(), d.cps.data() + d.cps.size(), d.partial}};
      std::vector<uint8_t> ok(1, 0);
      m.mark_accepted(one, ok, scratch);
      filter = ok[0];
      if (m.exhausted()) break;  // an ambiguous grammar past its work budget: refused, fast
    }
    const auto stacks_before = m.stacks();
    const sample::PartialUtf8 partial_before = m.partial();
    const bool accepted = m.accept_text(piece);
    if (m.exhausted()) {
      LOOM_FUZZ_CHECK(!accepted && m.stacks() == stacks_before);
      break;
    }
    if (filter >= 0) LOOM_FUZZ_CHECK(accepted == (filter == 1));
    if (!accepted) LOOM_FUZZ_CHECK(m.stacks() == stacks_before && m.partial() == partial_before);
    (void)m.can_end();
    (void)m.is_done();
  }
  return 0;
}

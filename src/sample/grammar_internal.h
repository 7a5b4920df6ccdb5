// Private to the grammar's files (grammar.cpp, grammar_parse.cpp): small helpers on the element
// array that both the parser and the matcher read.
#pragma once

#include "sample/grammar.h"

namespace loom::sample::grammar_internal {

// Whether e ends an alternative (the end of its rule or the start of the next alternative).
inline bool is_end_of_sequence(const GrammarElem& e) {
  return e.type == GrammarElemType::kEnd || e.type == GrammarElemType::kAlt;
}

}  // namespace loom::sample::grammar_internal

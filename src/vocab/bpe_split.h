// The BPE pre-tokenizer steps that llama.cpp runs as hand-written code rather than as a regex
// (its unicode.cpp), over code points: each splits the piece [ini, end) of `cps` and appends the
// resulting pieces to `out`. Private to the BPE tokenizer (bpe_tokenizer.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace loom::vocab::detail {

using Pieces = std::vector<std::pair<size_t, size_t>>;  // [begin, end) code point indices

// Kimi-K2's "\p{Han}+" step (its whole pattern: Han runs, words, numbers, punctuation, spaces).
void split_kimi_k2(const std::vector<uint32_t>& cps, size_t ini, size_t end, Pieces& out);
// AFMoE's "\p{AFMoE_digits}" and Tiny Aya's digit-group regex.
void split_digit_groups(const std::vector<uint32_t>& cps, size_t ini, size_t end, Pieces& out);
// "[^\n]+|[\n]+".
void split_newlines(const std::vector<uint32_t>& cps, size_t ini, size_t end, Pieces& out);

}  // namespace loom::vocab::detail

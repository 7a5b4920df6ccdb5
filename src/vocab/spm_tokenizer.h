// SentencePiece segmentation (internal to src/vocab).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace loom::vocab {

class Vocab;

namespace detail {

// Appends the SentencePiece segmentation of `text` to `out`. `text` is one raw fragment after
// special-token splitting, with the space prefix already added and spaces already escaped to
// U+2581 (the caller's job, because whether a prefix applies depends on the fragment's
// neighbours). `split_at_spaces` promises that no token contains U+2581 after anything other than
// U+2581 (Vocab checks this at load); it lets long text be segmented word by word.
void spm_segment(const Vocab& vocab, std::string_view text, bool split_at_spaces, std::vector<int32_t>& out);

}  // namespace detail
}  // namespace loom::vocab

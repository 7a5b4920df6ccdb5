// WordPiece (tokenizer.ggml.model = "bert"), internal to src/vocab.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace loom::vocab {

class Vocab;

namespace detail {

// BERT's basic tokenization as llama.cpp does it: code points are mapped to the first code point
// of their canonical decomposition (which drops the accents of precomposed letters) and
// lowercased; whitespace separates words, control characters are dropped, and punctuation, ASCII
// symbols and CJK ideographs become one-character words.
std::vector<std::string> wpm_pre_tokenize(std::string_view text, bool lowercase);

// Appends the WordPiece segmentation of one raw text fragment: each word, prefixed with U+2581
// (how the GGUF marks word-initial pieces; continuation pieces are stored without "##"), is
// covered greedily by the longest matching tokens; a word that cannot be covered becomes <unk>.
void wpm_segment(const Vocab& vocab, std::string_view text, bool lowercase, std::vector<int32_t>& out);

}  // namespace detail
}  // namespace loom::vocab

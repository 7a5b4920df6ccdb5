// Incremental detokenization for streaming generated text.
//
// StreamDetokenizer turns tokens into text one at a time and only ever returns text that is
// final: concatenating every push() result and the final flush() gives exactly
// sanitize_utf8(*vocab.detokenize(ids, remove_special, unparse_special)) for the same ids, and
// every returned chunk is well-formed UTF-8. To get there it holds back:
//   - an incomplete UTF-8 sequence at the end (SentencePiece byte-fallback tokens such as
//     <0xE6><0x97><0xA5>, or a byte-level BPE token ending inside a character), until the
//     character is complete or cannot be any more (then it becomes U+FFFD, as sanitize_utf8 does);
//   - for vocabularies with clean_spaces() (GPT-2, Llama-3, Falcon, WordPiece), a space among the
//     last three bytes, since " ?", " 's", " 're" or " ' " may still lose it;
//   - with remove_special, a trailing EOS, which detokenize drops only when it is the last token.
// The first token follows detokenize's leading-space rule (add_space_prefix strips one space
// from the first piece, even when that token renders as nothing; not after a dropped BOS).
//
// Typical use in a generation loop:
//   StreamDetokenizer detok(vocab);
//   for (...) { LOOM_ASSIGN_OR_RETURN(std::string text, detok.push(token)); emit(text); }
//   emit(detok.flush());
//
// The Vocab must outlive the StreamDetokenizer. Not thread-safe (one per stream).
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "vocab/vocab.h"

namespace loom::vocab {

struct StreamDetokenizerOptions {
  // Render control (and unknown) tokens as their text, as detokenize's unparse_special.
  bool unparse_special = false;
  // Drop a leading BOS / trailing EOS when the vocab adds them, as detokenize's remove_special.
  bool remove_special = false;
  // The tokens continue text that came before (generated after a prompt): no first-token rule,
  // so a leading space of the first piece is kept, as token_to_piece prints it.
  bool continuation = false;
};

class StreamDetokenizer {
 public:
  explicit StreamDetokenizer(const Vocab& vocab, StreamDetokenizerOptions options = {});

  // Appends one token and returns the text that became final (possibly ""). kOutOfRange for an
  // id outside [0, n_tokens()); the stream is then unchanged and can go on.
  Expected<std::string> push(int32_t token);

  // Ends the text: returns everything still held back (an incomplete UTF-8 tail becomes U+FFFD,
  // a held trailing EOS is dropped under remove_special) and resets, so the next push() starts a
  // new text (first-token rules apply again).
  std::string flush();

  // Discards everything held back and starts a new text.
  void reset();

  // Bytes currently held back (not yet returned), before cleanup and sanitizing.
  size_t pending_bytes() const { return raw_.size() + utf8_.size(); }

  const StreamDetokenizerOptions& options() const { return options_; }

 private:
  void render(int32_t token, std::string& out);
  // Moves raw_[0, n) through space cleanup and UTF-8 completion into `out`.
  void emit_raw(size_t n, bool final, std::string& out);

  const Vocab* vocab_;
  StreamDetokenizerOptions options_;
  bool first_ = true;          // no token pushed yet
  bool remove_space_ = false;  // the next rendered piece loses one leading space
  bool held_eos_ = false;      // a trailing EOS is held (remove_special)
  std::string raw_;            // rendered bytes not yet through clean_up_tokenization_spaces
  std::string utf8_;           // cleaned bytes ending in an incomplete UTF-8 sequence
};

}  // namespace loom::vocab

// Re-exported: the layers above name these as loom::X (CONTRIBUTING.md, "Namespaces").
namespace loom {
using vocab::StreamDetokenizer;
using vocab::StreamDetokenizerOptions;
}  // namespace loom

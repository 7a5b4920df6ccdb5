// GBNF grammars (llama.cpp's format) and the incremental matcher that constrains sampling.
//
//   root  ::= item ("," item)*        # rules: name ::= alternatives, one per line
//   item  ::= [a-z]+ | "\"" [^"]* "\"" | num{1,3} | ( "x" | "y" )? | .
//
// Literals "..." and character classes [...] (ranges a-z, negation [^...], escapes \n \t \r \\ \"
// \[ \] \xHH \uHHHH \UHHHHHHHH, any UTF-8 text), `.` (any character), grouping, alternation,
// repetition * + ? {m} {m,} {m,n}, comments from # to the end of the line. A rule ends at the end
// of its line unless inside parentheses or after `|`.
//
// Grammar::parse reports errors as kInvalidArgument "line:column: message". Left recursion
// (direct, indirect, or through rules that can match the empty string) is refused: the matcher
// expands rules depth-first and would not terminate.
//
// Matching works on Unicode code points with llama.cpp's algorithm: the state is a set of parse
// stacks, each a list of positions in the rules whose top is a character element. A token is
// allowed when its text (decoded from UTF-8; a trailing incomplete sequence must be able to
// complete to a character the grammar accepts) can be consumed from some stack. Candidate
// rejection shares the work of common prefixes between tokens, stack by stack.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "sample/stage.h"

namespace loom::vocab {
class Vocab;
}  // namespace loom::vocab
namespace loom {
using vocab::Vocab;
}  // namespace loom

namespace loom::sample {

// A GBNF string literal ("...") matching exactly the bytes of `text`: quotes, backslashes and
// control characters escaped (\n \r \t, else \xHH). For generators of grammars.
std::string gbnf_literal(std::string_view text);

enum class GrammarElemType : uint8_t {
  kEnd,           // end of a rule
  kAlt,           // start of another alternative
  kRuleRef,       // value: rule id
  kChar,          // value: code point; starts a positive character class
  kCharNot,       // value: code point; starts a negated character class
  kCharRngUpper,  // value: upper bound of the range started by the previous element
  kCharAlt,       // value: another code point of the class
  kCharAny,       // any code point
};

struct GrammarElem {
  GrammarElemType type;
  uint32_t value;
};

class Grammar {
 public:
  static Expected<std::shared_ptr<const Grammar>> parse(std::string_view gbnf, std::string_view root = "root");

  size_t n_rules() const { return rule_start_.size(); }
  const std::string& rule_name(uint32_t id) const { return names_[id]; }
  uint32_t root() const { return root_; }
  // All rules back to back, each terminated by kEnd; positions in stacks index this array.
  const std::vector<GrammarElem>& elems() const { return elems_; }
  uint32_t rule_start(uint32_t id) const { return rule_start_[id]; }
  // The rules in GBNF again (generated helper rules included); for debugging.
  std::string to_string() const;
  // Whether the character class starting at elems()[pos] accepts c.
  bool matches(uint32_t pos, uint32_t c) const;

 private:
  friend class GrammarParser;
  void build_ascii_masks();
  std::vector<GrammarElem> elems_;
  // For each position that starts a character class: the index of its 128-bit ASCII mask
  // (the common case, answered without walking the class).
  std::vector<uint32_t> mask_index_;
  std::vector<std::array<uint64_t, 2>> ascii_masks_;
  std::vector<uint32_t> rule_start_;
  std::vector<std::string> names_;
  uint32_t root_ = 0;
};

// An incomplete UTF-8 sequence carried between tokens: the bits so far, the bytes still to come
// (-1: invalid) and the length of the whole sequence.
struct PartialUtf8 {
  uint32_t value = 0;
  int n_remain = 0;
  int len = 0;
  bool operator==(const PartialUtf8&) const = default;
};

// Code points of text decoded after `start`, and the incomplete sequence it ends with. Strict
// UTF-8: an invalid sequence (bad lead or continuation byte, overlong form, surrogate, above
// U+10FFFF) gives no code points and n_remain = -1.
struct DecodedText {
  std::vector<uint32_t> cps;
  PartialUtf8 partial;
};
DecodedText decode_utf8_partial(std::string_view text, PartialUtf8 start);

// Text-level matching state. Copyable (cheap: the grammar is shared).
class GrammarMatcher {
 public:
  using Stack = std::vector<uint32_t>;

  explicit GrammarMatcher(std::shared_ptr<const Grammar> g);

  // Consumes text; returns false and leaves the state unchanged when the grammar cannot continue
  // with it (an incomplete trailing UTF-8 sequence is kept for the next call).
  bool accept_text(std::string_view text);
  // Whether the text so far is a complete sentence of the grammar.
  bool can_end() const;
  // Whether nothing more can be consumed (complete and no stack can continue), or no stack is left.
  bool is_done() const;
  bool is_dead() const { return stacks_.empty(); }
  void reset();

  // Token-level filter: for each text (with its decoded form for partial = {}), whether it can be
  // consumed next. Texts must be non-empty.
  struct Candidate {
    size_t index;        // caller's index
    const uint32_t* cp;  // remaining code points
    const uint32_t* end;
    PartialUtf8 partial;  // what the text ends with
  };
  // Sets accepted[c.index] = 1 for each candidate that can come next (others are left as they
  // are); reorders cands. accepted must start with 0 for the candidates. scratch: reusable buffers.
  void mark_accepted(std::vector<Candidate>& cands, std::vector<uint8_t>& accepted,
                     std::vector<std::vector<Candidate>>& scratch) const;

  // An ambiguous grammar can multiply its stacks at every character, so every operation above has
  // a work budget (kMaxWorkPerCall stack expansions). Past it, accept_text refuses the text and
  // mark_accepted stops marking (what it marked before stays valid), and exhausted() is true
  // until the next operation: the caller ends the generation instead of stalling its thread.
  static constexpr uint64_t kMaxWorkPerCall = uint64_t(1) << 21;
  bool exhausted() const { return exhausted_; }

  const Grammar& grammar() const { return *g_; }
  const std::vector<Stack>& stacks() const { return stacks_; }
  PartialUtf8 partial() const { return partial_; }

 private:
  std::shared_ptr<const Grammar> g_;
  std::vector<Stack> stacks_;
  PartialUtf8 partial_;
  mutable bool exhausted_ = false;
};

// The token texts a grammar stage matches: token_to_piece(id, special = true), except that
// control and unknown tokens (not end-of-generation) get no text, so they are never allowed; EOG ids.
struct GrammarVocab {
  std::vector<std::string> pieces;
  std::vector<uint8_t> is_eog;
  static GrammarVocab from_vocab(const Vocab& vocab);
};

// A sampler stage that drops every candidate the grammar cannot accept next; EOG tokens remain
// only when the grammar can end. accept(token) advances the grammar (an EOG token or a token
// that does not fit leaves it dead: apply() then removes every candidate).
class GrammarStage final : public SamplerStage {
 public:
  GrammarStage(std::shared_ptr<const Grammar> g, std::shared_ptr<const GrammarVocab> vocab);
  const char* name() const override { return "grammar"; }
  void apply(Candidates& c) override;
  void accept(int32_t token) override;
  void reset() override;
  std::unique_ptr<SamplerStage> clone() const override { return std::make_unique<GrammarStage>(*this); }

  // Whether token may come next (the same test apply() makes, for one token).
  bool allows(int32_t token) const;
  // Advances over token; false (state unchanged) when it does not fit.
  bool try_accept(int32_t token);
  const GrammarMatcher& matcher() const { return m_; }

 private:
  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const GrammarVocab> vocab_;
  std::shared_ptr<const std::vector<DecodedText>> decoded_;  // per token, decoded from an empty partial
  GrammarMatcher m_;
  bool ended_ = false;  // an EOG token was accepted
  // Scratch, reused between calls (a full-vocabulary pass must not allocate megabytes each token).
  std::vector<DecodedText> scratch_;  // per-candidate decodes when a partial sequence is pending
  std::vector<GrammarMatcher::Candidate> cands_;
  std::vector<uint8_t> keep_;
  std::vector<std::vector<GrammarMatcher::Candidate>> pool_;
};

}  // namespace loom::sample

// Re-exported: the layers above name these as loom::X (CONTRIBUTING.md, "Namespaces").
namespace loom {
using sample::Grammar;
using sample::GrammarMatcher;
}  // namespace loom

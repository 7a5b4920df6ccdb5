// Speculative decoding: a drafter guesses the next tokens, one decode of the target verifies them
// all, and the caller's own sampler picks every token from the target's logits exactly as plain
// decoding would. Because loom's kernels are batch-invariant (docs/design.md), the logits of row i
// of the verification batch are bit-identical to those a one-token decode at that position gives,
// and the sampler sees the same rows in the same order with the same state: the output is the
// plain decoding's output token for token, greedy or sampled (same seed), for any sampler chain or
// grammar. A draft is only a prediction; a wrong one costs the rows it occupied.
//
// This is the acceptance rule of speculative sampling with a deterministic draft: draft token d is
// kept with probability p(d) (the target's sampled token equals it), and on rejection the token
// comes from p conditioned on not being d, i.e. (p - q)+ normalized for q one-hot at d.
//
// Drafters: ModelDrafter (a smaller model with the same vocabulary, greedy, its own context kept in
// step with the history) and LookupDrafter (prompt lookup: what followed the latest earlier
// occurrence of the last n-gram in the prompt and the text so far; no second model).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "context/context.h"
#include "model/model.h"

namespace loom::speculative {

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Up to n_max tokens that probably follow `history` (which ends with the last token chosen).
  // Fewer or none when the drafter has no good guess.
  virtual Expected<std::vector<int32_t>> draft(std::span<const int32_t> history, int n_max) = 0;
  virtual std::string describe() const = 0;
};

// Prompt lookup decoding: for n = ngram_max down to ngram_min, the latest earlier occurrence of
// history's last n tokens; the draft is what followed it (up to n_max tokens).
class LookupDrafter final : public Drafter {
 public:
  explicit LookupDrafter(int ngram_max, int ngram_min = 1) : ngram_max_(ngram_max), ngram_min_(ngram_min) {}
  Expected<std::vector<int32_t>> draft(std::span<const int32_t> history, int n_max) override;
  std::string describe() const override;

 private:
  int ngram_max_, ngram_min_;
};

// A draft model decoding greedily in its own context. It stops drafting at the first token whose
// probability (softmax of the draft's logits) is below p_min.
class ModelDrafter final : public Drafter {
 public:
  // The two vocabularies must be the same: size, every token's text and type, BOS/EOS
  // (kInvalidArgument naming the first difference). The draft context gets `params` (n_ctx is
  // raised to hold the target's context plus a draft).
  static Expected<std::unique_ptr<ModelDrafter>> create(std::shared_ptr<const Model> draft, const Model& target,
                                                        ContextParams params, float p_min);
  Expected<std::vector<int32_t>> draft(std::span<const int32_t> history, int n_max) override;
  std::string describe() const override;

 private:
  ModelDrafter() = default;
  std::shared_ptr<const Model> model_;
  std::unique_ptr<Context> ctx_;
  std::vector<int32_t> cached_;  // tokens in the draft context's cells, in order
  float p_min_ = 0.0f;
};

// Same vocabulary check as ModelDrafter::create (exposed for the C API and tests).
Status check_same_vocab(const Model& draft, const Model& target);

// What the caller does with one verified row of logits: the token it picked (its sampler has
// accepted it), whether that token joins the output (false: end of generation without it, e.g.
// an end-of-generation token), and whether generation stops after it.
struct SpecPick {
  int32_t token = -1;
  bool emit = true;
  bool stop = false;
};
using SpecPickFn = std::function<Expected<SpecPick>(std::span<const float> logits)>;

struct SpecRound {
  std::vector<int32_t> tokens;  // picked and emitted, in order (1 + accepted draft tokens at most)
  int drafted = 0;              // draft tokens verified
  int accepted = 0;             // of them, equal to the target's pick
  bool stopped = false;         // a pick said stop (or did not emit)
};

// One verification round on sequence `seq` of `ctx`. Before: the context holds history[0 .. n-2]
// at positions 0 .. n-2 and history.back() is not decoded yet (n = history.size() >= 1). The
// draft (possibly empty) is decoded after it in one batch, every row with logits; `pick` is
// called for rows in order until a pick differs from the draft, stops, or the rows run out.
// After: the context holds history + tokens except the last token (which is pending, as before),
// or, when no token was emitted, the whole history. The draft must fit: n - 1 + draft.size() <
// ctx.n_ctx() (kInvalidArgument otherwise). On a failed decode, or a pick that returns an error
// (which the round returns), the cache is as before (the outputs are not).
Expected<SpecRound> speculative_round(Context& ctx, int seq, std::span<const int32_t> history,
                                      std::span<const int32_t> draft, const SpecPickFn& pick);

// Running totals for reports.
struct SpecStats {
  int64_t rounds = 0, drafted = 0, accepted = 0, emitted = 0;
  void add(const SpecRound& r) {
    ++rounds;
    drafted += r.drafted;
    accepted += r.accepted;
    emitted += int64_t(r.tokens.size());
  }
  double acceptance() const { return drafted > 0 ? double(accepted) / double(drafted) : 0.0; }
};

}  // namespace loom::speculative

// Re-exported: the layers above name these as loom::X (CONTRIBUTING.md, "Namespaces").
namespace loom {
using speculative::Drafter;
using speculative::ModelDrafter;
using speculative::SpecPick;
}  // namespace loom

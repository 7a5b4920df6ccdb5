// Token selection from logits: a chain of sampler stages (stages.h) in a user-chosen order, an
// optional grammar (grammar.h), and Sampler, which builds llama.cpp's common chain from
// SamplerParams.
//
//   Sampler s = *Sampler::create(params, &model->vocab());
//   for (tok : prompt) s.accept(tok, /*accept_grammar=*/false);   // penalty history
//   loop: tok = s.sample(logits); s.accept(tok); ...
//
// sample() does not change the state that accept() updates (penalty history, mirostat's mu,
// grammar position); it only draws random numbers. A Sampler copy is an independent sampler with
// the same state (one per sequence). The same seed, params and inputs give the same tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "sample/argmax.h"  // argmax(): greedy picks
#include "sample/grammar.h"
#include "sample/reasoning_budget.h"
#include "sample/sampling_defaults.h"
#include "sample/stage.h"
#include "sample/stages.h"

namespace loom::vocab {
class Vocab;
}  // namespace loom::vocab
namespace loom {
using vocab::Vocab;
}  // namespace loom

namespace loom::sample {

// A sequence of stages applied in order to one candidate array.
class SamplerChain {
 public:
  SamplerChain() = default;
  SamplerChain(const SamplerChain& o);
  SamplerChain& operator=(const SamplerChain& o);
  SamplerChain(SamplerChain&&) noexcept = default;
  SamplerChain& operator=(SamplerChain&&) noexcept = default;

  SamplerChain& add(std::unique_ptr<SamplerStage> stage);
  size_t size() const { return stages_.size(); }
  SamplerStage& stage(size_t i) { return *stages_[i]; }
  // "penalties -> top-k -> ... -> dist"
  std::string describe() const;

  void apply(Candidates& c);
  // fill + apply; the selected token (the largest logit when no stage picked one), or -1 when no
  // candidate is left.
  int32_t sample(std::span<const float> logits);
  void accept(int32_t token);
  void reset();
  // The candidates of the last sample() (probabilities are valid if a stage computed them).
  const Candidates& candidates() const { return cur_; }

 private:
  std::vector<std::unique_ptr<SamplerStage>> stages_;
  Candidates cur_;
};

// The configurable stages of the common chain (llama.cpp's common_sampler_type).
enum class SamplerType { kPenalties, kDry, kTopK, kTypicalP, kTopP, kMinP, kXtc, kTemperature };
// "penalties;dry;top_k;typ_p;top_p;min_p;xtc;temperature" (also ',' or ' ' separated; accepts
// llama.cpp's aliases top-k, typical_p, typical, min-p, temp, ...). kInvalidArgument otherwise.
Expected<std::vector<SamplerType>> parse_sampler_order(std::string_view text);
const char* sampler_type_name(SamplerType t);

struct SamplerParams {
  float temp = float(defaults::kTemperature);  // <= 0 (with dynatemp_range 0): greedy
  int top_k = defaults::kTopK;                 // <= 0: all
  float top_p = float(defaults::kTopP);        // >= 1: off
  uint64_t seed = 0;
  float min_p = float(defaults::kMinP);          // <= 0: off
  float typical_p = float(defaults::kTypicalP);  // >= 1: off
  float dynatemp_range = float(defaults::kDynatempRange);
  float dynatemp_exponent = float(defaults::kDynatempExponent);
  float xtc_probability = float(defaults::kXtcProbability);
  float xtc_threshold = float(defaults::kXtcThreshold);
  int32_t min_keep = defaults::kMinKeep;
  int32_t penalty_last_n = defaults::kPenaltyLastN;  // -1: n_ctx; 0: off
  float penalty_repeat = float(defaults::kPenaltyRepeat);
  float penalty_freq = float(defaults::kPenaltyFreq);
  float penalty_present = float(defaults::kPenaltyPresent);
  DryParams dry;                           // multiplier 0: off
  int32_t mirostat = defaults::kMirostat;  // 0 off, 1 v1, 2 v2 (replaces the truncation stages and dist)
  float mirostat_tau = float(defaults::kMirostatTau);
  float mirostat_eta = float(defaults::kMirostatEta);
  int32_t n_ctx = 4096;  // what -1 means for penalty_last_n and dry.penalty_last_n
  std::vector<std::pair<int32_t, float>> logit_bias;
  std::vector<SamplerType> order = {SamplerType::kPenalties, SamplerType::kDry,        SamplerType::kTopK,
                                    SamplerType::kTypicalP,  SamplerType::kTopP,       SamplerType::kMinP,
                                    SamplerType::kXtc,       SamplerType::kTemperature};
  std::string grammar;  // GBNF text; empty: unconstrained
  std::string grammar_root = "root";
  // Tokens a reasoning block may take before it is closed (reasoning_budget.h); -1: no limit.
  // The message is emitted before the closing tag when the budget runs out.
  int32_t reasoning_budget = -1;
  std::string reasoning_budget_message;
  // The reasoning block can be closed on demand (end_reasoning()), with or without a budget.
  bool reasoning_control = false;
};

// The stages SamplerParams describe (no grammar): logit bias, then `order`, then dist (or greedy
// when temp <= 0); with mirostat: logit bias, temperature, mirostat.
SamplerChain build_chain(const SamplerParams& p, const Vocab* vocab, int32_t n_vocab);

class Sampler {
 public:
  // Without a vocabulary: no grammar (p.grammar must be empty) and no DRY sequence breakers.
  explicit Sampler(const SamplerParams& p);
  // Validates the params and parses the grammar (kInvalidArgument with line:column on error).
  static Expected<Sampler> create(const SamplerParams& p, const Vocab* vocab);

  Sampler(const Sampler& o);
  Sampler& operator=(const Sampler& o);
  Sampler(Sampler&&) noexcept = default;
  Sampler& operator=(Sampler&&) noexcept = default;

  // The next token; -1 when the grammar admits none (dead end). With a grammar, the chain runs
  // first on the unconstrained logits and the grammar only checks the pick; when it rejects it,
  // the chain runs again on the grammar-filtered candidates (llama.cpp's common_sampler).
  int32_t sample(std::span<const float> logits);
  void accept(int32_t token, bool accept_grammar = true);
  void reset();
  // With reasoning_control or a budget: closes the reasoning block now, as a spent budget does (the
  // next tokens are the budget message and the end tag). False when not inside a block.
  bool end_reasoning() { return budget_ && budget_->force(); }

  const SamplerParams& params() const { return p_; }
  const SamplerChain& chain() const { return chain_; }
  bool has_grammar() const { return grammar_ != nullptr; }
  const GrammarStage* grammar() const { return grammar_.get(); }
  // Whether the grammar is complete and nothing else can follow (generation should stop).
  bool grammar_done() const { return grammar_ && grammar_->matcher().is_done(); }

 private:
  Sampler() = default;
  static bool argmax_suffices(const SamplerParams& p);

  SamplerParams p_;
  SamplerChain chain_;
  bool argmax_ = false;  // the chain can only pick the largest logit: sample() takes it directly
  std::unique_ptr<GrammarStage> grammar_;
  std::optional<ReasoningBudget> budget_;
  Candidates cur_;
};

}  // namespace loom::sample

// Re-exported: the layers above name these as loom::X (CONTRIBUTING.md, "Namespaces").
namespace loom {
using sample::Sampler;
using sample::SamplerParams;
}  // namespace loom

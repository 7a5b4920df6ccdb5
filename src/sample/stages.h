// The built-in sampler stages (llama.cpp's llama_sampler_init_* semantics). Each factory returns
// an independent stage; combine them with SamplerChain (sampler.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "sample/sampling_defaults.h"
#include "sample/stage.h"

namespace loom::vocab {
class Vocab;
}  // namespace loom::vocab
namespace loom {
using vocab::Vocab;
}  // namespace loom

namespace loom::sample {

// Adds a bias to the logit of each listed token (-INFINITY bans it).
std::unique_ptr<SamplerStage> make_logit_bias(std::vector<std::pair<int32_t, float>> biases);

// Repetition (multiplicative, CTRL-style: divides positive logits, multiplies negative ones),
// frequency (times the count) and presence (once) penalties over the last `last_n` accepted
// tokens. last_n = 0 disables.
std::unique_ptr<SamplerStage> make_penalties(int32_t last_n, float repeat, float freq, float present);

// DRY ("don't repeat yourself"): penalizes a token that would extend a sequence already seen in
// the last `last_n` tokens (-1 = n_ctx) by multiplier * base^(len - allowed_length), where len is
// the repeated length (>= allowed_length). Sequence breakers (strings) stop the matching; they
// are mapped onto token sequences with the vocabulary, as llama.cpp does (vocab may be null:
// then no breakers apply). multiplier 0 disables.
struct DryParams {
  float multiplier = float(defaults::kDryMultiplier);
  float base = float(defaults::kDryBase);
  int32_t allowed_length = defaults::kDryAllowedLength;
  int32_t penalty_last_n = defaults::kDryPenaltyLastN;
  std::vector<std::string> sequence_breakers = {"\n", ":", "\"", "*"};
};
std::unique_ptr<SamplerStage> make_dry(const DryParams& p, const Vocab* vocab, int32_t n_ctx);
// The same with breakers given as token sequences (p.sequence_breakers is ignored).
std::unique_ptr<SamplerStage> make_dry_with_token_breakers(const DryParams& p, int32_t n_ctx,
                                                           const std::vector<std::vector<int32_t>>& breakers);

// Keeps the k largest logits (k <= 0: no-op). Partial selection: O(n + k log k).
std::unique_ptr<SamplerStage> make_top_k(int32_t k);
// Nucleus: the smallest prefix (by probability) whose mass reaches p (at least min_keep).
std::unique_ptr<SamplerStage> make_top_p(float p, size_t min_keep = 1);
// Drops tokens whose probability is below p times the largest one.
std::unique_ptr<SamplerStage> make_min_p(float p, size_t min_keep = 1);
// Locally typical sampling (p >= 1: no-op).
std::unique_ptr<SamplerStage> make_typical(float p, size_t min_keep = 1);
// Exclude Top Choices: with probability `probability`, removes every token whose probability is
// at least `threshold` except the least likely of them.
std::unique_ptr<SamplerStage> make_xtc(float probability, float threshold, size_t min_keep, uint64_t seed);
// Divides logits by t; t <= 0 keeps only the most likely token.
std::unique_ptr<SamplerStage> make_temperature(float t);
// Dynamic temperature: with delta > 0 the temperature lies in [t - delta, t + delta], scaled by
// the normalized entropy of the distribution raised to `exponent`; otherwise as make_temperature.
std::unique_ptr<SamplerStage> make_temperature_ext(float t, float delta, float exponent);
// Mirostat v1 (picks the token). n_vocab: the model's vocabulary size; m: tokens used to estimate s.
std::unique_ptr<SamplerStage> make_mirostat(int32_t n_vocab, uint64_t seed, float tau, float eta, int32_t m = 100);
// Mirostat v2 (picks the token).
std::unique_ptr<SamplerStage> make_mirostat_v2(uint64_t seed, float tau, float eta);
// Picks the largest logit (the first one in array order on ties).
std::unique_ptr<SamplerStage> make_greedy();
// Picks a token at random from the softmax of the logits.
std::unique_ptr<SamplerStage> make_dist(uint64_t seed);

}  // namespace loom::sample

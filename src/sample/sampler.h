// Token selection from logits. This is the minimal sampler of the foundation: greedy (temp 0) and
// seeded temperature sampling with optional top-k / top-p. The full composable chain (penalties,
// min-p, typical, mirostat, grammar) replaces it in the sampling issue.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace loom {

struct SamplerParams {
  float temp = 0.8f;
  int top_k = 40;      // <= 0: all
  float top_p = 0.95f; // >= 1: all
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& p);
  // Index of the chosen token. logits must not be empty.
  int32_t sample(std::span<const float> logits);

 private:
  SamplerParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;  // reused between calls
};

// Index of the largest value; the first one on ties.
int32_t argmax(std::span<const float> v);

}  // namespace loom

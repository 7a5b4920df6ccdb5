// The building blocks of sampling: a candidate array (token id, logit, probability) and the
// SamplerStage interface every stage of a chain implements (penalties, truncations, temperature,
// grammar, the final pick). Stages follow llama.cpp's llama_sampler_* semantics.
//
// A stage reads and rewrites the candidates in place: it may change logits, reorder, drop
// candidates, compute probabilities, or pick one (`selected`). Stages that keep state between
// tokens (penalty history, mirostat's mu, grammar position) update it in accept(); apply() never
// depends on whether a previous apply() of the same step happened (a Sampler may run the chain
// twice for one token when a grammar rejects the first pick), except for consuming random numbers.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace loom::sample {

struct TokenData {
  // Left uninitialized on purpose: refilling a 100k-entry array every token must not zero it first.
  TokenData() {}  // NOLINT
  TokenData(int32_t id_, float logit_, float p_ = 0.0f) : id(id_), logit(logit_), p(p_) {}
  int32_t id;
  float logit;
  float p;  // valid only after a stage computed probabilities (see Candidates::softmax)
};

class Candidates {
 public:
  std::vector<TokenData> data;
  bool sorted = false;    // data is ordered by logit, descending (ties: lower id first)
  bool identity = false;  // data[i].id == i for every i (a full, untouched logit row)
  int32_t selected = -1;  // index into data of the picked token; -1 = none yet

  // One candidate per logit, ids 0..n-1 (identity, unsorted).
  void fill(std::span<const float> logits);
  size_t size() const { return data.size(); }
  bool empty() const { return data.empty(); }

  // Sorts by logit descending (ties by id); a no-op when already sorted.
  void sort();
  // Sorts only the first k positions (the k largest logits, in order); the rest is unspecified.
  // Marks the array sorted only when k covers it.
  void partial_sort(size_t k);
  // Keeps the first n candidates.
  void truncate(size_t n);
  // Probabilities from logits (stable softmax). With sort = true the array is sorted first.
  void softmax(bool sort = true);
  // Selected token id, or -1.
  int32_t selected_id() const { return selected >= 0 && size_t(selected) < data.size() ? data[size_t(selected)].id : -1; }
};

// Orders by logit descending, then by id (a total order, so results do not depend on the sort).
inline bool by_logit_desc(const TokenData& a, const TokenData& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

class SamplerStage {
 public:
  virtual ~SamplerStage() = default;
  virtual const char* name() const = 0;
  virtual void apply(Candidates& c) = 0;
  virtual void accept(int32_t /*token*/) {}
  virtual void reset() {}
  // An independent copy with the same state (for per-sequence samplers).
  virtual std::unique_ptr<SamplerStage> clone() const = 0;
};

// The random numbers of llama.cpp's samplers, drawn exactly as it draws them, so that the same
// seed and the same probabilities pick the same token: a 32-bit Mersenne Twister (std::mt19937,
// whose output the C++ standard fixes) seeded with the low 32 bits of the seed, turned into
// uniform reals by the standard's generate_canonical formula (what std::uniform_real_distribution
// and std::discrete_distribution use in libstdc++ and libc++; written out here so that the draws do
// not depend on the standard library loom is built with).
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { seed_with(seed); }
  void seed_with(uint64_t seed);
  uint32_t next();
  // Uniform in [0, 1) as std::uniform_real_distribution<double>(0, 1): two 32-bit draws.
  double uniform();
  // Uniform in [0, 1) as std::uniform_real_distribution<float>(0, 1): one 32-bit draw.
  float uniform_float();
  // An index drawn as std::discrete_distribution<int> over weights p (normalized in double,
  // cumulated, the last sum forced to 1, the first cumulated weight >= one uniform() draw).
  // Fewer than two weights: 0 without a draw.
  size_t discrete(std::span<const float> p);

 private:
  uint32_t mt_[624];
  int idx_ = 624;
  std::vector<double> cum_;  // discrete()'s scratch
};

}  // namespace loom::sample

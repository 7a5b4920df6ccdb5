#include "sample/sampler.h"

#include <algorithm>
#include <cmath>

namespace loom {

int32_t argmax(std::span<const float> v) {
  int32_t best = 0;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] > v[size_t(best)]) best = int32_t(i);
  }
  return best;
}

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) {}

int32_t Sampler::sample(std::span<const float> logits) {
  if (p_.temp <= 0.0f) return argmax(logits);
  cand_.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) cand_[i] = {logits[i], int32_t(i)};
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t k = cand_.size();
  if (p_.top_k > 0 && size_t(p_.top_k) < k) {
    k = size_t(p_.top_k);
    std::partial_sort(cand_.begin(), cand_.begin() + long(k), cand_.end(), by_logit);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  cand_.resize(k);
  // Softmax with temperature over the kept candidates.
  const float mx = cand_[0].first;
  double sum = 0;
  for (auto& c : cand_) {
    c.first = float(std::exp(double(c.first - mx) / p_.temp));
    sum += c.first;
  }
  if (p_.top_p < 1.0f) {
    double cum = 0;
    size_t keep = 0;
    while (keep < cand_.size()) {
      cum += cand_[keep++].first / sum;
      if (cum >= p_.top_p) break;
    }
    cand_.resize(keep);
    sum = 0;
    for (auto& c : cand_) sum += c.first;
  }
  std::uniform_real_distribution<double> u(0.0, sum);
  double r = u(rng_);
  for (const auto& c : cand_) {
    r -= c.first;
    if (r <= 0) return c.second;
  }
  return cand_.back().second;
}

}  // namespace loom

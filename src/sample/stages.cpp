#include "sample/stages.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "vocab/vocab.h"

namespace loom::sample {

// ---------------------------------------------------------------------------------------------
// Candidates and Rng

void Candidates::fill(std::span<const float> logits) {
  data.resize(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) data[i] = {int32_t(i), logits[i], 0.0f};
  sorted = false;
  identity = true;
  selected = -1;
}

void Candidates::sort() {
  if (sorted) return;
  std::sort(data.begin(), data.end(), by_logit_desc);
  sorted = true;
  identity = false;
}

void Candidates::partial_sort(size_t k) {
  if (sorted) return;
  if (k >= data.size()) {
    sort();
    return;
  }
  // nth_element then sorting the head beats std::partial_sort's heap for small k on large n.
  std::nth_element(data.begin(), data.begin() + long(k), data.end(), by_logit_desc);
  std::sort(data.begin(), data.begin() + long(k), by_logit_desc);
  identity = false;
}

void Candidates::truncate(size_t n) {
  if (n >= data.size()) return;
  data.resize(n);
  identity = false;
  if (selected >= int32_t(n)) selected = -1;
}

void Candidates::softmax(bool do_sort) {
  // As llama.cpp's softmax: exp in float, a float sum, each probability divided by it.
  if (data.empty()) return;
  if (do_sort) sort();
  float mx = data[0].logit;
  if (!sorted)
    for (const auto& t : data) mx = std::max(mx, t.logit);
  float sum = 0.0f;
  for (auto& t : data) {
    t.p = std::exp(t.logit - mx);
    sum += t.p;
  }
  for (auto& t : data) t.p = sum > 0.0f ? t.p / sum : 0.0f;
}

void Rng::seed_with(uint64_t seed) {
  // std::mt19937's seeding (the standard's recurrence, multiplier 1812433253).
  mt_[0] = uint32_t(seed);
  for (uint32_t i = 1; i < 624; ++i) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + i;
  idx_ = 624;
}

uint32_t Rng::next() {
  if (idx_ >= 624) {
    // Regenerate the state (the standard's twist: n 624, m 397, a 0x9908b0df).
    for (int i = 0; i < 624; ++i) {
      const uint32_t y = (mt_[i] & 0x80000000u) | (mt_[(i + 1) % 624] & 0x7fffffffu);
      mt_[i] = mt_[(i + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    idx_ = 0;
  }
  uint32_t y = mt_[idx_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

double Rng::uniform() {
  // generate_canonical<double, 53> over a 32-bit generator: k = 2 draws, summed as the standard
  // writes it (each scaled by the range raised to its position), over range^2; a result that
  // rounds to 1 becomes the largest double below 1 (as libstdc++ does).
  constexpr double kRange = 4294967296.0;
  double sum = double(next());
  sum += double(next()) * kRange;
  double r = sum / (kRange * kRange);
  if (r >= 1.0) r = std::nextafter(1.0, 0.0);
  return r;
}

float Rng::uniform_float() {
  // generate_canonical<float, 24>: one draw, in float.
  constexpr float kRange = 4294967296.0f;
  float r = float(next()) / kRange;
  if (r >= 1.0f) r = std::nextafter(1.0f, 0.0f);
  return r;
}

size_t Rng::discrete(std::span<const float> p) {
  if (p.size() < 2) return 0;
  double sum = 0.0;
  for (float v : p) sum += double(v);
  cum_.resize(p.size());
  double run = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    run += double(p[i]) / sum;
    cum_[i] = run;
  }
  cum_.back() = 1.0;
  const double u = uniform();
  return size_t(std::lower_bound(cum_.begin(), cum_.end(), u) - cum_.begin());
}

namespace {

// llama.cpp's dist pick: probabilities from the logits (exp in float, their sum in double), one
// uniform() draw scaled by the sum, the first candidate at which the running sum reaches it; the
// probabilities are left normalized. One candidate: still one draw (llama.cpp keeps its RNG in
// step with its backend sampling that way).
int32_t dist_pick(Candidates& c, Rng& rng) {
  if (c.data.empty()) return -1;
  if (c.data.size() == 1) {
    (void)rng.uniform();
    c.data[0].p = 1.0f;
    return 0;
  }
  float mx = c.data[0].logit;
  if (!c.sorted)
    for (const auto& t : c.data) mx = std::max(mx, t.logit);
  double sum = 0.0;
  for (auto& t : c.data) {
    t.p = std::exp(t.logit - mx);
    sum += t.p;
  }
  const double target = sum * rng.uniform();
  double run = 0.0;
  int32_t picked = -1;
  for (size_t i = 0; i < c.data.size(); ++i) {
    if (picked < 0) {
      run += c.data[i].p;
      if (run >= target) picked = int32_t(i);
    }
    c.data[i].p = float(c.data[i].p / sum);
  }
  return picked >= 0 ? picked : int32_t(c.data.size() - 1);
}

// std::discrete_distribution over the candidates' probabilities (llama.cpp's mirostat pick).
int32_t discrete_pick(const Candidates& c, Rng& rng, std::vector<float>& scratch) {
  if (c.data.empty()) return -1;
  scratch.resize(c.data.size());
  for (size_t i = 0; i < c.data.size(); ++i) scratch[i] = c.data[i].p;
  return int32_t(rng.discrete(scratch));
}

template <typename T>
class Cloneable : public SamplerStage {
 public:
  std::unique_ptr<SamplerStage> clone() const override { return std::make_unique<T>(static_cast<const T&>(*this)); }
};

// Removes candidates for which drop(t) is true, keeping order.
template <typename F>
void erase_if(Candidates& c, F drop) {
  const size_t before = c.data.size();
  c.data.erase(std::remove_if(c.data.begin(), c.data.end(), drop), c.data.end());
  if (c.data.size() != before) {
    c.identity = false;
    c.selected = -1;
  }
}

// ---------------------------------------------------------------------------------------------

class LogitBias final : public Cloneable<LogitBias> {
 public:
  explicit LogitBias(std::vector<std::pair<int32_t, float>> b) : biases_(std::move(b)) {
    for (const auto& [id, v] : biases_) by_id_[id] += v;
  }
  const char* name() const override { return "logit-bias"; }
  void apply(Candidates& c) override {
    if (biases_.empty()) return;
    if (c.identity) {
      for (const auto& [id, v] : by_id_)
        if (id >= 0 && size_t(id) < c.data.size()) c.data[size_t(id)].logit += v;
    } else {
      for (auto& t : c.data) {
        auto it = by_id_.find(t.id);
        if (it != by_id_.end()) t.logit += it->second;
      }
    }
    c.sorted = false;
  }

 private:
  std::vector<std::pair<int32_t, float>> biases_;
  std::unordered_map<int32_t, float> by_id_;
};

class Penalties final : public Cloneable<Penalties> {
 public:
  Penalties(int32_t last_n, float repeat, float freq, float present)
      : last_n_(std::max(last_n, 0)), repeat_(repeat), freq_(freq), present_(present) {}
  const char* name() const override { return "penalties"; }
  void apply(Candidates& c) override {
    if (last_n_ == 0 || (repeat_ == 1.0f && freq_ == 0.0f && present_ == 0.0f) || counts_.empty()) return;
    auto penalize = [&](TokenData& t, int count) {
      // Dividing a negative logit would make the token more likely: multiply it instead.
      if (t.logit <= 0) t.logit *= repeat_;
      else t.logit /= repeat_;
      t.logit -= float(count) * freq_ + float(count > 0) * present_;
    };
    if (c.identity) {
      for (const auto& [id, n] : counts_)
        if (id >= 0 && size_t(id) < c.data.size()) penalize(c.data[size_t(id)], n);
    } else {
      for (auto& t : c.data) {
        auto it = counts_.find(t.id);
        if (it != counts_.end()) penalize(t, it->second);
      }
    }
    c.sorted = false;
  }
  void accept(int32_t token) override {
    if (last_n_ == 0) return;
    ++counts_[token];
    if (prev_.size() >= size_t(last_n_)) {
      const int32_t old = prev_.front();
      prev_.pop_front();
      if (--counts_[old] == 0) counts_.erase(old);
    }
    prev_.push_back(token);
  }
  void reset() override {
    prev_.clear();
    counts_.clear();
  }

 private:
  int32_t last_n_;
  float repeat_, freq_, present_;
  std::deque<int32_t> prev_;
  std::unordered_map<int32_t, int> counts_;
};

// ---------------------------------------------------------------------------------------------
// DRY, after llama.cpp's llama_sampler_dry (itself from koboldcpp).

// token -> the tokens that must precede it (most recent first) for a sequence breaker to match;
// an empty tail = the token alone breaks.
using BreakerMap = std::unordered_multimap<int32_t, std::vector<int32_t>>;

void overlapping_token_sequences(const Vocab& vocab, const std::string& str, BreakerMap& out, int max_tail_len) {
  for (int32_t id = 0; id < vocab.n_tokens(); ++id) {
    const std::string word = vocab.token_to_piece(id, true);
    if (word.find(str) != std::string::npos) {
      out.emplace(id, std::vector<int32_t>());
      continue;
    }
    // The token ends with a prefix of str: the rest of str must follow as tokens.
    size_t pos = std::string::npos;
    while ((pos = word.find(str[0], pos + 1)) != std::string::npos) {
      bool match = true;
      size_t i = 1;
      for (; i < str.size() && i + pos < word.size(); ++i) {
        if (word[pos + i] != str[i]) {
          match = false;
          break;
        }
      }
      if (!match) continue;
      std::vector<int32_t> tail = vocab.tokenize(str.substr(i), false, false);
      if (max_tail_len >= 0 && tail.size() > size_t(max_tail_len)) tail.resize(size_t(max_tail_len));
      bool dup = false;
      auto range = out.equal_range(id);
      for (auto it = range.first; it != range.second; ++it) dup = dup || it->second == tail;
      if (!dup) out.emplace(id, std::move(tail));
    }
  }
}

class Dry final : public Cloneable<Dry> {
 public:
  Dry(const DryParams& p, const std::vector<std::vector<int32_t>>& token_breakers, int32_t n_ctx)
      : mult_(p.multiplier), base_(p.base), allowed_(p.allowed_length), n_ctx_(std::max(n_ctx, 1)) {
    last_n_ = p.penalty_last_n == -1 ? n_ctx_ : std::max(p.penalty_last_n, 0);
    enabled_ = mult_ != 0.0f && base_ >= 1.0f && last_n_ != 0;
    auto map = std::make_shared<BreakerMap>();
    for (const auto& b : token_breakers)
      if (!b.empty()) map->emplace(b[0], std::vector<int32_t>(b.begin() + 1, b.end()));
    breakers_ = std::move(map);
  }
  Dry(const DryParams& p, const Vocab* vocab, int32_t n_ctx)
      : mult_(p.multiplier), base_(p.base), allowed_(p.allowed_length), n_ctx_(std::max(n_ctx, 1)) {
    last_n_ = p.penalty_last_n == -1 ? n_ctx_ : std::max(p.penalty_last_n, 0);
    enabled_ = mult_ != 0.0f && base_ >= 1.0f && last_n_ != 0;
    auto map = std::make_shared<BreakerMap>();
    if (enabled_ && vocab) {
      constexpr size_t kMaxBreakers = 20, kMaxCharLen = 40;
      size_t n = 0;
      for (std::string s : p.sequence_breakers) {
        if (s.empty() || n++ >= kMaxBreakers) continue;
        if (s.size() > kMaxCharLen) s.resize(kMaxCharLen);
        overlapping_token_sequences(*vocab, s, *map, int(kMaxCharLen));
      }
    }
    breakers_ = std::move(map);
  }
  const char* name() const override { return "dry"; }
  void accept(int32_t token) override {
    if (!enabled_) return;
    last_.push_back(token);
    if (last_.size() > size_t(last_n_)) last_.pop_front();
  }
  void reset() override { last_.clear(); }

  void apply(Candidates& c) override {
    if (!enabled_) return;
    const int n = std::min(int(last_.size()), std::min(last_n_, n_ctx_));
    if (n <= allowed_) return;
    const int rep_limit = repetition_limit(n);
    if (rep_limit < allowed_) return;
    fill_repeat_lengths(n, rep_limit);
    collect_max_repeats(n);
    if (max_repeat_.empty()) return;
    penalize(c);
    c.sorted = false;
  }

 private:
  int32_t recent(int i) const { return last_[last_.size() - 1 - size_t(i)]; }  // i-th most recent

  // 1. The most recent sequence breaker limits how far back a repetition may reach.
  int repetition_limit(int n) const {
    for (int i = 0; i < n; ++i) {
      auto range = breakers_->equal_range(recent(i));
      if (range.first == range.second) continue;
      int longest = -1;
      for (auto it = range.first; it != range.second; ++it) {
        const int len = int(it->second.size());
        if (len > longest && len <= i) {
          bool match = true;
          for (int o = 0; o < len && match; ++o) match = it->second[size_t(o)] == recent(i - o - 1);
          if (match) longest = len;
        }
      }
      if (longest >= 0) return i - longest;
    }
    return n;
  }

  // 2. Z-algorithm over the reversed history: repeat[last - k] = length of the longest suffix
  //    of the history that also ends k tokens earlier (capped at rep_limit).
  void fill_repeat_lengths(int n, int rep_limit) {
    repeat_.assign(size_t(n), 0);
    const int last = n - 1;
    int rt = 0, lt = 0;
    for (int k = 1; k < n; ++k) {
      if (k > rt) {
        int m = 0;
        while (m + k < n && recent(m) == recent(m + k)) ++m;
        repeat_[size_t(last - k)] = std::min(m, rep_limit);
        if (m > 0) {
          lt = k;
          rt = k + m - 1;
        }
      } else {
        const int p = k - lt;
        const int right_len = rt - k + 1;
        if (repeat_[size_t(last - p)] < right_len) {
          repeat_[size_t(last - k)] = std::min(repeat_[size_t(last - p)], rep_limit);
        } else {
          int i = rt + 1;
          while (i < n && recent(i) == recent(i - k)) ++i;
          repeat_[size_t(last - k)] = std::min(i - k, rep_limit);
          lt = k;
          rt = i - 1;
        }
      }
    }
  }

  // 3. The token following each repeated sequence would extend it.
  void collect_max_repeats(int n) {
    max_repeat_.clear();
    for (int i = 0; i < n - 1; ++i) {
      const int len = repeat_[size_t(i)];
      if (len < allowed_) continue;
      const int32_t tok = recent(n - 2 - i);
      auto it = max_repeat_.find(tok);
      if (it == max_repeat_.end() || it->second < len) max_repeat_[tok] = len;
    }
  }

  // 4. Penalize (exponent clamped so pow stays finite).
  void penalize(Candidates& c) const {
    constexpr float kFloatMaxLog = 88.7228391f;
    int max_exp = 0;
    if (base_ > 1.000001f) max_exp = int(kFloatMaxLog / std::log(base_));
    for (auto& t : c.data) {
      auto it = max_repeat_.find(t.id);
      if (it == max_repeat_.end()) continue;
      bool single_breaker = false;
      auto range = breakers_->equal_range(t.id);
      for (auto b = range.first; b != range.second && !single_breaker; ++b) single_breaker = b->second.empty();
      if (single_breaker) continue;
      int e = it->second - allowed_;
      if (max_exp > 0 && e > max_exp) e = max_exp;
      t.logit -= mult_ * std::pow(base_, float(e));
    }
  }

  float mult_, base_;
  int allowed_, n_ctx_, last_n_ = 0;
  bool enabled_ = false;
  std::shared_ptr<const BreakerMap> breakers_;
  std::deque<int32_t> last_;
  std::vector<int> repeat_;                      // scratch
  std::unordered_map<int32_t, int> max_repeat_;  // scratch
};

// ---------------------------------------------------------------------------------------------
// Truncations

void top_k_impl(Candidates& c, int32_t k) {
  if (k <= 0 || c.empty()) return;
  const size_t kk = std::min(size_t(k), c.size());
  if (!c.sorted && kk * 16 <= c.size()) {
    // Small k: one pass with a k-element min-heap; most candidates lose one comparison against
    // its top. O(n + k log k) with a tiny constant, no full-array writes.
    std::vector<TokenData> heap(c.data.begin(), c.data.begin() + long(kk));
    std::make_heap(heap.begin(), heap.end(), by_logit_desc);  // front = the worst kept
    float worst = heap.front().logit;
    for (size_t i = kk; i < c.size(); ++i) {
      const TokenData& t = c.data[i];
      if (t.logit < worst) continue;
      if (by_logit_desc(t, heap.front())) {
        std::pop_heap(heap.begin(), heap.end(), by_logit_desc);
        heap.back() = t;
        std::push_heap(heap.begin(), heap.end(), by_logit_desc);
        worst = heap.front().logit;
      }
    }
    std::sort(heap.begin(), heap.end(), by_logit_desc);
    c.data.assign(heap.begin(), heap.end());
    c.identity = false;
    c.selected = -1;
    c.sorted = true;
    return;
  }
  c.partial_sort(kk);
  c.truncate(kk);
  c.sorted = true;
}

class TopK final : public Cloneable<TopK> {
 public:
  explicit TopK(int32_t k) : k_(k) {}
  const char* name() const override { return "top-k"; }
  void apply(Candidates& c) override { top_k_impl(c, k_); }

 private:
  int32_t k_;
};

class TopP final : public Cloneable<TopP> {
 public:
  TopP(float p, size_t min_keep) : p_(p), min_keep_(std::max<size_t>(min_keep, 1)) {}
  const char* name() const override { return "top-p"; }
  void apply(Candidates& c) override {
    if (p_ >= 1.0f || c.empty()) return;
    // Probabilities over the whole array without sorting it; then sort only as much of the head
    // as the nucleus needs (grows 4x at a time).
    c.softmax(false);
    size_t k = c.sorted ? c.size() : std::min<size_t>(c.size(), 256);
    for (;;) {
      c.partial_sort(k);
      double cum = 0.0;
      for (size_t i = 0; i < k; ++i) {
        cum += c.data[i].p;
        if (cum >= p_ && i + 1 >= min_keep_) {
          c.truncate(i + 1);
          c.sorted = true;
          return;
        }
      }
      if (k == c.size()) return;
      k = std::min(c.size(), k * 4);
    }
  }

 private:
  float p_;
  size_t min_keep_;
};

class MinP final : public Cloneable<MinP> {
 public:
  MinP(float p, size_t min_keep) : p_(p), min_keep_(std::max<size_t>(min_keep, 1)) {}
  const char* name() const override { return "min-p"; }
  void apply(Candidates& c) override {
    if (p_ <= 0.0f || c.empty()) return;
    float mx = -std::numeric_limits<float>::infinity();
    for (const auto& t : c.data) mx = std::max(mx, t.logit);
    const float min_logit = mx + std::log(p_);
    size_t kept = 0;
    for (const auto& t : c.data) kept += t.logit >= min_logit;
    if (kept >= min_keep_) {
      erase_if(c, [&](const TokenData& t) { return t.logit < min_logit; });
    } else {
      top_k_impl(c, int32_t(min_keep_));
    }
  }

 private:
  float p_;
  size_t min_keep_;
};

class Typical final : public Cloneable<Typical> {
 public:
  Typical(float p, size_t min_keep) : p_(p), min_keep_(std::max<size_t>(min_keep, 1)) {}
  const char* name() const override { return "typical"; }
  void apply(Candidates& c) override {
    if (p_ >= 1.0f || c.size() < 2) return;
    c.softmax(false);
    double entropy = 0.0;
    for (const auto& t : c.data)
      if (t.p > 0) entropy -= double(t.p) * std::log(double(t.p));
    // Candidates ordered by how far their surprise is from the entropy.
    shifted_.resize(c.size());
    for (size_t i = 0; i < c.size(); ++i) {
      const double p = c.data[i].p;
      shifted_[i] = {p > 0 ? std::fabs(-std::log(p) - entropy) : std::numeric_limits<double>::infinity(), i};
    }
    std::sort(shifted_.begin(), shifted_.end(), [&](const auto& a, const auto& b) {
      return a.first < b.first || (a.first == b.first && c.data[a.second].id < c.data[b.second].id);
    });
    double cum = 0.0;
    size_t last = shifted_.size();
    for (size_t i = 0; i < shifted_.size(); ++i) {
      cum += c.data[shifted_[i].second].p;
      if (cum > p_ && i + 1 >= min_keep_) {
        last = i + 1;
        break;
      }
    }
    std::vector<TokenData> kept;
    kept.reserve(last);
    for (size_t i = 0; i < last; ++i) kept.push_back(c.data[shifted_[i].second]);
    c.data = std::move(kept);
    c.sorted = false;
    c.identity = false;
    c.selected = -1;
  }

 private:
  float p_;
  size_t min_keep_;
  std::vector<std::pair<double, size_t>> shifted_;
};

class Xtc final : public Cloneable<Xtc> {
 public:
  Xtc(float prob, float thr, size_t min_keep, uint64_t seed)
      : prob_(prob), thr_(thr), min_keep_(std::max<size_t>(min_keep, 1)), seed_(seed), rng_(seed) {}
  const char* name() const override { return "xtc"; }
  void apply(Candidates& c) override {
    if (prob_ <= 0.0f || thr_ > 0.5f || c.size() < 2) return;
    if (rng_.uniform_float() > prob_) return;
    c.softmax(true);
    size_t last_above = 0;  // index of the least likely token at or above the threshold
    for (size_t i = 0; i < c.size(); ++i) {
      if (c.data[i].p >= thr_) last_above = i;
      else break;
    }
    if (last_above > 0 && c.size() - last_above >= min_keep_) {
      c.data.erase(c.data.begin(), c.data.begin() + long(last_above));
      c.identity = false;
      c.selected = -1;
    }
  }
  void reset() override { rng_.seed_with(seed_); }

 private:
  float prob_, thr_;
  size_t min_keep_;
  uint64_t seed_;
  Rng rng_;
};

void temp_impl(Candidates& c, float t) {
  if (c.empty()) return;
  if (t <= 0.0f) {
    size_t best = 0;
    for (size_t i = 1; i < c.size(); ++i)
      if (c.data[i].logit > c.data[best].logit) best = i;
    TokenData keep = c.data[best];
    c.data.assign(1, keep);
    c.sorted = true;
    c.identity = false;
    c.selected = -1;
    return;
  }
  if (t == 1.0f) return;
  const float inv = 1.0f / t;
  for (auto& x : c.data) x.logit *= inv;
}

class TempExt final : public Cloneable<TempExt> {
 public:
  TempExt(float t, float delta, float exponent) : t_(t), delta_(delta), exp_(exponent) {}
  const char* name() const override { return delta_ > 0 ? "dyn-temp" : "temp"; }
  void apply(Candidates& c) override {
    if (delta_ <= 0.0f) {
      temp_impl(c, t_);
      return;
    }
    if (c.size() <= 1) return;
    const float min_t = std::max(0.0f, t_ - delta_), max_t = t_ + delta_;
    c.softmax(false);
    double entropy = 0.0;
    for (const auto& x : c.data)
      if (x.p > 0) entropy -= double(x.p) * std::log(double(x.p));
    const double max_entropy = std::log(double(c.size()));
    const double norm = max_entropy > 0 ? entropy / max_entropy : 0.0;
    const float dyn_t = min_t + (max_t - min_t) * float(std::pow(norm, double(exp_)));
    temp_impl(c, dyn_t);
    c.softmax(false);
  }

 private:
  float t_, delta_, exp_;
};

// Mirostat: mu moves towards the target surprise tau after each token; apply() leaves the update
// pending until accept() confirms the pick (so running the chain twice for one step is harmless).
class Mirostat final : public Cloneable<Mirostat> {
 public:
  Mirostat(int version, int32_t n_vocab, uint64_t seed, float tau, float eta, int32_t m)
      : v_(version), n_vocab_(n_vocab), m_(std::max(m, 2)), seed_(seed), tau_(tau), eta_(eta), mu_(2 * tau), rng_(seed) {}
  const char* name() const override { return v_ == 1 ? "mirostat" : "mirostat-v2"; }
  void apply(Candidates& c) override {
    pending_token_ = -1;
    if (c.empty()) return;
    // llama.cpp's arithmetic, in float as it does it.
    c.softmax(true);
    if (v_ == 1) {
      float sum_ti_bi = 0.0f, sum_ti_sq = 0.0f;
      for (size_t i = 0; i + 1 < size_t(m_) && i + 1 < c.size(); ++i) {
        const float ti = std::log(float(i + 2) / float(i + 1));
        const float bi = std::log(c.data[i].p / c.data[i + 1].p);
        sum_ti_bi += ti * bi;
        sum_ti_sq += ti * ti;
      }
      const float s_hat = sum_ti_bi / sum_ti_sq;
      const float eps = s_hat - 1;
      const float nv = float(n_vocab_ > 0 ? n_vocab_ : int32_t(c.size()));
      const float k = std::pow((eps * std::pow(2.0f, mu_)) / (1 - std::pow(nv, -eps)), 1 / s_hat);
      // llama.cpp takes max(int(k), 1) unchecked: a k that is not finite or beyond int's range
      // converts to INT_MIN on x86-64 and so keeps one candidate; the same here on every CPU.
      const int32_t kk = std::isfinite(k) && std::fabs(k) < 2147483648.0f ? int32_t(k) : INT32_MIN;
      top_k_impl(c, std::max(int32_t(kk), int32_t(1)));
    } else {
      // Keep the candidates up to the first whose surprise exceeds mu (at least one).
      size_t keep = 0;
      while (keep < c.size() && !(-std::log2(c.data[keep].p) > mu_)) ++keep;
      c.truncate(std::max<size_t>(keep, 1));
    }
    c.softmax(true);
    const int32_t idx = discrete_pick(c, rng_, scratch_);
    c.selected = idx;
    const float surprise = -std::log2(c.data[size_t(idx)].p);
    pending_token_ = c.data[size_t(idx)].id;
    pending_mu_ = mu_ - eta_ * (surprise - tau_);
  }
  void accept(int32_t token) override {
    if (token == pending_token_ && std::isfinite(pending_mu_)) mu_ = pending_mu_;
    pending_token_ = -1;
  }
  void reset() override {
    mu_ = 2 * tau_;
    rng_.seed_with(seed_);
    pending_token_ = -1;
  }

 private:
  int v_;
  int32_t n_vocab_, m_;
  uint64_t seed_;
  float tau_, eta_, mu_;
  Rng rng_;
  std::vector<float> scratch_;
  int32_t pending_token_ = -1;
  float pending_mu_ = 0;
};

class Greedy final : public Cloneable<Greedy> {
 public:
  const char* name() const override { return "greedy"; }
  void apply(Candidates& c) override {
    if (c.empty()) return;
    size_t best = 0;
    for (size_t i = 1; i < c.size(); ++i)
      if (c.data[i].logit > c.data[best].logit) best = i;
    c.selected = int32_t(best);
  }
};

class Dist final : public Cloneable<Dist> {
 public:
  explicit Dist(uint64_t seed) : seed_(seed), rng_(seed) {}
  const char* name() const override { return "dist"; }
  void apply(Candidates& c) override { c.selected = dist_pick(c, rng_); }
  void reset() override { rng_.seed_with(seed_); }

 private:
  uint64_t seed_;
  Rng rng_;
};

}  // namespace

std::unique_ptr<SamplerStage> make_logit_bias(std::vector<std::pair<int32_t, float>> biases) {
  return std::make_unique<LogitBias>(std::move(biases));
}
std::unique_ptr<SamplerStage> make_penalties(int32_t last_n, float repeat, float freq, float present) {
  return std::make_unique<Penalties>(last_n, repeat, freq, present);
}
std::unique_ptr<SamplerStage> make_dry(const DryParams& p, const Vocab* vocab, int32_t n_ctx) {
  return std::make_unique<Dry>(p, vocab, n_ctx);
}
std::unique_ptr<SamplerStage> make_dry_with_token_breakers(const DryParams& p, int32_t n_ctx,
                                                           const std::vector<std::vector<int32_t>>& breakers) {
  return std::make_unique<Dry>(p, breakers, n_ctx);
}
std::unique_ptr<SamplerStage> make_top_k(int32_t k) { return std::make_unique<TopK>(k); }
std::unique_ptr<SamplerStage> make_top_p(float p, size_t min_keep) { return std::make_unique<TopP>(p, min_keep); }
std::unique_ptr<SamplerStage> make_min_p(float p, size_t min_keep) { return std::make_unique<MinP>(p, min_keep); }
std::unique_ptr<SamplerStage> make_typical(float p, size_t min_keep) { return std::make_unique<Typical>(p, min_keep); }
std::unique_ptr<SamplerStage> make_xtc(float probability, float threshold, size_t min_keep, uint64_t seed) {
  return std::make_unique<Xtc>(probability, threshold, min_keep, seed);
}
std::unique_ptr<SamplerStage> make_temperature(float t) { return std::make_unique<TempExt>(t, 0.0f, 1.0f); }
std::unique_ptr<SamplerStage> make_temperature_ext(float t, float delta, float exponent) {
  return std::make_unique<TempExt>(t, delta, exponent);
}
std::unique_ptr<SamplerStage> make_mirostat(int32_t n_vocab, uint64_t seed, float tau, float eta, int32_t m) {
  return std::make_unique<Mirostat>(1, n_vocab, seed, tau, eta, m);
}
std::unique_ptr<SamplerStage> make_mirostat_v2(uint64_t seed, float tau, float eta) {
  return std::make_unique<Mirostat>(2, 0, seed, tau, eta, 100);
}
std::unique_ptr<SamplerStage> make_greedy() { return std::make_unique<Greedy>(); }
std::unique_ptr<SamplerStage> make_dist(uint64_t seed) { return std::make_unique<Dist>(seed); }

}  // namespace loom::sample

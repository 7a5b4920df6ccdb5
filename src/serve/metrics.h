// Serving metrics: counters and latency histograms with vLLM's bucket boundaries (the set
// Prometheus dashboards for LLM servers expect). Plain values: the scheduler updates its copy on
// the loop thread and hands out snapshots.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace loom::serve {

class Histogram {
 public:
  Histogram() = default;
  explicit Histogram(std::span<const double> upper_bounds)
      : bounds_(upper_bounds.begin(), upper_bounds.end()), counts_(upper_bounds.size() + 1, 0) {}
  void observe(double v) {
    size_t i = 0;
    while (i < bounds_.size() && v > bounds_[i]) ++i;
    ++counts_[i];
    sum_ += v;
    ++count_;
  }
  const std::vector<double>& bounds() const { return bounds_; }
  // Per bucket (not cumulative); the last one is +Inf.
  const std::vector<uint64_t>& counts() const { return counts_; }
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

// Seconds.
inline constexpr double kTtftBuckets[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
                                          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
inline constexpr double kItlBuckets[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                         0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
inline constexpr double kLatencyBuckets[] = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                                             30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};

struct Metrics {
  uint64_t prompt_tokens = 0;  // prompt tokens computed
  uint64_t generated_tokens = 0;
  uint64_t requests_stop = 0, requests_length = 0, requests_cancelled = 0, requests_error = 0;
  uint64_t requests_rejected = 0;  // refused at submit (queue full, shutting down)
  uint64_t embed_requests = 0;
  uint64_t prefix_queried_tokens = 0;  // prompt tokens looked up in the prefix cache
  uint64_t prefix_hit_tokens = 0;      // of which were found
  uint64_t disk_loads = 0, disk_writes = 0, disk_errors = 0;
  uint64_t steps = 0;
  uint64_t draft_tokens = 0, draft_accepted = 0;  // speculative decoding (lookup): verified, kept
  uint64_t context_shifts = 0;                    // a sequence at its limit dropped old tokens and went on
  // Mixture-of-experts models: experts chosen (tokens x layers x n_expert_used), and the busiest
  // expert's share of its layer's choices (even routing: 1 / n_expert); 0 for other models.
  uint64_t expert_choices = 0;
  double expert_busiest_share = 0;
  // llama-server's llamacpp:* figures: seconds spent on prompts and on generation (summed over
  // finished requests), the longest sequence seen, running requests summed over steps.
  double prompt_seconds = 0, predicted_seconds = 0;
  uint64_t n_tokens_max = 0;
  uint64_t busy_slots_sum = 0;
  uint64_t stalls = 0;  // steps that found no cell for any row (a reservation error,
                        // resolved by ending or requeueing a request; 0 when sound)
  Histogram ttft{kTtftBuckets};
  Histogram itl{kItlBuckets};
  Histogram queue_time{kLatencyBuckets};
  Histogram e2e{kLatencyBuckets};
};

}  // namespace loom::serve

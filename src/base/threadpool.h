// A persistent worker pool. The calling thread takes part as worker 0, so a pool of n threads
// starts n-1 OS threads once and reuses them for every op: an op is handed out by bumping a
// generation counter, workers spin briefly and then sleep on it (futex via std::atomic::wait).
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace loom {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Threads that take part in jobs from now on (1..size()); contexts use fewer threads for
  // single-token steps than for batches.
  void set_active(int n) { active_ = n < 1 ? 1 : (n > n_threads_ ? n_threads_ : n); }
  int active() const { return active_; }

  // Runs fn(ith, nth) on every thread (ith in [0, nth)) and returns when all have finished.
  // nth may be limited below size() for small jobs; fn must not call run() recursively.
  template <typename F>
  void run(F&& fn, int max_threads = 0) {
    using Fn = std::remove_reference_t<F>;
    Job job{[](void* ctx, int ith, int nth) { (*static_cast<Fn*>(ctx))(ith, nth); },
            const_cast<void*>(static_cast<const void*>(&fn))};
    dispatch(job, max_threads);
  }

  // Splits [0, n) into contiguous chunks, one per thread: fn(begin, end).
  template <typename F>
  void parallel_for(int64_t n, F&& fn, int64_t min_per_thread = 1) {
    if (n <= 0) return;
    int64_t max_t = (n + min_per_thread - 1) / std::max<int64_t>(1, min_per_thread);
    int nth = static_cast<int>(std::min<int64_t>(active_, std::max<int64_t>(1, max_t)));
    run([&](int ith, int nt) {
      const int64_t begin = n * ith / nt, end = n * (ith + 1) / nt;
      if (begin < end) fn(begin, end);
    }, nth);
  }

 private:
  struct Job {
    void (*call)(void*, int, int) = nullptr;
    void* ctx = nullptr;
  };
  void dispatch(const Job& job, int max_threads);
  void worker_loop(int ith);

  int n_threads_;
  int active_;
  std::vector<std::thread> threads_;
  Job job_;
  int job_nth_ = 1;
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleeping_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace loom

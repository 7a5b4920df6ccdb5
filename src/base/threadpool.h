// A persistent worker pool. The calling thread takes part as worker 0, so a pool of n threads
// starts n-1 OS threads once and reuses them for every op: an op is handed out by bumping a
// generation counter, workers spin briefly and then sleep on it (futex via std::atomic::wait).
#pragma once

#include <algorithm>
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

  // Splits [0, n) into contiguous chunks of at least min_per_thread items: fn(begin, end) once
  // per chunk, chunks in any order on any thread. There are two chunks per thread: each thread
  // starts on its own first chunk (no shared counter touched), then takes the remaining ones
  // from an atomic counter, so a thread the OS delays (another process on the core) holds the
  // others up by at most one chunk instead of a whole share. Chunk boundaries depend only on n,
  // min_per_thread and the active thread count, never on timing.
  template <typename F>
  void parallel_for(int64_t n, F&& fn, int64_t min_per_thread = 1) {
    if (n <= 0) return;
    const int64_t grain = std::max<int64_t>(1, min_per_thread);
    const int64_t max_chunks = std::max<int64_t>(1, n / grain);
    const int nth = static_cast<int>(std::min<int64_t>(active_, max_chunks));
    if (nth <= 1) {
      fn(int64_t(0), n);
      return;
    }
    const int64_t n_chunks = std::min<int64_t>(max_chunks, 2 * int64_t(nth));
    std::atomic<int64_t> next{nth};
    auto chunk = [&](int64_t c) {
      const int64_t begin = n * c / n_chunks, end = n * (c + 1) / n_chunks;
      if (begin < end) fn(begin, end);
    };
    run([&](int ith, int) {
      chunk(ith);
      for (int64_t c = next.fetch_add(1, std::memory_order_relaxed); c < n_chunks;
           c = next.fetch_add(1, std::memory_order_relaxed)) {
        chunk(c);
      }
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

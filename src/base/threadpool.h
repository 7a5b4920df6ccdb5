// A persistent worker pool. The calling thread takes part as worker 0, so a pool of n threads
// starts n-1 OS threads once and reuses them for every op: an op is posted by bumping a
// generation counter, workers spin briefly and then sleep on it (futex via std::atomic::wait).
//
// A job is a set of items 0..n-1 that the participating threads *claim* from one atomic word
// (generation, next item, item count, participants): whoever is awake takes the next item. The
// caller claims too and then waits only for the items that others have claimed, never for a
// thread to wake up, so a worker that the OS has descheduled (another process on its core) costs
// the job nothing unless it already holds an item. Items never wait for each other.
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
  static constexpr int kMaxThreads = 127;

  explicit ThreadPool(int n_threads);  // clamped to 1..kMaxThreads
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // Threads that take part in jobs from now on (1..size()); contexts use fewer threads for
  // single-token steps than for batches.
  void set_active(int n) { active_ = n < 1 ? 1 : (n > n_threads_ ? n_threads_ : n); }
  int active() const { return active_; }

  // Runs fn(ith, nth) once for every ith in [0, nth) and returns when all have finished; nth is
  // the active thread count (limited to max_threads when that is > 0). Each ith is one work item
  // claimed by whichever thread is free, so one thread may run several (in any order): key
  // per-thread scratch by ith, never by OS thread, and never make one ith wait for another.
  // fn must not call run() recursively.
  template <typename F>
  void run(F&& fn, int max_threads = 0) {
    const int nth = limit(max_threads);
    dispatch(make_job(fn), nth, nth, false);
  }

  // As run(), but item ith runs on pool thread ith (the caller is thread 0): for work that must
  // really be spread over the OS threads, such as measuring memory bandwidth or first-touching
  // pages from the thread that will read them. Waits for every participating thread.
  template <typename F>
  void run_on_threads(F&& fn, int max_threads = 0) {
    const int nth = limit(max_threads);
    dispatch(make_job(fn), nth, nth, true);
  }

  // Splits [0, n) into contiguous chunks of at least min_per_thread items, two chunks per
  // active thread (fewer when n is small): fn(begin, end) once per chunk, claimed dynamically,
  // so a thread the OS delays holds the others up by at most the chunk it is in. Chunk
  // boundaries depend only on n, min_per_thread and the active thread count, never on timing.
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
    const int n_chunks = static_cast<int>(std::min<int64_t>(max_chunks, 2 * int64_t(nth)));
    auto chunk = [&](int c, int) {
      const int64_t begin = n * c / n_chunks, end = n * (c + 1) / n_chunks;
      if (begin < end) fn(begin, end);
    };
    dispatch(make_job(chunk), n_chunks, nth, false);
  }

  // Tests only: while held, workers leave every run() and parallel_for() job to the caller (as
  // if the OS never ran them), which must then still complete. run_on_threads() is not held.
  void hold_workers_for_test(bool hold) { held_.store(hold, std::memory_order_release); }

 private:
  struct Job {
    void (*call)(void*, int, int) = nullptr;
    void* ctx = nullptr;
  };
  template <typename F>
  static Job make_job(F& fn) {
    using Fn = std::remove_reference_t<F>;
    return Job{[](void* ctx, int i, int n) { (*static_cast<Fn*>(ctx))(i, n); },
               const_cast<void*>(static_cast<const void*>(&fn))};
  }
  int limit(int max_threads) const { return max_threads > 0 ? std::min(max_threads, active_) : active_; }
  // Runs items [0, n_items) on up to n_parts threads (pinned: item i on thread i, n_items ==
  // n_parts) and returns when all are done.
  void dispatch(const Job& job, int n_items, int n_parts, bool pinned);
  // Claims and runs items of the posted job as thread k until none is left for it.
  void work(int k, uint32_t& last_gen);
  void worker_loop(int k);
  // Wakes every worker with stop_ set and joins it.
  void stop_workers();

  int n_threads_;
  int active_;
  std::vector<std::thread> threads_;
  Job job_;                              // written by the caller before the job's word is posted
  uint32_t posted_gen_ = 0;              // caller side
  std::atomic<uint64_t> word_{0};        // the posted job: see threadpool.cpp for the bit layout
  std::atomic<uint32_t> generation_{0};  // wake-up counter, = the posted job's generation
  std::atomic<int> done_{0};             // items of the posted job finished
  std::atomic<int> sleeping_{0};
  std::atomic<bool> stop_{false};
  std::atomic<bool> held_{false};
};

}  // namespace loom

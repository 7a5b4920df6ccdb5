#include "base/threadpool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LOOM_CPU_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define LOOM_CPU_RELAX() asm volatile("yield")
#else
#define LOOM_CPU_RELAX() ((void)0)
#endif

namespace loom {
namespace {
// Spin this many rounds before sleeping: decode ops come microseconds apart, so a worker that
// just finished one op usually sees the next one without a futex round trip.
constexpr int kSpinRounds = 1 << 14;
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)), active_(n_threads_) {
  threads_.reserve(n_threads_ - 1);
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::dispatch(const Job& job, int max_threads) {
  const int nth = max_threads > 0 ? std::min(max_threads, active_) : active_;
  if (nth == 1) {
    job.call(job.ctx, 0, 1);
    return;
  }
  job_ = job;
  job_nth_ = nth;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  // seq_cst pairs with the worker's sleeping_ increment + re-check (no lost wake-up).
  generation_.fetch_add(1);
  if (sleeping_.load() > 0) generation_.notify_all();
  job.call(job.ctx, 0, nth);
  // Spin briefly, then yield: on a loaded machine a descheduled worker must get the core back.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpinRounds / 16) LOOM_CPU_RELAX();
    else std::this_thread::yield();
  }
}

void ThreadPool::worker_loop(int ith) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinRounds; ++spin) {
      if (spin < kSpinRounds / 16) LOOM_CPU_RELAX();
      else std::this_thread::yield();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      sleeping_.fetch_add(1);
      // Re-check after announcing sleep so a dispatch between the load and the wait is not lost.
      gen = generation_.load();
      while (gen == seen) {
        generation_.wait(seen, std::memory_order_acquire);
        gen = generation_.load(std::memory_order_acquire);
      }
      sleeping_.fetch_sub(1, std::memory_order_acq_rel);
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    if (ith < job_nth_) job_.call(job_.ctx, ith, job_nth_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace loom

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

// The posted job in one 64-bit word, so that a claim is a single compare-and-swap that also
// proves the job is still the one the claimant read: generation (32 bits), next unclaimed item
// (12), item count (12), participating threads (7), pinned (1).
struct Word {
  uint32_t gen;
  int next, items, parts;
  bool pinned;
};
constexpr uint64_t pack(uint32_t gen, int next, int items, int parts, bool pinned) {
  return uint64_t(gen) << 32 | uint64_t(next) << 20 | uint64_t(items) << 8 | uint64_t(parts) << 1 | uint64_t(pinned);
}
constexpr Word unpack(uint64_t w) {
  return Word{uint32_t(w >> 32), int(w >> 20 & 0xfff), int(w >> 8 & 0xfff), int(w >> 1 & 0x7f), bool(w & 1)};
}
constexpr uint64_t kOneItem = uint64_t(1) << 20;  // add to claim the next item
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::clamp(n_threads, 1, kMaxThreads)), active_(n_threads_) {
  try {
    threads_.reserve(size_t(n_threads_ - 1));
    for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker_loop(i); });
  } catch (...) {
    // Starting a thread failed (no memory, no threads left): the destructor does not run for a
    // constructor that throws, and a joinable std::thread destroyed unjoined terminates.
    stop_workers();
    throw;
  }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::work(int k, uint32_t& last_gen) {
  uint64_t w = word_.load(std::memory_order_acquire);
  for (;;) {
    const Word d = unpack(w);
    // A worker may read the same word on two wake-ups (the word is posted before the wake-up
    // counter moves): last_gen, the generation of the last word it read, makes it run a pinned
    // job once. Recording every word read also keeps it from going stale across a wrap of the
    // 32-bit generation.
    const bool repeat = d.gen == last_gen;
    last_gen = d.gen;
    if (k >= d.parts) return;
    if (d.pinned) {
      // Item k is this thread's alone; the caller waits for it, so the job cannot change
      // before it has run.
      if (repeat) return;
      job_.call(job_.ctx, k, d.items);
      done_.fetch_add(1, std::memory_order_release);
      return;
    }
    if (d.next >= d.items || (k != 0 && held_.load(std::memory_order_relaxed))) return;
    // A successful claim happens after the caller posted this word, hence after it wrote job_;
    // job_ cannot change until the claimed item is done (the caller waits for it).
    if (word_.compare_exchange_weak(w, w + kOneItem, std::memory_order_acq_rel, std::memory_order_acquire)) {
      job_.call(job_.ctx, d.next, d.items);
      done_.fetch_add(1, std::memory_order_release);
      w = word_.load(std::memory_order_acquire);
    }
  }
}

void ThreadPool::dispatch(const Job& job, int n_items, int n_parts, bool pinned) {
  if (n_parts <= 1 || n_items <= 1) {
    for (int i = 0; i < n_items; ++i) job.call(job.ctx, i, n_items);
    return;
  }
  job_ = job;
  done_.store(0, std::memory_order_relaxed);
  const uint32_t gen = ++posted_gen_;
  word_.store(pack(gen, 0, n_items, n_parts, pinned), std::memory_order_release);
  // seq_cst pairs with the worker's sleeping_ increment + re-check (no lost wake-up).
  generation_.store(gen);
  if (sleeping_.load() > 0) generation_.notify_all();
  uint32_t last_gen = gen - 1;
  work(0, last_gen);
  // Spin briefly, then yield: on a loaded machine a descheduled worker that holds an item must
  // get the core back.
  for (int spin = 0; done_.load(std::memory_order_acquire) != n_items; ++spin) {
    if (spin < kSpinRounds / 16) LOOM_CPU_RELAX();
    else std::this_thread::yield();
  }
}

void ThreadPool::worker_loop(int k) {
  uint32_t seen = 0, last_gen = 0;
  for (;;) {
    uint32_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinRounds; ++spin) {
      if (spin < kSpinRounds / 16) LOOM_CPU_RELAX();
      else std::this_thread::yield();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      sleeping_.fetch_add(1);
      // Re-check after announcing sleep so a post between the load and the wait is not lost.
      gen = generation_.load();
      while (gen == seen) {
        generation_.wait(seen, std::memory_order_acquire);
        gen = generation_.load(std::memory_order_acquire);
      }
      sleeping_.fetch_sub(1, std::memory_order_acq_rel);
    }
    seen = gen;
    if (stop_.load(std::memory_order_acquire)) return;
    work(k, last_gen);
  }
}

}  // namespace loom

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "base/arena.h"
#include "base/simd.h"
#include "base/status.h"
#include "base/threadpool.h"

namespace loom {
namespace {

TEST(ThreadPool, EveryItemRunsOncePerJob) {
  for (int n : {1, 2, 3, 4, 8}) {
    ThreadPool pool(n);
    EXPECT_EQ(pool.size(), n);
    for (int rep = 0; rep < 200; ++rep) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.run([&](int ith, int nth) {
        EXPECT_EQ(nth, n);
        hits[size_t(ith)].fetch_add(1);
      });
      for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    }
  }
}

// run_on_threads: item ith on pool thread ith, the caller being thread 0, every time.
TEST(ThreadPool, RunOnThreadsPinsItemsToThreads) {
  for (int n : {2, 3, 4}) {
    ThreadPool pool(n);
    std::vector<std::thread::id> first(static_cast<size_t>(n));
    for (int rep = 0; rep < 100; ++rep) {
      std::vector<std::thread::id> ids(static_cast<size_t>(n));
      pool.run_on_threads([&](int ith, int nth) {
        EXPECT_EQ(nth, n);
        ids[size_t(ith)] = std::this_thread::get_id();
      });
      EXPECT_EQ(ids[0], std::this_thread::get_id());
      EXPECT_EQ(std::set<std::thread::id>(ids.begin(), ids.end()).size(), size_t(n));
      if (rep == 0) first = ids;
      ASSERT_EQ(ids, first) << "rep " << rep;
      // Interleaved with claimed jobs.
      std::atomic<int> sum{0};
      pool.parallel_for(100, [&](int64_t b, int64_t e) { sum.fetch_add(int(e - b)); });
      ASSERT_EQ(sum.load(), 100);
    }
  }
}

// Workers that never run (held, as if descheduled by the OS) do not hold jobs up: the caller
// claims every item itself, and the pool works normally once they are back.
TEST(ThreadPool, JobsCompleteWithoutWorkers) {
  ThreadPool pool(3);
  pool.hold_workers_for_test(true);
  const std::thread::id caller = std::this_thread::get_id();
  for (int rep = 0; rep < 100; ++rep) {
    std::vector<std::atomic<int>> hits(3);
    pool.run([&](int ith, int) {
      EXPECT_EQ(std::this_thread::get_id(), caller);
      hits[size_t(ith)].fetch_add(1);
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
    std::atomic<int64_t> covered{0};
    pool.parallel_for(1000, [&](int64_t b, int64_t e) {
      EXPECT_EQ(std::this_thread::get_id(), caller);
      covered.fetch_add(e - b);
    });
    ASSERT_EQ(covered.load(), 1000);
  }
  pool.hold_workers_for_test(false);
  std::mutex mu;
  std::set<std::thread::id> runners;
  for (int rep = 0; rep < 2000 && runners.size() < 2; ++rep) {
    pool.run([&](int, int) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      std::lock_guard<std::mutex> lock(mu);
      runners.insert(std::this_thread::get_id());
    });
  }
  EXPECT_GE(runners.size(), 2u);  // the workers take items again
}

TEST(ThreadPool, ParallelForCoversRangeExactlyOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 2, 3, 5, 17, 1000}) {
    std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
    pool.parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) seen[size_t(i)].fetch_add(1);
    });
    for (auto& s : seen) ASSERT_EQ(s.load(), 1);
  }
}

// Chunks respect the minimum size, cover the range once, and their boundaries depend only on
// (n, min, threads): the same call twice gives the same set of chunks.
TEST(ThreadPool, ParallelForChunksAreDeterministicAndAtLeastMin) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 7, 64, 1000}) {
      for (int64_t min : {1, 3, 16, 5000}) {
        auto chunks = [&] {
          std::mutex mu;
          std::set<std::pair<int64_t, int64_t>> out;
          pool.parallel_for(
              n,
              [&](int64_t b, int64_t e) {
                std::lock_guard<std::mutex> lock(mu);
                out.emplace(b, e);
              },
              min);
          return out;
        };
        const auto a = chunks(), b = chunks();
        EXPECT_EQ(a, b);
        int64_t covered = 0;
        for (const auto& [lo, hi] : a) {
          covered += hi - lo;
          if (a.size() > 1) {
            EXPECT_GE(hi - lo, std::min(min, n)) << n << " " << min;
          }
        }
        EXPECT_EQ(covered, n);
      }
    }
  }
}

// A thread that stalls in a chunk does not keep the others from finishing the rest.
TEST(ThreadPool, ParallelForLetsOthersTakeAStalledThreadsChunks) {
  ThreadPool pool(2);
  std::atomic<int> by_worker{0}, by_caller{0};
  const std::thread::id caller = std::this_thread::get_id();
  pool.parallel_for(4, [&](int64_t, int64_t) {
    if (std::this_thread::get_id() == caller) {
      by_caller.fetch_add(1);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      by_worker.fetch_add(1);
    }
  });
  EXPECT_EQ(by_caller.load() + by_worker.load(), 4);
  EXPECT_GE(by_caller.load(), 3);  // the worker holds at most the one chunk it stalls in
}

TEST(ThreadPool, MaxThreadsLimitsParticipants) {
  ThreadPool pool(4);
  std::atomic<int> calls{0};
  pool.run(
      [&](int ith, int nth) {
        EXPECT_EQ(nth, 2);
        EXPECT_LT(ith, 2);
        calls.fetch_add(1);
      },
      2);
  EXPECT_EQ(calls.load(), 2);
}

TEST(ThreadPool, ManySmallJobsAfterIdleSleep) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int rep = 0; rep < 5000; ++rep) {
    pool.run([&](int ith, int) { sum.fetch_add(ith + 1); });
  }
  EXPECT_EQ(sum.load(), 5000 * 3);
}

TEST(Arena, AllocatesAlignedAndRefusesOverflow) {
  Arena a(1000);
  void* p1 = a.allocate(10);
  void* p2 = a.allocate(100);
  ASSERT_NE(p1, nullptr);
  ASSERT_NE(p2, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p1) % Arena::kAlign, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p2) % Arena::kAlign, 0u);
  EXPECT_EQ(a.allocate(1 << 20), nullptr);
  a.reset();
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.allocate(10), p1);  // reuse after reset: no new memory
  EXPECT_GE(a.high_water(), 192u);
}

TEST(Status, ExpectedCarriesValueOrError) {
  Expected<int> ok = 5;
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(*ok, 5);
  EXPECT_TRUE(ok.status().is_ok());
  Expected<int> bad = invalid_argument("nope");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "nope");
}

}  // namespace
}  // namespace loom

// Highway glue: the pinned runs visit each target once, the best first, and restore the choice.
TEST(Simd, ForEachTargetVisitsEveryTargetAndRestores) {
  const std::string best = loom::hwy_target_name();
  std::vector<std::string> seen;
  loom::for_each_hwy_target([&](const std::string& t) {
    seen.push_back(t);
    EXPECT_EQ(loom::hwy_target_name(), t);  // pinned
  });
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front(), best);
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), seen.size());
  EXPECT_EQ(loom::hwy_target_name(), best);
  std::string all;
  for (const auto& t : seen) all += t + " ";
  std::printf("Highway targets here: %s\n", all.c_str());
}

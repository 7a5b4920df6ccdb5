#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "base/arena.h"
#include "base/status.h"
#include "base/threadpool.h"

namespace loom {
namespace {

TEST(ThreadPool, EveryThreadRunsOncePerJob) {
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

TEST(ThreadPool, MaxThreadsLimitsParticipants) {
  ThreadPool pool(4);
  std::atomic<int> calls{0};
  pool.run([&](int ith, int nth) {
    EXPECT_EQ(nth, 2);
    EXPECT_LT(ith, 2);
    calls.fetch_add(1);
  }, 2);
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

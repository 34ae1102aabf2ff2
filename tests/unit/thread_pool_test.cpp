#include "kernels/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "kernels/cpu/work_ranges.h"

namespace moeflow {
namespace {

// (parallel_for's coverage and its exceptions are tested in matmul_test.cpp.)

// The timing the bench reports: every multi-part section counted once, its parts'
// start delay and uneven finish inside the section's own time; switching timing off
// keeps the counts, and sections after that are not counted.
TEST(ThreadPool, TimingCountsSectionsAndTheirParts) {
  ThreadPool pool(2);
  pool.set_timing(true);
  for (int i = 0; i < 5; ++i)
    pool.parallel_for(2, [](int64_t, int64_t, int part) {
      // Part 1 finishes ~2 ms after part 0: an uneven finish of about that much.
      if (part == 1) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    });
  pool.parallel_for(1, [](int64_t, int64_t, int) {});  // one part: not a parallel section
  pool.set_timing(false);
  pool.parallel_for(2, [](int64_t, int64_t, int) {});
  const ThreadPool::Stats s = pool.stats();
  EXPECT_EQ(s.sections, 5);
  EXPECT_GE(s.start_seconds, 0.0);
  EXPECT_GE(s.uneven_seconds, 5 * 0.0015);
  EXPECT_LE(s.start_seconds, s.section_seconds);
  EXPECT_LE(s.uneven_seconds, s.section_seconds);
  EXPECT_GE(s.section_seconds, 5 * 0.002);
  pool.set_timing(true);
  EXPECT_EQ(pool.stats().sections, 0) << "switching timing on restarts the counts";
}

// One thread alone walks its range in chunks of `own` until half of what is left is
// smaller, then in halves down to `steal` items (guided scheduling).
TEST(WorkRanges, OwnChunksShrinkToHalfOfWhatIsLeft) {
  cpu::WorkRanges wr;
  const uint32_t bounds[] = {0, 100};
  wr.reset(bounds, 1);
  std::vector<uint32_t> sizes;
  uint32_t b = 0, e = 0, expect_begin = 0;
  while (wr.next(0, 32, 4, b, e)) {
    EXPECT_EQ(b, expect_begin) << "front to back, no gaps";
    expect_begin = e;
    sizes.push_back(e - b);
  }
  EXPECT_EQ(sizes, (std::vector<uint32_t>{32, 32, 18, 9, 4, 4, 1}));
}

TEST(WorkRanges, AThreadThatRunsDryStealsFromTheBackOfAnother) {
  cpu::WorkRanges wr;
  const uint32_t bounds[] = {0, 6, 50};
  wr.reset(bounds, 2);
  uint32_t b = 0, e = 0;
  ASSERT_TRUE(wr.next(0, 32, 4, b, e));
  EXPECT_EQ(b, 0u);
  EXPECT_EQ(e, 4u);  // min(32, max(4, 6 / 2))
  ASSERT_TRUE(wr.next(0, 32, 4, b, e));
  EXPECT_EQ(b, 4u);
  EXPECT_EQ(e, 6u);
  ASSERT_TRUE(wr.next(0, 32, 4, b, e));  // own range empty: the back of thread 1's
  EXPECT_EQ(b, 46u);
  EXPECT_EQ(e, 50u);
  ASSERT_TRUE(wr.next(1, 32, 4, b, e));  // thread 1 still starts at its front
  EXPECT_EQ(b, 6u);
  EXPECT_EQ(e, 26u);  // min(32, max(4, 40 / 2))
}

// The halves of next() that moe_forward's expert-per-thread decode calls itself: it
// steals only from ranges whose items are ready, and waits while any is not empty.
TEST(WorkRanges, FrontAndBackTakenSeparatelyMeetInTheMiddle) {
  cpu::WorkRanges wr;
  const uint32_t bounds[] = {0, 10, 20};
  wr.reset(bounds, 2);
  uint32_t b = 0, e = 0;
  EXPECT_FALSE(wr.empty(1));
  ASSERT_TRUE(wr.take_back(1, 4, b, e));
  EXPECT_EQ(b, 16u);
  EXPECT_EQ(e, 20u);
  ASSERT_TRUE(wr.take_front(1, 8, 4, b, e));
  EXPECT_EQ(b, 10u);
  EXPECT_EQ(e, 14u);  // min(8, 6 left, max(4, 6 / 2))
  ASSERT_TRUE(wr.take_back(1, 4, b, e));
  EXPECT_EQ(b, 14u);
  EXPECT_EQ(e, 16u);  // the last 2: a steal takes what is left
  EXPECT_TRUE(wr.empty(1));
  EXPECT_FALSE(wr.take_front(1, 8, 4, b, e));
  EXPECT_FALSE(wr.take_back(1, 4, b, e));
  EXPECT_FALSE(wr.empty(0));  // the other range untouched
}

TEST(WorkRanges, ConcurrentThreadsTakeEveryItemOnce) {
  constexpr int kThreads = 4;
  constexpr uint32_t kItems = 20000;
  for (int round = 0; round < 20; ++round) {
    cpu::WorkRanges wr;
    // Uneven ranges, so that stealing happens.
    const uint32_t bounds[kThreads + 1] = {0, 100, 9000, 9500, kItems};
    wr.reset(bounds, kThreads);
    std::vector<std::atomic<int>> taken(kItems);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        uint32_t b = 0, e = 0;
        while (wr.next(t, 32, 4, b, e))
          for (uint32_t i = b; i < e; ++i) taken[i].fetch_add(1);
      });
    for (auto& th : threads) th.join();
    for (uint32_t i = 0; i < kItems; ++i) ASSERT_EQ(taken[i].load(), 1) << "item " << i << ", round " << round;
  }
}

}  // namespace
}  // namespace moeflow

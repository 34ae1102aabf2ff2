// parallel_for: every index runs once, on any number of threads, and a failure
// surfaces as the one a serial loop would have raised first.
#include "base/parallel_for.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace moeflow {
namespace {

TEST(ParallelFor, RunsEveryIndexOnceOnAnyNumberOfThreads) {
  for (int threads : {1, 2, 4, 16}) {
    for (int64_t n : {0, 1, 3, 1000}) {
      std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
      std::mutex mu;
      std::set<std::thread::id> ids;
      parallel_for(n, threads, [&](int64_t i) {
        runs[static_cast<size_t>(i)].fetch_add(1);
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
      });
      for (int64_t i = 0; i < n; ++i) EXPECT_EQ(runs[static_cast<size_t>(i)].load(), 1) << n << " on " << threads << ": " << i;
      EXPECT_LE(ids.size(), static_cast<size_t>(threads)) << n;
      if (threads == 1 && n > 0) {
        EXPECT_EQ(ids, std::set<std::thread::id>{std::this_thread::get_id()}) << "runs on the caller";
      }
    }
  }
}

TEST(ParallelFor, RethrowsTheLowestFailedIndexAndTakesNoneAfterIt) {
  for (int threads : {1, 4}) {
    for (int round = 0; round < (threads == 1 ? 1 : 50); ++round) {
      std::atomic<int64_t> highest{-1}, ran{0};
      try {
        parallel_for(2000, threads, [&](int64_t i) {
          ran.fetch_add(1);
          int64_t h = highest.load();
          while (i > h && !highest.compare_exchange_weak(h, i)) {
          }
          if (i == 700 || i == 300 || i == 301) throw std::runtime_error("piece " + std::to_string(i));
        });
        FAIL() << "no exception";
      } catch (const std::runtime_error& e) {
        EXPECT_EQ(std::string(e.what()), "piece 300") << threads << " threads, round " << round;
      }
      // One thread stops where a serial loop stops.
      if (threads == 1) {
        EXPECT_EQ(highest.load(), 300);
        EXPECT_EQ(ran.load(), 301);
      }
    }
  }
}

}  // namespace
}  // namespace moeflow

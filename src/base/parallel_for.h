// Runs independent pieces of work on a few short-lived threads: for one-off jobs (a
// model's load) that come before any thread pool exists and must not depend on one.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace moeflow {

// Calls body(i) once for every i in [0, n), on up to `threads` threads (the caller's
// among them). Each thread takes the next index as it finishes one, so pieces of
// uneven cost still spread. Indices are taken in increasing order and none is taken
// after a body throws, so every index below a failed one has run: the exception
// rethrown (once all threads stopped) is the lowest index's, the one a serial loop
// would have raised.
template <class Body>
void parallel_for(int64_t n, int threads, Body&& body) {
  std::atomic<int64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  int64_t failed_at = n;
  std::exception_ptr error;
  auto work = [&] {
    while (!failed.load(std::memory_order_relaxed)) {
      const int64_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= n) return;
      try {
        body(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (i < failed_at) failed_at = i, error = std::current_exception();
        failed.store(true, std::memory_order_relaxed);
      }
    }
  };
  const int64_t helpers = std::max<int64_t>(0, std::min<int64_t>(threads, n) - 1);
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < helpers; ++t) {
    try {
      pool.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // fewer threads than asked: the others take the pieces
    }
  }
  work();
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace moeflow

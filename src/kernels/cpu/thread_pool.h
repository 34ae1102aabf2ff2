// A persistent pool of worker threads. parallel_for splits [0, n) into contiguous
// chunks, runs them on the workers and the calling thread, and returns when all are
// done. Threads are created once (thread start costs more than a decode step's
// mat-vec on a small model). Thread safety: one parallel_for at a time per pool.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace moeflow {

// One step of a spin-wait: the pause instruction where the CPU has one (it tells the
// core, and a hyperthread sibling, that this thread only waits).
inline void spin_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads >= 1 (the caller counts as one)
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // fn(begin, end, thread_index); chunks are aligned to `grain` elements.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                    int64_t grain = 1);

  // Where the parallel sections' time goes (for `moeflow bench`): with timing on, each
  // parallel_for with more than one part reads the clock when it publishes the job,
  // when every part starts and finishes, and at the join (6 reads per section on two
  // threads; off by default).
  struct Stats {
    int64_t sections = 0;
    double section_seconds = 0;  // publish to join, summed
    double start_seconds = 0;    // publish to the latest part's start (waking the workers)
    double uneven_seconds = 0;   // first part finished to last part finished (an idle thread)
  };
  void set_timing(bool on);  // on: also restarts the counts
  Stats stats() const { return stats_; }

 private:
  void worker();
  // Takes the next unclaimed part of job `seq`; false when none is left (or the job ended).
  bool claim_part(uint64_t seq, int parts, int* part);
  // Runs part `part` of the current job, recording its time and its exception.
  void run_part(int part, std::exception_ptr* err);
  void run_chunk(int64_t n, int64_t grain, int parts, int index,
                 const std::function<void(int64_t, int64_t, int)>& fn);
  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_start_, cv_done_;
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t job_n_ = 0, job_grain_ = 1;
  int job_parts_ = 1;                        // chunks in the current job (<= n_threads_)
  std::atomic<uint64_t> generation_{0};      // bumped once per parallel_for
  std::atomic<uint64_t> claim_{0};           // (sequence << 16) | the next part no thread has taken
  std::atomic<int> pending_{0};              // worker chunks not yet finished
  std::atomic<int> sleepers_{0};             // workers blocked on cv_start_
  std::atomic<bool> caller_sleeping_{false}; // caller blocked on cv_done_
  std::atomic<bool> stop_{false};
  std::exception_ptr worker_error_;          // first exception thrown by a worker's chunk
  struct alignas(64) PartTimes {             // one cache line per thread: no false sharing
    int64_t start_ns = 0, finish_ns = 0;
  };
  bool timing_ = false;                      // the caller's switch
  bool job_timed_ = false;                   // the current job's copy, read by the workers
  std::vector<PartTimes> part_times_;
  Stats stats_;
};

}  // namespace moeflow

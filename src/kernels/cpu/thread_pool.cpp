// Fork/join pool tuned for many small jobs (a decode step issues hundreds of
// parallel_for calls per token).
//
// Publication: generation_ packs (sequence << 16) | parts into one atomic word and
// wakes the workers. Parts 1.. are not assigned to threads but claimed: claim_ packs
// (sequence << 16) | the next unclaimed part, and a thread takes a part with one
// compare-and-swap that fails once the job has moved on. The caller runs part 0, then
// claims whatever parts no worker has started. So a worker that the OS has not
// scheduled (cores shared with other processes) does not hold up the join: before,
// every parallel_for waited for every worker to run its own part, which on a busy
// 2-core machine cost a scheduler time slice per call and slowed a decode step 30-50x.
// Only a thread holding a claimed part touches the job fields and counts in pending_;
// the caller does not rewrite them until pending_ drops to zero, so no thread ever
// sees a half-written job.
//
// Waiting: both sides spin (with a pause instruction) for a short time before
// blocking on a condition variable; sleepers_/caller_sleeping_ tell the other side
// whether a notify is needed, so the fast path takes no lock at all. The
// store-then-load pairs are seq_cst, which rules out a lost wake-up (Dekker).
#include "kernels/cpu/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <limits>

namespace moeflow {

namespace {

constexpr uint64_t kPartsBits = 16;
constexpr uint64_t kPartsMask = (uint64_t{1} << kPartsBits) - 1;
constexpr int kMaxThreads = static_cast<int>(kPartsMask);

using Clock = std::chrono::steady_clock;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// How long a thread busy-waits before blocking. Long enough to bridge the serial
// gaps between the parallel_for calls of one decode step, short enough that an idle
// pool goes quiet almost at once.
int64_t spin_ns(int n_threads) {
  // hardware_concurrency() reads /sys on glibc: far too slow to ask per call.
  static const unsigned hw = std::thread::hardware_concurrency();
  // Oversubscribed: spinning steals the core from the thread we are waiting for.
  if (hw != 0 && static_cast<unsigned>(n_threads) > hw) return 2'000;
  return 200'000;
}

// Spin until pred() or the budget runs out; returns pred()'s final value.
template <class Pred>
bool spin_until(Pred pred, int64_t budget_ns) {
  if (pred()) return true;
  const auto t0 = Clock::now();
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      spin_pause();
      if (pred()) return true;
    }
    const int64_t el =
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    if (el >= budget_ns) return pred();
    // Past the serial gaps of a decode step (attention, routing, norms: tens of
    // microseconds), let a runnable thread (maybe the one we wait for, when cores are
    // shared) have the core. Not sooner: on a virtual machine sched_yield is a
    // hypercall-priced system call, and a job published while the worker is inside one
    // starts late (yielding after 4 us cost the 330M q8_0 decode ~3%, A/B).
    if (el >= 50'000) std::this_thread::yield();
  }
}

struct Range {
  int64_t begin, end;
};

// Chunk `index` of `parts`: the grain-sized blocks of [0, n) dealt out evenly.
Range chunk_of(int64_t n, int64_t grain, int parts, int index) {
  const int64_t blocks = (n + grain - 1) / grain;
  const int64_t per = blocks / parts, extra = blocks % parts;
  const int64_t b0 = index * per + std::min<int64_t>(index, extra);
  const int64_t b1 = b0 + per + (index < extra ? 1 : 0);
  return {std::min(n, b0 * grain), std::min(n, b1 * grain)};
}

}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(std::clamp(n_threads, 1, kMaxThreads)), part_times_(static_cast<size_t>(n_threads_)) {
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
  }
  cv_start_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::set_timing(bool on) {
  timing_ = on;
  if (on) stats_ = Stats{};
}

void ThreadPool::run_chunk(int64_t n, int64_t grain, int parts, int index,
                           const std::function<void(int64_t, int64_t, int)>& fn) {
  const Range c = chunk_of(n, grain, parts, index);
  if (c.begin < c.end) fn(c.begin, c.end, index);
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                              int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t blocks = (n + grain - 1) / grain;
  const int parts = static_cast<int>(std::min<int64_t>(n_threads_, blocks));
  if (parts <= 1) {
    fn(0, n, 0);
    return;
  }

  const int64_t t_publish = timing_ ? now_ns() : 0;
  job_timed_ = timing_;
  job_ = &fn;
  job_n_ = n;
  job_grain_ = grain;
  job_parts_ = parts;
  worker_error_ = nullptr;
  pending_.store(parts - 1, std::memory_order_relaxed);
  const uint64_t seq = (generation_.load(std::memory_order_relaxed) >> kPartsBits) + 1;
  claim_.store(seq << kPartsBits | 1);                                     // parts 1.. open
  generation_.store((seq << kPartsBits) | static_cast<uint64_t>(parts));  // seq_cst publish
  if (sleepers_.load() > 0) {
    { std::lock_guard<std::mutex> lk(mu_); }
    cv_start_.notify_all();
  }

  std::exception_ptr mine;
  if (timing_) part_times_[0].start_ns = now_ns();
  try {
    run_chunk(n, grain, parts, 0, fn);
  } catch (...) {
    mine = std::current_exception();
  }
  if (timing_) part_times_[0].finish_ns = now_ns();
  // The parts no worker has taken yet: a worker that is not running must not make us wait.
  for (int p; claim_part(seq, parts, &p);) {
    run_part(p, &mine);
    pending_.fetch_sub(1);
  }

  auto done = [this] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(done, spin_ns(n_threads_))) {
    std::unique_lock<std::mutex> lk(mu_);
    caller_sleeping_.store(true);
    cv_done_.wait(lk, [this] { return pending_.load() == 0; });
    caller_sleeping_.store(false, std::memory_order_relaxed);
  }
  job_ = nullptr;
  if (timing_) {
    // The workers wrote their times before their pending_ decrement (seq_cst), which
    // the acquire loads above saw: the values are theirs for this job.
    const int64_t t_join = now_ns();
    int64_t latest_start = 0, first_finish = std::numeric_limits<int64_t>::max(), last_finish = 0;
    for (int p = 0; p < parts; ++p) {
      const PartTimes& t = part_times_[static_cast<size_t>(p)];
      latest_start = std::max(latest_start, t.start_ns);
      first_finish = std::min(first_finish, t.finish_ns);
      last_finish = std::max(last_finish, t.finish_ns);
    }
    ++stats_.sections;
    stats_.section_seconds += 1e-9 * static_cast<double>(t_join - t_publish);
    stats_.start_seconds += 1e-9 * static_cast<double>(latest_start - t_publish);
    stats_.uneven_seconds += 1e-9 * static_cast<double>(last_finish - first_finish);
  }
  std::exception_ptr err = mine ? mine : worker_error_;
  worker_error_ = nullptr;
  if (err) std::rethrow_exception(err);
}

void ThreadPool::worker() {
  uint64_t seen = 0;  // the value before any job (a late-starting worker must not skip one)
  const int64_t budget = spin_ns(n_threads_);
  for (;;) {
    uint64_t g = seen;
    auto changed = [&] {
      g = generation_.load(std::memory_order_acquire);
      return g != seen || stop_.load(std::memory_order_relaxed);
    };
    if (!spin_until(changed, budget)) {
      sleepers_.fetch_add(1);  // seq_cst: pairs with the caller's publish-then-check
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_start_.wait(lk, changed);
      }
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    if (stop_.load()) return;
    seen = g;
    const uint64_t seq = g >> kPartsBits;
    const int parts = static_cast<int>(g & kPartsMask);
    for (int p; claim_part(seq, parts, &p);) {
      std::exception_ptr err;
      run_part(p, &err);
      if (err) {
        std::lock_guard<std::mutex> lk(mu_);
        if (!worker_error_) worker_error_ = err;
      }
      if (pending_.fetch_sub(1) == 1 && caller_sleeping_.load()) {
        { std::lock_guard<std::mutex> lk(mu_); }
        cv_done_.notify_one();
      }
    }
  }
}

bool ThreadPool::claim_part(uint64_t seq, int parts, int* part) {
  uint64_t c = claim_.load(std::memory_order_acquire);
  for (;;) {
    if ((c >> kPartsBits) != seq) return false;
    const int p = static_cast<int>(c & kPartsMask);
    if (p >= parts) return false;
    if (claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel)) {
      *part = p;
      return true;
    }
  }
}

void ThreadPool::run_part(int part, std::exception_ptr* err) {
  const bool timed = job_timed_;
  PartTimes& times = part_times_[static_cast<size_t>(part)];
  if (timed) times.start_ns = now_ns();
  try {
    run_chunk(job_n_, job_grain_, job_parts_, part, *job_);
  } catch (...) {
    if (!*err) *err = std::current_exception();
  }
  if (timed) times.finish_ns = now_ns();
}

}  // namespace moeflow

// Contiguous per-thread ranges of work items that finished threads steal from.
//
// Why: a decode step's mat-vecs are fork/joins of ~50 us each, split evenly by bytes.
// The worker starts a few microseconds after the caller and the two cores do not run
// at the same speed on a shared machine, so one thread routinely waited ~17% of the
// time at the join (measured, 2 threads, 330M q8_0 model). Each thread still walks its
// own range front to back (one long stream for the hardware prefetcher: dealing small
// parts round-robin instead was measured at 64% of the speed); only when it runs dry
// does it take chunks from the back of another thread's range. Its own chunks shrink
// to half of what is left near the end of its range (guided scheduling), so that a
// thread that finishes first still finds something to steal: `moeflow bench` measured
// the time one thread sat idle at the join at 4.7-5.6% of a q4_0 decode with fixed
// chunks and 2.1-2.8% with shrinking ones (3 alternating pairs, 2 threads).
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>

namespace moeflow::cpu {

class WorkRanges {
 public:
  // Thread i owns items [bounds[i], bounds[i+1]) for i < n.
  void reset(const uint32_t* bounds, int n) {
    if (n > capacity_) {
      slots_ = std::make_unique<Slot[]>(static_cast<size_t>(n));
      capacity_ = n;
    }
    n_ = n;
    for (int i = 0; i < n; ++i) slots_[i].fb.store(pack(bounds[i], bounds[i + 1]), std::memory_order_relaxed);
  }

  // The next chunk for thread `self`: up to `own` items from the front of its range
  // (at most half of what is left there, at least `steal`), else up to `steal` items
  // from the back of the first other range with any left.
  // Returns false when all ranges are empty.
  bool next(int self, uint32_t own, uint32_t steal, uint32_t& begin, uint32_t& end) {
    if (take_front(self, own, steal, begin, end)) return true;
    for (int k = 1; k < n_; ++k)
      if (take_back((self + k) % n_, steal, begin, end)) return true;
    return false;
  }
  // The two halves of next(), for callers that decide which range to take from (one
  // whose items are not ready yet must not be stolen from): up to `own` items from the
  // front of range i (at most half of what is left, at least `steal`), or `steal`
  // items from its back (least == most: a steal never shrinks).
  bool take_front(int i, uint32_t own, uint32_t steal, uint32_t& begin, uint32_t& end) {
    return take(i, own, steal, true, begin, end);
  }
  bool take_back(int i, uint32_t steal, uint32_t& begin, uint32_t& end) {
    return take(i, steal, steal, false, begin, end);
  }
  bool empty(int i) const {
    const uint64_t v = slots_[i].fb.load(std::memory_order_relaxed);
    return static_cast<uint32_t>(v >> 32) >= static_cast<uint32_t>(v);
  }

 private:
  struct alignas(64) Slot {
    std::atomic<uint64_t> fb{0};  // front << 32 | back
  };
  static uint64_t pack(uint32_t f, uint32_t b) { return uint64_t{f} << 32 | b; }

  // Up to `most` items, at most half of what is left but at least `least`.
  bool take(int i, uint32_t most, uint32_t least, bool front, uint32_t& begin, uint32_t& end) {
    std::atomic<uint64_t>& a = slots_[i].fb;
    uint64_t v = a.load(std::memory_order_relaxed);
    for (;;) {
      const uint32_t f = static_cast<uint32_t>(v >> 32), b = static_cast<uint32_t>(v);
      if (f >= b) return false;
      // No more than half of what is left: a chunk cannot be stolen once taken, so
      // near the end of a range smaller chunks leave the back open to a thread that
      // ran dry instead of keeping it idle.
      const uint32_t c = std::min({most, b - f, std::max(least, (b - f) / 2)});
      const uint64_t nv = front ? pack(f + c, b) : pack(f, b - c);
      if (a.compare_exchange_weak(v, nv, std::memory_order_acq_rel, std::memory_order_relaxed)) {
        begin = front ? f : b - c;
        end = front ? f + c : b;
        return true;
      }
    }
  }

  std::unique_ptr<Slot[]> slots_;
  int capacity_ = 0, n_ = 0;
};

}  // namespace moeflow::cpu

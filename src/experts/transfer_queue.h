// The priority queue of copy jobs both transports keep: highest priority first, FIFO
// among equal priorities (so runs are deterministic), cancel and reprioritise by key.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "experts/expert_key.h"

namespace moeflow {

struct TransferJob {
  ExpertKey key;
  uint8_t* dst = nullptr;
  double priority = 0;
  uint64_t seq = 0;  // submission order
};

// Whether a is copied before b: the higher priority, then the earlier submission.
inline bool copies_before(const TransferJob& a, const TransferJob& b) {
  return a.priority != b.priority ? a.priority > b.priority : a.seq < b.seq;
}

class TransferQueue {
 public:
  void push(const ExpertKey& key, uint8_t* dst, double priority) {
    jobs_.push_back({key, dst, priority, next_seq_++});
  }
  bool empty() const { return jobs_.empty(); }
  size_t size() const { return jobs_.size(); }
  // The job to start next (null when none), left in the queue.
  const TransferJob* peek() const {
    if (jobs_.empty()) return nullptr;
    size_t best = 0;
    for (size_t i = 1; i < jobs_.size(); ++i)
      if (copies_before(jobs_[i], jobs_[best])) best = i;
    return &jobs_[best];
  }
  // Removes and returns the job to start next.
  std::optional<TransferJob> pop() {
    const TransferJob* best = peek();
    if (!best) return std::nullopt;
    TransferJob j = *best;
    jobs_.erase(jobs_.begin() + (best - jobs_.data()));
    return j;
  }
  bool remove(const ExpertKey& key) {
    for (size_t i = 0; i < jobs_.size(); ++i)
      if (jobs_[i].key == key) {
        jobs_.erase(jobs_.begin() + static_cast<int64_t>(i));
        return true;
      }
    return false;
  }
  // Jobs queued with at least this priority.
  size_t count_at_least(double priority) const {
    size_t n = 0;
    for (const TransferJob& j : jobs_) n += j.priority >= priority;
    return n;
  }
  void set_priority(const ExpertKey& key, double priority) {
    for (TransferJob& j : jobs_)
      if (j.key == key) j.priority = priority;
  }

 private:
  // The queue holds at most the experts that fit the budget (tens to hundreds), so a
  // linear scan beats a heap that would need decrease-key and lazy deletion.
  std::vector<TransferJob> jobs_;
  uint64_t next_seq_ = 0;
};

}  // namespace moeflow

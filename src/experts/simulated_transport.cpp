#include "experts/simulated_transport.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "experts/expert_cache.h"

namespace moeflow {

SimulatedTransport::SimulatedTransport(const ExpertGeometry& geometry, const LinkProfile& link)
    : geometry_(geometry), link_(link), engines_(static_cast<size_t>(std::max(1, link.copy_engines))) {}

double SimulatedTransport::transfer_seconds(const ExpertKey& key) const { return seconds_for(geometry_.bytes_of(key)); }

void SimulatedTransport::submit(const ExpertKey& key, uint8_t*, double priority) {
  queue_.push(key, nullptr, priority);
  start_idle(now_);
  preempt_for(priority);
}

void SimulatedTransport::reprioritize(const ExpertKey& key, double priority) {
  queue_.set_priority(key, priority);
  for (Engine& e : engines_)
    if (e.busy && e.key == key) e.priority = priority;  // a running copy that is now a demand is not pre-empted
  preempt_for(priority);
}

bool SimulatedTransport::cancel(const ExpertKey& key) {
  if (!queue_.remove(key)) return false;
  left_.erase(key);
  return true;
}

void SimulatedTransport::preempt_for(double priority) {
  if (priority < kDemandPriority) return;
  // A held prefetch that has not begun gives its engine to the demand outright.
  for (Engine& e : engines_) {
    if (!e.busy || e.yields || e.start <= now_ || e.priority >= kDemandPriority) continue;
    if (queue_.count_at_least(kDemandPriority) == 0) return;
    if (e.bytes != geometry_.bytes_of(e.key)) left_[e.key] = e.bytes;  // a resumed piece keeps what it has left
    queue_.push(e.key, nullptr, e.priority);
    e.busy = false;
    start_idle(now_);
  }
  if (link_.chunk_bytes == 0) return;
  // One engine freed for each queued demand: those idle or already yielding count.
  size_t freeing = 0;
  for (const Engine& e : engines_)
    if (!e.busy || e.yields) ++freeing;
  if (freeing >= queue_.count_at_least(kDemandPriority)) return;
  Engine* victim = nullptr;
  for (Engine& e : engines_)
    if (e.busy && !e.yields && e.priority < kDemandPriority && (!victim || e.priority < victim->priority)) victim = &e;
  if (!victim) return;
  // It stops at the end of the chunk under way (its first chunk if the latency has
  // not passed yet); if that is the end of the copy, there is nothing to pre-empt.
  const double moving = std::max(0.0, now_ - victim->start - link_.latency_s);
  const uint64_t moved = static_cast<uint64_t>(moving * link_.bandwidth_bytes_per_s);
  const uint64_t chunks = moved / link_.chunk_bytes + 1;
  const uint64_t boundary = std::min(victim->bytes, chunks * link_.chunk_bytes);
  if (boundary >= victim->bytes) return;
  left_[victim->key] = victim->bytes - boundary;
  bytes_moved_ += boundary;
  victim->finish = victim->start + seconds_for(boundary);
  victim->yields = true;
  ++preemptions_;
}

void SimulatedTransport::start_idle(double t) {
  for (Engine& e : engines_) {
    if (e.busy || queue_.empty()) continue;
    const TransferJob j = *queue_.pop();
    e.busy = true;
    e.yields = false;
    e.key = j.key;
    e.priority = j.priority;
    // A held prefetch takes the engine now and starts moving at the hold's end; a
    // demand arriving before then takes the engine back (preempt_for).
    e.start = j.priority < kDemandPriority ? std::max(t, hold_until_) : t;
    const auto left = left_.find(j.key);
    e.bytes = left != left_.end() ? left->second : geometry_.bytes_of(j.key);
    if (left != left_.end()) left_.erase(left);
    e.finish = e.start + seconds_for(e.bytes);
  }
}

void SimulatedTransport::settle(double t) {
  for (;;) {
    Engine* first = nullptr;
    for (Engine& e : engines_)
      if (e.busy && e.finish <= t && (!first || e.finish < first->finish)) first = &e;
    if (!first) return;
    first->busy = false;
    if (first->yields) {
      queue_.push(first->key, nullptr, first->priority);  // resumes with left_[key] bytes
    } else {
      done_.push_back(first->key);
      bytes_moved_ += first->bytes;
    }
    start_idle(first->finish);
  }
}

void SimulatedTransport::advance(double seconds) {
  if (seconds > 0) now_ += seconds;
  settle(now_);
}

void SimulatedTransport::collect(std::vector<ExpertKey>& done, bool block) {
  settle(now_);
  while (block && done_.empty()) {  // a pre-empted piece ends without a copy done
    double next = std::numeric_limits<double>::infinity();
    for (const Engine& e : engines_)
      if (e.busy) next = std::min(next, e.finish);
    if (next == std::numeric_limits<double>::infinity())
      throw std::logic_error("SimulatedTransport::collect: blocking with no transfer in flight");
    now_ = std::max(now_, next);
    settle(now_);
  }
  done.insert(done.end(), done_.begin(), done_.end());
  done_.clear();
}

}  // namespace moeflow

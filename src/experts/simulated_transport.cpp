#include "experts/simulated_transport.h"

#include <limits>
#include <stdexcept>

namespace moeflow {

SimulatedTransport::SimulatedTransport(const ExpertGeometry& geometry, const LinkProfile& link)
    : geometry_(geometry), link_(link), engines_(static_cast<size_t>(std::max(1, link.copy_engines))) {}

double SimulatedTransport::transfer_seconds(const ExpertKey& key) const {
  return link_.latency_s + static_cast<double>(geometry_.bytes_of(key)) / link_.bandwidth_bytes_per_s;
}

void SimulatedTransport::submit(const ExpertKey& key, uint8_t*, double priority) {
  queue_.push(key, nullptr, priority);
  start_idle(now_);
}

void SimulatedTransport::reprioritize(const ExpertKey& key, double priority) { queue_.set_priority(key, priority); }

bool SimulatedTransport::cancel(const ExpertKey& key) { return queue_.remove(key); }

void SimulatedTransport::start_idle(double t) {
  for (Engine& e : engines_) {
    if (e.busy || queue_.empty()) continue;
    const TransferJob j = *queue_.pop();
    e.busy = true;
    e.key = j.key;
    e.finish = t + transfer_seconds(j.key);
  }
}

void SimulatedTransport::settle(double t) {
  for (;;) {
    Engine* first = nullptr;
    for (Engine& e : engines_)
      if (e.busy && e.finish <= t && (!first || e.finish < first->finish)) first = &e;
    if (!first) return;
    first->busy = false;
    done_.push_back(first->key);
    bytes_moved_ += geometry_.bytes_of(first->key);
    start_idle(first->finish);
  }
}

void SimulatedTransport::advance(double seconds) {
  if (seconds > 0) now_ += seconds;
  settle(now_);
}

void SimulatedTransport::collect(std::vector<ExpertKey>& done, bool block) {
  settle(now_);
  if (block && done_.empty()) {
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

// A Transport that forwards to another and counts the copies it has outstanding
// (submitted, not yet collected or cancelled) and the buffers it was handed: what the tests of the prefill pipeline
// check its "at most two slots" against, from outside the code under test.
#pragma once
#include <algorithm>
#include <cstdint>
#include <set>
#include <vector>

#include "experts/transport.h"

namespace moeflow::testing {

class CountingTransport final : public Transport {
 public:
  explicit CountingTransport(Transport& inner) : inner_(inner) {}

  bool needs_buffers() const override { return inner_.needs_buffers(); }
  void submit(const ExpertKey& key, uint8_t* dst, double priority) override {
    inner_.submit(key, dst, priority);
    peak = std::max(peak, ++outstanding);
    ++submitted;
    if (dst) buffers.insert(dst);
  }
  void reprioritize(const ExpertKey& key, double priority) override { inner_.reprioritize(key, priority); }
  bool cancel(const ExpertKey& key) override {
    const bool cancelled = inner_.cancel(key);
    if (cancelled) --outstanding;
    return cancelled;
  }
  void collect(std::vector<ExpertKey>& done, bool block) override {
    const size_t before = done.size();
    inner_.collect(done, block);
    outstanding -= static_cast<int64_t>(done.size() - before);
  }
  double now() override { return inner_.now(); }
  uint64_t bytes_moved() const override { return inner_.bytes_moved(); }
  void hold_prefetches(double until) override { inner_.hold_prefetches(until); }

  int64_t outstanding = 0;  // copies submitted and not yet collected or cancelled
  int64_t peak = 0;         // most outstanding at once
  int64_t submitted = 0;    // copies ever submitted
  std::set<uint8_t*> buffers;  // distinct destination buffers ever used

 private:
  Transport& inner_;
};

}  // namespace moeflow::testing

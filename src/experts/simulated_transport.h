// A transport on a virtual clock, for the trace-driven simulator: each copy takes
// latency + bytes / bandwidth on one of `copy_engines` engines; queued jobs start, by
// priority, when an engine frees up. Compute is modelled by advance(): transfers in
// flight progress while the clock moves, which is how prefetching overlaps compute.
// A blocking collect() jumps the clock to the next completion (a stall).
#pragma once
#include <vector>

#include "experts/transfer_queue.h"
#include "experts/transport.h"

namespace moeflow {

struct LinkProfile {
  double bandwidth_bytes_per_s = 25e9;
  double latency_s = 10e-6;
  int copy_engines = 1;
};

class SimulatedTransport final : public Transport {
 public:
  SimulatedTransport(const ExpertGeometry& geometry, const LinkProfile& link);

  bool needs_buffers() const override { return false; }
  void submit(const ExpertKey& key, uint8_t* dst, double priority) override;
  void reprioritize(const ExpertKey& key, double priority) override;
  bool cancel(const ExpertKey& key) override;
  void collect(std::vector<ExpertKey>& done, bool block) override;
  double now() override { return now_; }
  uint64_t bytes_moved() const override { return bytes_moved_; }

  // Moves the virtual clock forward by `seconds` of compute.
  void advance(double seconds);
  double transfer_seconds(const ExpertKey& key) const;

 private:
  struct Engine {
    bool busy = false;
    ExpertKey key;
    double finish = 0;
  };
  // Completes every transfer that finishes by time `t`, in time order, starting
  // queued jobs on the freed engines.
  void settle(double t);
  void start_idle(double t);

  const ExpertGeometry& geometry_;
  LinkProfile link_;
  double now_ = 0;
  std::vector<Engine> engines_;
  TransferQueue queue_;
  std::vector<ExpertKey> done_;
  uint64_t bytes_moved_ = 0;
};

}  // namespace moeflow

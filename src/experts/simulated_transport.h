// A transport on a virtual clock, for the trace-driven simulator: each copy takes
// latency + bytes / bandwidth on one of `copy_engines` engines; queued jobs start, by
// priority, when an engine frees up. Copies move in chunks of `chunk_bytes` (0: one
// piece): a demand (priority kDemandPriority) that finds every engine copying a
// prefetch pre-empts the lowest-priority one at its next chunk boundary, and the
// prefetch goes back to the queue with what it has left (paying the latency again
// when it resumes), so a demand never waits behind the whole of a wrong guess. Compute is modelled by advance(): transfers in
// flight progress while the clock moves, which is how prefetching overlaps compute.
// A blocking collect() jumps the clock to the next completion (a stall).
#pragma once
#include <unordered_map>
#include <vector>

#include "experts/transfer_queue.h"
#include "experts/transport.h"

namespace moeflow {

struct LinkProfile {
  double bandwidth_bytes_per_s = 25e9;
  double latency_s = 10e-6;
  int copy_engines = 1;
  uint64_t chunk_bytes = 0;  // pre-emption granularity (0: copies are not pre-empted)
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
  void hold_prefetches(double until) override { hold_until_ = until; }

  // Moves the virtual clock forward by `seconds` of compute.
  void advance(double seconds);
  // Time of a whole copy of `key` (from its first byte, latency included).
  double transfer_seconds(const ExpertKey& key) const;
  uint64_t preemptions() const { return preemptions_; }

 private:
  struct Engine {
    bool busy = false;
    ExpertKey key;
    double priority = 0;
    double start = 0;       // when its current piece starts (latency first); a held prefetch's lies ahead
    uint64_t bytes = 0;     // bytes this piece moves
    double finish = 0;
    bool yields = false;    // pre-empted: at `finish` it goes back to the queue
  };
  // Pre-empts a prefetch for a demand of priority `priority` if every engine is busy.
  void preempt_for(double priority);
  double seconds_for(uint64_t bytes) const { return link_.latency_s + static_cast<double>(bytes) / link_.bandwidth_bytes_per_s; }
  // Completes every transfer that finishes by time `t`, in time order, starting
  // queued jobs on the freed engines.
  void settle(double t);
  void start_idle(double t);

  const ExpertGeometry& geometry_;
  LinkProfile link_;
  double now_ = 0;
  double hold_until_ = 0;  // prefetches start no earlier (hold_prefetches)
  std::vector<Engine> engines_;
  TransferQueue queue_;
  std::vector<ExpertKey> done_;
  std::unordered_map<ExpertKey, uint64_t> left_;  // bytes still to move of pre-empted copies
  uint64_t bytes_moved_ = 0;
  uint64_t preemptions_ = 0;
};

}  // namespace moeflow

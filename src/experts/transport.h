// What moves an expert from the slow tier into the fast tier. Two implementations
// share this interface so that the ExpertCache is one piece of code in the engine and
// in the simulator:
//   FileTransport       I/O threads doing aligned preads (O_DIRECT where allowed)
//   SimulatedTransport  a virtual clock: latency + bytes / bandwidth per copy engine
//
// Jobs wait in a priority queue (higher first, FIFO among equals) until a worker (or
// copy engine) is free; a started job cannot be cancelled. Only the cache's thread
// calls these methods.
#pragma once
#include <cstdint>
#include <vector>

#include "experts/expert_key.h"

namespace moeflow {

class Transport {
 public:
  virtual ~Transport() = default;
  // Whether the cache must give each job a real destination buffer.
  virtual bool needs_buffers() const = 0;
  // Queues a copy of `key` into `dst` (null when !needs_buffers()).
  virtual void submit(const ExpertKey& key, uint8_t* dst, double priority) = 0;
  // Raises (or lowers) the priority of a job still queued; no-op otherwise.
  virtual void reprioritize(const ExpertKey& key, double priority) = 0;
  // Drops a queued job; false if it has started (or finished) already.
  virtual bool cancel(const ExpertKey& key) = 0;
  // Appends the jobs finished since the last call. With `block`, waits until at least
  // one has finished; REQUIRES: a job is queued or running.
  virtual void collect(std::vector<ExpertKey>& done, bool block) = 0;
  // Seconds on this transport's clock (steady clock, or virtual time).
  virtual double now() = 0;
  // Bytes the jobs have moved from the slow tier so far.
  virtual uint64_t bytes_moved() const = 0;
  // Prefetches (jobs below demand priority) start no earlier than `until` on this
  // transport's clock: a predictor running on its own stream has not named them yet
  // (DuoServe §5.3). A no-op where the predictor's time is real (the engine runs it
  // inline); the simulator charges it.
  virtual void hold_prefetches(double /*until*/) {}
};

}  // namespace moeflow

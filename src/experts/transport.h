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
#include <string>
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
  // Seconds the link had a copy in flight so far (0 where not measured): against the
  // run's time, how busy the copy engine was.
  virtual double busy_seconds() const { return 0; }
  // The link's copy bandwidth in bytes/second where the transport measured it (0:
  // not measured; the file transports' storage is measured apart).
  virtual double bandwidth() const { return 0; }
  // Where the slow tier is, for humans ("O_DIRECT reads", "pinned host -> device").
  virtual std::string medium() const { return ""; }
  // An expert's bytes in host memory, laid out as its cache buffer, where the
  // transport keeps every expert there (the CUDA backend's host tier); else null.
  // --on-miss host-compute computes a missed expert from here on the CPU.
  virtual const uint8_t* host_copy(const ExpertKey& /*key*/) const { return nullptr; }
};

}  // namespace moeflow

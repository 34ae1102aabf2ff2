// What the real transports share: jobs wait in the TransferQueue behind a mutex,
// worker threads of the transport take them one at a time and copy them (the
// subclass's copy(): pread from the file, cudaMemcpyAsync to a device), and finished
// ones wait in a list for the cache's collect(). A copy goes in chunks; between two, a
// worker asks should_yield(): when a demand (kDemandPriority) waits with no worker
// free, a prefetch's copy goes back to the queue with its progress and its worker
// takes the demand, so a demand never waits behind the whole of a wrong prefetch.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "experts/transfer_queue.h"
#include "experts/transport.h"

namespace moeflow {

class WorkerTransport : public Transport {
 public:
  ~WorkerTransport() override;

  bool needs_buffers() const override { return true; }
  void submit(const ExpertKey& key, uint8_t* dst, double priority) override;
  void reprioritize(const ExpertKey& key, double priority) override;
  bool cancel(const ExpertKey& key) override;
  void collect(std::vector<ExpertKey>& done, bool block) override;
  double now() override;  // the steady clock
  uint64_t bytes_moved() const override;

  // Copies given up for a demand so far.
  uint64_t preemptions() const;

 protected:
  // Starts n workers (at least one). A subclass calls this last in its constructor
  // and stop_workers() first in its destructor: the workers call its copy().
  void start_workers(int n);
  void stop_workers();
  // Copies the rest of the job from job.done on (job.done says how far it got);
  // false when it gave way to a demand (should_yield() said so between two chunks).
  virtual bool copy(TransferJob& job) = 0;
  // Bytes a finished copy of `key` moved.
  virtual uint64_t bytes_of(const ExpertKey& key) const = 0;
  // Once on each worker thread before its first job (e.g. binding a device).
  virtual void on_worker_start() {}
  bool should_yield(const ExpertKey& key);
  // Seconds workers spent inside copy(), summed over them.
  double copy_seconds() const;

 private:
  void worker();

  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  TransferQueue queue_;
  std::vector<ExpertKey> done_;
  size_t running_ = 0;
  std::vector<std::pair<ExpertKey, double>> running_jobs_;  // key, current priority
  size_t yielding_ = 0;  // workers that decided to give their copy up for a demand
  uint64_t preemptions_ = 0;
  uint64_t bytes_moved_ = 0;
  double copy_seconds_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// Seconds on the steady clock.
double steady_seconds();

}  // namespace moeflow

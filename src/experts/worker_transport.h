// What the real transports share: jobs wait in the TransferQueue behind a mutex,
// worker threads of the transport move them piece by piece (the subclass's
// copy_range(): pread from the file, cudaMemcpyAsync to a device), and finished ones
// wait in a list for the cache's collect().
//
// Pieces, not whole copies, are what a free worker takes (a subclass sets their size,
// piece_end()): so the readers of a file share one expert's reads instead of one
// reader taking each expert, and a decode step's two missing experts keep four
// readers busy, not two (an NVMe drive reads far faster with several requests in flight).
// Which piece next: a demand's (kDemandPriority) first, then a started copy's, so a
// prefetch once begun finishes (with help) before another starts, then the queue's
// head. A demand thus waits at most for the pieces in flight, never behind the rest of
// a wrong prefetch: the prefetch's remaining pieces wait, its progress kept. A
// subclass whose piece is the whole rest of a copy (one copy stream on a GPU) gives
// way inside copy_range() instead, asking should_yield() between its own chunks.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
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

  // Times a started prefetch was left, pieces still to move, for a demand.
  uint64_t preemptions() const;

 protected:
  // Starts n workers (at least one). A subclass calls this last in its constructor
  // and stop_workers() first in its destructor: the workers call its copy_range().
  void start_workers(int n);
  void stop_workers();
  // Moves bytes [from, to) of the job's expert (bytes_of's count, in the subclass's
  // order), on any worker, beside other pieces of the same copy; returns where it
  // stopped: `to`, or less where it gave way to a demand (should_yield() said so;
  // only a piece that is the whole rest of its copy may).
  virtual uint64_t copy_range(const TransferJob& job, uint64_t from, uint64_t to) = 0;
  // Where the piece of `key`'s copy that starts at `from` ends. The default, the
  // whole rest: one worker per copy.
  virtual uint64_t piece_end(const ExpertKey& key, uint64_t from) const { return bytes_of(key); }
  // Once every byte has landed, on the worker that moved the last piece, before the
  // copy is reported done (e.g. repacking the expert).
  virtual void finish(const TransferJob&) {}
  // Bytes a finished copy of `key` moved.
  virtual uint64_t bytes_of(const ExpertKey& key) const = 0;
  // Once on each worker thread before its first job (e.g. binding a device).
  virtual void on_worker_start() {}
  // For a copy_range() moving the whole rest of a copy: whether to stop at the next
  // chunk boundary for a demand that waits with no worker free.
  bool should_yield(const ExpertKey& key);
  // Seconds workers spent inside copy_range() and finish(), summed over them.
  double copy_seconds() const;

 private:
  // A copy that has begun: bytes handed to workers (claimed) and landed.
  struct Started {
    TransferJob job;
    uint64_t total = 0, claimed = 0, landed = 0;
    int pieces_running = 0;
    bool failed = false;          // a piece threw: no more pieces; done once none runs
    bool left_for_demand = false; // pre-empted, counted once until resumed
    // Bytes no worker has taken yet, and the copy can still go on.
    bool has_unclaimed() const { return !failed && claimed < total; }
  };
  // A piece to move: the copy (owned by started_) and its byte range.
  struct Piece {
    Started* copy = nullptr;
    uint64_t from = 0, to = 0;
  };
  void worker();
  bool has_piece() const;  // under mu_
  // Under mu_, has_piece() holding: the next piece, for a worker whose previous piece
  // was of the copy submitted as `last_seq` (kNoCopy: none).
  Piece claim_piece(uint64_t last_seq);
  static constexpr uint64_t kNoCopy = ~uint64_t{0};
  Started* started(const ExpertKey& key) const;
  void fail(Started* c, std::exception_ptr err);  // under mu_: c takes no more pieces
  void retire(Started* c);  // under mu_: reports c done and forgets it

  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  TransferQueue queue_;
  std::vector<std::unique_ptr<Started>> started_;
  std::vector<ExpertKey> done_;
  size_t running_ = 0;   // workers inside copy_range() or finish()
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

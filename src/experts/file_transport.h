// The real transport: a pool of I/O threads reading experts from the model file with
// pread into the cache's aligned buffers. The file is opened with O_DIRECT where the
// file system allows it, so the page cache neither hides the cost of a miss nor holds
// a second copy of the experts outside the budget; where it does not (tmpfs, some
// overlay file systems) reads are buffered and each read range is dropped from the
// page cache afterwards (posix_fadvise DONTNEED).
//
// An expert is read in chunks of `chunk_bytes` (0: whole, never given up). Between chunks a reader checks for a
// demand (priority kDemandPriority) waiting with no reader free: if its own copy is a
// prefetch, it puts the copy back in the queue with its progress and takes the
// demand, so a demand never waits behind the whole of a wrong prefetch.
#pragma once
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "experts/expert_store.h"
#include "experts/transfer_queue.h"
#include "experts/transport.h"

namespace moeflow {

class FileTransport final : public Transport {
 public:
  // Throws InputError if the file cannot be opened.
  FileTransport(const ExpertStore& store, int n_threads, bool try_direct = true, uint64_t chunk_bytes = 4ull << 20);
  ~FileTransport() override;

  bool needs_buffers() const override { return true; }
  void submit(const ExpertKey& key, uint8_t* dst, double priority) override;
  void reprioritize(const ExpertKey& key, double priority) override;
  bool cancel(const ExpertKey& key) override;
  void collect(std::vector<ExpertKey>& done, bool block) override;
  double now() override;
  uint64_t bytes_moved() const override;

  bool direct_io() const { return direct_; }
  uint64_t preemptions() const;
  // Tests: called on the reader thread after each chunk of a copy (bytes done so far).
  void set_chunk_hook(std::function<void(const ExpertKey&, uint64_t)> hook) { chunk_hook_ = std::move(hook); }

 private:
  void worker();
  // Reads the rest of the job's expert; false if it stopped for a demand (job.done
  // says how far it got).
  bool read_expert(TransferJob& job);
  bool should_yield(const ExpertKey& key);
  void read_span(uint8_t* dst, uint64_t offset, uint64_t len);

  const ExpertStore& store_;
  int fd_direct_ = -1;   // O_DIRECT descriptor, or -1
  int fd_buffered_ = -1;
  bool direct_ = false;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  TransferQueue queue_;
  std::vector<ExpertKey> done_;
  size_t running_ = 0;
  std::vector<std::pair<ExpertKey, double>> running_jobs_;  // key, current priority
  size_t yielding_ = 0;  // readers that decided to give their copy up for a demand
  uint64_t preemptions_ = 0;
  uint64_t chunk_bytes_;
  std::function<void(const ExpertKey&, uint64_t)> chunk_hook_;
  uint64_t bytes_moved_ = 0;
  std::exception_ptr error_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// Measures the read bandwidth of `path`'s storage the way FileTransport reads
// (O_DIRECT where allowed, `n_threads` readers, chunks of `chunk_bytes`), over at most
// `max_bytes` spread across the file. Returns bytes/second.
double measure_file_read_bandwidth(const std::string& path, int n_threads, uint64_t chunk_bytes, uint64_t max_bytes);

}  // namespace moeflow

// The CUDA backend's transport: every expert waits in pinned host memory (the host
// tier, read from the model file once at start), and a copy thread moves the ones the
// cache asks for into their device buffers with cudaMemcpyAsync on a stream of its
// own, so copies overlap the compute stream's kernels (MoE-Infinity, fMoE: the
// papers' PCIe setting).
//
// A copy goes in chunks of chunk_bytes, two in flight so the copy engine never waits
// on the host between them. Between chunks the thread checks for a demand (priority
// kDemandPriority) queued behind a prefetch: the prefetch stops, its rest waits with
// its progress kept, and the demand starts, so a demand waits at most for the chunks in
// flight, never for a whole wrong prefetch (worker_transport.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "experts/expert_store.h"
#include "experts/worker_transport.h"

namespace moeflow {

class HostToDeviceTransport final : public WorkerTransport {
 public:
  // Reads every expert of `store` into pinned host memory with `io_threads` readers;
  // throws InputError if the file cannot be read or the memory cannot be pinned.
  HostToDeviceTransport(const ExpertStore& store, int io_threads, uint64_t chunk_bytes = 8ull << 20);
  ~HostToDeviceTransport() override;

  std::string medium() const override { return "pinned host -> device"; }
  const uint8_t* host_copy(const ExpertKey& key) const override;
  // Measured once at start: the host tier's first bytes (up to 256 MiB) into a device
  // buffer, the way copies go.
  double bandwidth() const override { return bandwidth_; }
  // One copy thread: the seconds it had a copy in flight are the link's busy time.
  double busy_seconds() const override { return copy_seconds(); }
  uint64_t host_bytes() const { return host_bytes_; }

 private:
  // The whole rest of a copy is one piece (one copy stream); it gives way to a demand
  // between chunks (should_yield).
  uint64_t copy_range(const TransferJob& job, uint64_t from, uint64_t to) override;
  uint64_t bytes_of(const ExpertKey& key) const override { return store_.buffer_bytes(key); }
  void on_worker_start() override;

  const ExpertStore& store_;
  uint64_t chunk_bytes_;
  uint8_t* host_ = nullptr;  // pinned: every expert at offsets_[index], laid out as its cache buffer
  uint64_t host_bytes_ = 0;
  double bandwidth_ = 0;
  std::vector<uint64_t> offsets_;
  int device_ = 0;
  void* stream_ = nullptr;   // cudaStream_t
  void* events_[2] = {nullptr, nullptr};
};

}  // namespace moeflow

#include "backend/cuda/host_to_device_transport.h"

#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "base/error.h"
#include "experts/file_transport.h"

namespace moeflow {
HostToDeviceTransport::HostToDeviceTransport(const ExpertStore& store, int io_threads, uint64_t chunk_bytes)
    : store_(store), chunk_bytes_(std::max<uint64_t>(chunk_bytes, 1 << 20)) {
  const ExpertGeometry& g = store.geometry();
  offsets_.resize(g.bytes.size());
  for (size_t i = 0; i < g.bytes.size(); ++i) {
    offsets_[i] = host_bytes_;
    host_bytes_ += (g.bytes[i] + 255) / 256 * 256;
  }
  if (cudaHostAlloc(reinterpret_cast<void**>(&host_), std::max<uint64_t>(host_bytes_, 1), cudaHostAllocDefault) !=
      cudaSuccess) {
    cudaGetLastError();
    throw InputError("cannot pin " + std::to_string(host_bytes_ >> 20) +
                     " MiB of host memory for the experts (the CUDA backend's host tier)");
  }
  const int fd = ::open(store.path().c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    cudaFreeHost(host_);
    throw InputError(store.path() + ": cannot open for expert reads: " + std::strerror(errno));
  }
  struct stat st {};
  const uint64_t opened_size = ::fstat(fd, &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
  // Every expert into the host tier, io_threads readers taking experts in turn.
  std::atomic<size_t> next{0};
  std::exception_ptr err;
  std::mutex err_mu;
  auto reader = [&] {
    try {
      for (size_t i; (i = next++) < offsets_.size();) {
        const ExpertKey key{static_cast<int32_t>(i / static_cast<size_t>(g.n_expert)),
                            static_cast<int32_t>(i % static_cast<size_t>(g.n_expert))};
        for (const ExpertPart& p : store.parts(key))
          read_file_range(fd, store.path(), host_ + offsets_[i] + p.buffer_offset, p.span_begin,
                          p.span_end - p.span_begin, opened_size);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(err_mu);
      if (!err) err = std::current_exception();
    }
  };
  std::vector<std::thread> readers;
  for (int t = 1; t < std::max(1, io_threads); ++t) readers.emplace_back(reader);
  reader();
  for (auto& t : readers) t.join();
  ::close(fd);
  if (err) {
    cudaFreeHost(host_);
    std::rethrow_exception(err);
  }
  CUDA_CHECK(cudaGetDevice(&device_));
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_ = s;
  for (void*& e : events_) {
    cudaEvent_t ev;
    CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventBlockingSync));
    e = ev;
  }
  // The link's bandwidth, chunk by chunk as copy_expert moves bytes (a warm-up copy
  // first: the first touch of a mapping costs more).
  const uint64_t probe = std::min<uint64_t>(host_bytes_, 256ull << 20);
  if (probe >= (16u << 20)) {
    uint8_t* d = nullptr;
    if (cudaMalloc(reinterpret_cast<void**>(&d), probe) == cudaSuccess) {
      CUDA_CHECK(cudaMemcpyAsync(d, host_, std::min<uint64_t>(probe, chunk_bytes_), cudaMemcpyHostToDevice, s));
      CUDA_CHECK(cudaStreamSynchronize(s));
      const double t0 = steady_seconds();
      for (uint64_t at = 0; at < probe; at += chunk_bytes_)
        CUDA_CHECK(cudaMemcpyAsync(d + at, host_ + at, std::min(chunk_bytes_, probe - at), cudaMemcpyHostToDevice, s));
      CUDA_CHECK(cudaStreamSynchronize(s));
      bandwidth_ = static_cast<double>(probe) / (steady_seconds() - t0);
      cudaFree(d);
    } else {
      cudaGetLastError();
    }
  }
  start_workers(1);  // one copy stream: chunks in order, a demand between two
}

HostToDeviceTransport::~HostToDeviceTransport() {
  stop_workers();
  for (void* e : events_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
  cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  cudaFreeHost(host_);
}

const uint8_t* HostToDeviceTransport::host_copy(const ExpertKey& key) const {
  return host_ + offsets_[static_cast<size_t>(store_.geometry().index(key))];
}

void HostToDeviceTransport::on_worker_start() { cudaSetDevice(device_); }

uint64_t HostToDeviceTransport::copy_range(const TransferJob& job, uint64_t from, uint64_t to) {
  const uint8_t* src = host_copy(job.key);
  cudaStream_t s = static_cast<cudaStream_t>(stream_);
  // Chunk i records events_[i % 2]; waiting on chunk i - 1 keeps chunk i queued behind
  // it, so the copy engine always has the next chunk.
  uint64_t issued = from;
  int n_issued = 0;
  while (issued < to) {
    const uint64_t n = std::min(chunk_bytes_, to - issued);
    CUDA_CHECK(cudaMemcpyAsync(job.dst + issued, src + issued, n, cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(events_[n_issued % 2]), s));
    issued += n;
    ++n_issued;
    if (n_issued >= 2) {
      CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(events_[(n_issued - 2) % 2])));
      if (issued < to && should_yield(job.key)) {
        CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(events_[(n_issued - 1) % 2])));
        return issued;
      }
    }
  }
  if (n_issued > 0) CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(events_[(n_issued - 1) % 2])));
  return to;
}

}  // namespace moeflow

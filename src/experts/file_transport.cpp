#include "experts/file_transport.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <vector>

#include "base/error.h"
#include "experts/expert_cache.h"

namespace moeflow {

namespace {

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};

}  // namespace

FileTransport::FileTransport(const ExpertStore& store, int n_threads, bool try_direct, uint64_t chunk_bytes)
    : store_(store),
      chunk_bytes_(chunk_bytes == 0 ? 0 : std::max<uint64_t>(kDirectIoAlign, (chunk_bytes + kDirectIoAlign - 1) & ~(kDirectIoAlign - 1))) {
  fd_buffered_ = ::open(store.path().c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_buffered_ < 0)
    throw InputError(store.path() + ": cannot open for expert reads: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_buffered_, &st) != 0) throw InputError(store.path() + ": cannot stat: " + std::strerror(errno));
  opened_size_ = static_cast<uint64_t>(st.st_size);
#ifdef O_DIRECT
  if (try_direct) fd_direct_ = ::open(store.path().c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
#endif
  direct_ = fd_direct_ >= 0;
  start_workers(n_threads);
}

FileTransport::~FileTransport() {
  stop_workers();
  if (fd_direct_ >= 0) ::close(fd_direct_);
  if (fd_buffered_ >= 0) ::close(fd_buffered_);
}

uint64_t FileTransport::bytes_of(const ExpertKey& key) const {
  uint64_t n = 0;
  for (const ExpertPart& p : store_.parts(key)) n += p.span_end - p.span_begin;
  return n;
}

// An expert's bytes are its spans end to end; a piece lies within one span (a chunk of
// it, or the whole span), unless chunk_bytes_ is 0: then the whole expert is one piece.
uint64_t FileTransport::piece_end(const ExpertKey& key, uint64_t from) const {
  if (chunk_bytes_ == 0) return bytes_of(key);
  uint64_t start = 0;
  for (const ExpertPart& p : store_.parts(key)) {
    const uint64_t len = p.span_end - p.span_begin;
    if (from < start + len) return start + std::min(len, from - start + chunk_bytes_);
    start += len;
  }
  return start;
}

uint64_t FileTransport::copy_range(const TransferJob& job, uint64_t from, uint64_t to) {
  uint64_t start = 0;
  for (const ExpertPart& p : store_.parts(job.key)) {
    const uint64_t len = p.span_end - p.span_begin;
    const uint64_t a = std::max(from, start), b = std::min(to, start + len);
    if (a < b) {
      read_span(job.dst + p.buffer_offset + (a - start), p.span_begin + (a - start), b - a);
      if (chunk_hook_) chunk_hook_(job.key, b);
    }
    start += len;
  }
  return to;
}

void FileTransport::finish(const TransferJob& job) {
  store_.prepare(job.key, job.dst);  // on this I/O thread, before the expert is reported done
}

void FileTransport::read_span(uint8_t* dst, uint64_t offset, uint64_t len) {
  // Some file systems accept O_DIRECT at open but refuse the read: go buffered.
  bool refused = false;
  if (direct_) read_file_range(fd_direct_, store_.path(), dst, offset, len, opened_size_, &refused);
  if (direct_ && !refused) return;
  read_file_range(fd_buffered_, store_.path(), dst, offset, len, opened_size_);
  ::posix_fadvise(fd_buffered_, static_cast<off_t>(offset), static_cast<off_t>(len), POSIX_FADV_DONTNEED);
}

void read_file_range(int fd, const std::string& path, uint8_t* dst, uint64_t offset, uint64_t len,
                     uint64_t opened_size, bool* einval) {
  uint64_t done = 0;
  while (done < len) {
    const ssize_t r = ::pread(fd, dst + done, len - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      if (einval && errno == EINVAL) {
        *einval = true;
        return;
      }
      throw InputError(path + ": read of " + std::to_string(len) + " bytes at offset " + std::to_string(offset) +
                       " failed: " + std::strerror(errno));
    }
    if (r == 0) {
      if (offset + done < opened_size)
        throw InputError(path + ": the file ends at byte " + std::to_string(offset + done) + ", short of the " +
                         std::to_string(opened_size) + " it held when opened: it was cut or replaced during the run");
      std::memset(dst + done, 0, len - done);
      return;
    }
    done += static_cast<uint64_t>(r);
  }
}

bool reads_direct(const Transport& t) {
  const auto* f = dynamic_cast<const FileTransport*>(&t);
  return f && f->direct_io();
}

double measure_file_read_bandwidth(const std::string& path, int n_threads, uint64_t chunk_bytes, uint64_t max_bytes) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw InputError(path + ": cannot stat: " + std::strerror(errno));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  chunk_bytes = (chunk_bytes + kDirectIoAlign - 1) & ~(kDirectIoAlign - 1);
  const uint64_t n_chunks = std::max<uint64_t>(1, std::min(max_bytes, size) / chunk_bytes);
  const uint64_t stride = std::max<uint64_t>(chunk_bytes, (size / n_chunks) & ~(kDirectIoAlign - 1));
  int fd = -1;
#ifdef O_DIRECT
  fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
#endif
  const bool direct = fd >= 0;
  if (!direct) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw InputError(path + ": cannot open: " + std::strerror(errno));
  if (!direct) ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  std::atomic<uint64_t> next{0}, total{0};
  const double t0 = steady_seconds();
  std::vector<std::thread> ts;
  for (int i = 0; i < std::max(1, n_threads); ++i)
    ts.emplace_back([&] {
      std::unique_ptr<uint8_t, FreeDeleter> buf(static_cast<uint8_t*>(std::aligned_alloc(kDirectIoAlign, chunk_bytes)));
      for (uint64_t c; (c = next.fetch_add(1)) < n_chunks;) {
        const ssize_t r = ::pread(fd, buf.get(), chunk_bytes, static_cast<off_t>(c * stride));
        if (r > 0) total += static_cast<uint64_t>(r);
      }
    });
  for (auto& t : ts) t.join();
  const double dt = steady_seconds() - t0;
  if (!direct) ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  return dt > 0 ? static_cast<double>(total.load()) / dt : 0;
}

}  // namespace moeflow

// The real transport: a pool of I/O threads reading experts from the model file with
// pread into the cache's aligned buffers. The file is opened with O_DIRECT where the
// file system allows it, so the page cache neither hides the cost of a miss nor holds
// a second copy of the experts outside the budget; where it does not (tmpfs, some
// overlay file systems) reads are buffered and each read range is dropped from the
// page cache afterwards (posix_fadvise DONTNEED).
//
// An expert is read in pieces of at most `chunk_bytes` within one of its spans (0: the
// whole expert at once, never given up), which the readers share (WorkerTransport):
// one expert's spans and chunks are read by several readers at once, and a reader
// done with a piece of a prefetch takes a demand's next, so a demand never waits
// behind the whole of a wrong prefetch.
#pragma once
#include <functional>
#include <string>

#include "experts/expert_store.h"
#include "experts/worker_transport.h"

namespace moeflow {

class FileTransport final : public WorkerTransport {
 public:
  // Throws InputError if the file cannot be opened.
  FileTransport(const ExpertStore& store, int n_threads, bool try_direct = true, uint64_t chunk_bytes = 4ull << 20);
  ~FileTransport() override;

  std::string medium() const override { return direct_ ? "O_DIRECT" : "buffered reads"; }

  bool direct_io() const { return direct_; }
  // Tests: called on the reader thread after each read of a copy (the end of the bytes it read).
  void set_chunk_hook(std::function<void(const ExpertKey&, uint64_t)> hook) { chunk_hook_ = std::move(hook); }

 private:
  // Reads bytes [from, to) of the expert's aligned spans (end to end).
  uint64_t copy_range(const TransferJob& job, uint64_t from, uint64_t to) override;
  uint64_t piece_end(const ExpertKey& key, uint64_t from) const override;
  void finish(const TransferJob& job) override;  // prepares the expert (repacking)
  uint64_t bytes_of(const ExpertKey& key) const override;
  void read_span(uint8_t* dst, uint64_t offset, uint64_t len);

  const ExpertStore& store_;
  int fd_direct_ = -1;   // O_DIRECT descriptor, or -1
  int fd_buffered_ = -1;
  uint64_t opened_size_ = 0;  // the file's size at open: a read that ends short of it was cut
  bool direct_ = false;
  uint64_t chunk_bytes_;
  std::function<void(const ExpertKey&, uint64_t)> chunk_hook_;
};

// Reads [offset, offset + len) of the file open as fd (named `path` in errors) into
// dst, retrying short and interrupted reads. Bytes past `opened_size` (the file's size
// when it was opened) read as zeros: an expert's aligned span may run past the file's
// end, the expert's own bytes never do (the reader validated every tensor range). A
// file that ends before `opened_size` was cut while the run read it: InputError, never
// zeros in place of weights. With `einval` non-null, a read the file system refuses
// with EINVAL (O_DIRECT accepted at open, refused at read) sets it and returns; every
// other failure throws InputError.
void read_file_range(int fd, const std::string& path, uint8_t* dst, uint64_t offset, uint64_t len,
                     uint64_t opened_size, bool* einval = nullptr);

// Whether t reads experts from the file with O_DIRECT (a FileTransport that could).
bool reads_direct(const Transport& t);

// Measures the read bandwidth of `path`'s storage the way FileTransport reads
// (O_DIRECT where allowed, `n_threads` readers, chunks of `chunk_bytes`), over at most
// `max_bytes` spread across the file. Returns bytes/second.
double measure_file_read_bandwidth(const std::string& path, int n_threads, uint64_t chunk_bytes, uint64_t max_bytes);

}  // namespace moeflow

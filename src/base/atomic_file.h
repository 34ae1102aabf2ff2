// Replacing a file so that a crash, a kill or a full disk never leaves a half-written
// file where a valid one was, and a planted symbolic link or a FIFO never redirects
// the write. Every file the project writes whole goes through AtomicFile:
//   1. the target's folder must exist and the target, if present, must be a regular
//      file (not a symbolic link, FIFO, device or folder);
//   2. bytes go to a new temporary in that folder, created with O_CREAT | O_EXCL
//      under a random name (so a planted "P.tmp" is never opened, let alone followed);
//   3. commit(): flush, fsync the temporary, rename it over the target, fsync the
//      folder (so the rename itself survives a power cut).
// An AtomicFile destroyed without commit() removes its temporary and leaves the
// target as it was. Errors are InputError naming the path and the system's reason.
#pragma once
#include <memory>
#include <ostream>
#include <streambuf>
#include <string>
#include <vector>

namespace moeflow {

// Throws InputError unless `path` could be replaced: its folder exists and is
// writable, and `path` is absent or a regular file. For checking an output before a
// long computation; `what` names the flag or role ("--out", "the trace").
void check_output_path(const std::string& path, const std::string& what);

class AtomicFile {
 public:
  // Checks the target (check_output_path) and creates the temporary.
  explicit AtomicFile(const std::string& path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  std::ostream& stream() { return out_; }
  void write(const void* data, size_t n);
  // Makes the new contents the target's, durably; throws InputError on any failure
  // (the target is then unchanged).
  void commit();
  const std::string& path() const { return path_; }

 private:
  class Buf : public std::streambuf {
   public:
    explicit Buf(int fd);
    bool failed() const { return failed_; }
    int sync() override;

   protected:
    int_type overflow(int_type c) override;
    std::streamsize xsputn(const char* s, std::streamsize n) override;

   private:
    bool drain();
    int fd_;
    bool failed_ = false;
    int err_ = 0;
    std::vector<char> buf_;
    friend class AtomicFile;
  };
  void fail(const std::string& why);

  std::string path_, tmp_;
  int fd_ = -1;
  std::unique_ptr<Buf> buf_;
  std::ostream out_{nullptr};
  bool committed_ = false;
};

// Writes `bytes` to `path` through an AtomicFile.
void write_file_atomic(const std::string& path, const std::string& bytes);

}  // namespace moeflow

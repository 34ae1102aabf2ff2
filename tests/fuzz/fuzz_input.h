// What the libFuzzer harnesses share: an input as a file (the readers under test take
// paths and map them), and the one rule every harness checks: a bad input is an
// InputError, anything else escaping is a bug (libFuzzer reports the abort as a crash).
#pragma once
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace moeflow::fuzz {

// An anonymous in-memory file holding the input, reachable by path.
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) {
    fd_ = ::memfd_create("fuzz_input", MFD_CLOEXEC);
    if (fd_ < 0) std::abort();
    for (size_t done = 0; done < size;) {
      const ssize_t w = ::write(fd_, data + done, size - done);
      if (w <= 0) std::abort();
      done += static_cast<size_t>(w);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

[[noreturn]] inline void not_an_input_error(const char* what) {
  std::fprintf(stderr, "fuzz: an exception other than InputError escaped: %s\n", what);
  std::abort();
}

}  // namespace moeflow::fuzz

// Wraps a harness body: InputError is the expected outcome for bad input.
#define MOEFLOW_FUZZ_BODY(...)                                  \
  try {                                                         \
    __VA_ARGS__                                                 \
  } catch (const moeflow::InputError&) {                        \
  } catch (const std::exception& e) {                           \
    moeflow::fuzz::not_an_input_error(e.what());                \
  }

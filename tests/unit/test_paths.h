// What the unit tests share: fixtures in the source tree, scratch files that stay
// apart when ctest runs tests in parallel processes, and running a shell command.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <string>

namespace moeflow::testing {

inline std::string fixture_path(const std::string& f) { return std::string(MOEFLOW_FIXTURES) + "/" + f; }

// Removes, when the test process exits, every file it named through scratch_path
// (callers append extensions, so by prefix: "moeflow_*_<pid>_*").
struct ScratchCleaner {
  ~ScratchCleaner() {
    // (Appended piecewise: "_" + std::string trips a GCC 12 -Wrestrict false positive.)
    std::string tag = "_";
    tag += std::to_string(::getpid());
    tag += '_';
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(::testing::TempDir(), ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("moeflow_", 0) == 0 && name.find(tag) != std::string::npos) std::filesystem::remove_all(e.path(), ec);
    }
  }
};

inline std::string scratch_path(const std::string& stem) {
  static ScratchCleaner cleaner;
  static std::atomic<int> n{0};
  return ::testing::TempDir() + "moeflow_" + stem + "_" + std::to_string(::getpid()) + "_" + std::to_string(n++);
}

// Runs `cmd` with the shell, returns its stdout; *status gets pclose's status.
inline std::string run_command(const std::string& cmd, int* status) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  *status = ::pclose(p);
  return out;
}

// The moeflow binary's exit code and output (stdout and stderr together).
struct BinaryResult {
  int code = -1;
  std::string out;
};

inline BinaryResult run_moeflow(const std::string& args) {
  BinaryResult r;
  int status = -1;
  r.out = run_command(std::string(MOEFLOW_BINARY) + " " + args + " 2>&1", &status);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace moeflow::testing

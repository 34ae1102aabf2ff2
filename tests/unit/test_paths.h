// Paths shared by the unit tests: fixtures in the source tree, and scratch files that
// stay apart when ctest runs tests in parallel processes.
#pragma once
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <string>

namespace moeflow::testing {

inline std::string fixture_path(const std::string& f) { return std::string(MOEFLOW_FIXTURES) + "/" + f; }

inline std::string scratch_path(const std::string& stem) {
  static std::atomic<int> n{0};
  return ::testing::TempDir() + "moeflow_" + stem + "_" + std::to_string(::getpid()) + "_" + std::to_string(n++);
}

}  // namespace moeflow::testing

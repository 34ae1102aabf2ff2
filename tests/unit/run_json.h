// `moeflow ARGS` run as a child process, its stdout parsed as JSON (null, with a test
// failure, when it exits non-zero): how the end-to-end tests read `run --json`.
#pragma once
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "test_paths.h"

namespace moeflow::testing {

inline nlohmann::json run_json(const std::string& args) {
  int status = -1;
  const std::string out = run_command(std::string(MOEFLOW_BINARY) + " " + args + " 2>/dev/null", &status);
  EXPECT_EQ(status, 0) << args;
  return status == 0 ? nlohmann::json::parse(out) : nlohmann::json();
}

}  // namespace moeflow::testing

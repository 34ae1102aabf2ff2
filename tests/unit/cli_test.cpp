// The binary as a user meets it: bad flags and bad files exit non-zero with a message
// that says what to fix; good runs print what the docs promise.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/wait.h>

#include "test_paths.h"

namespace moeflow {
namespace {

struct Result {
  int code = -1;
  std::string out;  // stdout and stderr together
};

Result run(const std::string& args) {
  Result r;
  int status = -1;
  r.out = moeflow::testing::run_command(std::string(MOEFLOW_BINARY) + " " + args + " 2>&1", &status);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

const std::string kModel = moeflow::testing::fixture_path("mixtral-f32.gguf");

void expect_failure(const std::string& args, const std::string& needle) {
  const Result r = run(args);
  EXPECT_NE(r.code, 0) << args << "\n" << r.out;
  EXPECT_NE(r.out.find(needle), std::string::npos) << args << "\nexpected '" << needle << "' in:\n" << r.out;
}

TEST(Cli, BadFlagsExitNonZeroAndSayWhatToFix) {
  expect_failure("", "usage");
  expect_failure("frobnicate", "unknown command");
  expect_failure("run -m " + kModel + " --no-such-flag", "--no-such-flag");
  expect_failure("run -m " + kModel + " -n lots", "-n");
  expect_failure("run -m " + kModel + " --temp -1", "--temp");
  expect_failure("run -m " + kModel + " -p hi --prompt-tokens 1,2", "not both");
  expect_failure("run -m " + kModel + " --prompt-tokens 1,x,3", "x");
  expect_failure("run -m " + kModel + " --prompt-tokens 999999", "vocabulary");
  expect_failure("run -m " + kModel + " --policy nope --expert-budget 50%", "unknown policy 'nope'");
  expect_failure("run -m " + kModel + " --policy lru --expert-budget 10parsecs", "unknown unit");
  expect_failure("run -m " + kModel + " --expert-budget 50%", "--policy");
  expect_failure("run -m " + kModel + " --policy lru --on-miss maybe", "--on-miss");
  expect_failure("simulate", "--trace");
  expect_failure("trace", "subcommand");
}

TEST(Cli, BadFilesExitNonZeroNamingTheFile) {
  expect_failure("run -m /no/such/model.gguf -p hi", "/no/such/model.gguf");
  const std::string junk = moeflow::testing::scratch_path("junk") + ".gguf";
  std::ofstream(junk) << "this is not a gguf file at all";
  expect_failure("run -m " + junk + " -p hi", "magic");
  expect_failure("inspect " + junk, "magic");
  const std::string bad_trace = moeflow::testing::scratch_path("bad") + ".jsonl";
  std::ofstream(bad_trace) << "{\"request\":0}\n";
  expect_failure("trace stats " + bad_trace, bad_trace + ":1");
  expect_failure("simulate --trace " + bad_trace, bad_trace + ":1");
  std::remove(junk.c_str());
  std::remove(bad_trace.c_str());
}

TEST(Cli, RunJsonHasTokensTextTimingsAndCache) {
  const Result r = run("run -m " + kModel + " --prompt-tokens 1,2,3,4 -n 6 --temp 0 --ignore-eos --json --policy lru "
                       "--expert-budget 50%");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.find('{')));
  EXPECT_EQ(j["prompt_tokens"], (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(j["tokens"].size(), 6u);
  EXPECT_TRUE(j["text"].is_string());
  EXPECT_TRUE(j["timings"]["generation_tokens_per_second"].is_number());
  for (const char* k : {"hits", "misses", "hit_rate", "bytes_read"}) EXPECT_TRUE(j["cache"].contains(k)) << k;
  const Result all = run("run -m " + kModel + " --prompt-tokens 1,2,3,4 -n 6 --temp 0 --ignore-eos --json");
  EXPECT_EQ(nlohmann::json::parse(all.out.substr(all.out.find('{')))["tokens"], j["tokens"]);
}

TEST(Cli, PolicyStateSurvivesARestart) {
  const std::string state = moeflow::testing::scratch_path("eamc") + ".state";
  const std::string common = "run -m " + kModel + " --prompt-tokens 1,2,3,4,5 -n 6 --temp 0 --ignore-eos --json "
                             "--policy moe-infinity --expert-budget 50%";
  const Result first = run(common + " --policy-state-out " + state);
  ASSERT_EQ(first.code, 0) << first.out;
  std::ifstream in(state, std::ios::binary);
  const std::string saved((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_FALSE(saved.empty());
  const Result second = run(common + " --policy-state " + state);
  ASSERT_EQ(second.code, 0) << second.out;
  const auto tokens = [](const Result& r) { return nlohmann::json::parse(r.out.substr(r.out.find('{')))["tokens"]; };
  EXPECT_EQ(tokens(first), tokens(second));
  expect_failure(common + " --policy-state " + kModel, "moe-infinity state");
  std::remove(state.c_str());
}

TEST(Cli, RerouteIsLabelledLossy) {
  const Result r = run("run -m " + kModel + " -p hi -n 4 --policy lru --expert-budget 50% --on-miss reroute");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("lossy"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace moeflow

// eMoE through the binary: its flags are validated naming the bad value, `run` detects
// an unlabelled prompt's task by keywords, `simulate` runs eMoE with rerouting as a
// labelled row, and `trace sensitivity` writes a profile the policy reads back.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "policy/emoe.h"
#include "test_paths.h"

namespace moeflow {
namespace {

using Result = moeflow::testing::BinaryResult;
Result run(const std::string& args) { return moeflow::testing::run_moeflow(args); }

nlohmann::json json_of(const Result& r) { return nlohmann::json::parse(r.out.substr(r.out.find('{'))); }

const std::string kRoot = std::string(MOEFLOW_FIXTURES) + "/../..";
const std::string kModel = kRoot + "/models/default.gguf";
const std::string kTrace = kRoot + "/models/traces/default-heldout.jsonl";

TEST(EmoeCli, BadFlagsAreNamed) {
  Result r = run("run -m " + kModel + " -p hi -n 1 --policy emoe --expert-budget 50% --emoe-variant sideways");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--emoe-variant 'sideways'"), std::string::npos) << r.out;
  r = run("run -m " + kModel + " -p hi -n 1 --tasks /no/such/tasks.json");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("/no/such/tasks.json"), std::string::npos) << r.out;
  r = run("simulate --trace " + kTrace + " --policy emoe --emoe-variant up");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.out.find("--emoe-variant 'up'"), std::string::npos) << r.out;
}

TEST(EmoeCli, RunDetectsTheTaskByKeywordsUnlessGiven) {
  const std::string common = "run -m " + kModel + " -n 2 --temp 0 --json --policy emoe --expert-budget 50% ";
  Result r = run(common + "-p 'import os\ndef main(self):\n    return None'");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(json_of(r)["task"], "python");
  EXPECT_EQ(json_of(r)["task_source"], "keywords");
  r = run(common + "-p 'import os' --task de");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(json_of(r)["task"], "de");
  EXPECT_EQ(json_of(r)["task_source"], "flag");
  r = run(common + "-p 'import os' --emoe-variant layer-by-layer --emoe-top-l 3");
  EXPECT_EQ(r.code, 0) << r.out;
}

TEST(EmoeCli, SimulateRunsEmoeWithReroutingAsALabelledRow) {
  const Result r = run("simulate --trace " + kTrace + " --learn 0:56 --measure 56:80 --hw nvme --cache 50% --json "
                       "--policy emoe,emoe+reroute");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = json_of(r)["results"];
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["policy"], "emoe");
  EXPECT_EQ(j[1]["policy"], "emoe+reroute");
  EXPECT_FALSE(j[0]["lossy"].get<bool>());
  EXPECT_TRUE(j[1]["lossy"].get<bool>());
  const double f = j[1]["rerouted_fraction"].get<double>();
  EXPECT_GT(f, 0.0);
  EXPECT_LT(f, 1.0);
  // Rerouting serves a miss from a resident expert instead of waiting for it.
  EXPECT_LT(j[1]["stall_seconds"].get<double>(), j[0]["stall_seconds"].get<double>());
  EXPECT_LT(j[1]["tpot_seconds"].get<double>(), j[0]["tpot_seconds"].get<double>());
}

TEST(EmoeCli, TraceSensitivityWritesAProfileThePolicyReads) {
  const std::string out = moeflow::testing::scratch_path("tasks") + ".json";
  const Result r = run("trace sensitivity " + kTrace + " --requests 0:16 --out " + out);
  ASSERT_EQ(r.code, 0) << r.out;
  const auto tasks = load_task_profiles(out);
  int with_rows = 0;
  for (const TaskProfile& t : tasks) with_rows += t.sensitivity.size() == 6;
  EXPECT_EQ(with_rows, 8) << "prose, dict, c (requests 0-15) measured, the rest kept from profiles/tasks.json\n" << r.out;
  EXPECT_NE(r.out.find("gate-mass"), std::string::npos) << r.out;
  const Result sim = run("simulate --trace " + kTrace + " --learn 0:56 --policy emoe --json --hw nvme --tasks " + out);
  EXPECT_EQ(sim.code, 0) << sim.out;
  std::remove(out.c_str());
}

}  // namespace
}  // namespace moeflow

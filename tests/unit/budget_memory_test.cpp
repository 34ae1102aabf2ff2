// A budget is a promise: the peak resident memory (VmHWM) of a budgeted run stays
// within dense + KV + budget + a stated overhead, and the same check fails for an
// all-resident run of the same model (so the test can fail). Runs the real binary.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "run_json.h"
#include "test_paths.h"

namespace moeflow {
namespace {

using moeflow::testing::run_json;

// Process, libraries, thread stacks, scratch activations, tokenizer, allocator slack.
constexpr uint64_t kOverheadBytes = 24ull << 20;

using moeflow::testing::run_command;


TEST(BudgetMemory, PeakRssStaysWithinDenseKvBudgetAndOverhead) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "resident memory is meaningless under AddressSanitizer";
#endif
  const std::string model = moeflow::testing::scratch_path("budget") + ".gguf";
  int status = -1;
  run_command(std::string(MOEFLOW_BINARY) + " make-model -o " + model +
                  " --dtype q8_0 --embd 512 --ff 768 --layers 6 --heads 8 --kv-heads 2 --head-dim 64 --experts 8 "
                  "--top-k 2 >/dev/null 2>&1",
              &status);
  ASSERT_EQ(status, 0);
  const std::string common = " -m " + model + " -p 'the budget is a promise' -n 24 --temp 0 --ignore-eos --json --threads 2";

  const nlohmann::json all = run_json("run" + common);
  const nlohmann::json lru = run_json("run" + common + " --policy lru --expert-budget 25%");
  EXPECT_EQ(all["tokens"], lru["tokens"]) << "--on-miss load must be lossless";

  const auto& mem = lru["memory"];
  const uint64_t budget = lru["cache"]["budget_bytes"].get<uint64_t>();
  const uint64_t limit = mem["dense_bytes"].get<uint64_t>() + mem["kv_bytes"].get<uint64_t>() + budget + kOverheadBytes;
  const uint64_t peak = mem["peak_rss_bytes"].get<uint64_t>();
  const uint64_t peak_all = all["memory"]["peak_rss_bytes"].get<uint64_t>();
  std::printf("[ budget ] expert bytes %.1f MiB, budget %.1f MiB, limit %.1f MiB: peak RSS %.1f MiB budgeted, "
              "%.1f MiB all resident\n",
              mem["expert_bytes"].get<double>() / 1048576.0, budget / 1048576.0, limit / 1048576.0, peak / 1048576.0,
              peak_all / 1048576.0);
  EXPECT_LE(peak, limit);
  EXPECT_GT(peak_all, limit) << "the all-resident run should not fit the budgeted limit (test model too small?)";
  EXPECT_GT(lru["cache"]["misses"].get<uint64_t>(), 0u);
  std::remove(model.c_str());
}

TEST(BudgetMemory, TooSmallABudgetIsRefusedWithAClearMessage) {
  int status = -1;
  const std::string out = run_command(std::string(MOEFLOW_BINARY) + " run -m " +
                                          moeflow::testing::fixture_path("mixtral-f32.gguf") +
                                          " -p hi -n 2 --policy lru --expert-budget 1KiB 2>&1",
                                      &status);
  EXPECT_NE(status, 0);
  EXPECT_NE(out.find("below the minimum"), std::string::npos) << out;
}

}  // namespace
}  // namespace moeflow

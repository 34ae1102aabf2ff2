// The serverless cost model (src/plan/cost_model.h, platform.h) on hand-computed cases.
#include <gtest/gtest.h>

#include <fstream>

#include "base/error.h"
#include "plan/cost_model.h"
#include "sim/profiles.h"
#include "plan_test_platform.h"
#include "test_paths.h"

namespace moeflow::plan {
namespace {

using testing::round_expert;
using testing::round_platform;

// head = warm 0.01 + storage access 0.02 + 1e6 B / 1e6 B/s = 1.03 s.
TEST(PlanCostModel, NonPipelinedIndirectByHand) {
  const auto p = round_platform();
  // 4 tokens at 1024 MB (1 vCPU): down 0.02+400/1e6, compute 0.4, up 0.02+400/1e6.
  const double t = replica_seconds(p, round_expert(), Comm::indirect, {1024, 1, 0}, 4);
  EXPECT_NEAR(t, 1.03 + 0.0204 + 0.4 + 0.0204, 1e-12);
  // Billed: 1471 ms x 1 GB x 1e-5 $/GBs + 2e-7 $.
  EXPECT_NEAR(invocation_cost(p, 1024, t), 1.471e-5 + 2e-7, 1e-15);
  // At 2048 MB the CPU share doubles: compute 0.2 s; billed 1271 ms x 2 GB.
  const double t2 = replica_seconds(p, round_expert(), Comm::indirect, {2048, 1, 0}, 4);
  EXPECT_NEAR(t2, 1.03 + 0.0204 + 0.2 + 0.0204, 1e-12);
  EXPECT_NEAR(invocation_cost(p, 2048, t2), 1.271 * 2 * 1e-5 + 2e-7, 1e-15);
}

TEST(PlanCostModel, DirectTransferAndItsPayloadLimit) {
  const auto p = round_platform();
  EXPECT_NEAR(replica_seconds(p, round_expert(), Comm::direct, {1024, 1, 0}, 4), 1.03 + 0.0004 + 0.4 + 0.0004, 1e-12);
  EXPECT_NEAR(replica_seconds(p, round_expert(), Comm::direct, {1024, 1, 0}, 10), 1.03 + 0.001 + 1.0 + 0.001, 1e-12);
  // 11 tokens x 100 B > 1000 B payload (12f).
  EXPECT_EQ(replica_seconds(p, round_expert(), Comm::direct, {1024, 1, 0}, 11), kInfeasible);
  // Two replicas carry 6 + 5 tokens: feasible; the slower one sets the time.
  const ExpertRun r = expert_run(p, round_expert(), Comm::direct, {1024, 2, 0}, 11);
  const double t6 = 1.03 + 0.0006 + 0.6 + 0.0006, t5 = 1.03 + 0.0005 + 0.5 + 0.0005;
  EXPECT_NEAR(r.seconds, t6, 1e-12);
  EXPECT_NEAR(r.cost, invocation_cost(p, 1024, t6) + invocation_cost(p, 1024, t5), 1e-15);
}

TEST(PlanCostModel, PipelinedIndirectByHand) {
  const auto p = round_platform();
  // 4 tokens, beta 2: first minibatch (down 0.0202 + compute 0.2), one more block
  // max(0.2202, up 0.0202), then the last upload 0.0202.
  EXPECT_NEAR(replica_seconds(p, round_expert(), Comm::pipelined_indirect, {1024, 1, 2}, 4),
              1.03 + 0.2202 + 0.2202 + 0.0202, 1e-12);
  // 5 tokens: 3 minibatches, the last of 1 token.
  EXPECT_NEAR(replica_seconds(p, round_expert(), Comm::pipelined_indirect, {1024, 1, 2}, 5),
              1.03 + 0.2202 + 2 * 0.2202 + 0.0201, 1e-12);
}

TEST(PlanCostModel, MemoryLimitAndPipelining) {
  auto p = round_platform();
  p.timeout_s = 1e9;  // 1 MB is 1/1024 of a vCPU: slow, but only memory is tested here
  // 1 MB = 1048576 B holds 1e6 B of parameters + 48 tokens of 1 kB, not 49.
  EXPECT_NE(replica_seconds(p, round_expert(), Comm::indirect, {1, 1, 0}, 48), kInfeasible);
  EXPECT_EQ(replica_seconds(p, round_expert(), Comm::indirect, {1, 1, 0}, 49), kInfeasible);
  // The pipelined design keeps only a minibatch resident (12c).
  EXPECT_NE(replica_seconds(p, round_expert(), Comm::pipelined_indirect, {1, 1, 2}, 100), kInfeasible);
  // No tokens: not invoked, nothing billed.
  const ExpertRun idle = expert_run(p, round_expert(), Comm::indirect, {1024, 2, 0}, 0);
  EXPECT_EQ(idle.seconds, 0);
  EXPECT_EQ(idle.cost, 0);
}

TEST(PlanCostModel, GatherThroughStorageOnly) {
  const auto p = round_platform();
  EXPECT_NEAR(gather_seconds(p, round_expert(), Comm::indirect, 30), 0.02 + 3000 / 1e6, 1e-12);
  EXPECT_NEAR(gather_seconds(p, round_expert(), Comm::pipelined_indirect, 30), 0.02 + 3000 / 1e6, 1e-12);
  EXPECT_EQ(gather_seconds(p, round_expert(), Comm::direct, 30), 0);
}

TEST(PlanPlatform, BundledLambdaProfileLoads) {
  const PlatformProfile p = load_platform_profile("lambda");
  EXPECT_NEAR(p.price_per_gb_second, 0.0000166667, 1e-12);
  EXPECT_NEAR(p.price_per_request, 0.20 / 1e6, 1e-15);
  EXPECT_EQ(p.memory_min_mb, 128);
  EXPECT_EQ(p.memory_max_mb, 10240);
  EXPECT_EQ(p.payload_limit_bytes, 6291456);
  EXPECT_NEAR(p.vcpus(1769), 1.0, 1e-12);
  EXPECT_NEAR(p.vcpus(10240), 10240.0 / 1769, 1e-12);  // proportional, under the 6-vCPU cap
  EXPECT_NE(p.source.find("aws.amazon.com/lambda/pricing"), std::string::npos);
}

TEST(PlanPlatform, BadFieldIsNamed) {
  std::ifstream in(profiles_dir() + "/platforms/lambda.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string bad = moeflow::testing::scratch_path("platform") + ".json";
  const std::string good = "\"memory_options_mb\": [128";
  const size_t at = text.find(good);
  ASSERT_NE(at, std::string::npos);
  std::ofstream(bad) << text.substr(0, at) << "\"memory_options_mb\": [100" << text.substr(at + good.size());
  try {
    load_platform_profile(bad);
    FAIL() << "a memory option below the platform minimum loaded";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("memory_options_mb"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace moeflow::plan

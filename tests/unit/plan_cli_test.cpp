// `moeflow plan` end to end on the small trace in models/traces.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_paths.h"

namespace moeflow {
namespace {

const std::string kTrace = std::string(MOEFLOW_FIXTURES) + "/../../models/traces/default-heldout.jsonl";

TEST(PlanCli, OdsJsonHasTheIssueFields) {
  const auto r = testing::run_moeflow("plan --trace " + kTrace + " --json --batch-tokens 64 --time-limit 20");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  for (const char* k : {"cost", "optimal_cost", "baseline_cost", "latency_ms", "slo_attainment", "deployment", "prediction"})
    EXPECT_TRUE(j.contains(k)) << k << "\n" << r.out;
  ASSERT_TRUE(j["optimal_cost"].is_number()) << r.out;
  EXPECT_LE(j["optimal_cost"].get<double>(), j["cost"].get<double>() * (1 + 1e-12));
  EXPECT_LE(j["latency_ms"].get<double>(), j["slo_ms"].get<double>() * (1 + 1e-9));
  EXPECT_TRUE(j["meets_slo_on_plan"].get<bool>());
  EXPECT_EQ(j["deployment"].size(), 6u);
  std::printf("cost %.3g optimal %.3g baseline %.3g, served SLO attainment %.2f\n", j["cost"].get<double>(),
              j["optimal_cost"].get<double>(), j["baseline_cost"].get<double>(), j["slo_attainment"].get<double>());
}

TEST(PlanCli, BoAndExactMeetTheSloAndExactBoundsBo) {
  for (const char* m : {"bo --bo-iterations 3", "exact"}) {
    const auto r = testing::run_moeflow("plan --trace " + kTrace + " --json --batch-tokens 64 --time-limit 20 --method " + m);
    ASSERT_EQ(r.code, 0) << m << "\n" << r.out;
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_TRUE(j["meets_slo_on_plan"].get<bool>()) << m;
    EXPECT_LE(j["optimal_cost"].get<double>(), j["cost"].get<double>() * (1 + 1e-12)) << m;
    EXPECT_LT(j["cost"].get<double>(), j["baseline_cost"].get<double>()) << m;
  }
}

TEST(PlanCli, InfeasibleSloIsReported) {
  const auto r = testing::run_moeflow("plan --trace " + kTrace + " --slo-ms 1 --method exact");
  EXPECT_EQ(r.code, 4) << r.out;
  EXPECT_NE(r.out.find("infeasible"), std::string::npos) << r.out;
}

// --learn over every request leaves none held out: the learned ones are scored, and the
// output says so rather than calling it a one-request trace.
TEST(PlanCli, LearningOnEveryRequestScoresInSample) {
  const auto r = testing::run_moeflow("plan --trace " + kTrace + " --learn 0:80 --batch-tokens 64 --time-limit 20 "
                                      "--exact-time-limit 0");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("80 learning requests"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("no request held out: the learned ones are scored, in-sample"), std::string::npos) << r.out;
}

TEST(PlanCli, BadFlagsAreUsageErrors) {
  EXPECT_EQ(testing::run_moeflow("plan --trace " + kTrace + " --method magic").code, 2);
  EXPECT_EQ(testing::run_moeflow("plan").code, 2);
  const auto r = testing::run_moeflow("plan --trace " + kTrace + " --platform /nonexistent.json");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("/nonexistent.json"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace moeflow

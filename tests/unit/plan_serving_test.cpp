// Serving batches under a fixed deployment (src/plan/serving.h), by hand.
#include <gtest/gtest.h>

#include "plan/serving.h"
#include "plan_test_platform.h"

namespace moeflow::plan {
namespace {

Instance one_layer(double slo) {
  Instance in;
  in.platform = testing::round_platform();
  in.shape = testing::round_expert();
  in.slo_s = slo;
  return in;
}

Deployment both(Comm c, FunctionConfig f) { return Deployment{{c}, {{f, f}}}; }

TEST(PlanServing, WarmColdAndFailedRunsByHand) {
  const Instance in = one_layer(2.0);
  const Deployment d = both(Comm::indirect, {1024, 1, 0});
  // 4 tokens on expert 0 (the idle one is not invoked): 1.4708 s, billed 1471 ms at 1 GB;
  // the next layer downloads the 4 results: 0.02 + 400 B / 1e6 B/s.
  ServingReport r = serve(in, d, {{{4, 0}}}, false);
  EXPECT_NEAR(r.cost, 1.471e-5 + 2e-7, 1e-15);
  EXPECT_NEAR(r.mean_latency_s, 1.4708 + 0.0204, 1e-12);
  EXPECT_EQ(r.slo_attainment, 1.0);
  // The first batch pays the 1 s cold start, billed at 1 GB.
  r = serve(in, d, {{{4, 0}}, {{4, 0}}}, true);
  EXPECT_NEAR(r.cost, 2 * (1.471e-5 + 2e-7) + 1e-5, 1e-15);
  EXPECT_NEAR(r.max_latency_s, 1.0 + 1.4708 + 0.0204, 1e-12);
  EXPECT_EQ(r.slo_attainment, 0.5);
  // 11 tokens overflow the direct payload (1000 B): the head time (1.03 s) is billed,
  // then a re-run through storage at 2048 MB: 1.03 + 0.0211 + 0.55 + 0.0211 = 1.6222 s.
  r = serve(in, both(Comm::direct, {1024, 1, 0}), {{{11, 0}}}, false);
  EXPECT_EQ(r.failed_runs, 1);
  EXPECT_NEAR(r.cost, (1.03e-5 + 2e-7) + (1.623 * 2 * 1e-5 + 2e-7), 1e-15);
  EXPECT_NEAR(r.mean_latency_s, 1.03 + 1.6222, 1e-12);
  EXPECT_EQ(r.slo_attainment, 0.0);
}

TEST(PlanServing, BatchesCutInOrder) {
  std::vector<RoutedToken> ts(5);
  for (int i = 0; i < 5; ++i) ts[i].experts = {{i < 3 ? 0 : 1}};
  const auto b = batch_loads(ts, 2, 1, 2);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0][0], (std::vector<int64_t>{2, 0}));
  EXPECT_EQ(b[1][0], (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(b[2][0], (std::vector<int64_t>{0, 1}));
}

}  // namespace
}  // namespace moeflow::plan

// The deployment problem (12): the CBC formulation against brute force over every
// deployment of small instances, ODS (Alg. 1) and BO (Alg. 2) against it, infeasible
// SLOs reported as such.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <random>

#include "plan/bayes_opt.h"
#include "plan/exact_solver.h"
#include "plan/ods.h"
#include "plan_test_platform.h"

namespace moeflow::plan {
namespace {

Instance make_instance(const std::vector<std::vector<int64_t>>& tokens, double slo_s) {
  Instance in;
  in.platform = testing::round_platform();
  in.shape = testing::round_expert();
  in.tokens = tokens;
  in.slo_s = slo_s;
  return in;
}

// Every deployment of the raw grid (no pruning): the cheapest meeting the SLO.
double brute_force(const Instance& in) {
  const PlatformProfile& p = in.platform;
  std::vector<FunctionConfig> grid[kNumComm];
  for (int c = 0; c < kNumComm; ++c)
    for (int32_t m : p.memory_options_mb)
      for (int32_t r = 1; r <= p.max_replicas; ++r)
        for (int32_t b : c == 0 ? p.minibatch_options : std::vector<int32_t>{0}) grid[c].push_back({m, r, b});
  const size_t L = in.tokens.size(), E = in.tokens[0].size();
  double best = kInfeasible;
  Deployment d;
  d.method.resize(L);
  d.expert.assign(L, std::vector<FunctionConfig>(E));
  std::function<void(size_t)> slot = [&](size_t i) {
    if (i == L * E) {
      const Evaluation ev = evaluate(in, d);
      if (ev.feasible && ev.latency_s <= in.slo_s * (1 + 1e-9)) best = std::min(best, ev.cost);
      return;
    }
    const size_t l = i / E, e = i % E;
    for (const FunctionConfig& f : grid[static_cast<int>(d.method[l])]) d.expert[l][e] = f, slot(i + 1);
  };
  std::function<void(size_t)> design = [&](size_t l) {
    if (l == L) return slot(0);
    for (int c = 0; c < kNumComm; ++c) d.method[l] = static_cast<Comm>(c), design(l + 1);
  };
  design(0);
  return best;
}

TEST(PlanSolver, ExactMatchesBruteForceAndBoundsOds) {
  std::mt19937 rng(7);
  int instances = 0, feasible = 0, ods_found = 0;
  double worst_gap = 0;
  for (int trial = 0; trial < 6; ++trial) {
    std::vector<std::vector<int64_t>> tokens(2, std::vector<int64_t>(2));
    for (auto& layer : tokens)
      for (int64_t& v : layer) v = std::uniform_int_distribution<int64_t>(0, 14)(rng);
    for (double slo : {2.2, 2.6, 3.0, 3.6, 5.0}) {
      const Instance in = make_instance(tokens, slo);
      const double ref = brute_force(in);
      const SolveResult ex = solve_exact(in, 30);
      const OdsResult ods = optimal_deployment_selection(in, 30);
      ++instances;
      if (ref == kInfeasible) {
        EXPECT_EQ(ex.status, SolveResult::infeasible);
        EXPECT_FALSE(ods.feasible);
        continue;
      }
      ++feasible;
      ASSERT_EQ(ex.status, SolveResult::optimal) << "trial " << trial << " slo " << slo;
      EXPECT_NEAR(ex.cost, ref, 1e-12) << "trial " << trial << " slo " << slo;
      EXPECT_LE(ex.latency_s, slo * (1 + 1e-9));
      if (ods.feasible) {
        ++ods_found;
        EXPECT_LE(ods.latency_s, slo * (1 + 1e-9)) << "ODS returned a deployment that breaks the SLO";
        EXPECT_TRUE(evaluate(in, ods.deployment).feasible);
        EXPECT_LE(ex.cost, ods.cost * (1 + 1e-12));
        worst_gap = std::max(worst_gap, ods.cost / ex.cost - 1);
      }
    }
  }
  std::printf("%d instances, %d feasible; ODS found a deployment on %d, worst cost gap to the optimum %.2f%%\n", instances,
              feasible, ods_found, 100 * worst_gap);
  EXPECT_GT(feasible, 10);
  EXPECT_GT(ods_found, feasible / 2);
}

TEST(PlanSolver, InfeasibleSloReported) {
  // Every invocation needs at least the 1.03 s head time.
  const Instance in = make_instance({{3, 4}, {5, 0}}, 0.5);
  EXPECT_EQ(solve_exact(in, 10).status, SolveResult::infeasible);
  EXPECT_FALSE(optimal_deployment_selection(in, 10).feasible);
}

TEST(PlanSolver, MaxMemoryBaselineIsFeasibleAndDearer) {
  const Instance in = make_instance({{8, 2}, {1, 9}}, 10);
  const Evaluation base = evaluate(in, max_memory_deployment(in));
  ASSERT_TRUE(base.feasible);
  const SolveResult ex = solve_exact(in, 10);
  ASSERT_EQ(ex.status, SolveResult::optimal);
  EXPECT_LE(ex.cost, base.cost);
}

// Tokens whose expert at each layer is set by their position (top-1 of 3 experts).
std::vector<RoutedToken> positional_tokens(int n) {
  std::vector<RoutedToken> out;
  for (int i = 0; i < n; ++i) {
    RoutedToken t;
    t.position = i % 6;
    t.token_id = 10 + i % 4;
    t.experts = {{i % 6 < 4 ? 0 : 1}, {i % 6 == 0 ? 2 : 0}};
    out.push_back(t);
  }
  return out;
}

TEST(PlanSolver, BoMeetsTheSloAndExactBoundsIt) {
  const std::vector<RoutedToken> tokens = positional_tokens(12);
  PopularityTable table(2, 3, 1);
  table.observe(tokens);
  const Load real = real_load(tokens, 2, 3);
  BoOptions o;
  o.max_iterations = 4;
  o.dims = 4;
  o.time_limit_per_solve_s = 10;
  for (double slo : {2.6, 3.0, 5.0}) {
    Instance in = make_instance(real, slo);
    const BoResult bo = bayesian_optimisation(in, table, tokens, tokens, 12, Features::token_and_position, o);
    const SolveResult ex = solve_exact(in, 10);
    ASSERT_EQ(ex.status, SolveResult::optimal) << slo;
    ASSERT_TRUE(bo.feasible) << slo;
    const Evaluation ev = evaluate(in, bo.deployment);
    EXPECT_TRUE(ev.feasible);
    EXPECT_LE(ev.latency_s, slo * (1 + 1e-9));
    EXPECT_LE(ex.cost, ev.cost * (1 + 1e-12));
    std::printf("slo %.1f s: exact $%.4g, BO $%.4g after %d iterations\n", slo, ex.cost, ev.cost, bo.iterations);
  }
  Instance tight = make_instance(real, 0.5);
  EXPECT_FALSE(bayesian_optimisation(tight, table, tokens, tokens, 12, Features::token_and_position, o).feasible);
}

}  // namespace
}  // namespace moeflow::plan

// Bayesian optimisation with multi-dimensional epsilon-greedy search, serverless-moe
// Sec. IV-B, Alg. 2. The black box is the billed cost of all MoE layers when batches of
// profiled requests are served by the deployment ODS (Alg. 1) plans from the predictor's
// loads; the variables are D key-value pairs of the predictor's table (their counts).
// Per iteration i:
//   - the epsilon vector decays, eps_d <- eps_d / (1 + kappa) (line 3); its first
//     rho*D dimensions decay slower (kappa / gamma, gamma > 1), and gamma grows when the
//     last trial met case (i) or (ii) below (lines 20-21: "decrease the decay rate");
//   - each dimension d is exploited with probability 1 - eps_d (the best trial's d-th
//     pair) or explored with probability eps_d: dimensions 1..rho*D adjust a key from the
//     limited range K1 (keys of the tokens of batches whose predicted per-replica count
//     was off by more than delta, line 12), the rest adjust a key of the normal range or
//     create a new token-to-expert key (K2), values drawn from the positive integers up
//     to twice the current count (lines 30-31);
//   - several such proposals are scored by a Gaussian-process surrogate of the cost
//     (RBF kernel over the predicted per-(layer, expert) loads each proposal yields) and
//     the one with the lowest posterior mean is evaluated (lines 4-7, 25-29);
//   - the evaluation serves every batch under the ODS deployment, replicating an expert
//     whose real tokens overflow its memory (case i) or its payload (case ii) and keeping
//     it when all constraints of (12) hold (case iii); the trial's cost is the billed
//     total over the profiled batches.
// Stops when the best cost improved by less than `threshold` (relative) over `patience`
// iterations, or after `max_iterations` (line 33).
#pragma once
#include <cstdint>
#include <vector>

#include "plan/ods.h"
#include "plan/popularity.h"
#include "plan/serving.h"
#include "plan/load_margin.h"

namespace moeflow::plan {

struct BoOptions {
  int max_iterations = 12, patience = 4, dims = 16, proposals = 6;
  double threshold = 0.002, rho = 0.5, gamma = 2.0, eps0 = 0.9, kappa = 0.25, delta = 2.0;
  double time_limit_per_solve_s = 20;
  uint64_t seed = 1;
  LoadFactors load_factors;  // margins on each trial's predicted loads (plan/load_margin.h); empty: none
};

struct BoResult {
  bool feasible = false;
  PopularityTable table;       // the adjusted table of the best trial
  Deployment deployment;       // the best trial's repaired deployment
  double cost = kInfeasible;   // its billed cost on the profiled batches (the BO objective)
  int iterations = 0;
  std::vector<double> trial_costs;
  double seconds = 0;
};

// `plan` is the instance being planned (platform, shape, SLO, and the predicted per-batch
// loads of the requests to serve). Trial 0 is ODS on `plan` itself; every later trial
// predicts the loads of `serve` (features only) with its adjusted table, scales them to
// one batch of `batch_tokens` and plans with ODS. Each trial's deployment is repaired and
// billed on the real batches of `profiled` (requests whose routing is known: the
// black box of Alg. 2), and is kept only if it still meets the SLO on `plan` (so exact on
// `plan` bounds BO's cost, and BO finds a deployment whenever ODS does).
BoResult bayesian_optimisation(const Instance& plan, const PopularityTable& table, const std::vector<RoutedToken>& serve,
                               const std::vector<RoutedToken>& profiled, int64_t batch_tokens, Features features,
                               const BoOptions& opt);

// The predicted per-batch load: loads over `n_tokens` tokens scaled to `batch_tokens`,
// rounded up (a deployment sized for the mean batch).
Load per_batch(const Load& total, int64_t n_tokens, int64_t batch_tokens);

}  // namespace moeflow::plan

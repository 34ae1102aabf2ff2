// Optimal Deployment Selection, serverless-moe Sec. IV-A, Alg. 1. Problem (12) is split
// into three sub-problems, each with one scatter-gather design on every MoE layer, each
// solved by the integer-programming solver (here CBC, exact_solver.h; the paper used
// Gurobi). From their per-layer costs C_l^c and MoE-E2E latencies L_l^c, every layer
// takes its cheapest design (lines 4-7); when the mixed choice breaks the SLO, the layer
// with the highest latency has that design's cost set to infinity (lines 10-12) and the
// choice is made again (at most 3L rounds). When a layer has no design left, the best
// single-design solution is returned (lines 18-20). The result never violates the SLO:
// when no single-design solution meets it and no mix does, ODS reports infeasible.
#pragma once
#include "plan/exact_solver.h"

namespace moeflow::plan {

struct OdsResult {
  bool feasible = false;
  Deployment deployment;
  double cost = kInfeasible, latency_s = kInfeasible;
  double seconds = 0;          // wall time of the three solves and the selection
  bool all_proven = true;      // every sub-problem solved to proven optimality
  int rounds = 0;              // selection rounds of Alg. 1
};

OdsResult optimal_deployment_selection(const Instance& in, double time_limit_per_solve_s);

}  // namespace moeflow::plan

// Problem (12) solved exactly (over the platform's discrete grid) as a 0-1 integer
// program with COIN-OR CBC. With the candidates of deployment.h enumerated, (12) is
// linear:
//   variables  x[l,e,c,k] in {0,1}  expert (l,e) runs candidate k of design c
//              y[l,c]     in {0,1}  layer l uses design c
//              T[l]       >= 0      slowest expert of layer l (linearised max of (12a)/(12d))
//   minimise   sum cost[l,e,c,k] x[l,e,c,k]                              (12a), micro-$
//   subject to sum_c y[l,c] = 1                                  for all l (one design)
//              sum_k x[l,e,c,k] = y[l,c]                    for all l,e,c
//              T[l] >= sum_{c,k} sec[l,e,c,k] x[l,e,c,k]      for all l,e
//              sum_l T[l] + sum_{l,c} gather[l,c] y[l,c] <= SLO - non_moe   (12d)
// Memory (12c), payload (12f) and the pipelined minibatch bound (12e) are enforced by
// leaving infeasible candidates out; y[l,c] is fixed to 0 when an expert of l has none.
// `allowed[l]` restricts layer l's designs (ODS solves one design at a time, Sec. IV-A).
#pragma once
#include <array>
#include <vector>

#include "plan/deployment.h"

namespace moeflow::plan {

struct SolveResult {
  enum Status { optimal, feasible_not_proven, infeasible, no_solution_in_time } status = infeasible;
  Deployment deployment;  // valid for optimal and feasible_not_proven
  double cost = kInfeasible, latency_s = kInfeasible;
  double bound = 0;       // CBC's best lower bound on the cost
  double seconds = 0;     // solver wall time
  bool has_deployment() const { return status == optimal || status == feasible_not_proven; }
};
const char* status_name(SolveResult::Status s);

using DesignMask = std::array<bool, kNumComm>;

SolveResult solve_exact(const Instance& in, const std::vector<DesignMask>& allowed, double time_limit_s);
SolveResult solve_exact(const Instance& in, double time_limit_s);  // every design allowed

}  // namespace moeflow::plan

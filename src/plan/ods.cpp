#include "plan/ods.h"

#include <chrono>

namespace moeflow::plan {

OdsResult optimal_deployment_selection(const Instance& in, double time_limit_per_solve_s) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t L = in.tokens.size();
  OdsResult out;
  // Three sub-problems of (12), one design each (Sec. IV-A).
  std::array<SolveResult, kNumComm> sub;
  std::array<Evaluation, kNumComm> ev;
  std::vector<std::array<double, kNumComm>> cost(L);
  for (int c = 0; c < kNumComm; ++c) {
    DesignMask only{};
    only[c] = true;
    sub[c] = solve_exact(in, std::vector<DesignMask>(L, only), time_limit_per_solve_s);
    if (sub[c].status != SolveResult::optimal && sub[c].status != SolveResult::infeasible) out.all_proven = false;
    if (sub[c].has_deployment()) ev[c] = evaluate(in, sub[c].deployment);
    for (size_t l = 0; l < L; ++l) cost[l][c] = sub[c].has_deployment() ? ev[c].layer_cost[l] : kInfeasible;
  }
  // Alg. 1 lines 3-17: per-layer cheapest design, repaired until the SLO holds.
  for (;;) {
    ++out.rounds;
    std::vector<int> pick(L, -1);
    bool exhausted = false;
    double latency = in.non_moe_s;
    for (size_t l = 0; l < L && !exhausted; ++l) {
      for (int c = 0; c < kNumComm; ++c)
        if (cost[l][c] != kInfeasible && (pick[l] < 0 || cost[l][c] < cost[l][pick[l]])) pick[l] = c;
      if (pick[l] < 0) exhausted = true;
      else latency += ev[pick[l]].layer_latency_s[l];
    }
    if (exhausted) break;
    if (latency <= in.slo_s * (1 + 1e-9)) {
      out.feasible = true;
      out.deployment.method.resize(L);
      out.deployment.expert.resize(L);
      for (size_t l = 0; l < L; ++l) {
        out.deployment.method[l] = static_cast<Comm>(pick[l]);
        out.deployment.expert[l] = sub[pick[l]].deployment.expert[l];
      }
      break;
    }
    size_t worst = 0;
    for (size_t l = 1; l < L; ++l)
      if (ev[pick[l]].layer_latency_s[l] > ev[pick[worst]].layer_latency_s[worst]) worst = l;
    cost[worst][pick[worst]] = kInfeasible;
  }
  // Alg. 1 lines 18-20: fall back to the best single-design deployment.
  if (!out.feasible) {
    int best = -1;
    for (int c = 0; c < kNumComm; ++c)
      if (sub[c].has_deployment() && (best < 0 || sub[c].cost < sub[best].cost)) best = c;
    if (best >= 0) out.feasible = true, out.deployment = sub[best].deployment;
  }
  if (out.feasible) {
    const Evaluation e = evaluate(in, out.deployment);
    out.cost = e.cost;
    out.latency_s = e.latency_s;
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace moeflow::plan

#include "plan/exact_solver.h"

#include <coin/Cbc_C_Interface.h>

#include <chrono>
#include <memory>
#include <string>

namespace moeflow::plan {

const char* status_name(SolveResult::Status s) {
  switch (s) {
    case SolveResult::optimal: return "optimal";
    case SolveResult::feasible_not_proven: return "feasible (time limit: not proven optimal)";
    case SolveResult::infeasible: return "infeasible";
    case SolveResult::no_solution_in_time: return "no solution within the time limit";
  }
  return "?";
}

SolveResult solve_exact(const Instance& in, double time_limit_s) {
  return solve_exact(in, std::vector<DesignMask>(in.tokens.size(), DesignMask{true, true, true}), time_limit_s);
}

SolveResult solve_exact(const Instance& in, const std::vector<DesignMask>& allowed, double time_limit_s) {
  const auto t0 = std::chrono::steady_clock::now();
  constexpr double kScale = 1e6;  // objective in micro-dollars: CBC's tolerances are absolute
  const size_t L = in.tokens.size();
  SolveResult res;
  std::unique_ptr<Cbc_Model, void (*)(Cbc_Model*)> m(Cbc_newModel(), Cbc_deleteModel);
  Cbc_setLogLevel(m.get(), 0);
  int ncol = 0;
  auto add_col = [&](double lb, double ub, double obj, bool integer) {
    Cbc_addCol(m.get(), "", lb, ub, obj, integer ? 1 : 0, 0, nullptr, nullptr);
    return ncol++;
  };
  struct Var { int col; size_t l, e; int c; Candidate cand; };
  std::vector<Var> xs;
  std::vector<std::array<int, kNumComm>> y(L);
  std::vector<int> T(L);
  std::vector<std::vector<std::array<std::vector<size_t>, kNumComm>>> x_of(L);  // indices into xs
  for (size_t l = 0; l < L; ++l) {
    const size_t E = in.tokens[l].size();
    x_of[l].resize(E);
    T[l] = add_col(0, 1e30, 0, false);
    for (int c = 0; c < kNumComm; ++c) {
      std::vector<std::vector<Candidate>> cands(E);
      bool ok = allowed[l][c];
      for (size_t e = 0; ok && e < E; ++e) {
        cands[e] = candidates(in, l, e, static_cast<Comm>(c));
        ok = !cands[e].empty();
      }
      y[l][c] = add_col(0, ok ? 1 : 0, 0, true);
      if (!ok) continue;
      for (size_t e = 0; e < E; ++e)
        for (const Candidate& k : cands[e]) {
          x_of[l][e][c].push_back(xs.size());
          xs.push_back({add_col(0, 1, k.cost * kScale, true), l, e, c, k});
        }
    }
  }
  std::vector<int> idx;
  std::vector<double> val;
  auto row = [&](char sense, double rhs) {
    Cbc_addRow(m.get(), "", static_cast<int>(idx.size()), idx.data(), val.data(), sense, rhs);
    idx.clear(), val.clear();
  };
  for (size_t l = 0; l < L; ++l) {
    for (int c = 0; c < kNumComm; ++c) idx.push_back(y[l][c]), val.push_back(1);
    row('E', 1);
    for (size_t e = 0; e < in.tokens[l].size(); ++e) {
      for (int c = 0; c < kNumComm; ++c) {
        for (size_t i : x_of[l][e][c]) idx.push_back(xs[i].col), val.push_back(1);
        idx.push_back(y[l][c]), val.push_back(-1);
        row('E', 0);
      }
      idx.push_back(T[l]), val.push_back(1);
      for (int c = 0; c < kNumComm; ++c)
        for (size_t i : x_of[l][e][c]) idx.push_back(xs[i].col), val.push_back(-xs[i].cand.seconds);
      row('G', 0);
    }
  }
  for (size_t l = 0; l < L; ++l) {
    idx.push_back(T[l]), val.push_back(1);
    for (int c = 0; c < kNumComm; ++c)
      if (const double g = gather_seconds(in.platform, in.shape, static_cast<Comm>(c), in.layer_tokens(l)); g > 0)
        idx.push_back(y[l][c]), val.push_back(g);
  }
  row('L', in.slo_s - in.non_moe_s);

  Cbc_setParameter(m.get(), "timeMode", "elapsed");  // the limit is wall-clock time
  Cbc_setMaximumSeconds(m.get(), time_limit_s);
  Cbc_setAllowableGap(m.get(), 0);
  Cbc_setAllowableFractionGap(m.get(), 0);
  Cbc_solve(m.get());
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool has_solution = Cbc_numberSavedSolutions(m.get()) > 0 || Cbc_isProvenOptimal(m.get());
  if (Cbc_isProvenInfeasible(m.get()) || (!has_solution && !Cbc_isSecondsLimitReached(m.get()))) {
    res.status = SolveResult::infeasible;
    return res;
  }
  if (!has_solution) {
    res.status = SolveResult::no_solution_in_time;
    return res;
  }
  res.status = Cbc_isProvenOptimal(m.get()) ? SolveResult::optimal : SolveResult::feasible_not_proven;
  res.bound = Cbc_getBestPossibleObjValue(m.get()) / kScale;
  const double* sol = Cbc_getColSolution(m.get());
  res.deployment.method.assign(L, Comm::indirect);
  res.deployment.expert.resize(L);
  for (size_t l = 0; l < L; ++l) {
    res.deployment.expert[l].assign(in.tokens[l].size(), FunctionConfig{});
    for (int c = 0; c < kNumComm; ++c)
      if (sol[y[l][c]] > 0.5) res.deployment.method[l] = static_cast<Comm>(c);
  }
  for (const Var& v : xs)
    if (sol[v.col] > 0.5 && static_cast<int>(res.deployment.method[v.l]) == v.c) res.deployment.expert[v.l][v.e] = v.cand.config;
  const Evaluation ev = evaluate(in, res.deployment);
  res.cost = ev.cost;
  res.latency_s = ev.latency_s;
  return res;
}

}  // namespace moeflow::plan

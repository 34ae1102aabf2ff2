#include "plan/bayes_opt.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <set>

namespace moeflow::plan {

Load per_batch(const Load& total, int64_t n_tokens, int64_t batch_tokens) {
  Load out = total;
  const double scale = n_tokens > 0 ? static_cast<double>(std::min(batch_tokens, n_tokens)) / static_cast<double>(n_tokens) : 0;
  for (auto& layer : out)
    for (int64_t& v : layer) v = static_cast<int64_t>(std::ceil(static_cast<double>(v) * scale - 1e-9));
  return out;
}

namespace {

using Key = PopularityTable::Key;
struct Pair {
  Key key;
  double value = 0;
};

struct Trial {
  std::vector<Pair> vars;
  std::vector<double> x;  // predicted per-batch loads / batch size, flattened
  double cost = kInfeasible;
  Deployment deployment;
  bool feasible = false;
};

// A Gaussian process with an RBF kernel over the trials' load vectors; posterior mean.
struct Surrogate {
  std::vector<std::vector<double>> X;
  std::vector<double> alpha;
  double mean = 0, length = 1;

  static double dist2(const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
    return s;
  }
  void fit(const std::vector<Trial>& trials) {
    X.clear();
    std::vector<double> y;
    double worst = 0;
    for (const Trial& t : trials)
      if (t.feasible) worst = std::max(worst, t.cost);
    for (const Trial& t : trials) X.push_back(t.x), y.push_back(t.feasible ? t.cost : 2 * worst + 1e-12);
    const size_t n = X.size();
    mean = 0;
    for (double v : y) mean += v / static_cast<double>(n);
    std::vector<double> d;
    for (size_t i = 0; i < n; ++i)
      for (size_t j = i + 1; j < n; ++j) d.push_back(std::sqrt(dist2(X[i], X[j])));
    std::sort(d.begin(), d.end());
    length = d.empty() || d[d.size() / 2] <= 0 ? 1 : d[d.size() / 2];
    // Cholesky of K + noise I, then alpha = K^-1 (y - mean).
    std::vector<double> L(n * n, 0);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j <= i; ++j) {
        double s = kernel(X[i], X[j]) + (i == j ? 1e-6 : 0);
        for (size_t k = 0; k < j; ++k) s -= L[i * n + k] * L[j * n + k];
        L[i * n + j] = i == j ? std::sqrt(std::max(s, 1e-12)) : s / L[j * n + j];
      }
    alpha.assign(n, 0);
    for (size_t i = 0; i < n; ++i) {
      double s = y[i] - mean;
      for (size_t k = 0; k < i; ++k) s -= L[i * n + k] * alpha[k];
      alpha[i] = s / L[i * n + i];
    }
    for (size_t i = n; i-- > 0;) {
      double s = alpha[i];
      for (size_t k = i + 1; k < n; ++k) s -= L[k * n + i] * alpha[k];
      alpha[i] = s / L[i * n + i];
    }
  }
  double kernel(const std::vector<double>& a, const std::vector<double>& b) const {
    return std::exp(-dist2(a, b) / (2 * length * length));
  }
  double predict(const std::vector<double>& x) const {
    double m = mean;
    for (size_t i = 0; i < X.size(); ++i) m += kernel(x, X[i]) * alpha[i];
    return m;
  }
};

PopularityTable with_pairs(const PopularityTable& base, const std::vector<Pair>& vars) {
  PopularityTable t = base;
  for (const Pair& p : vars) t.set_count(p.key, p.value);
  return t;
}

}  // namespace

BoResult bayesian_optimisation(const Instance& plan, const PopularityTable& table, const std::vector<RoutedToken>& serve,
                               const std::vector<RoutedToken>& tokens, int64_t batch_tokens, Features features,
                               const BoOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  const int32_t L = table.n_layer(), E = table.n_expert();
  const std::vector<Load> batches = batch_loads(tokens, batch_tokens, L, E);
  std::mt19937_64 rng(opt.seed);
  auto uniform = [&](double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng); };
  auto pick = [&](size_t n) { return static_cast<size_t>(std::uniform_int_distribution<size_t>(0, n - 1)(rng)); };

  const std::vector<Key> all_keys = table.keys();  // K2's existing keys
  std::vector<int32_t> token_ids, positions;       // values K2 may create keys with
  for (const RoutedToken& t : serve) {
    if (t.token_id >= 0) token_ids.push_back(t.token_id);
    positions.push_back(t.position);
  }
  std::vector<Key> limited;  // K1 (line 12)
  double gamma = opt.gamma;
  const int D = std::max(1, opt.dims);
  const int split = static_cast<int>(std::ceil(opt.rho * D));
  std::vector<double> eps(D, opt.eps0);

  // One trial (lines 5-29): predict, plan with ODS, serve with repair.
  bool hit_limits = false;
  auto run_trial = [&](Trial& trial, bool anchor) {
    const PopularityTable t = with_pairs(table, trial.vars);
    const Load predicted =
        anchor ? plan.tokens
               : apply_load_factors(per_batch(t.predicted_load(serve, features), static_cast<int64_t>(serve.size()), batch_tokens),
                                    opt.load_factors);
    trial.x.clear();
    for (const auto& layer : predicted)
      for (int64_t v : layer) trial.x.push_back(static_cast<double>(v) / static_cast<double>(batch_tokens));
    Instance in = plan;
    in.tokens = predicted;
    const OdsResult ods = optimal_deployment_selection(in, opt.time_limit_per_solve_s);
    if (!ods.feasible) return;
    Deployment d = ods.deployment;
    std::set<uint64_t> new_limited;
    for (size_t b = 0; b < batches.size(); ++b)
      for (int32_t l = 0; l < L; ++l)
        for (int32_t e = 0; e < E; ++e) {
          const int64_t real = batches[b][l][e];
          FunctionConfig& f = d.expert[l][e];
          const double per_replica_pred = static_cast<double>(predicted[l][e]) / f.replicas;
          const double per_replica_real = static_cast<double>(real) / f.replicas;
          if (std::abs(per_replica_pred - per_replica_real) > opt.delta) {
            // line 12: the tokens of this batch bound the range of keys to adjust
            const size_t first = b * static_cast<size_t>(batch_tokens);
            for (size_t i = first; i < tokens.size() && i < first + static_cast<size_t>(batch_tokens); ++i) {
              if (tokens[i].token_id >= 0) new_limited.insert(Key{l, PopularityTable::kToken, tokens[i].token_id, e}.packed());
              new_limited.insert(Key{l, PopularityTable::kPosition, tokens[i].position, e}.packed());
            }
          }
          if (real == 0 || replica_seconds(plan.platform, plan.shape, d.method[l], f, (real + f.replicas - 1) / f.replicas) != kInfeasible)
            continue;  // case (iii): every constraint holds, no replica added
          // cases (i)/(ii): replicate until memory and payload hold (lines 13-16, 20-21)
          hit_limits = true;
          while (f.replicas < real &&
                 replica_seconds(plan.platform, plan.shape, d.method[l], f, (real + f.replicas - 1) / f.replicas) == kInfeasible)
            ++f.replicas;
        }
    limited.clear();
    for (uint64_t k : new_limited) limited.push_back(Key::unpack(k));
    const ServingReport rep = moeflow::plan::serve(plan, d, batches, false);
    const Evaluation on_plan = evaluate(plan, d);
    trial.deployment = d;
    trial.feasible = on_plan.feasible && on_plan.latency_s <= plan.slo_s * (1 + 1e-9);
    trial.cost = trial.feasible ? rep.cost : kInfeasible;
  };

  std::vector<Trial> history(1);
  run_trial(history[0], true);  // ODS on the instance as given
  size_t best = 0;
  std::vector<double> best_at{history[0].cost};
  int iter = 0;
  for (iter = 1; iter <= opt.max_iterations; ++iter) {
    // line 3: decay; the first rho*D dimensions slower (and slower still after limits)
    if (hit_limits) gamma *= 1.5, hit_limits = false;
    for (int d = 0; d < D; ++d) eps[d] /= 1 + (d < split ? opt.kappa / gamma : opt.kappa);
    Surrogate gp;
    gp.fit(history);
    Trial chosen;
    double chosen_mean = kInfeasible;
    for (int p = 0; p < std::max(1, opt.proposals); ++p) {
      Trial prop;
      const std::vector<Pair>& best_vars = history[best].vars;
      for (int d = 0; d < D; ++d) {
        if (uniform(0, 1) >= eps[d] && d < static_cast<int>(best_vars.size())) {
          prop.vars.push_back(best_vars[d]);  // exploit
          continue;
        }
        Key k;
        if (d < split && !limited.empty()) k = limited[pick(limited.size())];
        else if (uniform(0, 1) < 0.5 && !all_keys.empty()) k = all_keys[pick(all_keys.size())];
        else {  // a new token-to-expert mapping (K2)
          const bool tok = !token_ids.empty() && uniform(0, 1) < 0.5;
          k = Key{static_cast<int32_t>(pick(L)), tok ? PopularityTable::kToken : PopularityTable::kPosition,
                  tok ? token_ids[pick(token_ids.size())] : positions[pick(positions.size())], static_cast<int32_t>(pick(E))};
        }
        const double now = table.count(k);
        prop.vars.push_back({k, std::floor(uniform(1, 2 * (now + 1) + 1))});
      }
      const PopularityTable t = with_pairs(table, prop.vars);
      const Load pred = per_batch(t.predicted_load(serve, features), static_cast<int64_t>(serve.size()), batch_tokens);
      for (const auto& layer : pred)
        for (int64_t v : layer) prop.x.push_back(static_cast<double>(v) / static_cast<double>(batch_tokens));
      const double m = gp.predict(prop.x);
      if (m < chosen_mean || chosen.vars.empty()) chosen = std::move(prop), chosen_mean = m;
    }
    run_trial(chosen, false);
    history.push_back(std::move(chosen));
    if (history.back().cost < history[best].cost) best = history.size() - 1;
    best_at.push_back(history[best].cost);
    // line 33: converged when the best cost changed little over `patience` iterations
    if (iter >= opt.patience) {
      const double then = best_at[best_at.size() - 1 - static_cast<size_t>(opt.patience)];
      const double now = best_at.back();
      if (now != kInfeasible && then != kInfeasible && (then - now) <= opt.threshold * then) break;
    }
  }
  BoResult res{false, with_pairs(table, history[best].vars), history[best].deployment, history[best].cost,
               std::min(iter, opt.max_iterations), {}, 0};
  res.feasible = history[best].feasible;
  for (const Trial& t : history) res.trial_costs.push_back(t.cost);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace moeflow::plan

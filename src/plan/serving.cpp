#include "plan/serving.h"

#include <algorithm>

namespace moeflow::plan {

std::vector<Load> batch_loads(const std::vector<RoutedToken>& tokens, int64_t batch_tokens, int32_t n_layer, int32_t n_expert) {
  std::vector<Load> out;
  for (size_t i = 0; i < tokens.size(); i += static_cast<size_t>(batch_tokens)) {
    const size_t j = std::min(tokens.size(), i + static_cast<size_t>(batch_tokens));
    out.push_back(real_load({tokens.begin() + static_cast<std::ptrdiff_t>(i), tokens.begin() + static_cast<std::ptrdiff_t>(j)},
                            n_layer, n_expert));
  }
  return out;
}

namespace {

// The run of an expert the deployment could not hold (see serving.h).
ExpertRun failed_and_rerun(const PlatformProfile& p, const ExpertShape& s, const FunctionConfig& f, int64_t n) {
  const double head = p.warm_start_s + p.storage_access_s + s.param_bytes / p.storage_bytes_per_s;
  ExpertRun r{head, invocation_cost(p, f.memory_mb, head) * std::max(1, f.replicas)};
  for (int32_t k = 1; k <= std::max<int64_t>(1, std::min<int64_t>(n, 1 << 20)); ++k) {
    const ExpertRun again = expert_run(p, s, Comm::indirect, FunctionConfig{p.memory_max_mb, k, 0}, n);
    if (again.seconds != kInfeasible) return {r.seconds + again.seconds, r.cost + again.cost};
  }
  return {kInfeasible, kInfeasible};
}

}  // namespace

ServingReport serve(const Instance& in, const Deployment& d, const std::vector<Load>& batches, bool cold_start_first) {
  ServingReport rep;
  const PlatformProfile& p = in.platform;
  for (size_t b = 0; b < batches.size(); ++b) {
    const Load& load = batches[b];
    double latency = in.non_moe_s;
    for (size_t l = 0; l < load.size() && l < d.method.size(); ++l) {
      double slowest = 0;
      int64_t layer_tokens = 0;
      for (size_t e = 0; e < load[l].size(); ++e) {
        const int64_t n = load[l][e];
        layer_tokens += n;
        if (n == 0) continue;
        const FunctionConfig& f = d.expert[l][e];
        ExpertRun r = expert_run(p, in.shape, d.method[l], f, n);
        if (r.seconds == kInfeasible) {
          ++rep.failed_runs;
          r = failed_and_rerun(p, in.shape, f, n);
        }
        if (cold_start_first && b == 0) {
          const int64_t invoked = std::min<int64_t>(f.replicas, n);
          r.seconds += p.cold_start_s;
          r.cost += static_cast<double>(invoked) * (invocation_cost(p, f.memory_mb, p.cold_start_s) - p.price_per_request);
        }
        rep.cost += r.cost;
        slowest = std::max(slowest, r.seconds);
      }
      latency += slowest + gather_seconds(p, in.shape, d.method[l], layer_tokens);
    }
    ++rep.batches;
    rep.mean_latency_s += latency;
    rep.max_latency_s = std::max(rep.max_latency_s, latency);
    if (latency <= in.slo_s * (1 + 1e-9)) rep.slo_attainment += 1;
  }
  if (rep.batches) rep.mean_latency_s /= static_cast<double>(rep.batches), rep.slo_attainment /= static_cast<double>(rep.batches);
  return rep;
}

}  // namespace moeflow::plan

#include "plan/deployment.h"

#include <algorithm>

namespace moeflow::plan {

int64_t Instance::layer_tokens(size_t l) const {
  int64_t n = 0;
  for (int64_t t : tokens[l]) n += t;
  return n;
}

std::vector<Candidate> candidates(const Instance& in, size_t layer, size_t expert, Comm c) {
  const PlatformProfile& p = in.platform;
  const int64_t n = in.tokens[layer][expert];
  std::vector<Candidate> all;
  if (n <= 0) {
    for (int32_t m : p.memory_options_mb) {
      FunctionConfig f{m, 1, c == Comm::pipelined_indirect ? p.minibatch_options.front() : 0};
      if (replica_seconds(p, in.shape, c, f, 1) != kInfeasible) return {{f, 0, 0}};
    }
    return {};
  }
  const std::vector<int32_t> no_beta{0};
  const std::vector<int32_t>& betas = c == Comm::pipelined_indirect ? p.minibatch_options : no_beta;
  for (int32_t m : p.memory_options_mb)
    for (int32_t r = 1; r <= p.max_replicas && r <= n; ++r)
      for (int32_t b : betas) {
        if (c == Comm::pipelined_indirect && b > n && b != betas.front()) continue;  // same as a smaller beta
        const FunctionConfig f{m, r, b};
        const ExpertRun run = expert_run(p, in.shape, c, f, n);
        if (run.seconds != kInfeasible) all.push_back({f, run.seconds, run.cost});
      }
  std::sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    return a.seconds != b.seconds ? a.seconds < b.seconds : a.cost < b.cost;
  });
  std::vector<Candidate> front;
  for (const Candidate& k : all)
    if (front.empty() || k.cost < front.back().cost) front.push_back(k);
  return front;
}

Evaluation evaluate(const Instance& in, const Deployment& d) {
  Evaluation ev;
  ev.latency_s = in.non_moe_s;
  for (size_t l = 0; l < in.tokens.size(); ++l) {
    double cost = 0, slowest = 0;
    for (size_t e = 0; e < in.tokens[l].size(); ++e) {
      const ExpertRun r = expert_run(in.platform, in.shape, d.method[l], d.expert[l][e], in.tokens[l][e]);
      if (r.seconds == kInfeasible) ev.feasible = false;
      cost += r.cost;
      slowest = std::max(slowest, r.seconds);
    }
    const double lat = slowest + gather_seconds(in.platform, in.shape, d.method[l], in.layer_tokens(l));
    ev.layer_cost.push_back(cost);
    ev.layer_latency_s.push_back(lat);
    ev.cost += cost;
    ev.latency_s += lat;
  }
  return ev;
}

Deployment max_memory_deployment(const Instance& in, int32_t memory_mb) {
  const int32_t mem = memory_mb > 0 ? memory_mb : in.platform.memory_max_mb;
  Deployment best;
  double best_cost = kInfeasible;
  for (int c = 0; c < kNumComm; ++c) {
    Deployment d;
    d.method.assign(in.tokens.size(), static_cast<Comm>(c));
    // The pipelined design needs a minibatch; LambdaML has none, so it gets the largest.
    const int32_t beta = c == 0 ? in.platform.minibatch_options.back() : 0;
    for (const auto& layer : in.tokens)
      d.expert.emplace_back(layer.size(), FunctionConfig{mem, 1, beta});
    const Evaluation ev = evaluate(in, d);
    if (ev.feasible && ev.cost < best_cost) best = d, best_cost = ev.cost;
  }
  if (best.method.empty()) {  // nothing fits: report the storage design's (infeasible) one
    best.method.assign(in.tokens.size(), Comm::indirect);
    for (const auto& layer : in.tokens) best.expert.emplace_back(layer.size(), FunctionConfig{mem, 1, 0});
  }
  return best;
}

}  // namespace moeflow::plan

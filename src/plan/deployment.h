// The optimal MoE deployment problem of serverless-moe Sec. III-D, Eq. (12), over the
// platform's discrete candidate set: for every MoE layer l a scatter-gather design c_l,
// for every expert (l, e) a memory size, a replica count (1..R) and, for the pipelined
// design, a minibatch size beta; minimise the billed cost of all MoE layers (12a) for a
// batch whose per-expert token counts are given, subject to memory (12c), payload (12f)
// and the latency SLO (12d): sum over layers of the MoE-E2E latency
//   L_l = max_e T_{l,e} + gather_l(c_l)
// plus a constant for the non-MoE layers must not exceed the SLO.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "plan/cost_model.h"

namespace moeflow::plan {

struct Instance {
  PlatformProfile platform;
  ExpertShape shape;
  std::vector<std::vector<int64_t>> tokens;  // [layer][expert] tokens of the batch
  double slo_s = 0;                          // (12d) bound on the MoE layers' E2E sum
  double non_moe_s = 0;                      // the non-MoE part of (12d), a constant
  int64_t layer_tokens(size_t l) const;
};

// One feasible (memory, replicas, beta) of an expert under one design, with its time
// and cost for the instance's token count.
struct Candidate {
  FunctionConfig config;
  double seconds = 0, cost = 0;
};

// Candidates of expert (l, e) under design c: every feasible configuration of the
// platform's grid, Pareto-pruned on (seconds, cost) (a configuration both slower and
// dearer than another is never needed: the layer's latency is a max, its cost a sum).
// An expert handed no tokens gets the smallest memory that holds its parameters.
std::vector<Candidate> candidates(const Instance& in, size_t layer, size_t expert, Comm c);

struct Deployment {
  std::vector<Comm> method;                        // per layer
  std::vector<std::vector<FunctionConfig>> expert;  // [layer][expert]
};

// The deployment's cost and latency on a batch of token counts (the instance's, or the
// real ones of a served batch).
struct Evaluation {
  double cost = 0, latency_s = 0;
  std::vector<double> layer_cost, layer_latency_s;
  bool feasible = true;  // every expert's run fits its memory and payload
};
Evaluation evaluate(const Instance& in, const Deployment& d);

// Every function at the largest memory, one replica, the same design on every layer
// (LambdaML-style, Sec. V-G): the cheapest of the designs that are feasible. memory_mb 0
// means the platform's largest; the paper's LambdaML ran at 3008 MB, Lambda's largest then.
Deployment max_memory_deployment(const Instance& in, int32_t memory_mb = 0);

}  // namespace moeflow::plan

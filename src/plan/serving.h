// Serving a trace under a deployment (the simulation; the paper's Sec. V-G
// comparison): batches of real token counts are run through the cost model with the
// deployment fixed beforehand, as on a serverless platform where redeploying takes
// minutes (Sec. II-C). The first batch pays every invoked function's cold start
// (billed: container-image functions are billed for their init phase). A run the
// deployment cannot hold (real tokens overflow the memory, or the payload under direct
// transfer) fails: its head time is billed at the configured memory, then it is re-run
// through external storage at the largest memory with the fewest replicas that fit, and
// the layer waits for both.
#pragma once
#include <vector>

#include "plan/deployment.h"
#include "plan/popularity.h"

namespace moeflow::plan {

using Load = std::vector<std::vector<int64_t>>;  // [layer][expert] tokens

// Consecutive batches of `batch_tokens` tokens (the last one may be shorter).
std::vector<Load> batch_loads(const std::vector<RoutedToken>& tokens, int64_t batch_tokens, int32_t n_layer, int32_t n_expert);

struct ServingReport {
  int64_t batches = 0, failed_runs = 0;
  double cost = 0;                     // billed, all batches
  double mean_latency_s = 0, max_latency_s = 0;
  double slo_attainment = 0;           // fraction of batches within the SLO
};

// `in` gives the platform, shape, SLO and non-MoE constant; its token counts are ignored.
ServingReport serve(const Instance& in, const Deployment& d, const std::vector<Load>& batches, bool cold_start_first);

}  // namespace moeflow::plan

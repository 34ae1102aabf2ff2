// A deterministic discrete-event model of the serving loop, for comparing schedulers
// on a replayed arrival trace without wall time (the test of eMoE's scheduler,
// and `moeflow simulate-serve`).
//
// Each step carries one decode token of every running request and the whole prompt
// of each request admitted at its start, and takes
//     step_fixed_s + token_s * tokens + expert_load_s (when it admits any)
// seconds: the shape of the engine's batched step (a fixed part, a part that grows
// with the tokens, expert loading on admission). The admission step yields a request's
// first token; it finishes after output_tokens. The scheduler runs before every step
// with the free slots and the running requests, as the serving loop calls it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "serve/scheduler.h"

namespace moeflow::serve {

struct SimRequest {
  double arrival_s = 0;
  int prompt_tokens = 1;
  int output_tokens = 1;
  double slo_s = 0;  // end-to-end target; 0: the scheduler's default
  std::string task;
};

struct ServingSimOptions {
  int slots = 4;
  double step_fixed_s = 0.01;
  double token_s = 0.002;
  double expert_load_s = 0;
  SchedPolicy sched = SchedPolicy::fcfs;
  SchedulerOptions sched_options;  // its token_seconds / expert_load_seconds start from the model's
};

struct ServingSimResult {
  int64_t requests = 0, slo_met = 0, with_slo = 0;
  double mean_latency_s = 0, p50_latency_s = 0, p90_latency_s = 0, p99_latency_s = 0;
  double mean_ttft_s = 0, mean_queue_s = 0;
  double makespan_s = 0;
  std::vector<double> latency_s;  // per request, in input order
};

ServingSimResult simulate_serving(const std::vector<SimRequest>& requests, const ServingSimOptions& opt);

// A reproducible mixed workload: `n` requests arriving as a Poisson process of `rate`
// per second, a share `interactive` of them short with a tight SLO (task "chat":
// prompt 64, output 16, SLO 1.5 s), the rest long with a loose one (task "summary":
// prompt 512, output 160, SLO 30 s).
std::vector<SimRequest> mixed_workload(int n, double rate, double interactive, uint64_t seed);

}  // namespace moeflow::serve

// A serverless platform and an expert with round numbers, so the plan tests can
// compute times and bills by hand.
#pragma once
#include "plan/cost_model.h"

namespace moeflow::plan::testing {

inline PlatformProfile round_platform() {
  PlatformProfile p;
  p.name = "round";
  p.source = "test";
  p.price_per_gb_second = 1e-5;
  p.price_per_request = 2e-7;
  p.billing_granularity_s = 0.001;
  p.memory_min_mb = 1;
  p.memory_max_mb = 2048;
  p.memory_step_mb = 1;
  p.memory_options_mb = {1024, 2048};
  p.mb_per_vcpu = 1024;
  p.max_vcpus = 2;
  p.payload_limit_bytes = 1000;
  p.timeout_s = 900;
  p.flops_per_vcpu = 1e9;
  p.runtime_overhead_bytes = 0;
  p.warm_start_s = 0.01;
  p.cold_start_s = 1;
  p.storage_access_s = 0.02;
  p.storage_bytes_per_s = 1e6;
  p.invoke_bytes_per_s = 1e6;
  p.max_replicas = 2;
  p.minibatch_options = {2};
  return p;
}

// 1 MB of parameters, 0.1 s per token on one vCPU, 100 B per token on the wire, 1 kB
// resident per token.
inline ExpertShape round_expert() { return ExpertShape{1e6, 1e8, 100, 1000}; }

}  // namespace moeflow::plan::testing

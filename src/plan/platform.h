// A serverless platform profile for the deployment planner: prices, quotas and the
// timing assumptions of the paper's cost model (serverless-moe, Sec. III-C/III-D).
// Data files: profiles/platforms/NAME.json (lambda.json: AWS Lambda list prices, cited
// in its "source" field). Every field is required and range-checked on load; a bad one
// throws InputError naming the file and the field.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace moeflow::plan {

struct PlatformProfile {
  std::string name, source;
  double price_per_gb_second = 0;      // billed on configured memory x billed duration
  double price_per_request = 0;        // per invocation (list price is per 1M)
  double billing_granularity_s = 0;    // duration is rounded up to this
  int32_t memory_min_mb = 0, memory_max_mb = 0, memory_step_mb = 0;
  std::vector<int32_t> memory_options_mb;  // the planner's candidate set M (Sec. III-D)
  double mb_per_vcpu = 0;              // CPU share grows with memory (Sec. II-A)
  double max_vcpus = 0;
  double payload_limit_bytes = 0;      // direct transfer limit (Sec. III-C, (12f))
  double timeout_s = 0;
  double flops_per_vcpu = 0;           // effective expert FLOP/s of one vCPU
  double runtime_overhead_bytes = 0;   // memory the function runtime itself takes
  double warm_start_s = 0, cold_start_s = 0;
  double storage_access_s = 0;         // external storage (S3-like) access delay
  double storage_bytes_per_s = 0;      // function <-> external storage bandwidth
  double invoke_bytes_per_s = 0;       // function -> function (payload) bandwidth
  int32_t max_replicas = 0;            // R in Sec. III-D
  std::vector<int32_t> minibatch_options;  // candidate pipeline minibatch sizes (beta)

  double vcpus(int32_t memory_mb) const;
};

// By file path, or by name from <profiles_dir()>/platforms/NAME.json.
PlatformProfile load_platform_profile(const std::string& name_or_path);

}  // namespace moeflow::plan

#include "plan/platform.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/input_file.h"
#include "base/json_fields.h"
#include "sim/profiles.h"

namespace moeflow::plan {

namespace {

using nlohmann::json;

double number(const json& j, const char* key, const std::string& path, double lo, double hi) {
  return json_number(j, key, path, lo, hi);
}

std::vector<int32_t> int_list(const json& j, const char* key, const std::string& path, int64_t lo, int64_t hi) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array() || it->empty())
    throw InputError(path + ": field \"" + key + "\" is missing or not a non-empty array");
  std::vector<int32_t> out;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& v = (*it)[i];
    if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
      throw InputError(path + ": field \"" + key + "\"[" + std::to_string(i) + "] is not an integer in [" +
                       std::to_string(lo) + ", " + std::to_string(hi) + "]");
    out.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace

double PlatformProfile::vcpus(int32_t memory_mb) const {
  return std::min(max_vcpus, static_cast<double>(memory_mb) / mb_per_vcpu);
}

PlatformProfile load_platform_profile(const std::string& name_or_path) {
  const bool file = name_or_path.find('/') != std::string::npos ||
                    (name_or_path.size() > 5 && name_or_path.compare(name_or_path.size() - 5, 5, ".json") == 0);
  const std::string path = file ? name_or_path : profiles_dir() + "/platforms/" + name_or_path + ".json";
  std::ifstream in = open_input_file(path, "platform profile");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number such as 1e400
    throw InputError(path + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw InputError(path + ": a platform profile must be a JSON object");
  json_check_fields(j, path, "platform",
                    {"name", "price_per_gb_second", "price_per_million_requests", "billing_granularity_ms",
                     "memory_min_mb", "memory_max_mb", "memory_step_mb", "memory_options_mb", "mb_per_vcpu", "max_vcpus",
                     "payload_limit_bytes", "timeout_s", "ephemeral_storage_max_mb", "assumed_gflops_per_vcpu",
                     "assumed_runtime_overhead_mb", "assumed_warm_start_ms", "assumed_cold_start_ms",
                     "assumed_storage_access_ms", "assumed_storage_bandwidth_mbs", "assumed_invoke_bandwidth_mbs",
                     "max_replicas", "pipeline_minibatch_options"});
  PlatformProfile p;
  if (!j.contains("name") || !j["name"].is_string()) throw InputError(path + ": field \"name\" is missing or not a string");
  if (!j.contains("source") || !j["source"].is_string() || j["source"].get<std::string>().empty())
    throw InputError(path + ": field \"source\" (the citation of the prices) is missing or empty");
  p.name = j["name"].get<std::string>();
  p.source = j["source"].get<std::string>();
  p.price_per_gb_second = number(j, "price_per_gb_second", path, 0, 1);
  p.price_per_request = number(j, "price_per_million_requests", path, 0, 1e6) / 1e6;
  p.billing_granularity_s = number(j, "billing_granularity_ms", path, 0.001, 60000) / 1e3;
  p.memory_min_mb = static_cast<int32_t>(json_integer(j, "memory_min_mb", path, 1, 1 << 24));
  p.memory_max_mb = static_cast<int32_t>(json_integer(j, "memory_max_mb", path, p.memory_min_mb, 1 << 24));
  p.memory_step_mb = static_cast<int32_t>(json_integer(j, "memory_step_mb", path, 1, 1 << 24));
  p.memory_options_mb = int_list(j, "memory_options_mb", path, p.memory_min_mb, p.memory_max_mb);
  for (size_t i = 0; i < p.memory_options_mb.size(); ++i)
    if ((p.memory_options_mb[i] - p.memory_min_mb) % p.memory_step_mb != 0)
      throw InputError(path + ": field \"memory_options_mb\" holds " + std::to_string(p.memory_options_mb[i]) +
                       ", not on the platform's " + std::to_string(p.memory_step_mb) + " MB steps");
  p.mb_per_vcpu = number(j, "mb_per_vcpu", path, 1, 1e7);
  p.max_vcpus = number(j, "max_vcpus", path, 0.01, 1e4);
  p.payload_limit_bytes = number(j, "payload_limit_bytes", path, 1, 1e12);
  p.timeout_s = number(j, "timeout_s", path, 0.001, 1e7);
  number(j, "ephemeral_storage_max_mb", path, 0, 1e9);  // validated; unused by the model
  p.flops_per_vcpu = number(j, "assumed_gflops_per_vcpu", path, 1e-3, 1e6) * 1e9;
  p.runtime_overhead_bytes = number(j, "assumed_runtime_overhead_mb", path, 0, 1e7) * 1048576.0;
  if (p.runtime_overhead_bytes >= static_cast<double>(p.memory_max_mb) * 1048576.0)
    throw InputError(path + ": field \"assumed_runtime_overhead_mb\" = " + json_short_number(p.runtime_overhead_bytes / 1048576.0) +
                     " leaves no memory in the largest function (memory_max_mb " + std::to_string(p.memory_max_mb) + ")");
  p.warm_start_s = number(j, "assumed_warm_start_ms", path, 0, 1e7) / 1e3;
  p.cold_start_s = number(j, "assumed_cold_start_ms", path, 0, 1e7) / 1e3;
  p.storage_access_s = number(j, "assumed_storage_access_ms", path, 0, 1e7) / 1e3;
  p.storage_bytes_per_s = number(j, "assumed_storage_bandwidth_mbs", path, 1e-6, 1e9) * 1048576.0;
  p.invoke_bytes_per_s = number(j, "assumed_invoke_bandwidth_mbs", path, 1e-6, 1e9) * 1048576.0;
  p.max_replicas = static_cast<int32_t>(json_integer(j, "max_replicas", path, 1, 1024));
  p.minibatch_options = int_list(j, "pipeline_minibatch_options", path, 1, 1 << 30);
  return p;
}

}  // namespace moeflow::plan

// Hardware and model profiles for the simulator's cost model: data files, not code
// (profiles/hw/*.json, profiles/models/*.json).
//
// hardware: {"name", "bandwidth_gbs", "latency_us", "copy_engines"[, "chunk_kib"]}
// model:    {"name", "n_layer", "n_expert", "top_k", "expert_bytes",
//            "dense_seconds_per_layer", "dense_seconds_per_layer_token",
//            "expert_seconds", "expert_seconds_per_token", "hidden_size"?, "predictor_seconds"?,
//            "fmoe_semantic_seconds"?, "fmoe_trajectory_seconds"?, "fmoe_insert_seconds"?}
// predictor_seconds (optional, 0 when absent): one run of DuoServe's layer predictor
// on the compute device, charged on its prediction stream (§5.3).
// fmoe_*_seconds (optional, 0 when absent): fMoE's Expert Map Matcher on the host CPU
// with a full store of 1K maps: a semantic search (256-number keys), a trajectory
// search over all layers, an insert that replaces a map; `simulate --policy
// fmoe-async` charges them (measured by FmoeMatcher.MeasuresOneSearch).
// hidden_size (optional, 0 when absent) is the width of a token's activation; the
// serverless planner (src/plan) needs it for payload sizes.
// Dense time of a layer for n tokens: dense_seconds_per_layer + n * ..._token.
// Expert time for n tokens routed to it: expert_seconds + n * expert_seconds_per_token
// (the fixed part is reading its weights from fast memory once).
#pragma once
#include <cstdint>
#include <string>

#include "experts/simulated_transport.h"

namespace moeflow {

struct HardwareProfile {
  std::string name;
  LinkProfile link;
};

struct ModelProfile {
  std::string name;
  int32_t n_layer = 0, n_expert = 0, top_k = 0;
  uint64_t expert_bytes = 0;
  int32_t hidden_size = 0;
  double predictor_seconds = 0;
  double fmoe_semantic_seconds = 0, fmoe_trajectory_seconds = 0, fmoe_insert_seconds = 0;
  double dense_seconds_per_layer = 0, dense_seconds_per_layer_token = 0;
  double expert_seconds = 0, expert_seconds_per_token = 0;

  double dense_seconds(int64_t n_tokens) const {
    return dense_seconds_per_layer + static_cast<double>(n_tokens) * dense_seconds_per_layer_token;
  }
  double expert_compute_seconds(int64_t n_tokens) const {
    return expert_seconds + static_cast<double>(n_tokens) * expert_seconds_per_token;
  }
};

// Load a profile by file path, or by name from the profile directory
// (<source>/profiles/{hw,models}/NAME.json, or $MOEFLOW_PROFILES). Throws InputError
// naming the file and the bad field.
HardwareProfile load_hardware_profile(const std::string& name_or_path);
ModelProfile load_model_profile(const std::string& name_or_path);
std::string profiles_dir();

// The model profile that matches a trace's model name (what `simulate` and `plan` use
// when no --model-profile is given); throws InputError when none is known.
std::string model_profile_for_trace_model(const std::string& trace_model);

}  // namespace moeflow

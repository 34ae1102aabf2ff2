// Builds a policy by its --policy name. "all" is not a policy but the absence of
// offloading (everything mapped); callers handle it before asking here.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "experts/expert_policy.h"

namespace moeflow {

struct PolicyOptions {
  std::string state_path;  // learned state to load (predictor, EAM collection), may be empty
  std::string tasks_path;    // emoe: task keyword profiles (empty: profiles/tasks.json if present)
  std::string emoe_variant;  // emoe: "all-layer" (default) or "layer-by-layer"
  int32_t emoe_top_l = 0;    // emoe: L experts held per layer (0: derived from budget_bytes)
  uint64_t budget_bytes = 0;  // the cache budget the policy runs under (0: unknown)
  // emoe: prompt text for keyword task detection when a request has no task label.
  std::function<std::string(const std::vector<int32_t>&)> detokenize = {};
  size_t eamc_capacity = 0;  // moe-infinity: EAM collection capacity (0: its default, Fig. 9's largest)
  bool async_matching = false;  // fmoe: match expert maps on a worker thread (the engine)
  double prediction_seconds = 0;  // duoserve: its predictor's time on the prediction stream (simulator)
  // fmoe-async in the simulator: the matcher runs on this clock (the simulated time),
  // a semantic search, a whole-trajectory search and an insert into a full store
  // taking these (the model profile's fmoe_*_seconds).
  std::function<double()> clock = {};
  double fmoe_semantic_seconds = 0, fmoe_trajectory_seconds = 0, fmoe_insert_seconds = 0;
};

// Throws InputError listing the known names when `name` is unknown.
std::unique_ptr<ExpertPolicy> make_policy(const std::string& name, const ExpertGeometry& g,
                                          const PolicyOptions& opt = {});
// Whether the policy learns state that --policy-state / --policy-state-out carry
// (make_policy refuses a state_path for one that does not).
bool policy_keeps_state(const std::string& name);
// Names accepted by make_policy, for help texts.
std::vector<std::string> policy_names();

}  // namespace moeflow

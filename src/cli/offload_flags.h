// Flags that put a run under an expert budget (run, bench, perplexity):
//   --expert-budget SIZE|N%   fast-tier bytes for experts (default: no offloading)
//   --policy NAME             all (no offloading), lru, lfu, on-demand, next-layer, ...
//   --on-miss load|reroute    lossless fetch, or eMoE rerouting (lossy)
//   --io-threads N            expert readers
//   --policy-state FILE       learned policy state to start from
//   --policy-state-out FILE   where to save it after the run (survives restarts)
//   --tasks FILE              eMoE task profiles: keywords and sensitivity (profiles/tasks.json)
//   --emoe-variant V          eMoE predictor: all-layer or layer-by-layer
//   --emoe-top-l N            eMoE: experts held per layer (0: from the budget)
// (EngineOptions: cli/model_flags.h), and the counters they report.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/args.h"
#include "engine/expert_offload.h"
#include "policy/emoe.h"

namespace moeflow::cli {

void add_offload_flags(Args& a);

// Refuses a bad --emoe-variant, --emoe-top-l or --tasks file (UsageError / InputError
// naming it) before any work; for every command that takes the eMoE flags.
void check_emoe_flags(const Args& a);

// The task profiles of --tasks (an error if given and bad), else profiles/tasks.json
// when present, else none. Also checks --emoe-variant and --emoe-top-l, so a bad value
// is refused whatever the policy.
std::vector<TaskProfile> task_profiles_from_flags(const Args& a);

// Refuses --policy-state-out where nothing would be saved (a policy that keeps no
// learned state, no offloading, or a command that does not save one: `saves` false)
// and an output that cannot be written, before any work.
void check_policy_state_out(const Args& a, const std::string& command, bool saves);

// Counters as the `cache` JSON object of run/bench/perplexity (null when inactive).
nlohmann::json offload_counters_json(const ExpertOffload& o);

}  // namespace moeflow::cli

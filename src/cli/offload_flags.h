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
// and the objects they build, attached to a Transformer.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/args.h"
#include "engine/expert_offload.h"
#include "engine/offloaded_experts.h"
#include "engine/transformer.h"
#include "experts/expert_cache.h"
#include "experts/expert_store.h"
#include "experts/file_transport.h"
#include "policy/emoe.h"
#include "experts/expert_policy.h"

namespace moeflow {
class Tokenizer;
}

namespace moeflow::cli {

void add_offload_flags(Args& a);

// Refuses a bad --emoe-variant, --emoe-top-l or --tasks file (UsageError / InputError
// naming it) before any work; for every command that takes the eMoE flags.
void check_emoe_flags(const Args& a);

// The task profiles of --tasks (an error if given and bad), else profiles/tasks.json
// when present, else none. Also checks --emoe-variant and --emoe-top-l, so a bad value
// is refused whatever the policy.
std::vector<TaskProfile> task_profiles_from_flags(const Args& a);

struct Offload : ExpertOffload {
  // Counters as the `cache` JSON object of run/bench.
  nlohmann::json counters_json() const;
  // Writes the policy's learned state to --policy-state-out, if given.
  void save_state(const Args& a) const;
};

// Counters as the `cache` JSON object of run/bench (null when inactive).
nlohmann::json offload_counters_json(const ExpertOffload& o);

// The offloading options the flags name, with `policy` instead of --policy.
OffloadOptions offload_options(const Args& a, const std::string& policy, const Tokenizer* tok = nullptr);

// Null Offload (inactive) when neither --expert-budget nor a policy other than "all"
// is given. Throws UsageError / InputError for bad values. With a tokenizer, eMoE
// classifies unlabelled prompts by their keywords.
Offload make_offload(const Args& a, const Model& model, const Tokenizer* tok = nullptr);
// Same, with the policy named here instead of by --policy.
Offload make_offload(const Args& a, const Model& model, const std::string& policy, const Tokenizer* tok = nullptr);

}  // namespace moeflow::cli

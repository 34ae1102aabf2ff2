#include "cli/offload_flags.h"

#include "base/atomic_file.h"
#include "base/error.h"

#include "policy/policy_factory.h"

namespace moeflow::cli {

void add_offload_flags(Args& a) {
  a.flag("--expert-budget", "fast-tier bytes for experts: 512MiB, 2GiB, or 25% of what all experts take in memory (100%: every expert; default: all resident)");
  std::string names = "all";
  for (const std::string& n : policy_names()) names += ", " + n;
  a.flag("--policy", "expert cache policy: " + names, true, "all");
  a.flag("--on-miss", "load (lossless), reroute (eMoE; lossy: tokens may differ) or host-compute (--backend cuda: a "
                      "missing expert computes on the CPU from host memory; lossless)", true, "load");
  a.flag("--io-threads", "threads reading experts from the model file", true, "4");
  a.flag("--policy-state", "learned policy state to start from (see train-predictor)");
  a.flag("--policy-state-out", "save the policy's learned state here after the run (e.g. MoE-Infinity's EAM collection)");
  a.flag("--tasks", "eMoE task profiles: keywords for task detection, per-layer sensitivity (default: profiles/tasks.json)");
  a.flag("--emoe-variant", "eMoE expert predictor: all-layer (from the previous prompt) or layer-by-layer", true, "all-layer");
  a.flag("--emoe-top-l", "eMoE: experts held per layer (0: derived from --expert-budget, weighted by sensitivity)", true, "0");
}

void check_emoe_flags(const Args& a) {
  try {
    parse_emoe_variant(a.str("--emoe-variant"));
  } catch (const InputError&) {
    throw UsageError("--emoe-variant '" + a.str("--emoe-variant") + "': expected all-layer or layer-by-layer");
  }
  a.integer("--emoe-top-l", 0, 1 << 20);
  if (a.has("--tasks")) load_task_profiles(a.str("--tasks"));  // names the file and field at fault
}

void check_policy_state_out(const Args& a, const std::string& command, bool saves) {
  if (!a.has("--policy-state-out")) return;
  const std::string policy = a.str("--policy");
  if (!saves)
    throw UsageError("--policy-state-out: " + command + " saves no policy state (run, perplexity and serve do)");
  if (policy == "all")
    throw UsageError("--policy-state-out: --policy all offloads nothing, so there is no policy state to save");
  if (!policy_keeps_state(policy))
    throw UsageError("--policy-state-out: policy '" + policy +
                     "' keeps no learned state (states belong to adaptive, duoserve, duoserve-k, emoe, fmoe and moe-infinity)");
  check_output_path(a.str("--policy-state-out"), "--policy-state-out");
}

std::vector<TaskProfile> task_profiles_from_flags(const Args& a) {
  check_emoe_flags(a);
  return task_profiles_or_default(a.str("--tasks"));
}

nlohmann::json offload_counters_json(const ExpertOffload& o) {
  if (!o.active()) return nullptr;
  const ExpertCache* cache = o.cache.get();
  const ExpertStore* store = o.store.get();
  const OffloadedExperts* source = o.source.get();
  const Transport* transport = o.transport.get();
  const std::string& policy_name = o.policy_name;
  const bool lossy = o.lossy;
  const CacheCounters& c = cache->counters();
  return {{"policy", policy_name},
          {"on_miss", on_miss_name(source->on_miss())},
          {"lossy", lossy},
          {"budget_bytes", cache->budget_bytes()},
          {"expert_bytes_total", store->geometry().total_bytes()},
          {"hits", c.hits},
          {"misses", c.misses},
          {"hit_rate", c.hit_rate()},
          {"prefetches_issued", c.prefetches_issued},
          {"prefetch_hits", c.prefetch_hits},
          {"prefetch_hit_rate", c.prefetch_hit_rate()},
          {"late_prefetches", c.late_prefetches},
          {"wasted_prefetches", c.wasted_prefetches},
          {"prefetches_dropped", c.prefetches_dropped},
          {"prefetches_cancelled", c.prefetches_cancelled},
          {"demand_loads", c.demand_loads},
          {"evictions", c.evictions},
          {"bytes_read", c.bytes_read},
          {"peak_bytes", c.peak_bytes},
          {"stall_seconds", c.stall_seconds},
          {"rerouted_slots", source->rerouted_slots()},
          {"host_computed_experts", source->host_computed()},
          {"direct_io", reads_direct(*transport)},
          {"transport", transport->medium()},
          {"link_busy_seconds", transport->busy_seconds()}};
}

}  // namespace moeflow::cli

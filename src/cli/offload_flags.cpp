#include "cli/offload_flags.h"

#include <cstdio>
#include <fstream>

#include "engine/tokenizer.h"
#include "base/atomic_file.h"
#include "base/error.h"
#include "kernels/cpu/q4_vnni.h"

#include "policy/policy_factory.h"

namespace moeflow::cli {

void add_offload_flags(Args& a) {
  a.flag("--expert-budget", "fast-tier bytes for experts: 512MiB, 2GiB or 25% of all expert bytes (default: all resident)");
  std::string names = "all";
  for (const std::string& n : policy_names()) names += ", " + n;
  a.flag("--policy", "expert cache policy: " + names, true, "all");
  a.flag("--on-miss", "load (lossless) or reroute (eMoE; lossy: tokens may differ)", true, "load");
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

std::vector<TaskProfile> task_profiles_from_flags(const Args& a) {
  check_emoe_flags(a);
  return task_profiles_or_default(a.str("--tasks"));
}

Offload make_offload(const Args& a, const Model& model, const Tokenizer* tok) {
  return make_offload(a, model, a.str("--policy"), tok);
}

Offload make_offload(const Args& a, const Model& model, const std::string& policy, const Tokenizer* tok) {
  check_emoe_flags(a);  // refused before any work, whatever the policy
  Offload o;
  o.policy_name = policy;
  const bool budgeted = a.has("--expert-budget");
  if (o.policy_name == "all") {
    if (budgeted) throw UsageError("--expert-budget needs a --policy other than 'all' (e.g. --policy lru)");
    if (a.has("--on-miss") && a.str("--on-miss") != "load")
      throw UsageError("--on-miss reroute needs an --expert-budget and a --policy");
    return o;
  }
  // Experts read into the cache take the resident model's layout (rows interleaved in
  // fours on VNNI CPUs), so offloaded and all-resident runs run the same kernels.
  o.store = std::make_unique<ExpertStore>(model, cpu::q4_vnni_enabled() && !a.has("--no-repack"));
  const ExpertGeometry& g = o.store->geometry();
  const uint64_t budget = budgeted ? parse_budget(a.str("--expert-budget"), o.store->total_file_bytes()) : g.total_bytes();
  const OnMiss on_miss = parse_on_miss(a.str("--on-miss"));
  o.lossy = on_miss == OnMiss::Reroute;
  PolicyOptions po;
  if (a.has("--policy-state")) po.state_path = a.str("--policy-state");
  if (a.has("--tasks")) po.tasks_path = a.str("--tasks");
  po.emoe_variant = a.str("--emoe-variant");
  po.emoe_top_l = static_cast<int32_t>(a.integer("--emoe-top-l", 0, 1 << 20));
  po.budget_bytes = budget;
  if (tok) po.detokenize = [tok](const std::vector<int32_t>& ids) { return tok->decode(ids); };
  po.async_matching = true;  // in the engine, matching must never block the forward pass (fMoE §4.3)
  o.policy = make_policy(o.policy_name, g, po);
  o.transport = std::make_unique<FileTransport>(*o.store, static_cast<int>(a.integer("--io-threads", 1, 64)));
  o.cache = std::make_unique<ExpertCache>(g, budget, *o.transport, *o.policy);
  o.source = std::make_unique<OffloadedExperts>(model.config(), *o.store, *o.cache, on_miss);
  return o;
}

nlohmann::json Offload::counters_json() const {
  if (!active()) return nullptr;
  const CacheCounters& c = cache->counters();
  return {{"policy", policy_name},
          {"on_miss", lossy ? "reroute" : "load"},
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
          {"direct_io", transport->direct_io()}};
}

void Offload::save_state(const Args& a) const {
  if (!active() || !a.has("--policy-state-out")) return;
  // Replace atomically (base/atomic_file.h): a crash mid-write never loses the previous
  // state, and a link planted next to it never redirects the write.
  AtomicFile out(a.str("--policy-state-out"));
  policy->save(out.stream());
  out.commit();
}

std::string Offload::summary() const {
  if (!active()) return {};
  const CacheCounters& c = cache->counters();
  char s[512];
  std::snprintf(s, sizeof s,
                "experts: policy %s, budget %.1f MiB of %.1f MiB%s | hit rate %.1f%% (%llu hits, %llu misses), "
                "prefetch hits %llu of %llu, %.1f MiB read, %.3f s stalled%s",
                policy_name.c_str(), static_cast<double>(cache->budget_bytes()) / 1048576.0,
                static_cast<double>(store->geometry().total_bytes()) / 1048576.0,
                transport->direct_io() ? " (O_DIRECT)" : " (buffered reads)", 100.0 * c.hit_rate(),
                static_cast<unsigned long long>(c.hits), static_cast<unsigned long long>(c.misses),
                static_cast<unsigned long long>(c.prefetch_hits), static_cast<unsigned long long>(c.prefetches_issued),
                static_cast<double>(c.bytes_read) / 1048576.0, c.stall_seconds,
                lossy ? " | LOSSY: --on-miss reroute changes which experts run" : "");
  return s;
}

}  // namespace moeflow::cli

#include "engine/expert_offload.h"

#include <cstdio>

#include "base/atomic_file.h"
#include "base/error.h"
#include "policy/emoe.h"
#include "policy/policy_factory.h"

namespace moeflow {

ExpertOffload make_expert_offload(const Model& model, const OffloadOptions& opt) {
  // Refused before any work, whatever the policy.
  parse_emoe_variant(opt.emoe_variant);
  if (opt.emoe_top_l < 0) throw InputError("eMoE top-L " + std::to_string(opt.emoe_top_l) + ": must be >= 0");
  if (opt.io_threads < 1 || opt.io_threads > 64)
    throw InputError("expert reader threads " + std::to_string(opt.io_threads) + ": expected 1 to 64");
  const OnMiss on_miss = parse_on_miss(opt.on_miss);
  ExpertOffload o;
  o.policy_name = opt.policy;
  if (opt.policy == "all") {
    if (!opt.budget.empty()) throw InputError("an expert budget needs a policy other than 'all' (e.g. lru)");
    if (on_miss != OnMiss::Load) throw InputError("--on-miss " + opt.on_miss + " needs an expert budget and a policy");
    return o;
  }
  // Experts read into the cache take the resident model's layout (rows interleaved in
  // fours on VNNI CPUs), so offloaded and all-resident runs run the same kernels.
  o.store = std::make_unique<ExpertStore>(model, opt.placer);
  const ExpertGeometry& g = o.store->geometry();
  // A share of what the experts take in the cache, so 100% never evicts.
  const uint64_t budget = opt.budget.empty() ? g.total_bytes() : parse_budget(opt.budget, g.total_bytes());
  o.lossy = on_miss == OnMiss::Reroute;
  PolicyOptions po;
  po.state_path = opt.policy_state;
  po.tasks_path = opt.tasks_path;
  po.emoe_variant = opt.emoe_variant;
  po.emoe_top_l = opt.emoe_top_l;
  po.budget_bytes = budget;
  po.detokenize = opt.detokenize;
  po.async_matching = true;  // in the engine, matching must never block the forward pass (fMoE §4.3)
  o.policy = make_policy(o.policy_name, g, po);
  if (opt.make_transport) o.transport = opt.make_transport(*o.store, opt.io_threads);
  if (!o.transport) o.transport = std::make_unique<FileTransport>(*o.store, opt.io_threads);
  if (on_miss == OnMiss::HostCompute && !o.transport->host_copy({0, 0}))
    throw InputError("--on-miss host-compute computes a missing expert on the CPU from host memory: it needs a GPU "
                     "backend (--backend cuda); on the CPU backend every expert already computes there (use load)");
  o.cache = std::make_unique<ExpertCache>(g, budget, *o.transport, *o.policy,
                                          opt.memory ? *opt.memory : host_expert_memory());
  o.source = std::make_unique<OffloadedExperts>(model.config(), *o.store, *o.cache, on_miss, o.transport.get());
  return o;
}

void ExpertOffload::save_state(const std::string& path) const {
  if (!active()) return;
  // Replace atomically (base/atomic_file.h): a crash mid-write never loses the previous
  // state, and a link planted next to it never redirects the write.
  AtomicFile out(path);
  policy->save(out.stream());
  out.commit();
}

std::string ExpertOffload::summary() const {
  if (!active()) return {};
  const CacheCounters& c = cache->counters();
  // Under host-compute most misses are experts computed on the CPU, not loads.
  const uint64_t host = source->host_computed();
  char s[640];
  std::snprintf(s, sizeof s,
                "experts: policy %s, budget %.1f MiB of %.1f MiB (%s) | hit rate %.1f%% (%llu hits, %llu misses%s%s), "
                "prefetch hits %llu of %llu, %.1f MiB read, %.3f s stalled%s",
                policy_name.c_str(), static_cast<double>(cache->budget_bytes()) / 1048576.0,
                static_cast<double>(store->geometry().total_bytes()) / 1048576.0,
                transport->medium().c_str(), 100.0 * c.hit_rate(), static_cast<unsigned long long>(c.hits),
                static_cast<unsigned long long>(c.misses), host ? ", computed on the host: " : "",
                host ? std::to_string(host).c_str() : "",
                static_cast<unsigned long long>(c.prefetch_hits), static_cast<unsigned long long>(c.prefetches_issued),
                static_cast<double>(c.bytes_read) / 1048576.0, c.stall_seconds,
                lossy ? " | LOSSY: --on-miss reroute changes which experts run" : "");
  return s;
}

}  // namespace moeflow

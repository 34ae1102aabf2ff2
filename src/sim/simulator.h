// The trace-driven simulator (DESIGN.md, "Simulator cost model"): replays a routing
// trace through the same ExpertCache, policy and layer protocol as the engine, on a
// SimulatedTransport's virtual clock. Per layer: dense compute advances the clock
// (prefetches in flight progress meanwhile), the router output from the trace goes to
// the policy, then experts are fetched and computed in the layer protocol's order
// (on demand, or DuoServe's two-slot prefill pipeline); a miss stalls until its copy
// lands.
//
// Requests run on one cache, `batch` at a time (continuous batching: each step carries
// the next iteration of every request in flight, a finished request's place goes to
// the next one). The first `warmup_requests` requests (the "learn" part) train learned
// policies and warm the cache without being scored, before any scored request runs; of
// the rest, the phases in `score` are counted (a step counts when it serves a scored
// request's counted phase). TPOT is per request and decode token: the time of the step
// that token waited for.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "experts/expert_cache.h"
#include "experts/layer_protocol.h"
#include "experts/expert_policy.h"
#include "sim/profiles.h"
#include "format/trace.h"

namespace moeflow {

struct SimOptions {
  std::string policy = "lru";
  double cache_fraction = 0.25;   // of all expert bytes (used when cache_bytes == 0)
  uint64_t cache_bytes = 0;
  size_t warmup_requests = 0;     // leading requests replayed unscored (learning)
  bool score_prefill = false;     // count prefill accesses in the hit rate too
  bool reroute = false;           // eMoE: misses use a resident expert instead (lossy)
  std::string policy_state;       // learned state to load before the run
  std::string tasks_path;         // emoe: task profiles (empty: profiles/tasks.json if present)
  std::string emoe_variant;       // emoe: all-layer (default) or layer-by-layer
  int32_t emoe_top_l = 0;         // emoe: L per layer (0: derived from the cache budget)
  size_t eamc_capacity = 0;       // moe-infinity: EAM collection capacity (0: its default)
  // Requests in flight at once (the serving setting): each step carries the next
  // iteration of each, their tokens tagged with their request; 1 replays requests one
  // after the other.
  size_t batch = 1;
};

struct SimResult {
  std::string policy;
  double cache_fraction = 0;
  uint64_t cache_bytes = 0;
  CacheCounters counters;         // scored part only
  double hit_rate = 0;            // scored accesses that found their expert resident
  double prefetch_accuracy = 0;   // prefetches used / prefetches issued (scored part)
  // Accesses that were resident or already on their way (a late prefetch): what the
  // policy foresaw, whether or not the link was fast enough to land it in time.
  double coverage = 0;
  double stall_seconds = 0;
  double ttft_seconds = 0;        // mean over scored requests with a prefill
  double tpot_seconds = 0;        // mean decode iteration time, scored requests
  double total_seconds = 0;
  uint64_t bytes_moved = 0;
  uint64_t peak_bytes = 0;
  uint64_t rerouted_slots = 0;     // (token, slot) pairs served by another expert, scored phases
  uint64_t scored_slots = 0;       // all (token, slot) pairs of the scored phases
  PipelineCounters pipeline;      // DuoServe's prefill pipeline, whole run (learning included)
  int64_t scored_requests = 0, scored_decode_tokens = 0;
  std::vector<std::string> notes;  // e.g. "no gate probabilities: top-k weights used"
};

// Geometry of the simulated model: the trace's shape with the profile's expert size.
ExpertGeometry sim_geometry(const Trace& trace, const ModelProfile& model);

// Runs one policy. `policy` may be prepared by the caller (null: built from
// opt.policy; "belady" is built from the trace's future).
SimResult simulate(const Trace& trace, const ModelProfile& model, const HardwareProfile& hw, const SimOptions& opt,
                   std::unique_ptr<ExpertPolicy> policy = nullptr);

}  // namespace moeflow

// The order in which one MoE layer's experts are fetched and computed, shared by the
// engine (OffloadedExperts) and the simulator so that both make the same cache and
// policy calls. Two protocols; the policy picks per layer (ExpertPolicy::stream_order).
//
// On demand (every policy, DuoServe in decode):
//   1. begin_layer: the layer's experts become protected from prefetch evictions;
//   2. pin the needed experts that are resident (hits);
//   3. request the missing ones (misses) while room allows without evicting this
//      layer's experts; the rest load in step 6;
//   4. ask the policy for its prefetches and queue them behind the demands;
//   5. compute the pinned experts while the missing ones load;
//   6. acquire (waiting if needed), compute and release each missing expert.
//
// Two-slot prefill pipeline (DuoServe-MoE §5.2, Fig. 4a): the missing experts stream
// one after the other through two slots, one computing while the other loads:
//   1. as above; the head of this layer (below) may already be resident or in flight;
//   2. start loading the first missing expert (in the policy's order), compute the
//      hits meanwhile;
//   3. for each missing expert: acquire it (the sync point), start loading the next
//      one, compute, release and retire it as the first to evict: the next load
//      takes its place, so the streamed experts cycle through two entries of the
//      cache instead of displacing what it holds for later layers and for decode;
//   4. while the layer's last expert computes, the free slot loads the head of layer
//      l+1: its most wanted expert that is not resident, which lands during l+1's
//      dense part, before its router has run (the paper's "prefetch the first expert
//      weights ... while the computation stream performs the non-MoE layers").
// The slots are cache entries, so the budget still bounds all memory; the pipeline
// itself never holds more than two experts loading or computing beyond what was
// resident (PipelineCounters::peak_slots), and no policy prefetch runs beside it
// (queued ones are cancelled when a pipelined layer starts: the link is its own).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "experts/expert_cache.h"

namespace moeflow {

struct PipelineCounters {
  uint64_t layers = 0;      // layers run through the two-slot pipeline
  uint64_t streamed = 0;    // experts it loaded after their layer's router ran
  uint64_t heads = 0;       // next-layer heads it fetched before the router
  uint64_t head_hits = 0;   // heads the layer then needed
  uint64_t overlapped = 0;  // loads started while another expert of the pipeline computed
  int32_t peak_slots = 0;   // most experts loading or computing in it at once (<= 2)
};

class LayerProtocol {
 public:
  // `compute(expert, buffer)` runs one expert (buffer is a placeholder when simulated).
  using Compute = std::function<void(int32_t, const uint8_t*)>;

  explicit LayerProtocol(ExpertCache& cache) : cache_(cache) {}

  // Fetches and computes `needed` (distinct ids) of `layer`, by the protocol the
  // cache's policy asks for.
  void run(int32_t layer, const std::vector<int32_t>& needed, const Compute& compute);

  // A step's embedding-layer output, before its first layer: handed to the policy
  // (ExpertPolicy::step_embeddings), whose plan for the step's start is queued.
  void begin_step(const std::vector<LayerRouting::StepEmbedding>& embeddings);

  const PipelineCounters& pipeline() const { return pipe_; }

 private:
  void run_on_demand(int32_t layer, const std::vector<int32_t>& needed, const Compute& compute);
  // Asks the policy for its plan at `layer_now` (-1: the step's start) and queues it.
  void plan(int32_t layer_now);
  // Queues plan_'s prefetches, at most the policy's prefetch_limit() new copies.
  void issue();
  void run_pipelined(int32_t layer, const std::vector<int32_t>& needed, const std::vector<int32_t>& order,
                     const Compute& compute);
  // Starts a copy in a free slot, waiting for the oldest load when both are taken.
  void load(const ExpertKey& key, bool demand);
  void fetch_head(int32_t next_layer);
  // Forgets loads that have landed (or were dropped); waits while more than
  // `max_loading` are left, oldest first.
  void settle(size_t max_loading);
  void note_slots();

  ExpertCache& cache_;
  std::vector<ExpertKey> loading_;  // the pipeline's copies in flight, oldest first
  bool computing_ = false;          // a streamed expert is computing
  ExpertKey head_{-1, -1};          // the last head fetched
  PipelineCounters pipe_;
  std::vector<int32_t> order_;
  PrefetchPlan plan_;
};

}  // namespace moeflow

// The engine's side of expert offloading: an ExpertSource that serves experts from an
// ExpertCache, tells the policy what happens, issues its prefetches, and handles
// misses as the run asks:
//   load     fetch the missing expert, then compute (lossless)
//   reroute  eMoE: a token whose expert is not resident uses its best-ranked resident
//            expert instead (lossy; the weights are recomputed from the router's
//            probabilities); only when fewer than top-k experts of the layer are
//            resident does a token still load its own.
//   host-compute  Fiddler: a missing expert computes on the CPU from the host copy the
//            transport keeps (Transport::host_copy; a GPU backend's host tier), its
//            load never waited for; lossless.
// Within a layer, experts are fetched and computed in the order of
// experts/layer_protocol.h: resident ones compute while missing ones load, or, when
// the policy streams prefill (DuoServe), through the two-slot pipeline.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "engine/expert_source.h"
#include "experts/expert_cache.h"
#include "experts/expert_store.h"
#include "experts/layer_protocol.h"
#include "model/model_config.h"
#include "model/model_weights.h"
#include "experts/expert_policy.h"

namespace moeflow {

enum class OnMiss { Load, Reroute, HostCompute };
// "load", "reroute" or "host-compute"; throws InputError otherwise.
OnMiss parse_on_miss(const std::string& s);
// The flag's word for m: "load", "reroute" or "host-compute".
const char* on_miss_name(OnMiss m);

// Mean of the model's input embeddings of `tokens` (fMoE's semantic prompt key).
std::vector<float> prompt_embedding(const Model& model, const std::vector<int32_t>& tokens);

class OffloadedExperts final : public ExpertSource {
 public:
  // `transport`: where host-compute finds a missing expert's bytes (the cache's own).
  OffloadedExperts(const ModelConfig& config, const ExpertStore& store, ExpertCache& cache, OnMiss on_miss,
                   const Transport* transport = nullptr);

  // Requests join and leave; several may run at once (the policy keeps each one's
  // state by its id).
  void begin_request(const RequestInfo& info);
  void end_request(int64_t id);
  void end_request();  // every running request

  void begin_step(const StepTokens& step) override;
  void routed(const LayerRouting& r) override;
  int32_t lookahead_depth() const override { return policy_.lookahead_depth(); }
  bool wants_embedding() const override { return policy_.wants_embedding(); }
  void step_embeddings(const std::vector<LayerRouting::StepEmbedding>& e) override { protocol_.begin_step(e); }
  void prepare_layer(LayerRouting& r) override;
  void run_experts(int32_t layer, const std::vector<int32_t>& needed, const ExpertCompute& compute) override;
  void end_step() override;

  OnMiss on_miss() const { return on_miss_; }
  uint64_t rerouted_slots() const { return rerouted_; }
  // Experts computed from host memory on a miss (host-compute).
  uint64_t host_computed() const { return host_computed_; }
  uint64_t iterations() const { return iter_; }
  const PipelineCounters& pipeline() const { return protocol_.pipeline(); }

 private:
  void reroute(LayerRouting& r);

  const ModelConfig& config_;
  const ExpertStore& store_;
  ExpertCache& cache_;
  ExpertPolicy& policy_;
  LayerProtocol protocol_;
  OnMiss on_miss_;
  const Transport* transport_;
  uint64_t host_computed_ = 0;
  std::vector<int32_t> resident_, missing_;
  std::set<int64_t> running_;
  int64_t iter_ = 0;
  uint64_t rerouted_ = 0;
};

}  // namespace moeflow

// How the forward pass reaches expert weights. Without a source, the MoE block reads
// experts straight from the model file's mapping (everything resident: the `all`
// reference). With one, a source decides where each expert's bytes come from and in
// which order experts compute (resident first while missing ones load), and may
// change the routing (eMoE rerouting).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "experts/expert_key.h"
#include "experts/expert_store.h"

namespace moeflow {

// Sees every forward call and every layer's routing (trace recorder, statistics).
class ForwardListener {
 public:
  virtual ~ForwardListener() = default;
  // One eval call: `n` tokens at positions pos..pos+n-1.
  virtual void begin_iteration(const int32_t* /*tokens*/, int64_t /*n*/, int64_t /*pos*/) {}
  // The router's decision, before any rerouting.
  virtual void routed(const LayerRouting&) {}
  virtual void end_iteration() {}
};

using ExpertCompute = std::function<void(int32_t expert, const ExpertMatrices&)>;

class ExpertSource : public ForwardListener {
 public:
  // May rewrite the routing of the layer about to run (lossy modes only).
  virtual void prepare_layer(LayerRouting&) {}
  // Calls compute once for every expert in `needed` (distinct ids), in any order.
  virtual void run_experts(int32_t layer, const std::vector<int32_t>& needed, const ExpertCompute& compute) = 0;
};

}  // namespace moeflow

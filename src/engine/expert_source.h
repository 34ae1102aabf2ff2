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
#include "engine/step_tokens.h"

namespace moeflow {

// Sees every forward call and every layer's routing (trace recorder, statistics).
class ForwardListener {
 public:
  virtual ~ForwardListener() = default;
  // One forward step (valid until end_step).
  virtual void begin_step(const StepTokens&) {}
  // The router's decision, before any rerouting (requests: each token's request).
  virtual void routed(const LayerRouting&) {}
  // Layers of lookahead routing wanted in routed() (LayerRouting::lookahead); the
  // forward pass computes the most any listener or the source asks for, none if 0.
  virtual int32_t lookahead_depth() const { return 0; }
  // Whether routed() should carry LayerRouting::embeddings with the step's first MoE
  // layer; the forward pass computes them when any listener or the source asks.
  virtual bool wants_embedding() const { return false; }
  virtual void end_step() {}
};

using ExpertCompute = std::function<void(int32_t expert, const ExpertMatrices&)>;

class ExpertSource : public ForwardListener {
 public:
  // The step's embedding-layer output pooled per request, before its first layer
  // (only when wants_embedding() and the step has some).
  virtual void step_embeddings(const std::vector<LayerRouting::StepEmbedding>&) {}
  // May rewrite the routing of the layer about to run (lossy modes only).
  virtual void prepare_layer(LayerRouting&) {}
  // Calls compute once for every expert in `needed` (distinct ids), in any order.
  virtual void run_experts(int32_t layer, const std::vector<int32_t>& needed, const ExpertCompute& compute) = 0;
};

}  // namespace moeflow

// Lookahead routing: the routers of the next layers applied to the current layer's
// MoE input, so a policy at layer l knows which experts layers l+1..l+D would pick if
// the hidden state did not change between them (it changes little: the residual
// stream carries most of it). Each layer's router sees the hidden state through its
// own norm, as it would at its own layer. Costs D router products per layer; the
// forward pass runs it only when a listener or the expert source asks
// (ForwardListener::lookahead_depth).
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "engine/step_tokens.h"
#include "experts/expert_key.h"
#include "model/model_weights.h"

namespace moeflow {

class LookaheadRouter {
 public:
  // Fills r.lookahead / r.lookahead_depth for layer r.layer: x is the layer's MoE input
  // (the residual stream before its norm), [n_tok][n_embd]. The depth is `depth`, cut
  // at the last layer and at the first layer without a router. Single tokens of the
  // step take the mat-vec path, as the layer's own router does, so with an unchanged
  // hidden state the lookahead equals the next layer's choice bit for bit.
  void route(const ModelConfig& c, const ModelWeights& w, int32_t depth, const float* x, const StepTokens& step,
             LayerRouting& r, Backend& backend);

 private:
  std::vector<float> xn_, logits_;
  std::vector<Product> jobs_;
  LayerRouting ahead_;
};

}  // namespace moeflow

// The MoE feed-forward block: route every token, group the batch's tokens by expert,
// run each chosen expert once over its group, and combine the outputs.
//
// Outputs are summed per token in the fixed top-k order regardless of the order in
// which experts were computed, so a run that computes experts in a different order
// (because some had to be loaded first) gives bit-identical results.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "model/model_weights.h"

namespace moeflow {

// Router output of one layer for a batch of tokens.
struct LayerRouting {
  int64_t layer = 0;
  int64_t n_tok = 0, n_expert = 0, top_k = 0;
  std::vector<int32_t> experts;   // [n_tok][top_k], best first
  std::vector<float> weights;     // [n_tok][top_k], as applied (renormalised or not)
  std::vector<float> probs;       // [n_tok][n_expert], full softmax of the router
};

// Called after each layer's routing (trace recorder, policies). May be empty.
using RoutingObserver = std::function<void(const LayerRouting&)>;

// Softmax over the router logits, top-k with ties to the lower id, optional renormalisation.
void route_tokens(const ModelConfig& c, const float* router_logits, int64_t n_tok, int64_t layer,
                  LayerRouting& out);

// x_norm: [n_tok][n_embd] normalised input. out: [n_tok][n_embd], overwritten.
void moe_forward(const ModelConfig& c, const LayerWeights& w, const LayerRouting& routing,
                 const float* x_norm, float* out, ThreadPool* pool);

}  // namespace moeflow

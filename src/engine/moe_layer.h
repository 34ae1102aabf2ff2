// The MoE feed-forward block: route every token, group the batch's tokens by expert,
// run each chosen expert once over its group, and combine the outputs.
//
// Outputs are summed per token in the fixed top-k order regardless of the order in
// which experts were computed, so a run that computes experts in a different order
// (because some had to be loaded first) gives bit-identical results.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/expert_source.h"
#include "experts/expert_key.h"
#include "backend/backend.h"
#include "model/model_weights.h"

namespace moeflow {

// The router logits of layer L for the step's tokens: L's FFN norm of the MoE input x
// ([n_tok][n_embd]) into xn, the router product into logits ([n_tok][n_expert]; every
// token as its own mat-vec, as a decode step computes it), plus the router's bias
// (gpt-oss). jobs is scratch. The layer's own routing and the lookahead
// (lookahead_routing.h) both come from here.
void router_logits(const ModelConfig& c, const LayerWeights& L, const float* x, int64_t n_tok,
                   std::vector<float>& xn, std::vector<float>& logits, std::vector<Product>& jobs, Backend& backend);

// The router's scores (softmax over the logits, or each one's sigmoid: c.router_scoring),
// top-k with ties to the lower id of the scores plus choice_bias (the layer's, empty when
// none), among the chosen groups' experts under group-limited routing; the chosen
// experts' unbiased scores, renormalised or not, times c.expert_weights_scale are the
// weights.
void route_tokens(const ModelConfig& c, const std::vector<float>& choice_bias, const float* router_logits,
                  int64_t n_tok, int64_t layer, LayerRouting& out, Backend& backend);

// x_norm: [n_tok][n_embd] normalised input. out: [n_tok][n_embd], overwritten.
// Experts come from `source`, or from the mapped weights `w` when it is null.
void moe_forward(const ModelConfig& c, const LayerWeights& w, const LayerRouting& routing,
                 const float* x_norm, float* out, Backend& backend, ExpertSource* source = nullptr);

// Recomputes a token's top-k weights from the full probabilities for the experts it
// now uses (after rerouting), renormalised or not as the model defines.
void reweight_token(const ModelConfig& c, LayerRouting& r, int64_t token);

}  // namespace moeflow

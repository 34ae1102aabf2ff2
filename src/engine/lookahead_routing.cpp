#include "engine/lookahead_routing.h"

#include <algorithm>

#include "engine/moe_layer.h"

namespace moeflow {

void LookaheadRouter::route(const ModelConfig& c, const ModelWeights& w, int32_t depth, const float* x,
                            const StepTokens& step, LayerRouting& r, Backend& backend) {
  const int64_t n = r.n_tok, K = r.top_k, l = r.layer;
  // r.layer numbers MoE layers; the weights are the model's layers, the leading dense
  // ones first (deepseek2: model_config.h, n_dense_lead).
  const int64_t first = l + c.n_dense_lead;
  int64_t d = 0;
  while (d < depth && first + d + 1 < c.n_layer && w.layers[static_cast<size_t>(first + d + 1)].gate_inp.data) ++d;
  r.lookahead_depth = d;
  r.lookahead.assign(static_cast<size_t>(n * d * K), 0);
  for (int64_t h = 1; h <= d; ++h) {
    const LayerWeights& L = w.layers[static_cast<size_t>(first + h)];
    router_logits(c, L, x, n, xn_, logits_, jobs_, backend);
    route_tokens(c, L.choice_bias, logits_.data(), n, l + h, ahead_, backend);
    for (int64_t t = 0; t < n; ++t)
      std::copy(ahead_.experts.begin() + t * K, ahead_.experts.begin() + (t + 1) * K,
                r.lookahead.begin() + (t * d + (h - 1)) * K);
  }
}

}  // namespace moeflow

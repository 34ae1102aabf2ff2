#include "engine/lookahead_routing.h"

#include <algorithm>

#include "engine/moe_layer.h"

namespace moeflow {

void LookaheadRouter::route(const ModelConfig& c, const ModelWeights& w, int32_t depth, const float* x,
                            const StepTokens& step, LayerRouting& r, Backend& backend) {
  const int64_t n = r.n_tok, D = c.n_embd, E = c.n_expert, K = r.top_k, l = r.layer;
  int64_t d = 0;
  while (d < depth && l + d + 1 < c.n_layer && w.layers[static_cast<size_t>(l + d + 1)].gate_inp.data) ++d;
  r.lookahead_depth = d;
  r.lookahead.assign(static_cast<size_t>(n * d * K), 0);
  if (d == 0) return;
  xn_.resize(static_cast<size_t>(n * D));
  logits_.resize(static_cast<size_t>(n * E));
  for (int64_t h = 1; h <= d; ++h) {
    const LayerWeights& L = w.layers[static_cast<size_t>(l + h)];
    backend.rmsnorm_rows(x, L.ffn_norm.data(), xn_.data(), n, D, c.rms_eps);
    const MatrixRef& g = L.gate_inp;
    jobs_.clear();
    if (step.n_single > 0) jobs_.push_back({g.dtype, g.layout, g.data, g.rows, g.cols, xn_.data(), step.n_single, logits_.data(), true});
    if (n > step.n_single)
      jobs_.push_back({g.dtype, g.layout, g.data, g.rows, g.cols, xn_.data() + step.n_single * D, n - step.n_single,
                       logits_.data() + step.n_single * E});
    backend.products(jobs_.data(), jobs_.size());
    // The router's own bias (gpt-oss), as the layer itself adds it before routing.
    if (!L.gate_inp_b.empty())
      for (int64_t t = 0; t < n; ++t)
        for (int64_t e = 0; e < E; ++e) logits_[static_cast<size_t>(t * E + e)] += L.gate_inp_b[static_cast<size_t>(e)];
    route_tokens(c, logits_.data(), n, l + h, ahead_, backend);
    for (int64_t t = 0; t < n; ++t)
      std::copy(ahead_.experts.begin() + t * K, ahead_.experts.begin() + (t + 1) * K,
                r.lookahead.begin() + (t * d + (h - 1)) * K);
  }
}

}  // namespace moeflow

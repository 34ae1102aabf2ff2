#include "engine/moe_layer.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/expert_groups.h"
#include "engine/step_products.h"


namespace moeflow {

namespace {

// Expert e's matrices with what the layer adds to them (gpt-oss: its biases, kept
// resident, and the clamped SwiGLU), wherever the matrices came from.
ExpertMatrices with_layer_extras(const ModelConfig& c, const LayerWeights& w, int32_t e, ExpertMatrices m) {
  m.glu = c.expert_glu;
  if (!w.gate_exps_b.empty()) {
    m.gate_bias = w.gate_exps_b.data() + static_cast<size_t>(e) * static_cast<size_t>(c.n_ff_expert);
    m.up_bias = w.up_exps_b.data() + static_cast<size_t>(e) * static_cast<size_t>(c.n_ff_expert);
    m.down_bias = w.down_exps_b.data() + static_cast<size_t>(e) * static_cast<size_t>(c.n_embd);
  }
  return m;
}

}  // namespace

void router_logits(const ModelConfig& c, const LayerWeights& L, const float* x, int64_t n_tok,
                   std::vector<float>& xn, std::vector<float>& logits, std::vector<Product>& jobs, Backend& backend) {
  const int64_t D = c.n_embd, E = c.n_expert;
  xn.resize(static_cast<size_t>(n_tok * D));
  logits.resize(static_cast<size_t>(n_tok * E));
  backend.rmsnorm_rows(x, L.ffn_norm.data(), xn.data(), n_tok, D, c.rms_eps);
  jobs.clear();
  // Token by token, whatever the router's type (f32 in most files): its logits, and so
  // the experts a token chooses and their weights, are then the same bits in a prompt's
  // chunk as in a decode step. Its rows are few (one per expert), so reading it once a
  // token costs next to nothing beside the experts it picks.
  jobs.push_back({L.gate_inp.dtype, L.gate_inp.layout, L.gate_inp.data, L.gate_inp.rows, L.gate_inp.cols, xn.data(),
                  n_tok, logits.data(), true});
  backend.products(jobs.data(), jobs.size());
  if (!L.gate_inp_b.empty()) add_bias(logits.data(), L.gate_inp_b, n_tok);
}

void route_tokens(const ModelConfig& c, const std::vector<float>& choice_bias, const float* router_logits,
                  int64_t n_tok, int64_t layer, LayerRouting& r, Backend& backend) {
  const int64_t E = c.n_expert, K = c.n_expert_used;
  r.layer = layer;
  r.n_tok = n_tok;
  r.n_expert = E;
  r.top_k = K;
  r.probs.assign(router_logits, router_logits + n_tok * E);
  r.experts.resize(static_cast<size_t>(n_tok * K));
  r.weights.resize(static_cast<size_t>(n_tok * K));
  std::vector<int32_t> order(static_cast<size_t>(E));
  std::vector<float> biased(choice_bias.empty() ? 0 : static_cast<size_t>(E));
  std::vector<float> in_groups(c.n_expert_group > 1 ? static_cast<size_t>(E) : 0);
  if (c.router_scoring == RouterScoring::Sigmoid) {
    for (float& x : r.probs) x = 1.0f / (1.0f + std::exp(-x));
  } else {
    backend.softmax_rows(r.probs.data(), n_tok, E);
  }
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* p = r.probs.data() + t * E;
    // The choice bias and group-limited routing change the ranking, not the scores the
    // weights are taken from.
    const float* rank = p;
    if (!biased.empty()) {
      for (int64_t e = 0; e < E; ++e) biased[static_cast<size_t>(e)] = p[e] + choice_bias[static_cast<size_t>(e)];
      rank = biased.data();
    }
    if (c.n_expert_group > 1) rank = limit_to_groups(c, rank, in_groups.data());
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [rank](int32_t a, int32_t b) { return rank[a] > rank[b] || (rank[a] == rank[b] && a < b); });
    for (int64_t k = 0; k < K; ++k) r.experts[t * K + k] = order[k];
    reweight_token(c, r, t);
  }
}

void reweight_token(const ModelConfig& c, LayerRouting& r, int64_t t) {
  const int64_t K = r.top_k, E = r.n_expert;
  const float* p = r.probs.data() + t * E;
  double sum = 0;
  for (int64_t k = 0; k < K; ++k) sum += p[r.experts[t * K + k]];
  for (int64_t k = 0; k < K; ++k) {
    const float pk = p[r.experts[t * K + k]];
    r.weights[t * K + k] = (c.norm_topk ? static_cast<float>(pk / sum) : pk) * c.expert_weights_scale;
  }
}

void moe_forward(const ModelConfig& c, const LayerWeights& w, const LayerRouting& r, const float* x_norm,
                 float* out, Backend& backend, ExpertSource* source) {
  const int64_t D = c.n_embd, F = c.n_ff_expert, K = r.top_k, T = r.n_tok;
  const int64_t* requests = r.requests.empty() ? nullptr : r.requests.data();
  // Group (token, slot) pairs by expert.
  std::vector<std::vector<int64_t>> slots(static_cast<size_t>(c.n_expert));
  for (int64_t i = 0; i < T * K; ++i) slots[r.experts[i]].push_back(i);

  std::vector<float> per_slot(static_cast<size_t>(T * K * D));
  std::vector<int32_t> needed;
  for (int32_t e = 0; e < static_cast<int32_t>(c.n_expert); ++e)
    if (!slots[static_cast<size_t>(e)].empty()) needed.push_back(e);
  if (source) {
    source->run_experts(static_cast<int32_t>(r.layer), needed, [&](int32_t e, const ExpertMatrices& m) {
      const std::vector<int64_t>* s = &slots[static_cast<size_t>(e)];
      const ExpertMatrices full = with_layer_extras(c, w, e, m);
      backend.expert_ffns(&full, &s, 1, x_norm, requests, K, D, F, per_slot.data());
    });
  } else {
    std::vector<ExpertMatrices> mats;
    std::vector<const std::vector<int64_t>*> expert_slots;
    for (int32_t e : needed) {
      mats.push_back(with_layer_extras(c, w, e, {w.gate_exps.expert(e), w.up_exps.expert(e), w.down_exps.expert(e)}));
      expert_slots.push_back(&slots[static_cast<size_t>(e)]);
    }
    backend.expert_ffns(mats.data(), expert_slots.data(), mats.size(), x_norm, requests, K, D, F, per_slot.data());
  }
  for (int64_t t = 0; t < T; ++t) {
    float* o = out + t * D;
    std::fill(o, o + D, 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const float wk = r.weights[t * K + k];
      const float* src = per_slot.data() + (t * K + k) * D;
      for (int64_t i = 0; i < D; ++i) o[i] += wk * src[i];
    }
  }
}

}  // namespace moeflow

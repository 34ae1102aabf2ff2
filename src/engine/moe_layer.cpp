#include "engine/moe_layer.h"

#include <algorithm>
#include <numeric>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"

namespace moeflow {

void route_tokens(const ModelConfig& c, const float* router_logits, int64_t n_tok, int64_t layer,
                  LayerRouting& r) {
  const int64_t E = c.n_expert, K = c.n_expert_used;
  r.layer = layer;
  r.n_tok = n_tok;
  r.n_expert = E;
  r.top_k = K;
  r.probs.assign(router_logits, router_logits + n_tok * E);
  r.experts.resize(static_cast<size_t>(n_tok * K));
  r.weights.resize(static_cast<size_t>(n_tok * K));
  std::vector<int32_t> order(static_cast<size_t>(E));
  for (int64_t t = 0; t < n_tok; ++t) {
    float* p = r.probs.data() + t * E;
    cpu::softmax(p, E);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + K, order.end(),
                      [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
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
    r.weights[t * K + k] = c.norm_topk ? static_cast<float>(pk / sum) : pk;
  }
}

namespace {

// Decode with every expert resident: one token, K experts. All gate and up products
// run as one batch and all down products as another: two fork/joins per layer instead
// of 3K, which on a small model is much of a decode step's time.
void decode_resident_experts(const LayerWeights& w, const std::vector<int32_t>& needed, const float* x,
                             int64_t D, int64_t F, float* per_slot,
                             const std::vector<std::vector<int64_t>>& slots, ThreadPool* pool) {
  const size_t n = needed.size();
  thread_local std::vector<float> gate, up;
  gate.resize(n * static_cast<size_t>(F));
  up.resize(n * static_cast<size_t>(F));
  std::vector<cpu::MatvecJob> jobs;
  jobs.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    const MatrixRef g = w.gate_exps.expert(needed[i]), u = w.up_exps.expert(needed[i]);
    jobs.push_back({g.dtype, g.data, g.rows, g.cols, x, gate.data() + i * F});
    jobs.push_back({u.dtype, u.data, u.rows, u.cols, x, up.data() + i * F});
  }
  cpu::matvec_batch(jobs.data(), jobs.size(), pool);
  cpu::swiglu(gate.data(), up.data(), gate.data(), static_cast<int64_t>(n) * F);
  jobs.clear();
  for (size_t i = 0; i < n; ++i) {
    const MatrixRef d = w.down_exps.expert(needed[i]);
    // The token's slot for this expert (T == 1: exactly one).
    const int64_t slot = slots[static_cast<size_t>(needed[i])].front();
    jobs.push_back({d.dtype, d.data, d.rows, d.cols, gate.data() + i * F, per_slot + slot * D});
  }
  cpu::matvec_batch(jobs.data(), jobs.size(), pool);
}

// Prefill with every expert resident: each selected expert's tokens gathered, then
// all gate and up products as one batch, SwiGLU, and all down products as another
// (two fork/joins per layer instead of three per expert; the threads' shares are
// balanced by FLOPs across experts that got very different numbers of tokens).
void prefill_resident_experts(const LayerWeights& w, const std::vector<int32_t>& needed,
                              const std::vector<std::vector<int64_t>>& slots, const float* x, int64_t K,
                              int64_t D, int64_t F, float* per_slot, ThreadPool* pool) {
  const size_t n = needed.size();
  std::vector<size_t> first(n + 1, 0);  // expert i's rows start at row first[i]
  for (size_t i = 0; i < n; ++i) first[i + 1] = first[i] + slots[static_cast<size_t>(needed[i])].size();
  const size_t rows = first[n];
  thread_local std::vector<float> xe, gate, up, down;
  xe.resize(rows * static_cast<size_t>(D));
  gate.resize(rows * static_cast<size_t>(F));
  up.resize(rows * static_cast<size_t>(F));
  down.resize(rows * static_cast<size_t>(D));
  for (size_t i = 0; i < n; ++i) {
    const auto& s = slots[static_cast<size_t>(needed[i])];
    for (size_t j = 0; j < s.size(); ++j) std::copy_n(x + (s[j] / K) * D, D, xe.data() + (first[i] + j) * D);
  }
  std::vector<cpu::MatmulJob> jobs;
  jobs.reserve(2 * n);
  for (size_t i = 0; i < n; ++i) {
    const MatrixRef g = w.gate_exps.expert(needed[i]), u = w.up_exps.expert(needed[i]);
    const int64_t nt = static_cast<int64_t>(first[i + 1] - first[i]);
    const float* xi = xe.data() + first[i] * D;
    jobs.push_back({g.dtype, g.data, g.rows, g.cols, xi, nt, gate.data() + first[i] * F});
    jobs.push_back({u.dtype, u.data, u.rows, u.cols, xi, nt, up.data() + first[i] * F});
  }
  cpu::matmul_batch(jobs.data(), jobs.size(), pool);
  cpu::swiglu(gate.data(), up.data(), gate.data(), static_cast<int64_t>(rows) * F);
  jobs.clear();
  for (size_t i = 0; i < n; ++i) {
    const MatrixRef d = w.down_exps.expert(needed[i]);
    const int64_t nt = static_cast<int64_t>(first[i + 1] - first[i]);
    jobs.push_back({d.dtype, d.data, d.rows, d.cols, gate.data() + first[i] * F, nt, down.data() + first[i] * D});
  }
  cpu::matmul_batch(jobs.data(), jobs.size(), pool);
  for (size_t i = 0; i < n; ++i) {
    const auto& s = slots[static_cast<size_t>(needed[i])];
    for (size_t j = 0; j < s.size(); ++j) std::copy_n(down.data() + (first[i] + j) * D, D, per_slot + s[j] * D);
  }
}

}  // namespace

void moe_forward(const ModelConfig& c, const LayerWeights& w, const LayerRouting& r, const float* x_norm,
                 float* out, ThreadPool* pool, ExpertSource* source) {
  const int64_t D = c.n_embd, F = c.n_ff_expert, K = r.top_k, T = r.n_tok;
  // Group (token, slot) pairs by expert.
  std::vector<std::vector<int64_t>> slots(static_cast<size_t>(c.n_expert));
  for (int64_t i = 0; i < T * K; ++i) slots[r.experts[i]].push_back(i);

  std::vector<float> per_slot(static_cast<size_t>(T * K * D));
  std::vector<float> xe, gate, up, down;
  auto compute = [&](int32_t e, const ExpertMatrices& m) {
    const auto& s = slots[static_cast<size_t>(e)];
    const int64_t n = static_cast<int64_t>(s.size());
    xe.resize(static_cast<size_t>(n * D));
    for (int64_t j = 0; j < n; ++j) std::copy_n(x_norm + (s[j] / K) * D, D, xe.data() + j * D);
    gate.resize(static_cast<size_t>(n * F));
    up.resize(static_cast<size_t>(n * F));
    down.resize(static_cast<size_t>(n * D));
    const MatrixRef &g = m.gate, &u = m.up, &d = m.down;
    cpu::matmul(g.dtype, g.data, g.rows, g.cols, xe.data(), n, gate.data(), pool);
    cpu::matmul(u.dtype, u.data, u.rows, u.cols, xe.data(), n, up.data(), pool);
    cpu::swiglu(gate.data(), up.data(), gate.data(), n * F);
    cpu::matmul(d.dtype, d.data, d.rows, d.cols, gate.data(), n, down.data(), pool);
    for (int64_t j = 0; j < n; ++j) std::copy_n(down.data() + j * D, D, per_slot.data() + s[j] * D);
  };
  std::vector<int32_t> needed;
  for (int32_t e = 0; e < static_cast<int32_t>(c.n_expert); ++e)
    if (!slots[static_cast<size_t>(e)].empty()) needed.push_back(e);
  if (source) {
    source->run_experts(static_cast<int32_t>(r.layer), needed, compute);
  } else if (T == 1) {
    decode_resident_experts(w, needed, x_norm, D, F, per_slot.data(), slots, pool);
  } else {
    prefill_resident_experts(w, needed, slots, x_norm, K, D, F, per_slot.data(), pool);
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

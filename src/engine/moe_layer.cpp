#include "engine/moe_layer.h"

#include <algorithm>
#include <numeric>

#include "engine/experts_per_thread.h"
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

// The SwiGLU FFN of experts mats[0, n), each over the (token, slot) pairs slots[i]
// that chose it, on the pool (null: the calling thread alone); row s of per_slot gets
// slot s's output. Every expert's gate and up products run as one batch and all down
// products as another (cpu::matmul_batch: two fork/joins per call instead of three
// per expert, the threads' shares balanced by FLOPs across experts with very
// different numbers of tokens). The resident experts of a layer come here together,
// an offloaded one as soon as it is in memory: the same kernels either way, so
// offloading is lossless bit for bit.
//
// Which kernel a token takes depends on its own sequence only: a token that is the
// only one of its sequence (requests, per token) in an expert's group runs as a
// mat-vec (a decode token; every token of a group of one), the others of its
// sequence as a mat-mul. So a sequence gets the same floats batched with any others
// as alone. Each expert's rows are laid out mat-vec tokens first ("lone"), then the
// mat-mul ones.
void expert_ffns(const ExpertMatrices* mats, const std::vector<int64_t>* const* slots, size_t n, const float* x,
                 const int64_t* requests, int64_t K, int64_t D, int64_t F, float* per_slot, ThreadPool* pool) {
  thread_local std::vector<int64_t> order;  // slots of every expert, lone first
  thread_local std::vector<size_t> first, lone;
  thread_local std::vector<float> xe, gate, up, down;
  first.assign(n + 1, 0);
  lone.assign(n, 0);
  order.clear();
  for (size_t i = 0; i < n; ++i) {
    const std::vector<int64_t>& sl = *slots[i];
    first[i + 1] = first[i] + sl.size();
    auto alone = [&](int64_t slot) {
      if (!requests) return sl.size() == 1;
      const int64_t r = requests[slot / K];
      return std::count_if(sl.begin(), sl.end(), [&](int64_t o) { return requests[o / K] == r; }) == 1;
    };
    const size_t at = order.size();
    for (int64_t slot : sl)
      if (alone(slot)) order.push_back(slot);
    lone[i] = order.size() - at;
    for (int64_t slot : sl)
      if (!alone(slot)) order.push_back(slot);
  }
  const size_t rows = first[n];
  xe.resize(rows * static_cast<size_t>(D));
  gate.resize(rows * static_cast<size_t>(F));
  up.resize(rows * static_cast<size_t>(F));
  down.resize(rows * static_cast<size_t>(D));
  // A group of one token reads it in place (every expert of a decode step), so experts
  // that share the token share one pointer and the mat-vecs quantise and pack it once;
  // larger groups read their tokens gathered into xe.
  auto input = [&](size_t i, size_t r0, size_t nt) -> const float* {
    if (nt == 1) return x + (order[r0] / K) * D;
    for (size_t j = 0; j < nt; ++j) std::copy_n(x + (order[r0 + j] / K) * D, D, xe.data() + (r0 + j) * D);
    return xe.data() + r0 * D;
  };
  std::vector<cpu::MatmulJob> jobs;
  jobs.reserve(4 * n);
  // Up to two jobs per expert and matrix: its lone tokens, then the others.
  auto add = [&](const MatrixRef& w, size_t i, const float* const in[2], float* out, int64_t out_w, int64_t in_w) {
    const size_t parts[2][2] = {{first[i], lone[i]}, {first[i] + lone[i], first[i + 1] - first[i] - lone[i]}};
    for (int k = 0; k < 2; ++k) {
      const auto [r0, nt] = parts[k];
      if (nt == 0) continue;
      const float* xin = in ? in[k] : gate.data() + r0 * static_cast<size_t>(in_w);
      jobs.push_back({w.dtype, w.data, w.rows, w.cols, xin, static_cast<int64_t>(nt), out + r0 * out_w, k == 0});
    }
  };
  for (size_t i = 0; i < n; ++i) {
    const float* in[2] = {lone[i] ? input(i, first[i], lone[i]) : nullptr,
                          first[i + 1] - first[i] > lone[i] ? input(i, first[i] + lone[i], first[i + 1] - first[i] - lone[i])
                                                            : nullptr};
    add(mats[i].gate, i, in, gate.data(), F, D);
    add(mats[i].up, i, in, up.data(), F, D);
  }
  cpu::matmul_batch(jobs.data(), jobs.size(), pool);
  cpu::swiglu(gate.data(), up.data(), gate.data(), static_cast<int64_t>(rows) * F);
  jobs.clear();
  for (size_t i = 0; i < n; ++i) add(mats[i].down, i, nullptr, down.data(), D, F);
  cpu::matmul_batch(jobs.data(), jobs.size(), pool);
  for (size_t r = 0; r < rows; ++r) std::copy_n(down.data() + r * D, D, per_slot + order[r] * D);
}

}  // namespace

void moe_forward(const ModelConfig& c, const LayerWeights& w, const LayerRouting& r, const float* x_norm,
                 float* out, ThreadPool* pool, ExpertSource* source) {
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
      expert_ffns(&m, &s, 1, x_norm, requests, K, D, F, per_slot.data(), pool);
    });
  } else {
    std::vector<ExpertMatrices> mats;
    std::vector<const std::vector<int64_t>*> expert_slots;
    for (int32_t e : needed) {
      mats.push_back({w.gate_exps.expert(e), w.up_exps.expert(e), w.down_exps.expert(e)});
      expert_slots.push_back(&slots[static_cast<size_t>(e)]);
    }
    // A decode step whose experts divide evenly among the threads (top-2 on 2 threads,
    // top-8 on 2, 4 or 8): each thread runs whole experts, gate and up, SwiGLU, the
    // quantising of its output and down, in one parallel section. Split by rows, as
    // below, the same step takes two sections, and between them the calling thread
    // reads the other core's half of every gate and up output: the largest serial gap
    // of a decode step (5 us per layer when this VM's two vCPUs are slow to exchange
    // data). 330M q4_0/q8_0 models, 2 threads, 39 alternating A/B rounds, medians:
    // q4_0 decode 941 -> 984 tok/s when the triad is ~50 GB/s, 1074 -> 1138 at ~90
    // (64.6-71.9% of the bound against 61.5-66.6%); q8_0 472 -> 497 and 607 -> 647.
    // Same kernels on the same rows, so the same floats (MoeLayer tests).
    // Tiny experts (the test fixtures') are not worth a fork/join: matmul.cpp's
    // threshold for one, 2^15 multiply-adds, applies to all of them together.
    const int parts = pool ? pool->size() : 1;
    const int64_t n = static_cast<int64_t>(mats.size());
    if (T == 1 && parts > 1 && n % parts == 0 && 3 * n * D * F >= (int64_t{1} << 15)) {
      thread_local ExpertsPerThread ept;  // the caller's; its buffers are reused
      ept.run(mats.data(), expert_slots.data(), mats.size(), x_norm, K, D, F, per_slot.data(), *pool);
    } else {
      expert_ffns(mats.data(), expert_slots.data(), mats.size(), x_norm, requests, K, D, F, per_slot.data(), pool);
    }
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

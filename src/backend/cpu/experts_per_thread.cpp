#include "backend/cpu/experts_per_thread.h"

#include <algorithm>
#include <stdexcept>

#include "backend/cpu/expert_activation.h"

namespace moeflow {

void ExpertsPerThread::owner_runs(const std::vector<int64_t>* const* slots, size_t n, int parts,
                                  std::vector<size_t>& first) {
  auto cost = [&](size_t e) { return static_cast<uint64_t>(slots[e]->size()) + 3; };
  uint64_t total = 0;
  for (size_t e = 0; e < n; ++e) total += cost(e);
  first.assign(static_cast<size_t>(parts) + 1, n);
  first[0] = 0;
  // Twice the costs, so that an expert's middle is a whole number.
  uint64_t before = 0;
  int p = 1;
  for (size_t e = 0; e < n; ++e) {
    const uint64_t middle = 2 * before + cost(e);
    while (p < parts && middle >= 2 * total * static_cast<uint64_t>(p) / static_cast<uint64_t>(parts)) first[p++] = e;
    before += cost(e);
  }
}

void ExpertsPerThread::run(const ExpertMatrices* mats, const std::vector<int64_t>* const* slots, size_t n,
                           const float* x, int64_t K, int64_t D, int64_t F, float* per_slot, ThreadPool& pool,
                           ActivationPrecision activations) {
  if (n < static_cast<size_t>(pool.size()))
    throw std::logic_error("moeflow: ExpertsPerThread::run with fewer experts than threads");
  activations_ = activations;
  while (experts_.size() < n) experts_.push_back(std::make_unique<Shared>());
  const uint32_t groups = static_cast<uint32_t>((D + kGroup - 1) / kGroup);
  bounds_.resize(n + 1);
  for (size_t e = 0; e <= n; ++e) bounds_[e] = static_cast<uint32_t>(e) * groups;
  ranges_.reset(bounds_.data(), static_cast<int>(n));
  for (size_t e = 0; e < n; ++e) experts_[e]->ready.store(false, std::memory_order_relaxed);
  failed_.store(false, std::memory_order_relaxed);
  owner_runs(slots, n, pool.size(), owners_);
  pool.parallel_for(pool.size(), [&](int64_t p0, int64_t p1, int) {
    // Every own expert prepared before any own down rows, so that a thread whose run
    // ends first finds the others' down projections ready to take from; then others'
    // rows: a thread handed several threads' shares must not wait for experts it has
    // yet to prepare itself.
    const size_t e0 = owners_[static_cast<size_t>(p0)], e1 = owners_[static_cast<size_t>(p1)];
    try {
      for (size_t e = e0; e < e1; ++e) prepare_expert(e, mats[e], *slots[e], x, K, D, F, per_slot);
    } catch (...) {
      failed_.store(true);  // the others must not wait for experts that will never be ready
      throw;
    }
    for (size_t e = e0; e < e1; ++e) {
      uint32_t b = 0, end = 0;
      while (ranges_.take_front(static_cast<int>(e), kOwn, kSteal, b, end)) down_rows(e, b, end, D, groups);
    }
    steal(n, D, groups);
  });
}

void ExpertsPerThread::down_rows(size_t e, uint32_t b, uint32_t end, int64_t D, uint32_t groups) const {
  const int64_t first = static_cast<int64_t>(b - e * groups) * kGroup;
  const int64_t last = std::min<int64_t>(static_cast<int64_t>(end - e * groups) * kGroup, D);
  const Shared& s = *experts_[e];
  s.down.rows(first, last);
  for (float* out : s.outs) expert_down_bias(*s.mats, out, 1, 0, first, last);
}

void ExpertsPerThread::prepare_expert(size_t e, const ExpertMatrices& m, const std::vector<int64_t>& slots,
                                      const float* x, int64_t K, int64_t D, int64_t F, float* per_slot) {
  Shared& s = *experts_[e];
  const size_t nt = slots.size();
  s.gate.resize(nt * static_cast<size_t>(F));
  s.up.resize(nt * static_cast<size_t>(F));
  // Every token's gate product, then every token's up product: matvec_batch reads
  // each matrix once for all the tokens, the two together (an expert's lone token:
  // the two mat-vecs on one activation).
  thread_local std::vector<cpu::MatvecJob> jobs;
  jobs.clear();
  for (const MatrixRef* w : {&m.gate, &m.up}) {
    float* y = w == &m.gate ? s.gate.data() : s.up.data();
    for (size_t k = 0; k < nt; ++k)
      jobs.push_back({w->dtype, w->layout, w->data, w->rows, w->cols, x + (slots[k] / K) * D, y + k * F,
                      int8_activations_for(activations_, w->dtype)});
  }
  cpu::matvec_batch(jobs.data(), jobs.size(), nullptr);
  expert_hidden(m, s.gate.data(), s.up.data(), static_cast<int64_t>(nt), F);
  s.mats = &m;
  s.outs.resize(nt);
  jobs.clear();
  for (size_t k = 0; k < nt; ++k) {
    s.outs[k] = per_slot + slots[k] * D;
    jobs.push_back({m.down.dtype, m.down.layout, m.down.data, m.down.rows, m.down.cols, s.gate.data() + k * F,
                    s.outs[k], int8_activations_for(activations_, m.down.dtype)});
  }
  s.down.prepare(jobs.data(), nt);
  s.ready.store(true, std::memory_order_release);
}

// Rows from the back of every other expert's down projection until none is left,
// waiting for the ones whose owners have not prepared them yet.
void ExpertsPerThread::steal(size_t n, int64_t D, uint32_t groups) {
  for (bool left = true; left && !failed_.load(std::memory_order_relaxed);) {
    left = false;
    for (size_t e = 0; e < n; ++e) {
      if (ranges_.empty(static_cast<int>(e))) continue;
      left = true;
      if (!experts_[e]->ready.load(std::memory_order_acquire)) continue;
      uint32_t b = 0, end = 0;
      while (ranges_.take_back(static_cast<int>(e), kSteal, b, end)) down_rows(e, b, end, D, groups);
    }
    if (left) spin_pause();
  }
}

}  // namespace moeflow

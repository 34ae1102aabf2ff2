#include "backend/cpu/experts_per_thread.h"

#include <algorithm>

#include "backend/cpu/expert_activation.h"

namespace moeflow {

void ExpertsPerThread::run(const ExpertMatrices* mats, const std::vector<int64_t>* const* slots, size_t n,
                           const float* x, int64_t K, int64_t D, int64_t F, float* per_slot, ThreadPool& pool,
                           ActivationPrecision activations) {
  activations_ = activations;
  while (experts_.size() < n) experts_.push_back(std::make_unique<Shared>());
  const uint32_t groups = static_cast<uint32_t>((D + kGroup - 1) / kGroup);
  bounds_.resize(n + 1);
  for (size_t e = 0; e <= n; ++e) bounds_[e] = static_cast<uint32_t>(e) * groups;
  ranges_.reset(bounds_.data(), static_cast<int>(n));
  for (size_t e = 0; e < n; ++e) experts_[e]->ready.store(false, std::memory_order_relaxed);
  failed_.store(false, std::memory_order_relaxed);
  const int64_t per_thread = static_cast<int64_t>(n) / pool.size();
  pool.parallel_for(pool.size(), [&](int64_t p0, int64_t p1, int) {
    // Own experts first, then others' rows: a thread handed several threads' shares
    // must not wait for experts it has yet to prepare itself.
    try {
      for (int64_t e = p0 * per_thread; e < p1 * per_thread; ++e)
        own_expert(static_cast<size_t>(e), mats[e], (*slots[e])[0], x, K, D, F, per_slot, groups);
    } catch (...) {
      failed_.store(true);  // the others must not wait for experts that will never be ready
      throw;
    }
    steal(n, D, groups);
  });
}

void ExpertsPerThread::down_rows(size_t e, uint32_t b, uint32_t end, int64_t D, uint32_t groups) const {
  const int64_t first = static_cast<int64_t>(b - e * groups) * kGroup;
  const int64_t last = std::min<int64_t>(static_cast<int64_t>(end - e * groups) * kGroup, D);
  experts_[e]->down.rows(first, last);
  const Shared& s = *experts_[e];
  expert_down_bias(*s.mats, s.out, 1, 0, first, last);
}

void ExpertsPerThread::own_expert(size_t e, const ExpertMatrices& m, int64_t slot, const float* x, int64_t K,
                                  int64_t D, int64_t F, float* per_slot, uint32_t groups) {
  Shared& s = *experts_[e];
  s.gate.resize(static_cast<size_t>(F));
  s.up.resize(static_cast<size_t>(F));
  const float* xt = x + (slot / K) * D;
  const cpu::MatvecJob gate_up[2] = {
      {m.gate.dtype, m.gate.layout, m.gate.data, m.gate.rows, m.gate.cols, xt, s.gate.data(),
       int8_activations_for(activations_, m.gate.dtype)},
      {m.up.dtype, m.up.layout, m.up.data, m.up.rows, m.up.cols, xt, s.up.data(),
       int8_activations_for(activations_, m.up.dtype)}};
  cpu::matvec_batch(gate_up, 2, nullptr);
  expert_hidden(m, s.gate.data(), s.up.data(), 1, F);
  s.mats = &m;
  s.out = per_slot + slot * D;
  s.down.prepare(
      {m.down.dtype, m.down.layout, m.down.data, m.down.rows, m.down.cols, s.gate.data(), per_slot + slot * D,
       int8_activations_for(activations_, m.down.dtype)});
  s.ready.store(true, std::memory_order_release);
  uint32_t b = 0, end = 0;
  while (ranges_.take_front(static_cast<int>(e), kOwn, kSteal, b, end)) down_rows(e, b, end, D, groups);
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

// A decode step's experts run whole, one thread each (moe_forward, when they divide
// evenly among the threads: top-2 on 2 threads, top-8 on 2, 4 or 8).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend/activation_precision.h"
#include "model/model_weights.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/work_ranges.h"

namespace moeflow {

// Thread p owns experts [p * k, (p + 1) * k), k = n / threads: each expert's gate and
// up (one paired batch on one activation), SwiGLU and the quantising of h run on its
// owner, which then computes its down rows front to back; a thread done with its own
// experts takes rows from the back of others' down projections once they are
// prepared (cpu::MatvecPlan). Why the stealing: the two vCPUs' speeds drift apart
// from section to section (each finishing last about as often, 6-9 us apart in ~70 us
// sections), and without it one sat idle 5-10% of a step; with it 1-2% (42
// alternating rounds, 330M models, 2 threads). Decode speed moved less: q8_0 653-675
// -> 667-689 tok/s when the triad is ~95 GB/s, q4_0 and the ~50 GB/s phase within
// noise (the idle core's share of memory went to the other). It also keeps a thread
// that the OS preempts from holding up the step.
//
// run: expert e (of n) over the single token x (its slot (*slots[e])[0] of the
// token's K), its output into row slot of per_slot (D floats each); n % pool.size()
// must be 0. The same kernels on the same rows as the row-split path, so the same
// floats. Not thread-safe: one run at a time per object (moe_forward keeps one per
// calling thread).
class ExpertsPerThread {
 public:
  // activations: decides each product's MatvecJob::x_int8 by its weights' type.
  void run(const ExpertMatrices* mats, const std::vector<int64_t>* const* slots, size_t n, const float* x,
           int64_t K, int64_t D, int64_t F, float* per_slot, ThreadPool& pool,
           ActivationPrecision activations = ActivationPrecision::Int16);

 private:
  static constexpr int64_t kGroup = 8;              // rows per work item
  static constexpr uint32_t kOwn = 16, kSteal = 4;  // work items per chunk
  struct Shared {
    std::vector<float> gate, up;  // h = SwiGLU(gate, up) lands in gate
    cpu::MatvecPlan down;
    const ExpertMatrices* mats = nullptr;  // for its down bias (gpt-oss)
    float* out = nullptr;                  // its output row
    std::atomic<bool> ready{false};  // down prepared: its rows may be taken
  };

  void down_rows(size_t e, uint32_t b, uint32_t end, int64_t D, uint32_t groups) const;
  void own_expert(size_t e, const ExpertMatrices& m, int64_t slot, const float* x, int64_t K, int64_t D, int64_t F,
                  float* per_slot, uint32_t groups);
  void steal(size_t n, int64_t D, uint32_t groups);

  ActivationPrecision activations_ = ActivationPrecision::Int16;
  std::atomic<bool> failed_{false};  // an owner threw: nothing more becomes ready
  std::vector<std::unique_ptr<Shared>> experts_;
  std::vector<uint32_t> bounds_;
  cpu::WorkRanges ranges_;
};

}  // namespace moeflow

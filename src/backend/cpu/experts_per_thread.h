// A decode step's experts run whole, one thread each, every expert with the tokens
// that chose it: one in a sequence's own step, several in a batched step of many
// sequences (moe_forward, when the step's tokens are each alone in their sequence).
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

// Thread p owns a run of consecutive experts, the runs cut where the experts'
// cumulative cost crosses p / threads of the total (owner_runs): each expert's gate
// and up (one paired batch on its tokens' activations, the matrices read once for
// all of them), SwiGLU and the quantising of h run on its owner, which, its run's
// experts all prepared, computes their down rows front to back; a thread done with
// its own experts takes rows from the back of others' down projections once they are
// prepared (cpu::MatvecPlan). Preparing the whole run first matters where the runs
// differ: 3 experts on 2 threads, the owner of 2 would otherwise still be on its
// second expert's gate and up when the other, done, found nothing to take.
//
// Why whole experts: split by rows, a step takes two sections per layer, and between
// them the calling thread reads the other core's half of every gate and up output and
// runs SwiGLU alone: the largest serial gap of a decode step (docs/performance.md).
// Why the stealing: the two vCPUs' speeds drift apart from section to section (each
// finishing last about as often, 6-9 us apart in ~70 us sections), and without it one
// sat idle 5-10% of a step; with it 1-2% (42 alternating rounds, 330M models, 2
// threads). In a batched step it also evens out the owners' shares, which whole
// experts with different numbers of tokens cannot. It keeps a thread that the OS
// preempts from holding up the step too.
//
// run: expert e (of n) over its tokens (slot s of *slots[e] is token s / K's), its
// outputs into rows s of per_slot (D floats each); every token alone in its sequence
// (each takes a mat-vec's arithmetic); n >= pool.size(). The same kernels on the same
// rows as the row-split path, so the same floats. Not thread-safe: one run at a time
// per object (moe_forward keeps one per calling thread).
class ExpertsPerThread {
 public:
  // activations: decides each product's MatvecJob::x_int8 by its weights' type.
  void run(const ExpertMatrices* mats, const std::vector<int64_t>* const* slots, size_t n, const float* x,
           int64_t K, int64_t D, int64_t F, float* per_slot, ThreadPool& pool,
           ActivationPrecision activations = ActivationPrecision::Int16);

  // The first expert of each of `parts` owners' runs (parts + 1 entries, the last n):
  // expert e's cost is its tokens plus 3 (a pass over the weights costs about as much
  // as three tokens' arithmetic on the int8 kernels), and an expert goes to the owner
  // in whose share of the total cost its middle falls. Equal costs and n % parts == 0
  // give every owner n / parts.
  static void owner_runs(const std::vector<int64_t>* const* slots, size_t n, int parts, std::vector<size_t>& first);

 private:
  static constexpr int64_t kGroup = 8;              // rows per work item
  static constexpr uint32_t kOwn = 16, kSteal = 4;  // work items per chunk
  struct Shared {
    std::vector<float> gate, up;  // [token][F]; h = SwiGLU(gate, up) lands in gate
    cpu::MatvecPlan down;
    const ExpertMatrices* mats = nullptr;  // for its down bias (gpt-oss)
    std::vector<float*> outs;              // its tokens' output rows
    std::atomic<bool> ready{false};        // down prepared: its rows may be taken
  };

  void down_rows(size_t e, uint32_t b, uint32_t end, int64_t D, uint32_t groups) const;
  // Gate, up, SwiGLU and the down product's inputs: its rows may then be taken.
  void prepare_expert(size_t e, const ExpertMatrices& m, const std::vector<int64_t>& slots, const float* x,
                      int64_t K, int64_t D, int64_t F, float* per_slot);
  void steal(size_t n, int64_t D, uint32_t groups);

  ActivationPrecision activations_ = ActivationPrecision::Int16;
  std::atomic<bool> failed_{false};  // an owner threw: nothing more becomes ready
  std::vector<std::unique_ptr<Shared>> experts_;
  std::vector<uint32_t> bounds_;
  std::vector<size_t> owners_;
  cpu::WorkRanges ranges_;
};

}  // namespace moeflow

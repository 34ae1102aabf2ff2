// The seam between the engine and the hardware it runs on (DESIGN.md, "The batched
// step"): a Backend owns the forward pass's operations, the memory of weights, expert
// buffers and the KV cache, and the in-memory layout of weights. The engine above it
// (forward pass, MoE layer, KV pool, model loading, expert offloading) names no
// kernel; the CPU backend is the project's kernels and thread pool, a GPU backend
// plugs in here.
//
// Thread safety: one caller at a time; a backend may use threads of its own within
// a call.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "experts/expert_memory.h"
#include "experts/transport.h"
#include "kernels/cpu/matmul.h"
#include "model/model_weights.h"
#include "tensor/dtype.h"

namespace moeflow {

class ExpertStore;

// Y = W X for each product (matmul.h: a product of one token, or with per_token, of
// each token alone, takes the mat-vec arithmetic; others the mat-mul's, unless the
// backend gives every token the mat-vec's, as the CPU one does on interleaved rows).
using Product = cpu::MatmulJob;
// The paged KV cache's shape and a query token's place in it (attention.h).
using AttentionShape = cpu::AttentionShape;
using AttentionQuery = cpu::AttentionQuery;
using KvSlot = cpu::KvSlot;
// The KV cache's layout, every backend's (kernels/cpu/attention.h): a plane's elements
// and an element's bytes.
using cpu::kv_element_bytes;
using cpu::kv_plane_size;

// Also the WeightPlacer of the weights it computes with (their memory and in-memory row
// layouts, tensor/row_layout.h) and the ExpertMemory the expert cache's buffers come
// from (experts/expert_memory.h).
class Backend : public WeightPlacer, public ExpertMemory {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // The CPU threads this backend computes with (the CPU backend's pool; a GPU
  // backend's host share); null when it runs on the calling thread alone.
  virtual ThreadPool* thread_pool() const = 0;

  // --- memory and layout: WeightPlacer's allocate, layout_for, place (weights) and
  // ExpertMemory's buffers ---

  // The KV cache's memory: only this backend's operations read or write it (a GPU
  // backend's is device memory the host cannot touch). Null when it cannot be had.
  virtual std::unique_ptr<DeviceBuffer> allocate_cache(size_t bytes) { return allocate(bytes); }
  // What fills the expert cache under an expert budget (the cache's buffers are this
  // backend's ExpertMemory); null: the model file read into them (FileTransport).
  virtual std::unique_ptr<Transport> expert_transport(const ExpertStore& /*store*/, int /*io_threads*/) {
    return nullptr;
  }

  // --- the bounds the benchmarks set speeds against, measured when asked ---
  // Bytes/second its memory streams over a working set of about `bytes` (the CPU: a
  // triad over its threads; a GPU: a device-to-device copy, reads and writes counted).
  virtual double measure_memory_bandwidth_gbs(uint64_t bytes) = 0;
  // Peak f32 multiply-add rate in GFLOP/s (2 per FMA); 0 where not measured.
  virtual double measure_peak_gflops() { return 0; }
  // Peak rate of its int8 multiply-accumulates in G/s (0 where its kernels have none),
  // and the instructions that rate was measured on.
  struct Int8Peak {
    double gmacs = 0;
    std::string instructions;
  };
  virtual Int8Peak measure_peak_int8() { return {}; }
  // Whether its products of t rows in `layout` against int8 (else int16) activations
  // run on the integer kernels that peak measures, int16 ones at half its rate.
  virtual bool int8_peak_applies(DType /*t*/, RowLayout /*layout*/, bool /*x_int8*/) const { return false; }
  // Whether its products of t rows in `layout` compute each token as a lone token's
  // product would, however many tokens of its sequence share the step (a chunk of a
  // prompt or one decode token): what makes a sequence's floats independent of how its
  // tokens were split into steps (Engine::split_invariant).
  virtual bool products_per_token(DType /*t*/, RowLayout /*layout*/) const { return false; }
  // What its kernels run on ("AVX3_ZEN4", "sm_90 NVIDIA H200").
  virtual std::string kernel_target() const = 0;
  // Wall time inside each of its operations so far, where the backend keeps it (a GPU
  // backend: staging, copies, kernels and waits together); empty where it does not.
  struct OpTime {
    std::string op;
    double seconds = 0;
    uint64_t calls = 0;
  };
  virtual std::vector<OpTime> op_times() const { return {}; }
  // Adds the wall time of its scope to an operation's time and calls; with a null one
  // it does nothing and reads no clock.
  class ScopedOpTime {
   public:
    explicit ScopedOpTime(OpTime* t) : t_(t) {
      if (t_) t0_ = std::chrono::steady_clock::now();
    }
    ~ScopedOpTime() {
      if (!t_) return;
      t_->seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
      ++t_->calls;
    }
    ScopedOpTime(const ScopedOpTime&) = delete;
    ScopedOpTime& operator=(const ScopedOpTime&) = delete;

   private:
    OpTime* t_;
    std::chrono::steady_clock::time_point t0_;
  };
  // Whether op_times counts from now on (a CPU backend reads the clock only while
  // asked to: its host ops and KV stores are called per token; a GPU backend always counts).
  virtual void set_op_timing(bool /*on*/) {}
  // What each operation took between two op_times() readings (the same backend's).
  static std::vector<OpTime> op_times_between(const std::vector<OpTime>& before, const std::vector<OpTime>& after) {
    std::vector<OpTime> d = after;
    for (size_t k = 0; k < d.size() && k < before.size(); ++k) {
      d[k].seconds -= before[k].seconds;
      d[k].calls -= before[k].calls;
    }
    return d;
  }

  // --- operations on f32 activations ---
  virtual void products(const Product* jobs, size_t n) = 0;
  virtual void attention(const AttentionShape& s, const float* q, int64_t n_tok, const AttentionQuery* tok,
                         const void* k_cache, const void* v_cache, float* out) = 0;
  // Writes `rows` rows of n floats (one position's keys or values, a row per kv head)
  // into a cache of kv_type elements at `at` (attention.h: the planes' layout).
  virtual void kv_store(DType kv_type, const float* src, int64_t rows, int64_t n, const KvSlot& at) = 0;
  // The KV cache types attention and kv_store take here (every backend: F32, F16).
  virtual bool kv_type_supported(DType t) const { return t == DType::F32 || t == DType::F16; }
  // y[t] = rmsnorm(x[t]) * w for t < n_rows rows of d; y may alias x.
  virtual void rmsnorm_rows(const float* x, const float* w, float* y, int64_t n_rows, int64_t d, float eps) = 0;
  // In-place softmax of each of `rows` rows of n floats (a step's router logits in
  // one call).
  virtual void softmax_rows(float* x, int64_t rows, int64_t n) = 0;
  // cos/sin of position pos's rotary angles (rot_dim floats), then the rotation of
  // n_heads heads at those angles, head h's first rot_dim floats at heads + h * stride
  // (a token's query or key heads in one call).
  virtual void rope_angles(int64_t pos, int64_t rot_dim, float freq_base, float* cs) = 0;
  virtual void rope_heads(float* heads, int64_t n_heads, int64_t stride, int64_t rot_dim, const float* cs,
                          bool neox) = 0;
  // The SwiGLU FFN of experts mats[0, n), each over the (token, slot) pairs slots[i]
  // that chose it (slot s = token s / K); row s of per_slot gets slot s's output (D
  // floats). requests[t] names token t's sequence (null: one sequence): a token alone
  // in its sequence within an expert's group takes the mat-vec arithmetic, the others
  // the mat-mul's, so a sequence gets the same floats whatever shares the step.
  virtual void expert_ffns(const ExpertMatrices* mats, const std::vector<int64_t>* const* slots, size_t n,
                           const float* x, const int64_t* requests, int64_t K, int64_t D, int64_t F,
                           float* per_slot) = 0;
};

}  // namespace moeflow

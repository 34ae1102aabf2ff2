// The CPU backend: the project's SIMD kernels (Highway, AVX-512 VNNI where present)
// on a thread pool, anonymous memory in huge pages where the kernel grants them, and
// rows interleaved in fours for q4_0 / q8_0 and the common k-quants on VNNI CPUs.
#pragma once
#include <memory>

#include "backend/activation_precision.h"
#include "backend/backend.h"
#include "kernels/cpu/thread_pool.h"

namespace moeflow {

// Whether products with weights of type t in `layout` take the integer (AVX-512 VNNI)
// mat-vec kernels for every token, a prompt's as well as decode's, on int8 (x_int8)
// or int16 activations: interleaved rows on either; on int8, k-quant rows in GGUF's
// layout (Q2_K and Q3_K, which are never interleaved, and the others under
// --no-repack; kquant_vnni.h), IQ4_NL / IQ4_XS / MXFP4 / Q4_1 / Q5_0 / Q5_1 rows
// (nl4_vnni.h); and on any AVX2 CPU the lattice i-quants (int8_avx2.h, which have no
// dequantiser of their own for the f32 tiles). Every other product of several tokens is
// an f32 mat-mul.
bool integer_kernels_for(DType t, RowLayout layout, bool x_int8);

class CpuBackend final : public Backend {
 public:
  // Owns a pool of `threads` workers. `interleave_rows` false keeps every matrix in
  // GGUF's layout (--no-repack). `activations` (--activations): whether products with
  // interleaved q4_0 / q8_0 rows and k-quant rows quantise their activation to int8 or
  // int16 (cpu::MatvecJob::x_int8), decided by the weights' type alone, every step
  // alike, so a sequence's floats still do not depend on its company.
  explicit CpuBackend(int threads, bool interleave_rows = true,
                      ActivationPrecision activations = ActivationPrecision::Int16);
  // Runs on `pool` (not owned; null: the calling thread alone).
  explicit CpuBackend(ThreadPool* pool, bool interleave_rows = true,
                      ActivationPrecision activations = ActivationPrecision::Int16);

  std::string name() const override { return "cpu"; }
  std::unique_ptr<DeviceBuffer> allocate(size_t bytes) override;  // host memory, huge pages
  uint8_t* allocate_expert_buffer(uint64_t bytes) override;
  void release_expert_buffer(uint8_t* p, uint64_t bytes) override;
  // q4_0 / q8_0 matrices that fit are interleaved in fours on AVX-512 VNNI CPUs unless
  // switched off (tensor/rows_x4.h says why), Q4_K / Q5_K / Q6_K too where they meet
  // int8 activations; everything else keeps GGUF's layout.
  RowLayout layout_for(DType t, int64_t rows, int64_t cols) const override;
  void place(RowLayout layout, DType t, const void* src, int64_t rows, int64_t cols, void* dst) const override;

  double measure_memory_bandwidth_gbs(uint64_t bytes) override;
  double measure_peak_gflops() override;
  Int8Peak measure_peak_int8() override;  // AVX-512 VNNI's, else AVX2's, 0 without either
  bool int8_peak_applies(DType t, RowLayout layout, bool x_int8) const override;
  // Products on the integer kernels (integer_kernels_for) run token by token.
  bool products_per_token(DType t, RowLayout layout) const override;
  std::string kernel_target() const override;

  void products(const Product* jobs, size_t n) override;
  void attention(const AttentionShape& s, const float* q, int64_t n_tok, const AttentionQuery* tok,
                 const void* k_cache, const void* v_cache, float* out) override;
  void kv_store(DType kv_type, const float* src, int64_t rows, int64_t n, const KvSlot& at) override;
  bool kv_type_supported(DType t) const override { return cpu::kv_type_supported(t); }
  void rmsnorm_rows(const float* x, const float* w, float* y, int64_t n_rows, int64_t d, float eps) override;
  void softmax_rows(float* x, int64_t rows, int64_t n) override;
  void rope_angles(int64_t pos, int64_t rot_dim, float freq_base, float* cs) override;
  void rope_heads(float* heads, int64_t n_heads, int64_t stride, int64_t rot_dim, const float* cs,
                  bool neox) override;
  void expert_ffns(const ExpertMatrices* mats, const std::vector<int64_t>* const* slots, size_t n, const float* x,
                   const int64_t* requests, int64_t K, int64_t D, int64_t F, float* per_slot) override;

  // Wall time in products, attention, KV stores, expert FFNs and the host ops (norms,
  // softmax, RoPE), as the CUDA backend names them, counted while set_op_timing is on.
  std::vector<OpTime> op_times() const override;
  void set_op_timing(bool on) override { op_timing_ = on; }

  // Null when single-threaded.
  ThreadPool* pool() const { return pool_; }
  ThreadPool* thread_pool() const override { return pool_; }

 private:
  std::unique_ptr<ThreadPool> owned_;
  ThreadPool* pool_;
  bool interleave_rows_;
  ActivationPrecision activations_;
  enum Op { kProducts, kAttention, kKvStore, kExperts, kHost, kOps };
  OpTime times_[kOps] = {{"products"}, {"attention"}, {"kv_store"}, {"expert_ffns"}, {"host ops"}};
  bool op_timing_ = false;
  // The operation's counters while timing is on, else null (ScopedOpTime reads no clock).
  OpTime* timed(Op op) { return op_timing_ ? &times_[op] : nullptr; }
};

}  // namespace moeflow

// The CUDA backend (DESIGN.md, "The batched step"): weights, the KV cache and the
// expert cache's buffers live in device memory, and the products, attention, KV stores
// and expert FFNs run there (kernels/cuda). Activations cross the seam as host arrays,
// as the Backend interface has them: each operation stages its inputs into pinned
// memory, copies them in, runs its kernels and copies its outputs back in one stream
// synchronisation. Norms, RoPE and the softmax stay on the CPU, and so do experts whose
// weights the caller hands over in host memory (--on-miss host-compute, Fiddler's
// mode): they run on the CPU backend's kernels while the device computes the rest.
//
// Memory: the resident weights are kept twice, in host memory (the embedding lookup
// reads rows there) and on the device (uploaded once, at their first use); the KV
// cache and expert buffers are device memory only. Under an expert budget the experts
// wait in pinned host memory and move through HostToDeviceTransport.
//
// Builds only with CUDA (MOEFLOW_HAVE_CUDA); backend/backend_factory.h picks backends
// by name and says when this one is missing.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "backend/activation_precision.h"
#include "backend/backend.h"

namespace moeflow {

// GPUs the CUDA runtime sees (0 when none, or when the driver cannot be loaded).
int cuda_device_count();
// Device memory in use on GPU `device` by every process (total minus free, bytes).
uint64_t cuda_device_memory_used(int device);

class CudaBackend final : public Backend {
 public:
  // Runs on GPU `device`, with `threads` CPU threads for the work that stays on the
  // host; experts computed there multiply `activations` as the CPU backend's do (the
  // GPU's own products take f32). Throws InputError when the device cannot be used.
  CudaBackend(int device, int threads, ActivationPrecision activations = ActivationPrecision::Int16);
  ~CudaBackend() override;

  std::string name() const override;
  ThreadPool* thread_pool() const override;
  // Host memory mirrored on the device: the caller fills the host side, the device
  // copy is made at the first operation that reads it. Throws InputError when the
  // device memory cannot be had.
  std::unique_ptr<DeviceBuffer> allocate(size_t bytes) override;
  // Device memory only (the KV cache): data() is a device address.
  std::unique_ptr<DeviceBuffer> allocate_cache(size_t bytes) override;
  uint8_t* allocate_expert_buffer(uint64_t bytes) override;
  void release_expert_buffer(uint8_t* p, uint64_t bytes) override;
  RowLayout layout_for(DType t, int64_t rows, int64_t cols) const override;
  void place(RowLayout layout, DType t, const void* src, int64_t rows, int64_t cols, void* dst) const override;
  std::unique_ptr<Transport> expert_transport(const ExpertStore& store, int io_threads) override;

  // A device-to-device copy of at least 1 GiB (larger than any L2), read and write
  // bytes counted. No FLOP peaks are measured (0).
  double measure_memory_bandwidth_gbs(uint64_t bytes) override;
  std::string kernel_target() const override;
  // products, attention, kv_store, expert_ffns, and the host's share (norms, RoPE,
  // softmax).
  std::vector<OpTime> op_times() const override;

  void products(const Product* jobs, size_t n) override;
  void attention(const AttentionShape& s, const float* q, int64_t n_tok, const AttentionQuery* tok,
                 const void* k_cache, const void* v_cache, float* out) override;
  void kv_store(DType kv_type, const float* src, int64_t rows, int64_t n, const KvSlot& at) override;
  void rmsnorm_rows(const float* x, const float* w, float* y, int64_t n_rows, int64_t d, float eps) override;
  void softmax_rows(float* x, int64_t rows, int64_t n) override;
  void rope_angles(int64_t pos, int64_t rot_dim, float freq_base, float* cs) override;
  void rope_heads(float* heads, int64_t n_heads, int64_t stride, int64_t rot_dim, const float* cs,
                  bool neox) override;
  void expert_ffns(const ExpertMatrices* mats, const std::vector<int64_t>* const* slots, size_t n, const float* x,
                   const int64_t* requests, int64_t K, int64_t D, int64_t F, float* per_slot) override;

  // Device memory this backend holds, by use (bytes).
  struct DeviceMemory {
    uint64_t weights = 0;  // resident weights' device copies
    uint64_t cache = 0;    // KV cache
    uint64_t experts = 0;  // expert buffers, those the cache holds and those kept for reuse
    uint64_t scratch = 0;  // activations and staging
  };
  DeviceMemory device_memory() const;
  // Experts computed on the CPU from host memory so far.
  uint64_t host_computed_experts() const;

  struct Impl;  // cuda_backend.cu

 private:
  // Shared with the buffers it gave: the model's weights may outlive the backend.
  std::shared_ptr<Impl> im_;
};

}  // namespace moeflow

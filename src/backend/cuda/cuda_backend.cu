#include "backend/cuda/cuda_backend.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/host_to_device_transport.h"
#include "base/error.h"
#include "kernels/cuda/dequant_groups.cuh"
#include "kernels/cuda/kernels.h"

namespace moeflow {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

uint64_t cuda_device_memory_used(int device) {
  CUDA_CHECK(cudaSetDevice(device));
  size_t free_b = 0, total_b = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return total_b - free_b;
}

namespace {

constexpr size_t kAlign = 256;
size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// A device allocation that grows (contents not kept) when asked for more.
struct DeviceScratch {
  uint8_t* p = nullptr;
  size_t size = 0;
  uint64_t* accounted = nullptr;
  uint8_t* need(size_t bytes) {
    if (bytes <= size) return p;
    if (p) cudaFree(p);
    *accounted -= size;
    size = std::max(bytes, size * 3 / 2);
    p = nullptr;
    if (cudaMalloc(reinterpret_cast<void**>(&p), size) != cudaSuccess) {
      cudaGetLastError();
      const size_t want = size;
      size = 0;
      throw InputError("CUDA: cannot allocate " + std::to_string(want >> 20) + " MiB of device scratch");
    }
    *accounted += size;
    return p;
  }
  ~DeviceScratch() {
    if (p) cudaFree(p);
  }
};

struct PinnedScratch {
  uint8_t* p = nullptr;
  size_t size = 0;
  uint8_t* need(size_t bytes) {
    if (bytes <= size) return p;
    if (p) cudaFreeHost(p);
    size = std::max(bytes, size * 3 / 2);
    p = nullptr;
    CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&p), size, cudaHostAllocDefault));
    return p;
  }
  ~PinnedScratch() {
    if (p) cudaFreeHost(p);
  }
};

}  // namespace

struct CudaBackend::Impl {
  enum class Kind { Mirrored, Device, HostExperts };
  struct Range {
    size_t size;
    Kind kind;
    uint8_t* dev;  // Mirrored: the device copy
    bool uploaded;
  };

  int device = 0;
  cudaStream_t stream = nullptr;
  std::unique_ptr<CpuBackend> cpu;
  mutable std::mutex mu;  // ranges and accounting (buffers are freed from their owners' threads)
  std::map<uintptr_t, Range> ranges;  // by host (Mirrored, HostExperts) or device (Device) start
  std::unordered_map<uint64_t, std::vector<uint8_t*>> free_experts;  // kept for reuse, by size
  std::unordered_map<const float*, float*> vectors;                  // device copies of biases, sinks
  DeviceMemory mem;
  uint64_t host_computed = 0;
  DeviceScratch d_in, d_out, d_work;
  PinnedScratch h_in, h_out;
  bool pending = false;  // a queued copy may still read h_in
  enum Op { kProducts, kAttention, kKvStore, kExperts, kHost, kOps };
  OpTime times[kOps] = {{"products"}, {"attention"}, {"kv_store"}, {"expert_ffns"}, {"host ops"}};

  void bind() const { cudaSetDevice(device); }

  ~Impl() {
    bind();
    for (auto& [size, list] : free_experts)
      for (uint8_t* p : list) cudaFree(p);
    for (auto& [h, d] : vectors) cudaFree(d);
    if (stream) cudaStreamDestroy(stream);
  }

  void add_range(const void* p, size_t size, Kind kind, uint8_t* dev = nullptr) {
    std::lock_guard<std::mutex> lock(mu);
    ranges[reinterpret_cast<uintptr_t>(p)] = {size, kind, dev, false};
  }
  void remove_range(const void* p) {
    std::lock_guard<std::mutex> lock(mu);
    ranges.erase(reinterpret_cast<uintptr_t>(p));
  }
  // The range holding p (null: none).
  std::pair<uintptr_t, Range*> find(const void* p) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = ranges.upper_bound(a);
    if (it == ranges.begin()) return {0, nullptr};
    --it;
    if (a >= it->first + it->second.size) return {0, nullptr};
    return {it->first, &it->second};
  }
  bool is_host_expert(const void* p) {
    std::lock_guard<std::mutex> lock(mu);
    auto [base, r] = find(p);
    return r && r->kind == Kind::HostExperts;
  }
  // The device address of p (a weight, KV cache or expert buffer address the caller
  // holds); uploads a mirrored region at its first use.
  const uint8_t* device_ptr(const void* p, const char* what) {
    std::lock_guard<std::mutex> lock(mu);
    auto [base, r] = find(p);
    if (!r || r->kind == Kind::HostExperts)
      throw InputError(std::string("CUDA backend: the ") + what +
                       " is not in memory the backend gave (weights read from the file mapping, --mmap, "
                       "cannot run on the GPU)");
    if (r->kind == Kind::Device) return static_cast<const uint8_t*>(p);
    if (!r->uploaded) {
      CUDA_CHECK(cudaMemcpy(r->dev, reinterpret_cast<const void*>(base), r->size, cudaMemcpyHostToDevice));
      r->uploaded = true;
    }
    return r->dev + (reinterpret_cast<uintptr_t>(p) - base);
  }
  // A device copy of a host vector of n floats that never changes (biases, sinks).
  const float* device_vector(const float* v, int64_t n) {
    if (!v) return nullptr;
    auto it = vectors.find(v);
    if (it != vectors.end()) return it->second;
    float* d = nullptr;
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&d), static_cast<size_t>(n) * 4));
    CUDA_CHECK(cudaMemcpy(d, v, static_cast<size_t>(n) * 4, cudaMemcpyHostToDevice));
    vectors.emplace(v, d);
    std::lock_guard<std::mutex> lock(mu);
    mem.weights += static_cast<uint64_t>(n) * 4;
    return d;
  }
  // Pinned input staging of `bytes`, once the stream no longer reads the last one.
  uint8_t* stage_in(size_t bytes) {
    if (pending) {
      CUDA_CHECK(cudaStreamSynchronize(stream));
      pending = false;
    }
    return h_in.need(bytes);
  }
  void sync() {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaGetLastError());
    pending = false;
  }
};

namespace {

class MirroredBuffer final : public DeviceBuffer {
 public:
  MirroredBuffer(std::shared_ptr<CudaBackend::Impl> im, std::unique_ptr<DeviceBuffer> host, uint8_t* dev)
      : im_(std::move(im)), host_(std::move(host)), dev_(dev) {
    im_->add_range(host_->data(), host_->size(), CudaBackend::Impl::Kind::Mirrored, dev_);
  }
  ~MirroredBuffer() override {
    im_->remove_range(host_->data());
    cudaFree(dev_);
    std::lock_guard<std::mutex> lock(im_->mu);
    im_->mem.weights -= host_->size();
  }
  uint8_t* data() const override { return host_->data(); }
  size_t size() const override { return host_->size(); }

 private:
  std::shared_ptr<CudaBackend::Impl> im_;
  std::unique_ptr<DeviceBuffer> host_;
  uint8_t* dev_;
};

class DeviceOnlyBuffer final : public DeviceBuffer {
 public:
  DeviceOnlyBuffer(std::shared_ptr<CudaBackend::Impl> im, uint8_t* dev, size_t size)
      : im_(std::move(im)), dev_(dev), size_(size) {
    im_->add_range(dev_, size_, CudaBackend::Impl::Kind::Device);
  }
  ~DeviceOnlyBuffer() override {
    im_->remove_range(dev_);
    cudaFree(dev_);
    std::lock_guard<std::mutex> lock(im_->mu);
    im_->mem.cache -= size_;
  }
  uint8_t* data() const override { return dev_; }
  size_t size() const override { return size_; }

 private:
  std::shared_ptr<CudaBackend::Impl> im_;
  uint8_t* dev_;
  size_t size_;
};

// Throws InputError naming the type when the kernels cannot read `what` of type t.
void require_kernel(DType t, const char* what) {
  if (!cuda::cuda_supports(t))
    throw InputError(std::string("CUDA backend: no kernel for ") + dtype_name(t) + " " + what +
                     " yet (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, Q2_K..Q6_K, IQ4_NL, IQ4_XS, MXFP4): run this model with --backend cpu");
}

uint8_t* device_alloc(size_t bytes, const char* what) {
  uint8_t* p = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(bytes, 1)) != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw InputError(std::string("CUDA: cannot allocate ") + std::to_string(bytes >> 20) + " MiB of device memory for " +
                     what + " (" + std::to_string(free_b >> 20) + " MiB free of " + std::to_string(total_b >> 20) +
                     "): set an expert budget (--expert-budget) or a smaller --ctx-size");
  }
  return p;
}

}  // namespace

CudaBackend::CudaBackend(int device, int threads, ActivationPrecision activations) : im_(std::make_shared<Impl>()) {
  const int n = cuda_device_count();
  if (n == 0) throw InputError("--backend cuda: no CUDA device is visible (driver missing or no GPU)");
  if (device < 0 || device >= n)
    throw InputError("CUDA device " + std::to_string(device) + ": " + std::to_string(n) + " device(s) visible");
  im_->device = device;
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaStreamCreateWithFlags(&im_->stream, cudaStreamNonBlocking));
  // The CPU's share (norms, RoPE, host-computed experts) in GGUF's layout: the same
  // bytes the device reads. On int8 activations (auto's choice for q4_0, the k-quants,
  // IQ4 and MXFP4) that layout has VNNI kernels; on int16 those types take f32 paths.
  im_->cpu = std::make_unique<CpuBackend>(threads, false, activations);
  for (DeviceScratch* s : {&im_->d_in, &im_->d_out, &im_->d_work}) s->accounted = &im_->mem.scratch;
}

CudaBackend::~CudaBackend() = default;

std::string CudaBackend::name() const {
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, im_->device);
  return std::string("cuda:") + std::to_string(im_->device) + " (" + prop.name + ")";
}

ThreadPool* CudaBackend::thread_pool() const { return im_->cpu->pool(); }

double CudaBackend::measure_memory_bandwidth_gbs(uint64_t bytes) {
  im_->bind();
  const size_t n = std::max<uint64_t>(bytes, 1ull << 30);
  uint8_t* a = device_alloc(n, "a bandwidth probe");
  uint8_t* b = nullptr;
  try {
    b = device_alloc(n, "a bandwidth probe");
  } catch (...) {
    cudaFree(a);
    throw;
  }
  cudaEvent_t t0, t1;
  CUDA_CHECK(cudaEventCreate(&t0));
  CUDA_CHECK(cudaEventCreate(&t1));
  CUDA_CHECK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, im_->stream));  // warm-up
  CUDA_CHECK(cudaEventRecord(t0, im_->stream));
  constexpr int kReps = 5;
  for (int i = 0; i < kReps; ++i) CUDA_CHECK(cudaMemcpyAsync(i % 2 ? a : b, i % 2 ? b : a, n, cudaMemcpyDeviceToDevice, im_->stream));
  CUDA_CHECK(cudaEventRecord(t1, im_->stream));
  CUDA_CHECK(cudaEventSynchronize(t1));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * static_cast<double>(n) * kReps / (static_cast<double>(ms) * 1e-3) / 1e9;
}

std::string CudaBackend::kernel_target() const {
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, im_->device);
  return "sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + " " + prop.name;
}

std::unique_ptr<DeviceBuffer> CudaBackend::allocate(size_t bytes) {
  im_->bind();
  std::unique_ptr<DeviceBuffer> host = allocate_host_buffer(bytes);
  if (!host) return nullptr;
  uint8_t* dev = device_alloc(bytes, "the weights");
  {
    std::lock_guard<std::mutex> lock(im_->mu);
    im_->mem.weights += bytes;
  }
  return std::make_unique<MirroredBuffer>(im_, std::move(host), dev);
}

std::unique_ptr<DeviceBuffer> CudaBackend::allocate_cache(size_t bytes) {
  im_->bind();
  uint8_t* dev = device_alloc(bytes, "the KV cache");
  {
    std::lock_guard<std::mutex> lock(im_->mu);
    im_->mem.cache += bytes;
  }
  return std::make_unique<DeviceOnlyBuffer>(im_, dev, bytes);
}

// Evicted buffers are kept for the next expert of the same size (experts of a model
// share a few sizes): cudaFree would wait for the whole device. A request no kept
// buffer fits frees every kept one first, so what is allocated never exceeds what the
// cache holds plus the new buffer, within its budget.
uint8_t* CudaBackend::allocate_expert_buffer(uint64_t bytes) {
  im_->bind();
  std::vector<std::pair<uint8_t*, uint64_t>> unfit;
  {
    std::lock_guard<std::mutex> lock(im_->mu);
    auto it = im_->free_experts.find(bytes);
    if (it != im_->free_experts.end() && !it->second.empty()) {
      uint8_t* p = it->second.back();
      it->second.pop_back();
      return p;
    }
    for (auto& [size, list] : im_->free_experts)
      for (uint8_t* q : list) unfit.push_back({q, size});
    im_->free_experts.clear();
  }
  for (auto [q, size] : unfit) {
    im_->remove_range(q);
    cudaFree(q);
    std::lock_guard<std::mutex> lock(im_->mu);
    im_->mem.experts -= size;
  }
  uint8_t* p = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&p), bytes) != cudaSuccess) {
    cudaGetLastError();
    throw std::bad_alloc();
  }
  im_->add_range(p, bytes, Impl::Kind::Device);
  std::lock_guard<std::mutex> lock(im_->mu);
  im_->mem.experts += bytes;
  return p;
}

void CudaBackend::release_expert_buffer(uint8_t* p, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(im_->mu);
  im_->free_experts[bytes].push_back(p);
}

RowLayout CudaBackend::layout_for(DType, int64_t, int64_t) const { return RowLayout::gguf; }

void CudaBackend::place(RowLayout layout, DType t, const void* src, int64_t rows, int64_t cols, void* dst) const {
  if (layout != RowLayout::gguf) throw std::invalid_argument("CUDA backend: only GGUF's row layout");
  std::memcpy(dst, src, row_bytes(t, cols) * static_cast<size_t>(rows));
}

std::unique_ptr<Transport> CudaBackend::expert_transport(const ExpertStore& store, int io_threads) {
  im_->bind();
  auto t = std::make_unique<HostToDeviceTransport>(store, io_threads);
  im_->add_range(t->host_copy({0, 0}), t->host_bytes(), Impl::Kind::HostExperts);
  return t;
}

void CudaBackend::products(const Product* jobs, size_t n) {
  if (n == 0) return;
  Impl& im = *im_;
  const ScopedOpTime timed(&im.times[Impl::kProducts]);
  im.bind();
  // Inputs once each (q, k and v share theirs), then every product, then one copy back.
  struct Input {
    const float* x;
    size_t at, bytes;
  };
  std::vector<Input> inputs;
  std::vector<size_t> in_at(n), out_at(n);
  size_t out_bytes = 0;
  for (size_t j = 0; j < n; ++j) {
    const Product& p = jobs[j];
    if (p.layout != RowLayout::gguf) throw std::invalid_argument("CUDA backend: a product in a CPU row layout");
    require_kernel(p.dtype, "weights");
    const size_t bytes = static_cast<size_t>(p.n_tok * p.cols) * 4;
    auto it = std::find_if(inputs.begin(), inputs.end(), [&](const Input& e) { return e.x == p.X; });
    if (it == inputs.end()) {
      inputs.push_back({p.X, 0, bytes});
      it = inputs.end() - 1;
    }
    it->bytes = std::max(it->bytes, bytes);
    in_at[j] = static_cast<size_t>(it - inputs.begin());
    out_at[j] = out_bytes;
    out_bytes += aligned(static_cast<size_t>(p.n_tok * p.rows) * 4);
  }
  size_t in_bytes = 0;
  for (Input& e : inputs) {
    e.at = in_bytes;
    in_bytes += aligned(e.bytes);
  }
  for (size_t& a : in_at) a = inputs[a].at;
  uint8_t* h_in = im.stage_in(in_bytes);
  for (const Input& e : inputs) std::memcpy(h_in + e.at, e.x, e.bytes);
  uint8_t* d_in = im.d_in.need(in_bytes);
  uint8_t* d_out = im.d_out.need(out_bytes);
  uint8_t* h_out = im.h_out.need(out_bytes);
  CUDA_CHECK(cudaMemcpyAsync(d_in, h_in, in_bytes, cudaMemcpyHostToDevice, im.stream));
  for (size_t j = 0; j < n; ++j) {
    const Product& p = jobs[j];
    cuda::matvec(p.dtype, im.device_ptr(p.W, "weight matrix"), p.rows, p.cols,
                 reinterpret_cast<const float*>(d_in + in_at[j]), p.cols, p.n_tok,
                 reinterpret_cast<float*>(d_out + out_at[j]), p.rows, im.stream);
  }
  CUDA_CHECK(cudaMemcpyAsync(h_out, d_out, out_bytes, cudaMemcpyDeviceToHost, im.stream));
  im.sync();
  for (size_t j = 0; j < n; ++j)
    std::memcpy(jobs[j].Y, h_out + out_at[j], static_cast<size_t>(jobs[j].n_tok * jobs[j].rows) * 4);
}

void CudaBackend::attention(const AttentionShape& s, const float* q, int64_t n_tok, const AttentionQuery* tok,
                            const void* k_cache, const void* v_cache, float* out) {
  if (n_tok <= 0) return;
  Impl& im = *im_;
  const ScopedOpTime timed(&im.times[Impl::kAttention]);
  im.bind();
  // Each distinct block table once, as long as its furthest token needs.
  std::vector<std::pair<const int32_t*, int64_t>> tables;  // host table, blocks used
  std::vector<size_t> table_of(static_cast<size_t>(n_tok));
  int64_t max_keys = 1;
  for (int64_t t = 0; t < n_tok; ++t) {
    const int64_t need = tok[t].pos / s.block_len + 1;
    auto it = std::find_if(tables.begin(), tables.end(), [&](const auto& e) { return e.first == tok[t].blocks; });
    if (it == tables.end()) {
      tables.push_back({tok[t].blocks, need});
      it = tables.end() - 1;
    }
    it->second = std::max(it->second, need);
    table_of[static_cast<size_t>(t)] = static_cast<size_t>(it - tables.begin());
    const int64_t keys = s.window > 0 ? std::min(tok[t].pos + 1, s.window) : tok[t].pos + 1;
    max_keys = std::max(max_keys, keys);
  }
  std::vector<int64_t> table_offset(tables.size());
  int64_t n_entries = 0;
  for (size_t i = 0; i < tables.size(); ++i) {
    table_offset[i] = n_entries;
    n_entries += tables[i].second;
  }
  const size_t q_bytes = aligned(static_cast<size_t>(n_tok * s.n_head * s.head_dim) * 4);
  const size_t queries_bytes = aligned(static_cast<size_t>(n_tok) * sizeof(cuda::DeviceQuery));
  const size_t tables_bytes = aligned(static_cast<size_t>(n_entries) * 4);
  const size_t in_bytes = q_bytes + queries_bytes + tables_bytes;
  uint8_t* h_in = im.stage_in(in_bytes);
  std::memcpy(h_in, q, static_cast<size_t>(n_tok * s.n_head * s.head_dim) * 4);
  auto* hq = reinterpret_cast<cuda::DeviceQuery*>(h_in + q_bytes);
  for (int64_t t = 0; t < n_tok; ++t) hq[t] = {tok[t].pos, table_offset[table_of[static_cast<size_t>(t)]]};
  auto* ht = reinterpret_cast<int32_t*>(h_in + q_bytes + queries_bytes);
  for (size_t i = 0; i < tables.size(); ++i)
    std::memcpy(ht + table_offset[i], tables[i].first, static_cast<size_t>(tables[i].second) * 4);
  const size_t out_bytes = static_cast<size_t>(n_tok * s.n_head * s.v_dim()) * 4;
  const size_t scratch_bytes = static_cast<size_t>(n_tok * s.n_head * max_keys) * 4;
  uint8_t* d_in = im.d_in.need(in_bytes);
  uint8_t* d_out = im.d_out.need(out_bytes);
  uint8_t* d_work = im.d_work.need(scratch_bytes);
  uint8_t* h_out = im.h_out.need(out_bytes);
  const float* sinks = im.device_vector(s.sinks, s.n_head);
  CUDA_CHECK(cudaMemcpyAsync(d_in, h_in, in_bytes, cudaMemcpyHostToDevice, im.stream));
  cuda::attention(s, reinterpret_cast<const float*>(d_in), n_tok,
                  reinterpret_cast<const cuda::DeviceQuery*>(d_in + q_bytes),
                  reinterpret_cast<const int32_t*>(d_in + q_bytes + queries_bytes), im.device_ptr(k_cache, "KV cache"),
                  im.device_ptr(v_cache, "KV cache"), sinks, reinterpret_cast<float*>(d_work), max_keys,
                  reinterpret_cast<float*>(d_out), im.stream);
  CUDA_CHECK(cudaMemcpyAsync(h_out, d_out, out_bytes, cudaMemcpyDeviceToHost, im.stream));
  im.sync();
  std::memcpy(out, h_out, out_bytes);
}

void CudaBackend::kv_store(DType kv_type, const float* src, int64_t rows, int64_t n, const KvSlot& at) {
  Impl& im = *im_;
  if (!kv_type_supported(kv_type))
    throw std::invalid_argument(std::string("moeflow: a ") + dtype_name(kv_type) + " KV cache on CUDA (f32 or f16 only)");
  void* dst = at.first(kv_element_bytes(kv_type), n);
  const int64_t dst_stride = at.plane, elem_stride = at.element_stride();
  const ScopedOpTime timed(&im.times[Impl::kKvStore]);
  im.bind();
  const size_t bytes = static_cast<size_t>(rows * n) * 4;
  uint8_t* h_in = im.stage_in(bytes);
  std::memcpy(h_in, src, bytes);
  // Its own device staging: the next operation's inputs may land in d_in before this
  // store has run.
  uint8_t* d = im.d_work.need(bytes);
  CUDA_CHECK(cudaMemcpyAsync(d, h_in, bytes, cudaMemcpyHostToDevice, im.stream));
  cuda::kv_store(kv_type, reinterpret_cast<const float*>(d), rows, n,
                 const_cast<uint8_t*>(im.device_ptr(dst, "KV cache")), dst_stride, elem_stride, im.stream);
  im.pending = true;
}

void CudaBackend::rmsnorm_rows(const float* x, const float* w, float* y, int64_t n_rows, int64_t d, float eps) {
  const ScopedOpTime timed(&im_->times[Impl::kHost]);
  im_->cpu->rmsnorm_rows(x, w, y, n_rows, d, eps);
}
void CudaBackend::softmax_rows(float* x, int64_t rows, int64_t n) {
  const ScopedOpTime timed(&im_->times[Impl::kHost]);
  im_->cpu->softmax_rows(x, rows, n);
}
void CudaBackend::rope_angles(int64_t pos, int64_t rot_dim, float freq_base, float* cs) {
  const ScopedOpTime timed(&im_->times[Impl::kHost]);
  im_->cpu->rope_angles(pos, rot_dim, freq_base, cs);
}
void CudaBackend::rope_heads(float* heads, int64_t n_heads, int64_t stride, int64_t rot_dim, const float* cs,
                             bool neox) {
  const ScopedOpTime timed(&im_->times[Impl::kHost]);
  im_->cpu->rope_heads(heads, n_heads, stride, rot_dim, cs, neox);
}

void CudaBackend::expert_ffns(const ExpertMatrices* mats, const std::vector<int64_t>* const* slots, size_t n,
                              const float* x, const int64_t* requests, int64_t K, int64_t D, int64_t F,
                              float* per_slot) {
  Impl& im = *im_;
  const ScopedOpTime timed(&im.times[Impl::kExperts]);
  im.bind();
  // Experts handed over in host memory run on the CPU (below, while the device
  // computes the others); every other expert's slots go to the device, gathered.
  std::vector<size_t> dev, host;
  for (size_t i = 0; i < n; ++i) (im.is_host_expert(mats[i].gate.data) ? host : dev).push_back(i);
  std::vector<size_t> first(dev.size() + 1, 0);
  for (size_t i = 0; i < dev.size(); ++i) first[i + 1] = first[i] + slots[dev[i]]->size();
  const size_t rows = first.back();
  if (rows > 0) {
    for (size_t i : dev)
      for (const MatrixRef* m : {&mats[i].gate, &mats[i].up, &mats[i].down}) require_kernel(m->dtype, "experts");
    const size_t x_bytes = rows * static_cast<size_t>(D) * 4;
    uint8_t* h_in = im.stage_in(x_bytes);
    for (size_t i = 0; i < dev.size(); ++i)
      for (size_t r = first[i]; r < first[i + 1]; ++r)
        std::memcpy(h_in + r * static_cast<size_t>(D) * 4, x + (*slots[dev[i]])[r - first[i]] / K * D,
                    static_cast<size_t>(D) * 4);
    const size_t hid = aligned(rows * static_cast<size_t>(F) * 4);
    float* d_x = reinterpret_cast<float*>(im.d_in.need(x_bytes));
    float* d_down = reinterpret_cast<float*>(im.d_out.need(x_bytes));
    uint8_t* work = im.d_work.need(2 * hid);
    float* d_gate = reinterpret_cast<float*>(work);
    float* d_up = reinterpret_cast<float*>(work + hid);
    CUDA_CHECK(cudaMemcpyAsync(d_x, h_in, x_bytes, cudaMemcpyHostToDevice, im.stream));
    for (size_t i = 0; i < dev.size(); ++i) {
      const ExpertMatrices& m = mats[dev[i]];
      const int64_t r0 = static_cast<int64_t>(first[i]), nt = static_cast<int64_t>(first[i + 1] - first[i]);
      if (nt == 0) continue;
      cuda::matvec(m.gate.dtype, im.device_ptr(m.gate.data, "expert"), F, D, d_x + r0 * D, D, nt, d_gate + r0 * F, F,
                   im.stream);
      cuda::matvec(m.up.dtype, im.device_ptr(m.up.data, "expert"), F, D, d_x + r0 * D, D, nt, d_up + r0 * F, F,
                   im.stream);
      cuda::expert_glu(d_gate + r0 * F, d_up + r0 * F, im.device_vector(m.gate_bias, F), im.device_vector(m.up_bias, F),
                       nt, F, m.glu == ExpertGlu::SwigluOai, im.stream);
      cuda::matvec(m.down.dtype, im.device_ptr(m.down.data, "expert"), D, F, d_gate + r0 * F, F, nt, d_down + r0 * D,
                   D, im.stream);
      if (m.down_bias) cuda::add_bias_rows(d_down + r0 * D, im.device_vector(m.down_bias, D), nt, D, im.stream);
    }
    uint8_t* h_out = im.h_out.need(x_bytes);
    CUDA_CHECK(cudaMemcpyAsync(h_out, d_down, x_bytes, cudaMemcpyDeviceToHost, im.stream));
    im.pending = true;
  }
  if (!host.empty()) {
    std::vector<ExpertMatrices> hm;
    std::vector<const std::vector<int64_t>*> hs;
    for (size_t i : host) {
      hm.push_back(mats[i]);
      hs.push_back(slots[i]);
    }
    im.cpu->expert_ffns(hm.data(), hs.data(), hm.size(), x, requests, K, D, F, per_slot);
    std::lock_guard<std::mutex> lock(im.mu);
    im.host_computed += host.size();
  }
  if (rows > 0) {
    im.sync();
    for (size_t i = 0; i < dev.size(); ++i)
      for (size_t r = first[i]; r < first[i + 1]; ++r)
        std::memcpy(per_slot + (*slots[dev[i]])[r - first[i]] * D, im.h_out.p + r * static_cast<size_t>(D) * 4,
                    static_cast<size_t>(D) * 4);
  }
}

std::vector<Backend::OpTime> CudaBackend::op_times() const {
  return std::vector<OpTime>(im_->times, im_->times + Impl::kOps);
}

CudaBackend::DeviceMemory CudaBackend::device_memory() const {
  std::lock_guard<std::mutex> lock(im_->mu);
  return im_->mem;
}

uint64_t CudaBackend::host_computed_experts() const {
  std::lock_guard<std::mutex> lock(im_->mu);
  return im_->host_computed;
}

}  // namespace moeflow

// Attention over the paged KV cache, KV stores and the expert FFN's elementwise parts.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <stdexcept>

#include "kernels/cpu/swiglu_oai.h"
#include "kernels/cuda/kernels.h"

namespace moeflow::cuda {
namespace {

constexpr int kAttnThreads = 128;

struct AttnParams {
  int64_t n_head, group, head_dim, v_dim, block_len, block_stride, v_stride, window;
  float scale;
};

__device__ float cache_at(const void* c, int64_t i, bool f16) {
  return f16 ? __half2float(static_cast<const __half*>(c)[i]) : static_cast<const float*>(c)[i];
}

// Reduces v over the block (max or sum); every thread gets the result.
template <bool kMax>
__device__ float block_reduce(float v, float* shared32) {
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  __syncthreads();  // shared32 may still be read by an earlier reduction
  if (lane == 0) shared32[warp] = v;
  __syncthreads();
  float r = shared32[0];
  for (int i = 1; i < warps; ++i) r = kMax ? fmaxf(r, shared32[i]) : r + shared32[i];
  return r;
}

// One thread block per (query head, token): scores of every key the token reads into
// scratch, their softmax (with the head's sink in the denominator), then the values'
// weighted sum, a thread per output element.
__global__ void attention_kernel(AttnParams p, const float* __restrict__ q, const DeviceQuery* __restrict__ queries,
                                 const int32_t* __restrict__ tables, const void* k_cache, const void* v_cache, bool f16,
                                 const float* __restrict__ sinks, float* __restrict__ scratch, int64_t max_keys,
                                 float* __restrict__ out) {
  extern __shared__ float qh[];
  __shared__ float red[32];
  const int64_t h = blockIdx.x, t = blockIdx.y, g = h / p.group;
  const DeviceQuery dq = queries[t];
  const int32_t* table = tables + dq.table_offset;
  const int64_t n_keys = dq.pos + 1;
  const int64_t first = p.window > 0 && n_keys > p.window ? n_keys - p.window : 0;
  const int64_t n = n_keys - first;
  for (int64_t d = threadIdx.x; d < p.head_dim; d += blockDim.x) qh[d] = q[(t * p.n_head + h) * p.head_dim + d];
  __syncthreads();
  float* sc = scratch + (t * p.n_head + h) * max_keys;
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t pos = first + i;
    const int64_t base = table[pos / p.block_len] * p.block_stride + g * p.block_len * p.head_dim + pos % p.block_len;
    float dot = 0.0f;
    for (int64_t d = 0; d < p.head_dim; ++d) dot = fmaf(qh[d], cache_at(k_cache, base + d * p.block_len, f16), dot);
    const float s = dot * p.scale;
    sc[i] = s;
    mx = fmaxf(mx, s);
  }
  const float sink = sinks ? sinks[h] : -INFINITY;
  mx = fmaxf(block_reduce<true>(mx, red), sink);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float e = expf(sc[i] - mx);
    sc[i] = e;
    sum += e;
  }
  sum = block_reduce<false>(sum, red);
  if (sinks) sum += expf(sink - mx);
  __syncthreads();  // every score is written before any thread reads them all
  const float inv = 1.0f / sum;
  for (int64_t d = threadIdx.x; d < p.v_dim; d += blockDim.x) {
    float o = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pos = first + i;
      const int64_t row = table[pos / p.block_len] * p.v_stride + g * p.block_len * p.v_dim + (pos % p.block_len) * p.v_dim;
      o = fmaf(sc[i], cache_at(v_cache, row + d, f16), o);
    }
    out[(t * p.n_head + h) * p.v_dim + d] = o * inv;
  }
}

__global__ void kv_store_kernel(bool f16, const float* __restrict__ src, int64_t rows, int64_t n, void* dst,
                                int64_t dst_stride, int64_t elem_stride) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * n) return;
  const int64_t r = i / n, e = i % n;
  const int64_t at = r * dst_stride + e * elem_stride;
  if (f16) static_cast<__half*>(dst)[at] = __float2half_rn(src[i]);
  else static_cast<float*>(dst)[at] = src[i];
}

__global__ void glu_kernel(float* __restrict__ gate, const float* __restrict__ up, const float* __restrict__ gate_bias,
                           const float* __restrict__ up_bias, int64_t total, int64_t F, bool oai) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  float g = gate[i], u = up[i];
  if (gate_bias) g += gate_bias[i % F];
  if (up_bias) u += up_bias[i % F];
  if (oai) {
    g = fminf(g, cpu::kSwigluOaiLimit);
    u = fminf(fmaxf(u, -cpu::kSwigluOaiLimit), cpu::kSwigluOaiLimit);
    gate[i] = (u + 1.0f) * g / (1.0f + expf(-cpu::kSwigluOaiAlpha * g));
  } else {
    gate[i] = g / (1.0f + expf(-g)) * u;
  }
}

__global__ void add_bias_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t total, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < total) y[i] += bias[i % n];
}

unsigned blocks_for(int64_t n, int threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace

void attention(const cpu::AttentionShape& s, const float* q, int64_t n_tok, const DeviceQuery* queries,
               const int32_t* tables, const void* k_cache, const void* v_cache, const float* sinks, float* scratch,
               int64_t max_keys, float* out, Stream stream) {
  if (s.kv_type != DType::F32 && s.kv_type != DType::F16)
    throw std::invalid_argument("cuda attention: the KV cache must be f32 or f16");
  if (s.n_head <= 0 || s.n_head_kv <= 0 || s.n_head % s.n_head_kv != 0 || s.head_dim <= 0 || s.block_len <= 0)
    throw std::invalid_argument("cuda attention: inconsistent shape");
  if (n_tok <= 0) return;
  AttnParams p{s.n_head, s.n_head / s.n_head_kv, s.head_dim, s.v_dim(), s.block_len, s.block_stride, s.v_stride(),
               s.window, s.scale > 0 ? s.scale : 1.0f / std::sqrt(static_cast<float>(s.head_dim))};
  const dim3 grid(static_cast<unsigned>(s.n_head), static_cast<unsigned>(n_tok));
  attention_kernel<<<grid, kAttnThreads, static_cast<size_t>(s.head_dim) * sizeof(float),
                     static_cast<cudaStream_t>(stream)>>>(p, q, queries, tables, k_cache, v_cache,
                                                          s.kv_type == DType::F16, sinks, scratch, max_keys, out);
}

void kv_store(DType kv_type, const float* src, int64_t rows, int64_t n, void* dst, int64_t dst_stride,
              int64_t elem_stride, Stream stream) {
  if (kv_type != DType::F32 && kv_type != DType::F16)
    throw std::invalid_argument("cuda kv_store: the KV cache must be f32 or f16");
  if (rows * n <= 0) return;
  kv_store_kernel<<<blocks_for(rows * n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      kv_type == DType::F16, src, rows, n, dst, dst_stride, elem_stride);
}

void expert_glu(float* gate, const float* up, const float* gate_bias, const float* up_bias, int64_t rows, int64_t F,
                bool oai, Stream stream) {
  if (rows * F <= 0) return;
  glu_kernel<<<blocks_for(rows * F, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(gate, up, gate_bias, up_bias,
                                                                                     rows * F, F, oai);
}

void add_bias_rows(float* y, const float* bias, int64_t rows, int64_t n, Stream stream) {
  if (rows * n <= 0) return;
  add_bias_kernel<<<blocks_for(rows * n, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(y, bias, rows * n, n);
}

}  // namespace moeflow::cuda

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/dequant_groups.cuh"
#include "kernels/cuda/kernels.h"

namespace moeflow::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;  // rows per thread block
constexpr int kTokensPerPass = 8;  // tokens a warp multiplies per read of its row

// One warp per row; lane l takes groups l, l + 32, ...: a warp reads a k-quant
// super-block (or 32 q4_0 / q8_0 blocks) together, so its loads are contiguous. The
// same code runs for any token count (the loop bound is uniform), so a token's sum is
// formed identically alone or in company.
template <DType T, int NT>
__global__ void matvec_kernel(const uint8_t* __restrict__ w, int64_t rows, int64_t cols, int64_t row_bytes,
                              const float* __restrict__ x, int64_t x_stride, int64_t n_tok, float* __restrict__ y,
                              int64_t y_stride) {
  constexpr int G = GroupTraits<T>::kGroup;
  static_assert(G == 8, "the loads below take eight floats");
  const int lane = threadIdx.x & 31;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5);
  if (r >= rows) return;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * NT;
  const int64_t left = n_tok - t0;
  const int nt = left < NT ? static_cast<int>(left) : NT;
  const uint8_t* row = w + r * row_bytes;
  const float* xs = x + t0 * x_stride;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  float v[G];
  const int64_t groups = cols / G;
  // Unrolled so that several groups' loads are in flight at once; each token's sum
  // still takes the groups in order.
#pragma unroll 4
  for (int64_t g = lane; g < groups; g += 32) {
    decode_group<T>(row, g, v);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < nt) {
        // Eight floats 32-byte aligned (matvec checks cols and the strides): two
        // vector loads, a warp's side by side.
        const float4* xt = reinterpret_cast<const float4*>(xs + t * x_stride + g * G);
        const float4 a = __ldg(xt), b = __ldg(xt + 1);
        float s = 0.0f;
        s = fmaf(v[0], a.x, s);
        s = fmaf(v[1], a.y, s);
        s = fmaf(v[2], a.z, s);
        s = fmaf(v[3], a.w, s);
        s = fmaf(v[4], b.x, s);
        s = fmaf(v[5], b.y, s);
        s = fmaf(v[6], b.z, s);
        s = fmaf(v[7], b.w, s);
        acc[t] += s;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    float a = acc[t];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
    if (lane == 0 && t < nt) y[(t0 + t) * y_stride + r] = a;
  }
}

template <DType T>
void launch(const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t x_stride, int64_t n_tok, float* y,
            int64_t y_stride, cudaStream_t s) {
  const int64_t row_bytes = cols / GroupTraits<T>::kBlock * GroupTraits<T>::kBlockBytes;
  // One token (decode) has a kernel of its own with one accumulator; it forms the
  // token's sum exactly as the eight-token kernel does.
  const unsigned row_blocks = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  if (n_tok == 1) {
    matvec_kernel<T, 1><<<dim3(row_blocks, 1), kWarpsPerBlock * 32, 0, s>>>(w, rows, cols, row_bytes, x, x_stride, 1, y,
                                                                           y_stride);
    return;
  }
  const dim3 grid(row_blocks, static_cast<unsigned>((n_tok + kTokensPerPass - 1) / kTokensPerPass));
  matvec_kernel<T, kTokensPerPass><<<grid, kWarpsPerBlock * 32, 0, s>>>(w, rows, cols, row_bytes, x, x_stride, n_tok, y,
                                                                        y_stride);
}

template <DType T>
void decode_host(const void* row, float* out, int64_t n) {
  constexpr int G = GroupTraits<T>::kGroup;
  for (int64_t g = 0; g < n / G; ++g) decode_group<T>(static_cast<const uint8_t*>(row), g, out + g * G);
}

}  // namespace

void matvec(DType t, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t x_stride, int64_t n_tok,
            float* y, int64_t y_stride, Stream stream) {
  if (rows <= 0 || n_tok <= 0) return;
  if (cols % 8 || x_stride % 8 || reinterpret_cast<uintptr_t>(x) % 32)
    throw std::invalid_argument("cuda matvec: columns, the activation's stride and address must be multiples of 8 floats");
  if (n_tok > 65535ll * kTokensPerPass) throw std::invalid_argument("cuda matvec: too many tokens in one product");
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (t) {
    case DType::F32: return launch<DType::F32>(w, rows, cols, x, x_stride, n_tok, y, y_stride, s);
    case DType::F16: return launch<DType::F16>(w, rows, cols, x, x_stride, n_tok, y, y_stride, s);
    case DType::BF16: return launch<DType::BF16>(w, rows, cols, x, x_stride, n_tok, y, y_stride, s);
    case DType::Q8_0: return launch<DType::Q8_0>(w, rows, cols, x, x_stride, n_tok, y, y_stride, s);
    case DType::Q4_0: return launch<DType::Q4_0>(w, rows, cols, x, x_stride, n_tok, y, y_stride, s);
    case DType::Q2_K: return launch<DType::Q2_K>(w, rows, cols, x, x_stride, n_tok, y, y_stride, s);
    case DType::Q3_K: return launch<DType::Q3_K>(w, rows, cols, x, x_stride, n_tok, y, y_stride, s);
    case DType::Q4_K: return launch<DType::Q4_K>(w, rows, cols, x, x_stride, n_tok, y, y_stride, s);
    case DType::Q5_K: return launch<DType::Q5_K>(w, rows, cols, x, x_stride, n_tok, y, y_stride, s);
    case DType::Q6_K: return launch<DType::Q6_K>(w, rows, cols, x, x_stride, n_tok, y, y_stride, s);
    default:
      throw std::invalid_argument(std::string("cuda matvec: no kernel for ") + dtype_name(t));
  }
}

void decode_row_on_host(DType t, const void* row, float* out, int64_t n) {
  switch (t) {
    case DType::F32: return decode_host<DType::F32>(row, out, n);
    case DType::F16: return decode_host<DType::F16>(row, out, n);
    case DType::BF16: return decode_host<DType::BF16>(row, out, n);
    case DType::Q8_0: return decode_host<DType::Q8_0>(row, out, n);
    case DType::Q4_0: return decode_host<DType::Q4_0>(row, out, n);
    case DType::Q2_K: return decode_host<DType::Q2_K>(row, out, n);
    case DType::Q3_K: return decode_host<DType::Q3_K>(row, out, n);
    case DType::Q4_K: return decode_host<DType::Q4_K>(row, out, n);
    case DType::Q5_K: return decode_host<DType::Q5_K>(row, out, n);
    case DType::Q6_K: return decode_host<DType::Q6_K>(row, out, n);
    default:
      throw std::invalid_argument(std::string("cuda: no decoder for ") + dtype_name(t));
  }
}

}  // namespace moeflow::cuda

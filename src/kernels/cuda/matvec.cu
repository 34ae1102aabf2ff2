#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/dequant_groups.cuh"
#include "kernels/cuda/kernels.h"

namespace moeflow::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;  // warps per thread block
constexpr int kTokensPerPass = 8;  // tokens a warp multiplies per read of its rows

// A warp takes R consecutive rows; lane l takes groups l, l + 32, ... of each: a warp
// reads a k-quant super-block (or 32 q4_0 / q8_0 blocks) of a row together, so its
// loads are contiguous, and the activation's floats a lane loads serve all R rows (at
// R = 1 they are seven times the bytes of q4_0 weights it streams). Every row's sum is
// formed in the same order whatever R and the token count are (the loop bounds are
// uniform): a token's result never depends on the tokens or rows beside it, and R = 1
// is the reference the others are tested against bit for bit.
template <DType T, int NT, int R>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    matvec_kernel(const uint8_t* __restrict__ w, int64_t rows, int64_t cols, int64_t row_bytes,
                  const float* __restrict__ x, int64_t x_stride, int64_t n_tok, float* __restrict__ y,
                  int64_t y_stride) {
  constexpr int G = GroupTraits<T>::kGroup;
  static_assert(G == 8, "the loads below take eight floats");
  // One token keeps few registers, so four groups' loads go in flight at once; eight
  // tokens' activations take 64 registers already.
  constexpr int kUnroll = NT == 1 ? 4 : 1;
  const int lane = threadIdx.x & 31;
  const int64_t r0 = (static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + (threadIdx.x >> 5)) * R;
  if (r0 >= rows) return;
  const int nr = rows - r0 < R ? static_cast<int>(rows - r0) : R;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * NT;
  const int64_t left = n_tok - t0;
  const int nt = left < NT ? static_cast<int>(left) : NT;
  const uint8_t* row0 = w + r0 * row_bytes;
  const float* xs = x + t0 * x_stride;
  float acc[R][NT];
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[i][t] = 0.0f;
  const int64_t groups = cols / G;
#pragma unroll kUnroll
  for (int64_t g = lane; g < groups; g += 32) {
    // Eight floats 32-byte aligned (matvec checks cols and the strides): two vector
    // loads, a warp's side by side.
    float4 xa[NT], xb[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t < nt) {
        const float4* xt = reinterpret_cast<const float4*>(xs + t * x_stride + g * G);
        xa[t] = __ldg(xt);
        xb[t] = __ldg(xt + 1);
      }
    }
#pragma unroll
    for (int i = 0; i < R; ++i) {
      if (i < nr) {
        float v[G];
        decode_group<T>(row0 + i * row_bytes, g, v);
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          if (t < nt) {
            const float4 a = xa[t], b = xb[t];
            float s = 0.0f;
            s = fmaf(v[0], a.x, s);
            s = fmaf(v[1], a.y, s);
            s = fmaf(v[2], a.z, s);
            s = fmaf(v[3], a.w, s);
            s = fmaf(v[4], b.x, s);
            s = fmaf(v[5], b.y, s);
            s = fmaf(v[6], b.z, s);
            s = fmaf(v[7], b.w, s);
            acc[i][t] += s;
          }
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < R; ++i) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      float a = acc[i][t];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffffu, a, o);
      if (lane == 0 && t < nt && i < nr) y[(t0 + t) * y_stride + r0 + i] = a;
    }
  }
}

// Rows per warp when the caller leaves it open: the most (up to 4, 2 for the
// eight-token kernel's registers) that still gives every multiprocessor a block.
int auto_rows_per_warp(int64_t rows, int64_t n_tok) {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    cudaGetLastError();
    return 1;
  }
  for (int r = n_tok == 1 ? 4 : 2; r > 1; r /= 2)
    if ((rows + kWarpsPerBlock * r - 1) / (kWarpsPerBlock * r) >= sms) return r;
  return 1;
}

template <DType T, int NT, int R>
void launch_rows(const uint8_t* w, int64_t rows, int64_t cols, int64_t row_bytes, const float* x, int64_t x_stride,
                 int64_t n_tok, float* y, int64_t y_stride, cudaStream_t s) {
  const int64_t rows_per_block = static_cast<int64_t>(kWarpsPerBlock) * R;
  const dim3 grid(static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block),
                  static_cast<unsigned>((n_tok + NT - 1) / NT));
  matvec_kernel<T, NT, R><<<grid, kWarpsPerBlock * 32, 0, s>>>(w, rows, cols, row_bytes, x, x_stride, n_tok, y, y_stride);
}

template <DType T>
void launch(const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t x_stride, int64_t n_tok, float* y,
            int64_t y_stride, int rows_per_warp, cudaStream_t s) {
  const int64_t rb = cols / GroupTraits<T>::kBlock * GroupTraits<T>::kBlockBytes;
  const int r = rows_per_warp > 0 ? rows_per_warp : auto_rows_per_warp(rows, n_tok);
  // One token (decode) has kernels of their own with one accumulator a row; they form
  // the token's sum exactly as the eight-token kernels do.
  if (n_tok == 1) {
    if (r >= 4) return launch_rows<T, 1, 4>(w, rows, cols, rb, x, x_stride, 1, y, y_stride, s);
    if (r == 2) return launch_rows<T, 1, 2>(w, rows, cols, rb, x, x_stride, 1, y, y_stride, s);
    return launch_rows<T, 1, 1>(w, rows, cols, rb, x, x_stride, 1, y, y_stride, s);
  }
  if (r >= 2) return launch_rows<T, kTokensPerPass, 2>(w, rows, cols, rb, x, x_stride, n_tok, y, y_stride, s);
  launch_rows<T, kTokensPerPass, 1>(w, rows, cols, rb, x, x_stride, n_tok, y, y_stride, s);
}

// Calls f.template operator()<T>() for the type t names; throws for a type the kernels
// cannot read.
template <class F>
void with_type(DType t, const char* what, F&& f) {
  switch (t) {
    case DType::F32: return f.template operator()<DType::F32>();
    case DType::F16: return f.template operator()<DType::F16>();
    case DType::BF16: return f.template operator()<DType::BF16>();
    case DType::Q8_0: return f.template operator()<DType::Q8_0>();
    case DType::Q4_0: return f.template operator()<DType::Q4_0>();
    case DType::Q4_1: return f.template operator()<DType::Q4_1>();
    case DType::Q5_0: return f.template operator()<DType::Q5_0>();
    case DType::Q5_1: return f.template operator()<DType::Q5_1>();
    case DType::Q2_K: return f.template operator()<DType::Q2_K>();
    case DType::Q3_K: return f.template operator()<DType::Q3_K>();
    case DType::Q4_K: return f.template operator()<DType::Q4_K>();
    case DType::Q5_K: return f.template operator()<DType::Q5_K>();
    case DType::Q6_K: return f.template operator()<DType::Q6_K>();
    case DType::IQ4_NL: return f.template operator()<DType::IQ4_NL>();
    case DType::IQ4_XS: return f.template operator()<DType::IQ4_XS>();
    case DType::MXFP4: return f.template operator()<DType::MXFP4>();
    default:
      throw std::invalid_argument(std::string("cuda ") + what + ": no kernel for " + dtype_name(t));
  }
}

template <DType T>
void decode_host(const void* row, float* out, int64_t n) {
  constexpr int G = GroupTraits<T>::kGroup;
  for (int64_t g = 0; g < n / G; ++g) decode_group<T>(static_cast<const uint8_t*>(row), g, out + g * G);
}

}  // namespace

void matvec(DType t, const uint8_t* w, int64_t rows, int64_t cols, const float* x, int64_t x_stride, int64_t n_tok,
            float* y, int64_t y_stride, Stream stream, int rows_per_warp) {
  if (rows <= 0 || n_tok <= 0) return;
  if (cols % 8 || x_stride % 8 || reinterpret_cast<uintptr_t>(x) % 32)
    throw std::invalid_argument("cuda matvec: columns, the activation's stride and address must be multiples of 8 floats");
  if (n_tok > 65535ll * kTokensPerPass) throw std::invalid_argument("cuda matvec: too many tokens in one product");
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  with_type(t, "matvec", [&]<DType T>() { launch<T>(w, rows, cols, x, x_stride, n_tok, y, y_stride, rows_per_warp, s); });
}

void decode_row_on_host(DType t, const void* row, float* out, int64_t n) {
  with_type(t, "decoder", [&]<DType T>() { decode_host<T>(row, out, n); });
}

}  // namespace moeflow::cuda

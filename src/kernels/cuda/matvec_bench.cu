// matvec's streaming speed (kernels.h): the GPU half of `moeflow bench-kernels`.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda/kernels.h"
#include "tensor/dtype.h"

namespace moeflow::cuda {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(std::string("cuda matvec benchmark: ") + what + ": " + cudaGetErrorString(e));
  }
}

}  // namespace

std::vector<double> matvec_stream_gbs(DType t, const uint8_t* matrix, int64_t rows, int64_t cols, int64_t n_tok,
                                      const std::vector<int>& rows_per_warp, uint64_t stream_bytes,
                                      double min_seconds) {
  const size_t mat_bytes = row_bytes(t, cols) * static_cast<size_t>(rows);
  // Matrices 256-byte aligned, as the backend places them; enough copies that the
  // device's L2 cannot hold what a pass reads.
  const size_t stride = (mat_bytes + 255) / 256 * 256;
  const int64_t n_mat = std::max<int64_t>(1, static_cast<int64_t>(stream_bytes / stride));
  uint8_t* w = nullptr;
  float *x = nullptr, *y = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  std::vector<double> out;
  try {
    check(cudaMalloc(reinterpret_cast<void**>(&w), stride * static_cast<size_t>(n_mat)), "weights");
    check(cudaMalloc(reinterpret_cast<void**>(&x), static_cast<size_t>(n_tok * cols) * 4), "activations");
    check(cudaMalloc(reinterpret_cast<void**>(&y), static_cast<size_t>(n_tok * rows) * 4), "results");
    check(cudaMemset(x, 0, static_cast<size_t>(n_tok * cols) * 4), "activations");
    check(cudaMemcpy(w, matrix, mat_bytes, cudaMemcpyHostToDevice), "upload");
    for (int64_t m = 1; m < n_mat; ++m)
      check(cudaMemcpy(w + stride * static_cast<size_t>(m), w, mat_bytes, cudaMemcpyDeviceToDevice), "copies");
    check(cudaEventCreate(&e0), "event");
    check(cudaEventCreate(&e1), "event");
    for (int r : rows_per_warp) {
      double best = 0;
      for (int rep = 0; rep < 3; ++rep) {
        int64_t calls = 0;
        float ms = 0;
        check(cudaEventRecord(e0), "event");
        do {
          for (int64_t m = 0; m < n_mat; ++m, ++calls)
            matvec(t, w + stride * static_cast<size_t>(m), rows, cols, x, cols, n_tok, y, rows, nullptr, r);
          check(cudaEventRecord(e1), "event");
          check(cudaEventSynchronize(e1), "kernels");
          check(cudaEventElapsedTime(&ms, e0, e1), "event");
        } while (ms * 1e-3 < min_seconds);
        best = std::max(best, static_cast<double>(calls) * static_cast<double>(mat_bytes) / (ms * 1e-3) / 1e9);
      }
      out.push_back(best);
    }
  } catch (...) {
    cudaFree(w), cudaFree(x), cudaFree(y);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    throw;
  }
  cudaFree(w), cudaFree(x), cudaFree(y);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return out;
}

}  // namespace moeflow::cuda

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

// What the benchmark allocates, freed however it ends.
struct Buffers {
  uint8_t* w = nullptr;
  float *x = nullptr, *y = nullptr;
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  ~Buffers() {
    cudaFree(w), cudaFree(x), cudaFree(y);
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
  }
};

}  // namespace

std::vector<double> matvec_stream_gbs(DType t, const uint8_t* matrix, int64_t rows, int64_t cols, int64_t n_tok,
                                      const std::vector<int>& rows_per_warp, uint64_t stream_bytes,
                                      double min_seconds) {
  const size_t mat_bytes = row_bytes(t, cols) * static_cast<size_t>(rows);
  // Matrices 256-byte aligned, as the backend places them; enough copies that the
  // device's L2 cannot hold what a pass reads.
  const size_t stride = (mat_bytes + 255) / 256 * 256;
  const int64_t n_mat = std::max<int64_t>(1, static_cast<int64_t>(stream_bytes / stride));
  Buffers b;
  check(cudaMalloc(reinterpret_cast<void**>(&b.w), stride * static_cast<size_t>(n_mat)), "weights");
  check(cudaMalloc(reinterpret_cast<void**>(&b.x), static_cast<size_t>(n_tok * cols) * 4), "activations");
  check(cudaMalloc(reinterpret_cast<void**>(&b.y), static_cast<size_t>(n_tok * rows) * 4), "results");
  check(cudaMemset(b.x, 0, static_cast<size_t>(n_tok * cols) * 4), "activations");
  check(cudaMemcpy(b.w, matrix, mat_bytes, cudaMemcpyHostToDevice), "upload");
  for (int64_t m = 1; m < n_mat; ++m)
    check(cudaMemcpy(b.w + stride * static_cast<size_t>(m), b.w, mat_bytes, cudaMemcpyDeviceToDevice), "copies");
  check(cudaEventCreate(&b.e0), "event");
  check(cudaEventCreate(&b.e1), "event");
  std::vector<double> out;
  for (int r : rows_per_warp) {
    double best = 0;
    for (int rep = 0; rep < 3; ++rep) {
      int64_t calls = 0;
      float ms = 0;
      check(cudaEventRecord(b.e0), "event");
      do {
        for (int64_t m = 0; m < n_mat; ++m, ++calls)
          matvec(t, b.w + stride * static_cast<size_t>(m), rows, cols, b.x, cols, n_tok, b.y, rows, nullptr, r);
        check(cudaEventRecord(b.e1), "event");
        check(cudaEventSynchronize(b.e1), "kernels");
        check(cudaEventElapsedTime(&ms, b.e0, b.e1), "event");
      } while (ms * 1e-3 < min_seconds);
      best = std::max(best, static_cast<double>(calls) * static_cast<double>(mat_bytes) / (ms * 1e-3) / 1e9);
    }
    out.push_back(best);
  }
  return out;
}

}  // namespace moeflow::cuda

// A batched step's tokens on one matrix against each token's mat-vec alone (int8
// activations): how the kernel tests check that a token gets the same floats either way.
#pragma once
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/thread_pool.h"

namespace moeflow::testing {

// (alone, together): n_tok tokens' rows (X, n_tok x cols) times W (rows x cols of t in
// GGUF's layout), one mat-vec each, and as one per-token matmul_batch on the pool.
inline std::pair<std::vector<float>, std::vector<float>> alone_and_together(DType t, const uint8_t* w, int64_t rows,
                                                                            int64_t cols, const std::vector<float>& X,
                                                                            int64_t n_tok, ThreadPool& pool) {
  std::vector<float> alone(static_cast<size_t>(n_tok * rows)), together(alone.size(), NAN);
  for (int64_t k = 0; k < n_tok; ++k) {
    const cpu::MatvecJob one{t, RowLayout::gguf, w, rows, cols, X.data() + k * cols, alone.data() + k * rows, true};
    cpu::matvec_batch(&one, 1, nullptr);
  }
  const cpu::MatmulJob step{t, RowLayout::gguf, w, rows, cols, X.data(), n_tok, together.data(), true, true};
  cpu::matmul_batch(&step, 1, &pool);
  return {alone, together};
}

}  // namespace moeflow::testing

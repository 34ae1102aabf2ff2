// How a step's rows go through one matrix, and a bias added to them: shared by the
// forward pass's blocks and the router (moe_layer.h), so every product of a step splits
// its rows the same way.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/model_weights.h"

namespace moeflow {

// Appends the jobs of Y = W X over a step's n rows of x ([n][w.cols]) into y
// ([n][w.rows]): the first n_single rows (tokens alone in their sequence) as per-token
// mat-vecs, the rest as one mat-mul, so a sequence's floats do not depend on its company.
inline void add_products(const MatrixRef& w, const float* x, int64_t n, int64_t n_single, float* y,
                         std::vector<Product>& jobs) {
  if (n_single > 0) jobs.push_back({w.dtype, w.layout, w.data, w.rows, w.cols, x, n_single, y, true});
  if (n > n_single)
    jobs.push_back({w.dtype, w.layout, w.data, w.rows, w.cols, x + n_single * w.cols, n - n_single, y + n_single * w.rows});
}

// y[t] += b for the n rows of y (b.size() floats each).
inline void add_bias(float* y, const std::vector<float>& b, int64_t n) {
  const int64_t d = static_cast<int64_t>(b.size());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < d; ++i) y[t * d + i] += b[static_cast<size_t>(i)];
}

}  // namespace moeflow

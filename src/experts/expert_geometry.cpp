#include <algorithm>
#include <functional>

#include "experts/expert_key.h"

namespace moeflow {

uint64_t ExpertGeometry::min_budget() const {
  uint64_t best = 0;
  std::vector<uint64_t> row;
  for (int32_t l = 0; l < n_layer; ++l) {
    row.assign(bytes.begin() + static_cast<int64_t>(l) * n_expert, bytes.begin() + static_cast<int64_t>(l + 1) * n_expert);
    const size_t k = std::min<size_t>(static_cast<size_t>(std::max(top_k, 1)), row.size());
    std::partial_sort(row.begin(), row.begin() + static_cast<int64_t>(k), row.end(), std::greater<>());
    uint64_t s = 0;
    for (size_t i = 0; i < k; ++i) s += row[i];
    best = std::max(best, s);
  }
  return best;
}

ExpertGeometry ExpertGeometry::uniform(int32_t n_layer, int32_t n_expert, int32_t top_k, uint64_t bytes_per_expert) {
  ExpertGeometry g;
  g.n_layer = n_layer;
  g.n_expert = n_expert;
  g.top_k = top_k;
  g.bytes.assign(static_cast<size_t>(n_layer) * static_cast<size_t>(n_expert), bytes_per_expert);
  return g;
}

}  // namespace moeflow

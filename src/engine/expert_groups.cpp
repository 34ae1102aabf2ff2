#include "engine/expert_groups.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

namespace moeflow {

const float* limit_to_groups(const ModelConfig& c, const float* p, float* out) {
  const int64_t G = c.n_expert_group, per = c.n_expert / G;
  thread_local std::vector<float> best;
  thread_local std::vector<int32_t> order;
  best.resize(static_cast<size_t>(G));
  order.resize(static_cast<size_t>(G));
  for (int64_t g = 0; g < G; ++g) {
    const float* first = p + g * per;
    const float* top = std::max_element(first, first + per);
    float score = *top;
    if (c.router_scoring == RouterScoring::Sigmoid && per > 1) {  // plus the group's second best
      float second = -std::numeric_limits<float>::infinity();
      for (const float* q = first; q < first + per; ++q)
        if (q != top) second = std::max(second, *q);
      score += second;
    }
    best[static_cast<size_t>(g)] = score;
  }
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + c.n_expert_group_used, order.end(), [](int32_t a, int32_t b) {
    return best[static_cast<size_t>(a)] > best[static_cast<size_t>(b)] ||
           (best[static_cast<size_t>(a)] == best[static_cast<size_t>(b)] && a < b);
  });
  std::fill(out, out + c.n_expert, -std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < c.n_expert_group_used; ++i) {
    const int64_t g = order[static_cast<size_t>(i)];
    std::copy(p + g * per, p + (g + 1) * per, out + g * per);
  }
  return out;
}

}  // namespace moeflow

#include "experts/reroute.h"

#include <algorithm>

namespace moeflow {

std::vector<int64_t> reroute_to_resident(LayerRouting& r, const std::vector<int32_t>& resident,
                                         const std::function<double(int32_t)>& fallback, uint64_t* rerouted_slots) {
  std::vector<int64_t> changed;
  const int64_t K = r.top_k, E = r.n_expert;
  if (static_cast<int64_t>(resident.size()) < K) return changed;  // too few resident: tokens load their own
  const bool probs = !r.probs.empty();
  for (int64_t t = 0; t < r.n_tok; ++t) {
    int32_t* ids = r.experts.data() + t * K;
    const float* p = probs ? r.probs.data() + t * E : nullptr;
    auto score = [&](int32_t e) { return p ? static_cast<double>(p[e]) : fallback(e); };
    bool any = false;
    for (int64_t k = 0; k < K; ++k) {
      if (std::binary_search(resident.begin(), resident.end(), ids[k])) continue;
      int32_t best = -1;
      double best_score = 0;
      for (int32_t x : resident) {
        if (std::find(ids, ids + K, x) != ids + K) continue;
        const double s = score(x);
        if (best < 0 || s > best_score) {
          best = x;
          best_score = s;
        }
      }
      ids[k] = best;
      any = true;
      if (rerouted_slots) ++*rerouted_slots;
    }
    if (!any) continue;
    // Keep the slots best first (ties to the lower id, as routing orders them).
    if (p) std::stable_sort(ids, ids + K, [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    changed.push_back(t);
  }
  return changed;
}

}  // namespace moeflow

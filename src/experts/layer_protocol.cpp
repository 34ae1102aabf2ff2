#include "experts/layer_protocol.h"

namespace moeflow {

void run_layer_experts(ExpertCache& cache, int32_t layer, const std::vector<int32_t>& needed,
                       const std::function<void(int32_t, const uint8_t*)>& compute) {
  ExpertPolicy& policy = cache.policy();
  cache.begin_layer(layer, needed);
  std::vector<int32_t> pinned, missing;
  std::vector<const uint8_t*> bufs;
  for (int32_t e : needed) {
    if (const uint8_t* b = cache.try_acquire({layer, e})) {
      pinned.push_back(e);
      bufs.push_back(b);
    } else {
      missing.push_back(e);
    }
  }
  for (int32_t e : missing)
    if (cache.room_for_demand({layer, e})) cache.request({layer, e});
  if (policy.prefetches()) {
    PrefetchPlan plan;
    policy.plan_prefetch(layer, plan);
    for (const PrefetchRequest& p : plan) cache.prefetch(p.key, p.priority);
  }
  for (size_t i = 0; i < pinned.size(); ++i) {
    compute(pinned[i], bufs[i]);
    cache.release({layer, pinned[i]});
  }
  for (int32_t e : missing) {
    const uint8_t* b = cache.acquire({layer, e});
    compute(e, b);
    cache.release({layer, e});
  }
}

}  // namespace moeflow

// The order in which one MoE layer's experts are fetched and computed, shared by the
// engine (OffloadedExperts) and the simulator so that both make the same cache and
// policy calls:
//   1. begin_layer: the layer's experts become protected from prefetch evictions;
//   2. pin the needed experts that are resident (hits);
//   3. request the missing ones (misses) while room allows without evicting this
//      layer's experts; the rest load in step 6;
//   4. ask the policy for its prefetches and queue them behind the demands;
//   5. compute the pinned experts while the missing ones load;
//   6. acquire (waiting if needed), compute and release each missing expert.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "experts/expert_cache.h"

namespace moeflow {

// `compute(expert, buffer)` runs one expert (buffer is a placeholder when simulated).
void run_layer_experts(ExpertCache& cache, int32_t layer, const std::vector<int32_t>& needed,
                       const std::function<void(int32_t, const uint8_t*)>& compute);

}  // namespace moeflow

// The policies that learn nothing: recency, frequency, arrival order, and the
// speculative next-layer guess.
#pragma once
#include <memory>
#include <string>

#include "experts/expert_policy.h"

namespace moeflow {

// The baseline policies: "lru", "lfu", "on-demand" (no prefetch, FIFO eviction),
// "next-layer" (prefetch for layer l+1 the ids layer l chose; LRU eviction).
// Returns null for an unknown name.
std::unique_ptr<ExpertPolicy> make_baseline_policy(const std::string& name, const ExpertGeometry& g);

}  // namespace moeflow

// eMoE's rerouting (emoe.txt §3.4; lossy): a token whose selected expert is not
// resident uses the best resident expert it does not use yet instead. "Best" is the
// router's probability for that token when known, else a score the caller supplies
// (the simulator: the expert's popularity so far, for traces without probabilities).
// Only when at least top-k experts of the layer are resident; otherwise tokens load
// their own. One rule for the engine and the simulator.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "experts/expert_key.h"

namespace moeflow {

// Rewrites r.experts in place; `resident` ascending ids of the layer's resident
// experts; fallback(e) scores expert e where r.probs is empty. A rerouted token's
// slots are re-sorted best first (by probability, when known). Returns the tokens
// that changed (the engine recomputes their weights); counts changed slots in
// *rerouted_slots.
std::vector<int64_t> reroute_to_resident(LayerRouting& r, const std::vector<int32_t>& resident,
                                         const std::function<double(int32_t)>& fallback, uint64_t* rerouted_slots);

}  // namespace moeflow

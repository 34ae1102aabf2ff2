// Belady's MIN, the simulator-only upper bound for hit rate. It is given the whole
// future (the sequence of layer steps the replay will make, and the experts each
// needs) and evicts the resident expert whose next use is furthest away.
//
// Two variants: `belady-min`, the classic demand-paging MIN, and `belady-prefetch`,
// which also prefetches like an oracle, conservatively (Cao, Felten, Karlin and Li,
// SIGMETRICS 1995: fetch the missing expert needed soonest, evicting the resident one
// needed furthest away, but only if that one is needed later than the incoming one).
// Conservative prefetching makes MIN's replacements, only earlier, so it never misses
// more than MIN -- provided each fetch is decided when the link can start it: a copy
// reserves its bytes from the moment it is queued, and a queue of guesses for far
// steps would shrink the cache the demand path works with (that cut this oracle to
// 41% against MIN's 62% on Mixtral at 25%). So the oracle starts one copy at a time,
// and only while the link is idle (no demand or prefetch copy on it). What is left
// of the gap is measured, not proved away: a copy in flight holds its bytes and
// cannot be evicted, so with copies much slower than a layer's compute a demand can
// find the cache in a state MIN never reaches (docs/policies.md: at most 0.2 points
// below MIN on the traces; tests/unit/simulator_test.cpp BeladyBoundsAreOrdered). The simulator's `belady` bound is the better of
// the two variants on each run.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "experts/expert_policy.h"

namespace moeflow {

struct LayerStep {
  int32_t layer = 0;
  std::vector<int32_t> needed;  // distinct experts
};

class BeladyPolicy final : public ExpertPolicy {
 public:
  // `steps`: every layer step of the replay in order (routed() is called once per
  // step). `capacity`: how many experts the cache holds.
  BeladyPolicy(const ExpertGeometry& g, std::vector<LayerStep> steps, int64_t capacity, bool prefetch = true);

  std::string name() const override { return prefetch_ ? "belady-prefetch" : "belady-min"; }
  bool prefetches() const override { return prefetch_; }
  void routed(const LayerRouting&) override { ++pos_; }
  void link_state(size_t copies_in_flight, size_t) override { link_busy_ = copies_in_flight > 0; }
  size_t prefetch_limit() const override { return 1; }
  void plan_prefetch(int32_t layer_now, PrefetchPlan& plan) override;
  size_t victim(const CacheView& view, const ExpertKey& incoming) override;

 private:
  // Index of the first step >= `from` that needs `key` (steps.size() if none).
  size_t next_use(const ExpertKey& key, size_t from) const;

  const ExpertGeometry& g_;
  std::vector<LayerStep> steps_;
  int64_t capacity_;
  bool prefetch_;
  std::vector<std::vector<uint32_t>> uses_;  // per expert index: the steps that need it
  int64_t pos_ = -1;                          // the step routed last
  bool link_busy_ = false;
};

}  // namespace moeflow

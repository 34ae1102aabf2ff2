// Belady's MIN, the simulator-only upper bound for hit rate. It is given the whole
// future (the sequence of layer steps the replay will make, and the experts each
// needs) and evicts the resident expert whose next use is furthest away.
//
// Two variants: `belady-min`, the classic demand-paging MIN, and `belady-prefetch`,
// which also prefetches like an oracle, conservatively (Cao et al.'s rule: it asks
// for the experts needed soonest but admits one only if the expert it would evict is
// needed later than the incoming one). A prefetching policy can beat demand-only MIN
// when its prefetches land in time; the simulator's `belady` bound is the better of
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
};

}  // namespace moeflow

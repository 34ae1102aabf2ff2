// Belady's MIN, the simulator-only upper bound for hit rate. It is given the whole
// future (the sequence of layer steps the replay will make, and the experts each
// needs) and evicts the resident expert whose next use is furthest away.
//
// Three variants. `belady-min`, the classic demand-paging MIN. `belady-prefetch`,
// which also prefetches like an oracle, conservatively (Cao, Felten, Karlin and Li,
// SIGMETRICS 1995): it fetches the missing expert needed soonest, first used at step
// u, and makes room by the replacement MIN will make at u, only earlier: the resident
// expert needed furthest away after u. It waits (declines, and a later step's plan
// tries again) while that expert is in use by the current step or still needed
// before u, so each of its replacements is one MIN makes (MIN is optimal whichever
// of the experts needed furthest away it evicts) and it never misses where MIN hits
// (tests/unit/simulator_test.cpp: BeladyPrefetchNeverBelowMin over random traces,
// and the two cases an earlier rule got wrong, by hand). Each fetch is decided when
// the link can start it: a copy reserves its bytes from the moment it is queued, and
// a queue of guesses for far steps would shrink the cache the demand path works with,
// so the oracle starts one copy at a time, only while the link is idle (no demand or
// prefetch copy on it).
//
// `belady-eager`, the rule before it: the same fetches, but room made at once by
// evicting the resident expert needed furthest away from now, whenever that one is
// needed later than the incoming expert. It departs from MIN's replacements (an
// expert in use now, or used again before u and then never, is kept or evicted
// where MIN would not), so it can fall below MIN when copies are slow, and rise
// above the conservative oracle when they land early (its fetches start sooner).
// The simulator's `belady` bound is the best of the three variants on each run.
#pragma once
#include <cstdint>
#include <string>
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
  enum class Mode { min, conservative, eager };  // belady-min, belady-prefetch, belady-eager
  static constexpr const char* kNames[] = {"belady-min", "belady-prefetch", "belady-eager"};
  // The mode a policy name asks for; false if it names none of them.
  static bool mode_of(const std::string& name, Mode& mode);

  // `steps`: every layer step of the replay in order (routed() is called once per
  // step). `capacity`: how many experts the cache holds.
  BeladyPolicy(const ExpertGeometry& g, std::vector<LayerStep> steps, int64_t capacity, Mode mode);

  std::string name() const override { return kNames[static_cast<int>(mode_)]; }
  bool prefetches() const override { return mode_ != Mode::min; }
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
  Mode mode_;
  std::vector<std::vector<uint32_t>> uses_;  // per expert index: the steps that need it
  int64_t pos_ = -1;                          // the step routed last
  bool link_busy_ = false;
};

}  // namespace moeflow

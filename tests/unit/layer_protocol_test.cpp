// The layer protocol (experts/layer_protocol.h) driven by hand on a simulated link:
// DuoServe's two-slot prefill pipeline never has more than two experts loading or
// computing beyond what was resident, counted from outside (the transport) and
// inside (its counters), at any budget; the on-demand protocol, for contrast, does.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "counting_transport.h"
#include "experts/layer_protocol.h"
#include "experts/simulated_transport.h"
#include "policy/policy_factory.h"

namespace moeflow {
namespace {

using moeflow::testing::CountingTransport;

constexpr int32_t kLayers = 4, kExperts = 8, kTopK = 2;

struct Replay {
  int64_t peak_outstanding = 0;  // from the transport
  int64_t worst_slots = 0;       // streamed expert computing + copies outstanding, at each compute
  PipelineCounters pipe;
  CacheCounters counters;
  uint64_t budget = 0;
  std::vector<std::map<int32_t, int>> computed;  // per layer: expert -> times computed
  double seconds = 0;
};

// One prefill iteration of `tokens` tokens (token t uses experts t and t+1 mod 8 at
// every layer: all eight are needed), then `decode` one-token steps, on two copy
// engines so that the link itself would allow more than one copy at once.
Replay replay(const std::string& policy_name, uint64_t budget_experts, int decode = 0) {
  const ExpertGeometry g = ExpertGeometry::uniform(kLayers, kExperts, kTopK, 100);
  SimulatedTransport link(g, LinkProfile{100.0, 0.0, 2});  // 1 s per copy
  CountingTransport counting(link);
  auto policy = make_policy(policy_name, g);
  ExpertCache cache(g, std::max<uint64_t>(budget_experts * 100, g.min_budget()), counting, *policy);
  LayerProtocol protocol(cache);
  Replay out;
  out.budget = cache.budget_bytes();
  out.computed.resize(kLayers);
  policy->begin_request({});
  for (int it = 0; it <= decode; ++it) {
    const int64_t n_tok = it == 0 ? 8 : 1;
    policy->begin_iteration(it == 0 ? Phase::Prefill : Phase::Decode, it);
    for (int32_t l = 0; l < kLayers; ++l) {
      link.advance(0.5);  // dense part
      LayerRouting r;
      r.layer = l;
      r.n_expert = kExperts;
      r.top_k = kTopK;
      r.n_tok = n_tok;
      for (int64_t t = 0; t < n_tok; ++t) {
        r.experts.push_back(static_cast<int32_t>((t + it) % kExperts));
        r.experts.push_back(static_cast<int32_t>((t + it + 1) % kExperts));
      }
      policy->routed(r);
      std::vector<int32_t> needed(r.experts);
      std::sort(needed.begin(), needed.end());
      needed.erase(std::unique(needed.begin(), needed.end()), needed.end());
      std::vector<bool> was_resident(kExperts);
      for (int32_t e : needed) was_resident[static_cast<size_t>(e)] = cache.resident({l, e});
      protocol.run(l, needed, [&](int32_t e, const uint8_t* buf) {
        EXPECT_NE(buf, nullptr);
        EXPECT_TRUE(cache.resident({l, e}));
        if (it == 0) {
          ++out.computed[static_cast<size_t>(l)][e];
          const int64_t slots = counting.outstanding + (was_resident[static_cast<size_t>(e)] ? 0 : 1);
          out.worst_slots = std::max(out.worst_slots, slots);
          out.peak_outstanding = std::max(out.peak_outstanding, counting.peak);
        }
        link.advance(1.0);  // compute ~ copy
      });
    }
    policy->end_iteration();
  }
  policy->end_request(0);
  out.pipe = protocol.pipeline();
  out.counters = cache.counters();
  out.seconds = link.now();
  return out;
}

TEST(PrefillPipeline, NeverMoreThanTwoSlotsAtAnyBudget) {
  // 8 experts = 25% of the 32; 2 = the minimum (top-2 of one layer); 32 = all.
  for (uint64_t budget : {uint64_t{8}, uint64_t{2}, uint64_t{4}, uint64_t{32}}) {
    const Replay r = replay("duoserve", budget);
    SCOPED_TRACE("budget " + std::to_string(budget) + " experts");
    EXPECT_LE(r.peak_outstanding, 2) << "copies in flight at once, counted by the transport";
    EXPECT_LE(r.worst_slots, 2) << "a streamed expert computing plus the copies in flight";
    EXPECT_EQ(r.pipe.peak_slots, 2) << "the pipeline overlaps: one computing while the next loads";
    EXPECT_EQ(r.pipe.layers, static_cast<uint64_t>(kLayers));
    EXPECT_GT(r.pipe.overlapped, 0u);
    EXPECT_LE(r.counters.peak_bytes, r.budget) << "the slots are cache entries: the budget holds";
    for (int32_t l = 0; l < kLayers; ++l) {
      EXPECT_EQ(r.computed[static_cast<size_t>(l)].size(), static_cast<size_t>(kExperts)) << "layer " << l;
      for (const auto& [e, n] : r.computed[static_cast<size_t>(l)]) EXPECT_EQ(n, 1) << "layer " << l << " expert " << e;
    }
    // Layers 1..3 each had their head fetched while the layer before finished, and
    // (all experts being needed in prefill) used it.
    EXPECT_EQ(r.pipe.heads, static_cast<uint64_t>(kLayers - 1));
    EXPECT_EQ(r.pipe.head_hits, static_cast<uint64_t>(kLayers - 1));
  }
}

TEST(PrefillPipeline, OnDemandHasMoreInFlightAndDecodeDoesNotStream) {
  // The transport's count does see more than two: on-demand requests every miss of the
  // layer at once (and the link runs two of them).
  const Replay lru = replay("lru", 8);
  EXPECT_GT(lru.peak_outstanding, 2);
  EXPECT_EQ(lru.pipe.layers, 0u);
  // DuoServe streams its prefill only: decode steps go through the on-demand protocol
  // (with the predictor's prefetches).
  const Replay duo = replay("duoserve", 8, 3);
  EXPECT_EQ(duo.pipe.layers, static_cast<uint64_t>(kLayers)) << "decode layers must not stream";
}

// DuoServe's k-slot cache (§5.1, §5.3): a cache of one expert (k = 1), 2 layers x 4
// experts; the policy plans layer 1's expert 2 after layer 0's gate. Copies take 1 s,
// computing an expert 0.25 s. Layer 0 demands (0,0): the plan finds no room (the slot
// is (0,0)'s) and is dropped. With frees_computed_experts, (0,0)'s slot goes to (1,2)
// once it has computed (t = 1.25), so after 2 s of dense work layer 1 hits; without,
// layer 1 misses and loads on demand.
class FixedPlan : public ExpertPolicy {
 public:
  explicit FixedPlan(bool frees, double predict = 0) : frees_(frees), predict_(predict) {}
  std::string name() const override { return "fixed-plan"; }
  bool prefetches() const override { return true; }
  bool frees_computed_experts() const override { return frees_; }
  double prediction_seconds() const override { return predict_; }
  void plan_prefetch(int32_t layer_now, PrefetchPlan& plan) override {
    if (layer_now == 0) plan.push_back({{1, 2}, 1.0});
  }
  size_t victim(const CacheView&, const ExpertKey&) override { return 0; }

 private:
  bool frees_;
  double predict_;
};

TEST(LayerProtocol, KSlotCacheStreamsTheNextLayerIntoAFreedSlot) {
  for (bool frees : {true, false}) {
    const ExpertGeometry g = ExpertGeometry::uniform(2, 4, 1, 100);
    SimulatedTransport link(g, LinkProfile{100.0, 0.0, 1});
    FixedPlan policy(frees);
    ExpertCache cache(g, 100, link, policy);
    LayerProtocol protocol(cache);
    auto compute = [&](int32_t, const uint8_t*) { link.advance(0.25); };
    protocol.run(0, {0}, compute);
    EXPECT_NEAR(link.now(), 1.25, 1e-12);
    link.advance(2.0);
    protocol.run(1, {2}, compute);
    const CacheCounters& c = cache.counters();
    EXPECT_EQ(c.prefetches_dropped, 1u) << "the first try, while (0,0) holds the slot";
    EXPECT_EQ(c.prefetches_issued, frees ? 1u : 0u);
    EXPECT_EQ(c.hits, frees ? 1u : 0u);
    EXPECT_EQ(c.misses, frees ? 1u : 2u);
    EXPECT_NEAR(link.now(), frees ? 3.5 : 4.5, 1e-12);
  }
}

// DuoServe's prediction stream (§5.3): the plan made at layer 0's gate names (1,2) only
// after the predictor's P seconds. A cache of two experts, copies of 1 s on one link,
// compute 0.25 s. Layer 0's demand (0,0) runs 0 to 1 and computes to 1.25 whatever P is
// (a demand is never held); the prefetch starts at max(1, P). After 0.5 s of dense work
// (t = 1.75) layer 1 waits for it: P = 0 lands at 2.0, P = 1.5 at 2.5.
TEST(LayerProtocol, PredictionTimeHoldsThePlansPrefetches) {
  for (double predict : {0.0, 1.5}) {
    const ExpertGeometry g = ExpertGeometry::uniform(2, 4, 1, 100);
    SimulatedTransport link(g, LinkProfile{100.0, 0.0, 1});
    FixedPlan policy(false, predict);
    ExpertCache cache(g, 200, link, policy);
    LayerProtocol protocol(cache);
    auto compute = [&](int32_t, const uint8_t*) { link.advance(0.25); };
    protocol.run(0, {0}, compute);
    EXPECT_NEAR(link.now(), 1.25, 1e-12) << predict;
    link.advance(0.5);
    protocol.run(1, {2}, compute);
    EXPECT_NEAR(link.now(), predict > 0 ? 2.75 : 2.25, 1e-12) << predict;
    EXPECT_EQ(cache.counters().prefetches_issued, 1u);
  }
}

}  // namespace
}  // namespace moeflow

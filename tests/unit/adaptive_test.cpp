// The `adaptive` policy (policy/adaptive.h) on hand-computed cases: the layer cycle's
// distance, the learned reuse table and its prior, the value that ranks victims, the
// prefetch admission test, and when prefetching is held back.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "base/error.h"
#include "policy/adaptive.h"
#include "policy/policy_factory.h"

namespace moeflow {
namespace {

LayerRouting routing(int32_t layer, std::vector<int32_t> experts) {
  LayerRouting r;
  r.layer = layer;
  r.n_expert = 4;
  r.top_k = 1;
  r.n_tok = static_cast<int64_t>(experts.size());
  r.experts = std::move(experts);
  return r;
}

TEST(Adaptive, DistanceIsTheLayerCycle) {
  const ExpertGeometry g = ExpertGeometry::uniform(4, 4, 1, 100);
  AdaptivePolicy p(g);
  EXPECT_EQ(p.distance(2, 1), 1);  // next layer of this iteration
  EXPECT_EQ(p.distance(0, 3), 1);  // layer 0 of the next iteration
  EXPECT_EQ(p.distance(0, 1), 3);
  EXPECT_EQ(p.distance(1, 1), 4);  // the layer computing now: a whole cycle away
}

// Layer 0 of a 2 x 4 model, top-1, three decode visits routing experts 0, 0, 1 (one
// request). Each visit adds one observation per expert to the cell of the features it
// had just before the visit (recency, short-term rate, long-term rate, the request's
// own rate); the never-routed experts all share one cell, (never, 0, 0, 0):
//   visit 0: all four never routed          -> n 4, hits 1 (e0)
//   visit 1: e1..e3 never                    -> n 7, hits 1   (e0: another cell, a hit)
//   visit 2: e1 never (routed now), e2, e3   -> n 10, hits 2  (e0: another cell, no hit)
// 12 observations, 3 hits: prior 0.25. A cell's estimate is (hits + 2 prior) / (n + 2).
TEST(Adaptive, LearnsReuseRatesPerFeatureCell) {
  const ExpertGeometry g = ExpertGeometry::uniform(2, 4, 1, 100);
  AdaptivePolicy p(g);
  p.begin_iteration(Phase::Decode, 0);
  for (const std::vector<int32_t>& e : {std::vector<int32_t>{0}, {0}, {1}}) p.routed(routing(0, e));
  EXPECT_EQ(p.observations(), 12u);
  const double never = (2 + 2 * 0.25) / (10 + 2);
  EXPECT_NEAR(p.reuse_probability({0, 2}), never, 1e-12) << "e2: never routed";
  EXPECT_NEAR(p.reuse_probability({1, 3}), never, 1e-12) << "an expert of an unvisited layer is never routed too";
  // e1, routed at the last visit with a short-term rate of .125 and a long-term rate
  // of 1/3, lands in a cell never observed: the prior.
  EXPECT_NEAR(p.reuse_probability({0, 1}), 0.25, 1e-12);
  // Prefill visits update the state but teach nothing.
  p.begin_iteration(Phase::Prefill, 1);
  p.routed(routing(1, {0, 1, 2, 3}));
  EXPECT_EQ(p.observations(), 12u);
  // Without the table, the long-term rate alone: e0 routed 2 of 3 visits.
  AdaptivePolicy plain(g, adaptive_options_from_name("adaptive-nolearned"), "adaptive-nolearned");
  for (const std::vector<int32_t>& e : {std::vector<int32_t>{0}, {0}, {1}}) plain.routed(routing(0, e));
  EXPECT_NEAR(plain.reuse_probability({0, 0}), 2.0 / 3.0, 1e-12);
}

// value = p / (p d + L (1 - p)): expected hits per layer step held until the next use.
TEST(Adaptive, EvictsTheLeastValuableAndAdmitsOnlyBetterPrefetches) {
  const ExpertGeometry g = ExpertGeometry::uniform(2, 4, 1, 100);
  AdaptivePolicy p(g);
  p.begin_iteration(Phase::Decode, 0);
  for (const std::vector<int32_t>& e : {std::vector<int32_t>{0}, {0}, {1}}) p.routed(routing(0, e));
  const double q = (2 + 2 * 0.25) / (10 + 2);  // (0,2), (1,2), (1,3): never routed
  EXPECT_NEAR(p.value({1, 2}, 0), q / (q * 1 + 2 * (1 - q)), 1e-12);  // next layer: d = 1
  EXPECT_NEAR(p.value({0, 2}, 0), q / (q * 2 + 2 * (1 - q)), 1e-12);  // this layer: d = L = 2
  // Same probability: the one further away goes.
  const std::vector<CacheEntryView> cands = {{{1, 2}, 5}, {{0, 2}, 9}};
  EXPECT_EQ(p.victim(CacheView{&cands, 10, 0, false}, {1, 3}), 1u);
  // A prefetch of (1,3) (d = 1) may replace (0,2) (d = 2), not its equal (1,2).
  const std::vector<CacheEntryView> far = {{{0, 2}}}, equal = {{{1, 2}}};
  EXPECT_EQ(p.victim(CacheView{&far, 10, 0, true}, {1, 3}), 0u);
  EXPECT_EQ(p.victim(CacheView{&equal, 10, 0, true}, {1, 3}), ExpertPolicy::kDecline);
  EXPECT_EQ(p.victim(CacheView{&equal, 10, 0, false}, {1, 3}), 0u) << "a demand is never declined";
  // Without the distance, the probability alone ranks them: a tie, the older use goes.
  AdaptivePolicy nd(g, adaptive_options_from_name("adaptive-nodistance"), "adaptive-nodistance");
  nd.begin_iteration(Phase::Decode, 0);
  for (const std::vector<int32_t>& e : {std::vector<int32_t>{0}, {0}, {1}}) nd.routed(routing(0, e));
  EXPECT_EQ(nd.victim(CacheView{&cands, 10, 0, false}, {1, 3}), 0u);
}

// Prefetch asks only for experts more likely routed than not, and only while the link
// is idle.
TEST(Adaptive, PrefetchesOnlyLikelyExpertsOnAnIdleLink) {
  const ExpertGeometry g = ExpertGeometry::uniform(2, 4, 1, 100);
  AdaptivePolicy p(g);
  p.begin_iteration(Phase::Decode, 0);
  for (int i = 0; i < 40; ++i) p.routed(routing(0, {0}));  // layer 0 always routes expert 0
  EXPECT_GT(p.reuse_probability({0, 0}), 0.9);
  EXPECT_LT(p.reuse_probability({0, 1}), 0.1);
  p.link_state(0, 0);
  PrefetchPlan plan;
  p.plan_prefetch(1, plan);  // lookahead 2 of a 2-layer cycle: layer 0 only
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].key, (ExpertKey{0, 0}));
  EXPECT_NEAR(plan[0].priority, p.value({0, 0}, 1), 1e-12);
  p.link_state(1, 0);
  plan.clear();
  p.plan_prefetch(1, plan);
  EXPECT_TRUE(plan.empty()) << "a copy is on the link";
  AdaptivePolicy off(g, adaptive_options_from_name("adaptive-noprefetch"), "adaptive-noprefetch");
  EXPECT_FALSE(off.prefetches());
}

// The running requests' own rate: the share of each one's tokens routed to the
// expert, combined as the chance that any of them routes it; a request that leaves
// stops counting.
TEST(Adaptive, RequestRateCombinesTheRunningRequests) {
  const ExpertGeometry g = ExpertGeometry::uniform(2, 4, 1, 100);
  AdaptivePolicy p(g);
  p.begin_request(RequestInfo{7, {}, {}, {}});
  p.begin_request(RequestInfo{9, {}, {}, {}});
  p.begin_iteration(Phase::Prefill, 0);
  // Request 7: four tokens, experts 0 0 0 1; request 9: two tokens, experts 0 2.
  LayerRouting r = routing(0, {0, 0, 0, 1, 0, 2});
  r.requests = {7, 7, 7, 7, 9, 9};
  p.routed(r);
  EXPECT_NEAR(p.request_rate({0, 0}), 1 - (1 - 0.75) * (1 - 0.5), 1e-12);
  EXPECT_NEAR(p.request_rate({0, 1}), 0.25, 1e-12);
  EXPECT_NEAR(p.request_rate({0, 2}), 0.5, 1e-12);
  EXPECT_EQ(p.request_rate({0, 3}), 0.0);
  EXPECT_EQ(p.request_rate({1, 0}), 0.0) << "no token at layer 1 yet";
  p.end_request(9);
  EXPECT_NEAR(p.request_rate({0, 0}), 0.75, 1e-12);
  EXPECT_EQ(p.request_rate({0, 2}), 0.0);
}

// The learned state survives a save and a load exactly (the same bytes, the same
// estimates); a state for another shape, a truncated one and foreign bytes are refused.
TEST(Adaptive, SaveLoadRoundTripsAndBadStatesAreRefused) {
  const ExpertGeometry g = ExpertGeometry::uniform(2, 4, 1, 100);
  AdaptivePolicy a(g);
  a.begin_iteration(Phase::Decode, 0);
  for (int i = 0; i < 10; ++i) {
    a.routed(routing(0, {i % 3}));
    a.routed(routing(1, {(i * 7) % 4}));
  }
  a.end_request(0);  // what a running request routed is its own, not learned state
  std::ostringstream saved;
  a.save(saved);
  AdaptivePolicy b(g);
  std::istringstream in(saved.str());
  b.load(in);
  std::ostringstream again;
  b.save(again);
  EXPECT_EQ(again.str(), saved.str());
  EXPECT_EQ(b.observations(), a.observations());
  for (int32_t l = 0; l < 2; ++l)
    for (int32_t e = 0; e < 4; ++e) EXPECT_EQ(b.reuse_probability({l, e}), a.reuse_probability({l, e}));
  auto load = [](const ExpertGeometry& geo, const std::string& bytes) {
    AdaptivePolicy p(geo);
    std::istringstream s(bytes);
    p.load(s);
  };
  EXPECT_THROW(load(ExpertGeometry::uniform(2, 8, 1, 100), saved.str()), InputError) << "another shape";
  EXPECT_THROW(load(g, saved.str().substr(0, saved.str().size() - 5)), InputError) << "truncated";
  EXPECT_THROW(load(g, saved.str() + "x"), InputError) << "trailing bytes";
  EXPECT_THROW(load(g, "not a state at all, not at all"), InputError);
  std::string bad = saved.str();
  bad[8 + 4 + 4 + 8] = '\x7f';  // the first cell's hits: a huge or NaN double
  bad[8 + 4 + 4 + 8 + 7] = '\x7f';
  EXPECT_THROW(load(g, bad), InputError) << "a cell with impossible counts";
  EXPECT_TRUE(policy_keeps_state("adaptive"));
  EXPECT_TRUE(policy_keeps_state("adaptive-noprefetch"));
}

TEST(Adaptive, AblationNamesParseAndBadOnesAreNamed) {
  const AdaptiveOptions o = adaptive_options_from_name("adaptive-nodistance-noprefetch");
  EXPECT_FALSE(o.distance);
  EXPECT_FALSE(o.prefetch);
  EXPECT_TRUE(o.learned);
  const ExpertGeometry g = ExpertGeometry::uniform(2, 4, 1, 100);
  EXPECT_EQ(make_policy("adaptive-nolearned", g)->name(), "adaptive-nolearned");
  EXPECT_EQ(make_policy("adaptive", g)->name(), "adaptive");
  EXPECT_FALSE(adaptive_options_from_name("adaptive-norequest").request);
  EXPECT_THROW(adaptive_options_from_name("adaptive-fast"), InputError);
  EXPECT_THROW(make_policy("adaptive-", g), InputError);
  EXPECT_THROW(make_policy("adaptive--noprefetch", g), InputError);
}

}  // namespace
}  // namespace moeflow

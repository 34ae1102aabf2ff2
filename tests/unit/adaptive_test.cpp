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

// Loads the state `from` saves into `into`, which must save the same bytes again;
// returns them.
std::string expect_round_trip(const AdaptivePolicy& from, AdaptivePolicy& into) {
  std::ostringstream saved;
  from.save(saved);
  std::istringstream in(saved.str());
  into.load(in);
  std::ostringstream again;
  into.save(again);
  EXPECT_EQ(again.str(), saved.str());
  return saved.str();
}

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
  AdaptivePolicy b(g);
  const std::string saved = expect_round_trip(a, b);
  EXPECT_EQ(b.observations(), a.observations());
  for (int32_t l = 0; l < 2; ++l)
    for (int32_t e = 0; e < 4; ++e) EXPECT_EQ(b.reuse_probability({l, e}), a.reuse_probability({l, e}));
  auto load = [](const ExpertGeometry& geo, const std::string& bytes) {
    AdaptivePolicy p(geo);
    std::istringstream s(bytes);
    p.load(s);
  };
  EXPECT_THROW(load(ExpertGeometry::uniform(2, 8, 1, 100), saved), InputError) << "another shape";
  EXPECT_THROW(load(g, saved.substr(0, saved.size() - 5)), InputError) << "truncated";
  EXPECT_THROW(load(g, saved + "x"), InputError) << "trailing bytes";
  EXPECT_THROW(load(g, "not a state at all, not at all"), InputError);
  std::string bad = saved;
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


// Two finished requests on a 2 x 4 model, top-1, each a prefill step of four tokens:
//   request 1: layer 0 experts 0 0 0 1, layer 1 experts 2 2 3 3
//   request 2: layer 0 experts 2 2 2 2, layer 1 experts 1 1 1 0
// Their EAMs are the stored collection. `matches` closest are summed.
AdaptivePolicy with_two_stored(const ExpertGeometry& g, AdaptiveOptions o, const std::string& name) {
  AdaptivePolicy p(g, o, name);
  for (int64_t id : {1, 2}) {
    p.begin_request(RequestInfo{id, {}, {}, {}});
    p.begin_iteration(Phase::Prefill, 0);
    LayerRouting l0 = routing(0, id == 1 ? std::vector<int32_t>{0, 0, 0, 1} : std::vector<int32_t>{2, 2, 2, 2});
    LayerRouting l1 = routing(1, id == 1 ? std::vector<int32_t>{2, 2, 3, 3} : std::vector<int32_t>{1, 1, 1, 0});
    l0.requests = l1.requests = {id, id, id, id};
    p.routed(l0);
    p.routed(l1);
    p.end_iteration();
    p.end_request(id);
  }
  return p;
}

AdaptiveOptions one_match(const std::string& name) {
  AdaptiveOptions o = adaptive_options_from_name(name);
  o.similarity_matches = 1;
  return o;
}

// The running request's EAM so far is matched (cosine) against the stored ones; the
// closest one's shares of tokens per (layer, expert) are its prediction, for every
// layer. Request 3 has routed expert 0 at layer 0: cosine 3 / sqrt(18) with request 1,
// 0 with request 2, so request 1 predicts: layer 0 e0 3/4, e1 1/4; layer 1 e2, e3 1/2.
// Request 4 (expert 2 at layer 0) matches request 2 alone: layer 0 e2 1; layer 1 e0
// 1/4, e1 3/4. Together: the chance that either routes it, 1 - (1 - a)(1 - b).
TEST(AdaptiveSimilarity, PredictsFromTheClosestStoredRequestPerRunningRequest) {
  const ExpertGeometry g = ExpertGeometry::uniform(2, 4, 1, 100);
  AdaptivePolicy p = with_two_stored(g, one_match("adaptive"), "adaptive");
  EXPECT_EQ(p.stored_requests(), 2u);
  p.begin_request(RequestInfo{3, {}, {}, {}});
  p.begin_iteration(Phase::Prefill, 0);
  EXPECT_EQ(p.similarity_share({0, 0}), -1.0) << "an empty EAM matches nothing";
  LayerRouting r = routing(0, {0});
  r.requests = {3};
  p.routed(r);
  p.end_iteration();
  p.begin_iteration(Phase::Decode, 1);
  auto expect_shares = [&p](const double (&want)[2][4], const char* when) {
    for (int32_t l = 0; l < 2; ++l)
      for (int32_t e = 0; e < 4; ++e)
        EXPECT_NEAR(p.similarity_share({l, e}), want[l][e], 1e-6) << when << ": " << l << "," << e;
  };
  expect_shares({{0.75, 0.25, 0, 0}, {0, 0, 0.5, 0.5}}, "request 3 alone");
  p.begin_request(RequestInfo{4, {}, {}, {}});
  r = routing(0, {2});
  r.requests = {4};
  p.routed(r);
  p.end_iteration();
  p.begin_iteration(Phase::Decode, 2);
  // Request 3's EAM is still (layer 0, e0) x 1: the same match.
  expect_shares({{0.75, 0.25, 1, 0}, {0.25, 0.75, 0.5, 0.5}}, "requests 3 and 4");
  p.end_request(4);
  EXPECT_EQ(p.stored_requests(), 3u);
  p.begin_iteration(Phase::Decode, 3);
  EXPECT_NEAR(p.similarity_share({0, 2}), 0.0, 1e-6) << "a request that left predicts nothing";
  // Matching selects only among more stored requests than it takes.
  AdaptivePolicy three = with_two_stored(g, adaptive_options_from_name("adaptive"), "adaptive");  // 3 matches
  three.begin_request(RequestInfo{3, {}, {}, {}});
  three.routed(r);
  three.begin_iteration(Phase::Decode, 1);
  EXPECT_EQ(three.similarity_share({0, 2}), -1.0);
  AdaptivePolicy off = with_two_stored(g, one_match("adaptive-nosimilarity"), "adaptive-nosimilarity");
  EXPECT_EQ(off.stored_requests(), 0u);
  EXPECT_FALSE(adaptive_options_from_name("adaptive-nosimilarity").similarity);
  EXPECT_EQ(make_policy("adaptive-nosimilarity", g)->name(), "adaptive-nosimilarity");
}

// The prediction is not trusted as is: a table indexed by (predicted share, the first
// table's probability) counts decode visits' hits and the hits p expected, and p is
// scaled by (hits + 1) / (expected + 1). Without the learned table (-nolearned) p is
// the long-term rate, so every cell is known. Layer 1 was visited twice (the stored
// requests' prefills), each expert routed once: rate 1/2 (bucket [0.5, 0.7)). Request
// 3 predicts layer 1 e0, e1 0 (bucket 0), e2, e3 1/2 (bucket [0.5, 0.7)).
//   visit 1 routes e2: cell (1/2, 1/2): hits 1, expected 1;  (0, 1/2): 0, 1.
//     rates after: e2 2/3, the others 1/3 (bucket [0.2, 0.35)).
//   visit 2 routes e3: (1/2, 1/2) += e2: 0, 2/3;  (1/2, 1/3) += e3: 1, 1/3;
//     (0, 1/3) += e0, e1: 0, 2/3.  Rates after: e2, e3 1/2, e0, e1 1/4.
// e2, e3: 1/2 * (1 + 1) / (5/3 + 1) = 0.375; e0: 1/4 * 1 / (2/3 + 1) = 0.15.
TEST(AdaptiveSimilarity, CorrectsTheProbabilityPerPredictedShare) {
  const ExpertGeometry g = ExpertGeometry::uniform(2, 4, 1, 100);
  const std::string name = "adaptive-nolearned-nolookahead-notrajectory";
  AdaptivePolicy p = with_two_stored(g, one_match(name), name);
  p.begin_request(RequestInfo{3, {}, {}, {}});
  LayerRouting r = routing(0, {0});
  r.requests = {3};
  p.begin_iteration(Phase::Prefill, 0);
  p.routed(r);
  p.end_iteration();
  p.begin_iteration(Phase::Decode, 1);
  for (int32_t e = 0; e < 4; ++e) EXPECT_EQ(p.base_probability({1, e}), 0.5) << "no observation yet: the rate";
  LayerRouting d = routing(1, {2});
  d.requests = {3};
  p.routed(d);
  p.end_iteration();
  EXPECT_NEAR(p.base_probability({1, 2}), 2.0 / 3.0, 1e-12) << "hits as expected: ratio 1";
  EXPECT_NEAR(p.base_probability({1, 0}), 1.0 / 3.0, 1e-12) << "a cell not seen yet";
  p.begin_iteration(Phase::Decode, 2);
  EXPECT_NEAR(p.similarity_share({1, 2}), 0.5, 1e-6) << "request 3 still matches request 1";
  d.experts = {3};
  p.routed(d);
  EXPECT_NEAR(p.base_probability({1, 2}), 0.375, 1e-12);
  EXPECT_NEAR(p.base_probability({1, 3}), 0.375, 1e-12);
  EXPECT_NEAR(p.reuse_probability({1, 3}), 0.375, 1e-12);
  EXPECT_NEAR(p.base_probability({1, 0}), 0.15, 1e-12);
  EXPECT_NEAR(p.table_probability({1, 0}), 0.25, 1e-12);
  // Off, the table's probability stands.
  const std::string off_name = name + "-nosimilarity";
  AdaptivePolicy off = with_two_stored(g, one_match(off_name), off_name);
  off.begin_request(RequestInfo{3, {}, {}, {}});
  off.begin_iteration(Phase::Prefill, 0);
  off.routed(r);
  off.end_iteration();
  off.begin_iteration(Phase::Decode, 1);
  off.routed(d);
  EXPECT_EQ(off.similarity_share({1, 2}), -1.0);
  EXPECT_NEAR(off.base_probability({1, 3}), 2.0 / 3.0, 1e-12);
}

// A full collection replaces the stored request most similar to the newcomer
// (MoE-Infinity App. B.1). Capacity 2: request 5 (layer 0 e0 e0) replaces request 1,
// so a request routing e0 now matches request 5, which routed e0 with all its tokens.
TEST(AdaptiveSimilarity, AFullCollectionReplacesTheMostSimilar) {
  const ExpertGeometry g = ExpertGeometry::uniform(2, 4, 1, 100);
  AdaptiveOptions o = one_match("adaptive");
  o.similarity_capacity = 2;
  AdaptivePolicy p = with_two_stored(g, o, "adaptive");
  p.begin_request(RequestInfo{5, {}, {}, {}});
  p.begin_iteration(Phase::Prefill, 0);
  LayerRouting r = routing(0, {0, 0});
  r.requests = {5, 5};
  p.routed(r);
  p.end_request(5);
  EXPECT_EQ(p.stored_requests(), 2u);
  p.begin_request(RequestInfo{6, {}, {}, {}});
  r = routing(0, {0});
  r.requests = {6};
  p.routed(r);
  p.begin_iteration(Phase::Decode, 1);
  EXPECT_NEAR(p.similarity_share({0, 0}), 1.0, 1e-6);
  EXPECT_NEAR(p.similarity_share({1, 2}), 0.0, 1e-6) << "request 5 saw no layer-1 token";
}

// The collection and the similarity table are saved (state version 3); a version-2
// state (before them) still loads, with both empty; a stored request that routes more
// tokens than its layer saw is refused.
TEST(AdaptiveSimilarity, StateKeepsTheCollectionAndVersionTwoStatesLoad) {
  const ExpertGeometry g = ExpertGeometry::uniform(2, 4, 1, 100);
  AdaptivePolicy a = with_two_stored(g, one_match("adaptive"), "adaptive");
  AdaptivePolicy b(g, one_match("adaptive"));
  const std::string saved = expect_round_trip(a, b);
  EXPECT_EQ(b.stored_requests(), 2u);
  for (AdaptivePolicy* q : {&a, &b}) {
    q->begin_request(RequestInfo{3, {}, {}, {}});
    LayerRouting r = routing(0, {0});
    r.requests = {3};
    q->routed(r);
    q->begin_iteration(Phase::Decode, 1);
  }
  for (int32_t e = 0; e < 4; ++e) EXPECT_EQ(a.similarity_share({1, e}), b.similarity_share({1, e}));
  EXPECT_NEAR(b.similarity_share({1, 2}), 0.5, 1e-6);
  // Version 3's tail: the similarity table, two stored EAMs, the trajectory table, no
  // stored path (prefill steps leave none), the finished requests.
  const size_t entry = 8 * 4 + 2 * 8, sim = 8 + 16 * AdaptivePolicy::kSimilarBuckets * AdaptivePolicy::kSimilarPriorBuckets;
  const size_t traj = 8 + 16 * AdaptivePolicy::kMaxTrajectory * AdaptivePolicy::kSimilarBuckets * AdaptivePolicy::kSimilarPriorBuckets +
                      8 + 8 + 8;
  std::string v2 = saved;
  v2[7] = '2';
  v2.resize(v2.size() - sim - 8 - 2 * entry - traj);
  AdaptivePolicy c(g, one_match("adaptive"));
  std::istringstream old(v2);
  c.load(old);
  EXPECT_EQ(c.stored_requests(), 0u);
  std::string bad = saved;
  const size_t first_count = saved.size() - traj - 2 * entry;  // request 1, layer 0, expert 0: 3 tokens
  bad[first_count] = 9;  // 9 of its 4 layer-0 tokens
  std::istringstream impossible(bad);
  EXPECT_THROW(AdaptivePolicy(g, one_match("adaptive")).load(impossible), InputError);
  std::string cut = saved;
  cut.resize(cut.size() - traj - 4);
  std::istringstream truncated(cut);
  EXPECT_THROW(AdaptivePolicy(g, one_match("adaptive")).load(truncated), InputError);
}

// Similar tokens: each decode token's path (expert per layer) is stored at the end of
// its step. Three layers x 4 experts, top-1, two matches; requests 1 and 2 leave the
// paths P0 = (0, 1, 2), P1 = (0, 1, 3) and P2 = (1, 2, 3). A token that routed e0 at
// layer 0 shares a pair with P0 and P1: layer 1 e1 2/2, layer 2 e2 and e3 1/2 each.
// Routing e2 at layer 1 next, every path shares one pair; among equals the newest
// go first, P2 and P1: layer 2 e3 2/2. Two tokens in one step: the chance that either
// routes it.
LayerRouting step_routing(int32_t layer, std::vector<int32_t> experts, std::vector<int64_t> ids) {
  LayerRouting r = routing(layer, std::move(experts));
  r.requests = std::move(ids);
  return r;
}

TEST(AdaptiveTrajectory, PredictsTheLayersAheadFromTheClosestPaths) {
  const ExpertGeometry g = ExpertGeometry::uniform(3, 4, 1, 100);
  AdaptiveOptions o = adaptive_options_from_name("adaptive-nosimilarity");
  o.similarity_matches = 1;  // predictions once two requests have finished
  o.trajectory_matches = 2;
  AdaptivePolicy p(g, o, "t");
  const std::vector<std::pair<int64_t, std::vector<int32_t>>> tokens = {{1, {0, 1, 2}}, {1, {0, 1, 3}}, {2, {1, 2, 3}}};
  for (const auto& [id, path] : tokens) {
    p.begin_request(RequestInfo{id, {}, {}, {}});
    p.begin_iteration(Phase::Decode, 0);
    for (int32_t l = 0; l < 3; ++l) p.routed(step_routing(l, {path[static_cast<size_t>(l)]}, {id}));
    p.end_iteration();
    if (id == 2 || path[2] == 3) p.end_request(id);
  }
  EXPECT_EQ(p.stored_paths(), 3u);
  p.begin_request(RequestInfo{3, {}, {}, {}});
  p.begin_iteration(Phase::Decode, 1);
  EXPECT_EQ(p.trajectory_share({1, 1}), -1.0) << "nothing routed in this step yet";
  EXPECT_EQ(p.step_probability({1, 1}), p.base_probability({1, 1}));
  p.routed(step_routing(0, {0}, {3}));
  int32_t h = 0;
  EXPECT_NEAR(p.trajectory_share({1, 1}, &h), 1.0, 1e-6);
  EXPECT_EQ(h, 1);
  EXPECT_NEAR(p.trajectory_share({1, 2}), 0.0, 1e-6);
  EXPECT_NEAR(p.trajectory_share({2, 2}, &h), 0.5, 1e-6);
  EXPECT_EQ(h, 2);
  EXPECT_NEAR(p.trajectory_share({2, 3}), 0.5, 1e-6);
  EXPECT_EQ(p.step_probability({1, 1}), p.base_probability({1, 1})) << "an unseen cell: ratio 1";
  p.routed(step_routing(1, {2}, {3}));
  EXPECT_EQ(p.trajectory_share({1, 1}), -1.0) << "layer 1's prediction is spent";
  EXPECT_NEAR(p.trajectory_share({2, 3}, &h), 1.0, 1e-6);
  EXPECT_EQ(h, 1);
  EXPECT_NEAR(p.trajectory_share({2, 2}), 0.0, 1e-6);
  p.routed(step_routing(2, {3}, {3}));
  p.end_iteration();
  EXPECT_EQ(p.stored_paths(), 4u);
  // Requests 3 and 4 in one step; request 3's last token left P3 = (0, 2, 3).
  p.begin_request(RequestInfo{4, {}, {}, {}});
  p.begin_iteration(Phase::Decode, 2);
  p.routed(step_routing(0, {0, 1}, {3, 4}));
  // Request 3's token (e0) matches P3 and P1, the two newest sharing e0: layer 1 e1
  // 1/2, e2 1/2; layer 2 e3 2/2. Request 4's (e1) matches P2 alone: layer 1 e2, layer 2 e3.
  EXPECT_NEAR(p.trajectory_share({1, 1}), 0.5, 1e-6);
  EXPECT_NEAR(p.trajectory_share({1, 2}), 1.0, 1e-6);
  EXPECT_NEAR(p.trajectory_share({2, 3}), 1.0, 1e-6);
  EXPECT_NEAR(p.trajectory_share({2, 2}), 0.0, 1e-6);
  // The paths, the ring's slot and the finished requests are saved with the rest.
  AdaptivePolicy q(g, o, "t");
  const std::string saved = expect_round_trip(p, q);
  EXPECT_EQ(q.stored_paths(), 4u);
  q.begin_iteration(Phase::Decode, 2);
  q.routed(step_routing(0, {1}, {4}));
  EXPECT_NEAR(q.trajectory_share({1, 2}), 1.0, 1e-6) << "the loaded paths predict";
  std::string bad = saved;
  bad[bad.size() - 8 - 4] = 9;  // the last path's layer-2 expert: 9 of 4
  std::istringstream impossible(bad);
  EXPECT_THROW(AdaptivePolicy(g, o, "t").load(impossible), InputError);
  // A token that matches no path leaves the step without a prediction.
  p.begin_iteration(Phase::Decode, 3);
  p.routed(step_routing(0, {0, 3}, {3, 4}));
  EXPECT_EQ(p.trajectory_share({1, 1}), -1.0);
  // Until more requests than the EAM matches have finished, no prediction.
  AdaptivePolicy young(g, o, "t");
  young.begin_request(RequestInfo{1, {}, {}, {}});
  young.begin_iteration(Phase::Decode, 0);
  for (int32_t l = 0; l < 3; ++l) young.routed(step_routing(l, {0}, {1}));
  young.end_iteration();
  young.end_request(1);
  young.begin_iteration(Phase::Decode, 1);
  young.routed(step_routing(0, {0}, {2}));
  EXPECT_EQ(young.stored_paths(), 1u);
  EXPECT_EQ(young.trajectory_share({1, 0}), -1.0);
  EXPECT_FALSE(adaptive_options_from_name("adaptive-notrajectory").trajectory);
}

}  // namespace
}  // namespace moeflow

// MoE-Infinity's decisions step by step on hand-made routings (moe-infinity.txt §4.5-4.7, App. B.1).
#include "policy/moe_infinity.h"

#include <gtest/gtest.h>

#include <sstream>

#include "base/error.h"

namespace moeflow {
namespace {

const ExpertGeometry kGeo = ExpertGeometry::uniform(3, 4, 1, 100);

LayerRouting route(int64_t layer, std::vector<int32_t> ids) {
  LayerRouting r;
  r.layer = layer;
  r.n_tok = static_cast<int64_t>(ids.size());
  r.n_expert = 4;
  r.top_k = 1;
  r.experts = std::move(ids);
  return r;
}

// One request: a prefill iteration with `pre` ids per layer, then one decode iteration.
void run_request(MoeInfinityPolicy& p, const std::vector<std::vector<int32_t>>& pre, const std::vector<std::vector<int32_t>>& dec) {
  p.begin_request(RequestInfo{});
  p.begin_iteration(Phase::Prefill, 0);
  for (size_t l = 0; l < pre.size(); ++l) p.routed(route(static_cast<int64_t>(l), pre[l]));
  p.end_iteration();
  if (!dec.empty()) {
    p.begin_iteration(Phase::Decode, 1);
    for (size_t l = 0; l < dec.size(); ++l) p.routed(route(static_cast<int64_t>(l), dec[l]));
    p.end_iteration();
  }
  p.end_request(0);
}

LayerRouting route_of(int64_t layer, std::vector<int32_t> ids, std::vector<int64_t> requests) {
  LayerRouting r = route(layer, std::move(ids));
  r.requests = std::move(requests);
  return r;
}

std::string saved(const MoeInfinityPolicy& p) {
  std::ostringstream s;
  p.save(s);
  return s.str();
}

TEST(MoeInfinity, RequestEamsAreTracedPerPhase) {
  MoeInfinityPolicy p(kGeo);
  run_request(p, {{0, 0}, {1, 1}, {2, 3}}, {{3}, {3}, {3}});
  ASSERT_EQ(p.collection().size(), 1u);
  const auto& e = p.collection()[0];
  EXPECT_EQ(e.prefill, (std::vector<uint32_t>{2, 0, 0, 0, 0, 2, 0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(e.decode, (std::vector<uint32_t>{0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1}));
}

// Two requests whose steps interleave (an engine step carries tokens of both) keep
// separate EAMs: the collection gets the entries they get run one after the other,
// where a single shared EAM would have merged them into one.
TEST(MoeInfinity, InterleavedRequestsKeepTheirOwnEams) {
  const std::vector<std::vector<int32_t>> a_pre = {{0, 0}, {1, 1}, {2, 3}}, a_dec = {{3}, {3}, {3}};
  const std::vector<std::vector<int32_t>> b_pre = {{1, 2, 2}, {0, 0, 3}, {1, 1, 1}}, b_dec = {{2}, {0}, {1}};
  MoeInfinityPolicy seq(kGeo);
  auto run_alone = [&](int64_t id, const auto& pre, const auto& dec) {
    seq.begin_request(RequestInfo{id, {}, {}, {}});
    seq.begin_iteration(Phase::Prefill, 0);
    for (size_t l = 0; l < pre.size(); ++l) seq.routed(route(static_cast<int64_t>(l), pre[l]));
    seq.end_iteration();
    seq.begin_iteration(Phase::Decode, 1);
    for (size_t l = 0; l < dec.size(); ++l) seq.routed(route(static_cast<int64_t>(l), dec[l]));
    seq.end_iteration();
    seq.end_request(id);
  };
  run_alone(7, a_pre, a_dec);
  run_alone(9, b_pre, b_dec);

  MoeInfinityPolicy mixed(kGeo);
  mixed.begin_request(RequestInfo{7, {}, {}, {}});
  mixed.begin_request(RequestInfo{9, {}, {}, {}});
  // Step 1: both prompts. Step 2: a decodes while b decodes.
  mixed.begin_iteration(Phase::Prefill, 0);
  for (size_t l = 0; l < 3; ++l) {
    std::vector<int32_t> ids = a_pre[l];
    ids.insert(ids.end(), b_pre[l].begin(), b_pre[l].end());
    mixed.routed(route_of(static_cast<int64_t>(l), ids, {7, 7, 9, 9, 9}));
  }
  mixed.end_iteration();
  mixed.begin_iteration(Phase::Decode, 1);
  for (size_t l = 0; l < 3; ++l)
    mixed.routed(route_of(static_cast<int64_t>(l), {a_dec[l][0], b_dec[l][0]}, {7, 9}));
  mixed.end_iteration();
  mixed.end_request(7);
  mixed.end_request(9);
  ASSERT_EQ(mixed.collection().size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(mixed.collection()[i].prefill, seq.collection()[i].prefill) << "request " << i;
    EXPECT_EQ(mixed.collection()[i].decode, seq.collection()[i].decode) << "request " << i;
  }
}

// A step's prefill phase belongs to the requests that prefill in it: a request that
// decodes beside another's prompt counts its token as decode.
TEST(MoeInfinity, ADecodeBesideAPromptIsCountedAsDecode) {
  MoeInfinityPolicy p(kGeo);
  p.begin_request(RequestInfo{1, {}, {}, {}});
  p.begin_iteration(Phase::Prefill, 0);
  for (int64_t l = 0; l < 3; ++l) p.routed(route_of(l, {0, 0}, {1, 1}));
  p.end_iteration();
  p.begin_request(RequestInfo{2, {}, {}, {}});
  p.begin_iteration(Phase::Prefill, 1);  // 2's prompt beside 1's decode token
  for (int64_t l = 0; l < 3; ++l) p.routed(route_of(l, {3, 1, 1}, {1, 2, 2}));
  p.end_iteration();
  p.end_request(1);
  ASSERT_EQ(p.collection().size(), 1u);
  EXPECT_EQ(p.collection()[0].prefill, (std::vector<uint32_t>{2, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0}));
  EXPECT_EQ(p.collection()[0].decode, (std::vector<uint32_t>{0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1}));
}

TEST(MoeInfinity, PrefetchesTheMatchedEamWeightedByLayerProximity) {
  MoeInfinityPolicy p(kGeo, {.capacity = 8, .n_match = 3, .prefetch_distance = 2});
  run_request(p, {{0, 0}, {1, 1}, {2, 3}}, {});
  p.begin_request(RequestInfo{});
  p.begin_iteration(Phase::Prefill, 0);
  p.routed(route(0, {0}));
  PrefetchPlan plan;
  p.plan_prefetch(0, plan);
  // Layer 1 (distance 1): weight 1 - 1/3; layer 2 (distance 2): 1 - 2/3, likelihood 1/2 each.
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].key, (ExpertKey{1, 1}));
  EXPECT_DOUBLE_EQ(plan[0].priority, 2.0 / 3.0);
  EXPECT_EQ(plan[1].key, (ExpertKey{2, 2}));
  EXPECT_DOUBLE_EQ(plan[1].priority, 0.5 / 3.0);
  EXPECT_EQ(plan[2].key, (ExpertKey{2, 3}));
  EXPECT_DOUBLE_EQ(plan[2].priority, 0.5 / 3.0);
  // At the last layer the next iteration's layers wrap around: layer 0 is distance 1.
  p.routed(route(1, {1}));
  p.routed(route(2, {2}));
  plan.clear();
  p.plan_prefetch(2, plan);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].key, (ExpertKey{0, 0}));
  EXPECT_DOUBLE_EQ(plan[0].priority, 2.0 / 3.0);
  EXPECT_EQ(plan[1].key, (ExpertKey{1, 1}));
  EXPECT_DOUBLE_EQ(plan[1].priority, 1.0 / 3.0);
}

TEST(MoeInfinity, MatchesTheClosestEamsOnly) {
  MoeInfinityPolicy p(kGeo, {.capacity = 8, .n_match = 1});
  run_request(p, {{0}, {1}, {2}}, {});
  run_request(p, {{3}, {3}, {3}}, {});
  p.begin_request(RequestInfo{});
  p.begin_iteration(Phase::Prefill, 0);
  p.routed(route(0, {3}));
  PrefetchPlan plan;
  p.plan_prefetch(0, plan);
  // Every future layer by default, nearer first: (1,3) at 1 - 1/3, (2,3) at 1 - 2/3.
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].key, (ExpertKey{1, 3}));
  EXPECT_DOUBLE_EQ(plan[0].priority, 2.0 / 3.0);
  EXPECT_EQ(plan[1].key, (ExpertKey{2, 3}));
  EXPECT_DOUBLE_EQ(plan[1].priority, 1.0 / 3.0);
}

// Algorithm 1 matches the current iteration's EAM (curEAM), not the request's whole
// history. Stored: A decodes 0,1,2 and B decodes 3,3,3 (per layer). The running
// request's first decode iteration went 0,1,2 (like A); its second routes 3 at layer 0.
// The iteration's EAM {(0,3)} matches B alone (cosine 1/sqrt(3) against A's 0), so
// layer 1's prediction is B's expert 3; its history {(0,0),(0,3),(1,1),(2,2)} would
// have matched A (cosine 3/sqrt(12) = 0.87 against B's 1/sqrt(12) = 0.29), expert 1.
TEST(MoeInfinity, MatchesTheCurrentIterationsEam) {
  MoeInfinityPolicy p(kGeo, {.capacity = 8, .n_match = 1, .prefetch_distance = 1});
  run_request(p, {{0}, {1}, {2}}, {{0}, {1}, {2}});
  run_request(p, {{3}, {3}, {3}}, {{3}, {3}, {3}});
  p.begin_request(RequestInfo{});
  p.begin_iteration(Phase::Prefill, 0);
  for (int64_t l = 0; l < 3; ++l) p.routed(route(l, {static_cast<int32_t>(l)}));
  p.end_iteration();
  p.begin_iteration(Phase::Decode, 1);
  for (int64_t l = 0; l < 3; ++l) p.routed(route(l, {static_cast<int32_t>(l)}));
  p.end_iteration();
  p.begin_iteration(Phase::Decode, 2);
  p.routed(route(0, {3}));
  PrefetchPlan plan;
  p.plan_prefetch(0, plan);
  ASSERT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan[0].key, (ExpertKey{1, 3}));
}

// EAMC replacement (App. B.1) compares entries as one flattened vector. One layer of
// 4 experts, capacity 2. E1: prompt 10 x e0, output e2. E2: prompt e0 + 10 x e3,
// output e1. The new N: prompt 10 x e0, output e1. Flattened [prefill | decode]:
// cos(N, E1) = 100 / 101 = 0.990, cos(N, E2) = (10 + 1) / sqrt(101 * 102) = 0.108:
// E1 goes. (Averaging the two phases' cosines would have said E2: (0.0995 + 1) / 2 =
// 0.55 against E1's (1 + 0) / 2 = 0.5.)
TEST(MoeInfinity, ReplacementComparesTheFlattenedEam) {
  const ExpertGeometry one = ExpertGeometry::uniform(1, 4, 1, 100);
  MoeInfinityPolicy p(one, {.capacity = 2, .n_match = 1});
  auto request = [&](std::vector<int32_t> prompt, int32_t out) {
    p.begin_request(RequestInfo{});
    p.begin_iteration(Phase::Prefill, 0);
    p.routed(route(0, std::move(prompt)));
    p.end_iteration();
    p.begin_iteration(Phase::Decode, 1);
    p.routed(route(0, {out}));
    p.end_iteration();
    p.end_request(0);
  };
  request(std::vector<int32_t>(10, 0), 2);
  std::vector<int32_t> e2(10, 3);
  e2.push_back(0);
  request(e2, 1);
  request(std::vector<int32_t>(10, 0), 1);
  ASSERT_EQ(p.collection().size(), 2u);
  EXPECT_EQ(p.collection()[0].prefill, (std::vector<uint32_t>{10, 0, 0, 0}));
  EXPECT_EQ(p.collection()[0].decode, (std::vector<uint32_t>{0, 1, 0, 0})) << "N took E1's place";
  EXPECT_EQ(p.collection()[1].prefill, (std::vector<uint32_t>{1, 0, 0, 10}));
}

TEST(MoeInfinity, EvictsByAlgorithmOneFavouringEarlyLayers) {
  MoeInfinityPolicy p(kGeo);
  run_request(p, {{0, 0}, {1, 1}, {2, 3}}, {});
  p.begin_request(RequestInfo{});
  p.begin_iteration(Phase::Prefill, 0);
  p.routed(route(0, {0}));
  // p = (peam + eps)(1 - l/L)/ntoken: (0,1) ~ 0, (2,2) = 1/6, (1,1) = 2/3, (0,0) = 1.
  std::vector<CacheEntryView> c(4);
  c[0].key = {0, 0};
  c[1].key = {1, 1};
  c[2].key = {2, 2};
  c[3].key = {0, 1};
  CacheView v{&c, 10, 0};
  EXPECT_EQ(p.victim(v, {1, 0}), 3u);
  c.pop_back();
  EXPECT_EQ(p.victim(v, {1, 0}), 2u);
  c.pop_back();
  EXPECT_EQ(p.victim(v, {1, 0}), 1u);  // same likelihood: the later layer goes first
}

TEST(MoeInfinity, FullCollectionReplacesTheMostSimilarEntry) {
  MoeInfinityPolicy p(kGeo, {.capacity = 2, .n_match = 3});
  run_request(p, {{0}, {0}, {0}}, {});
  run_request(p, {{3}, {3}, {3}}, {});
  run_request(p, {{0, 0}, {0, 1}, {0, 0}}, {});  // closest to the first
  ASSERT_EQ(p.collection().size(), 2u);
  EXPECT_EQ(p.collection()[0].prefill[0], 2u);
  EXPECT_EQ(p.collection()[1].prefill[3], 1u);
}

TEST(MoeInfinity, SaveLoadRoundTripsExactly) {
  MoeInfinityPolicy a(kGeo, {.capacity = 4, .n_match = 2});
  run_request(a, {{0, 1}, {1, 1}, {2, 3}}, {{3}, {3}, {2}});
  run_request(a, {{3}, {2}, {1}}, {{0}, {0}, {0}});
  const std::string s = saved(a);
  MoeInfinityPolicy b(kGeo, {.capacity = 4, .n_match = 2});
  std::istringstream in(s);
  b.load(in);
  EXPECT_EQ(saved(b), s);
  for (MoeInfinityPolicy* p : {&a, &b}) {
    p->begin_request(RequestInfo{});
    p->begin_iteration(Phase::Decode, 1);
    p->routed(route(0, {3}));
  }
  PrefetchPlan pa, pb;
  a.plan_prefetch(0, pa);
  b.plan_prefetch(0, pb);
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].key, pb[i].key);
    EXPECT_EQ(pa[i].priority, pb[i].priority);
  }
}

TEST(MoeInfinity, BadStateFilesAreRejected) {
  MoeInfinityPolicy a(kGeo, {.capacity = 4});
  run_request(a, {{0}, {1}, {2}}, {});
  const std::string good = saved(a);
  auto load = [](const std::string& text, size_t capacity = 4) {
    MoeInfinityPolicy p(kGeo, {.capacity = capacity});
    std::istringstream in(text);
    p.load(in);
  };
  EXPECT_THROW(load("not a state"), InputError);
  EXPECT_THROW(load(good.substr(0, good.size() - 4)), InputError);
  EXPECT_THROW(load(good + " 7"), InputError);
  std::string other = good;
  other.replace(other.find("3 4"), 3, "3 5");
  EXPECT_THROW(load(other), InputError);
  run_request(a, {{1}, {1}, {1}}, {});
  EXPECT_THROW(load(saved(a), 1), InputError) << "two entries do not fit a capacity of one";
}

}  // namespace
}  // namespace moeflow

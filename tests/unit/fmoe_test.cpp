// The fMoE policy (fmoe.txt §4) on hand-made routings: 4 layers of 4 experts, top-1,
// prefetch distance 2, so every decision can be worked out by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <limits>
#include <sstream>
#include <thread>

#include "base/error.h"
#include "experts/expert_cache.h"
#include "experts/layer_protocol.h"
#include "experts/simulated_transport.h"
#include "policy/fmoe.h"
#include "policy/policy_factory.h"

namespace moeflow {
namespace {

const ExpertGeometry kGeo = ExpertGeometry::uniform(4, 4, 1, 100);
const FmoeOptions kOpt{.distance = 2, .capacity = 8};

LayerRouting full(int64_t layer, std::vector<float> p) {
  LayerRouting r{layer, 1, static_cast<int64_t>(p.size()), 1, {0}, {}, p, {}};
  r.experts[0] = static_cast<int32_t>(std::max_element(p.begin(), p.end()) - p.begin());
  return r;
}

// Layer l prefers expert l with probability 0.7.
std::vector<float> peaked(int32_t at) {
  std::vector<float> p(4, 0.1f);
  p[static_cast<size_t>(at)] = 0.7f;
  return p;
}

void one_iteration(FmoePolicy& f, const std::vector<std::vector<float>>& layers) {
  f.begin_iteration(Phase::Decode, 0);
  for (size_t l = 0; l < layers.size(); ++l) f.routed(full(static_cast<int64_t>(l), layers[l]));
  f.end_iteration();
}

// The history every test starts from: one request with embedding (1, 0) whose only
// iteration chose expert l at layer l.
void learn(FmoePolicy& f) {
  f.begin_request(RequestInfo{1, {}, {1, 0}, {}});
  one_iteration(f, {peaked(0), peaked(1), peaked(2), peaked(3)});
  f.end_request(1);
  f.wait_idle();
}

using Plan = std::vector<std::tuple<int32_t, int32_t, double>>;
Plan plan_at(FmoePolicy& f, int32_t layer) {
  PrefetchPlan p;
  f.plan_prefetch(layer, p);
  Plan out;
  for (const PrefetchRequest& r : p) out.emplace_back(r.key.layer, r.key.expert, r.priority);
  return out;
}

void expect_plan(const Plan& got, const Plan& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(std::get<0>(got[i]), std::get<0>(want[i])) << i;
    EXPECT_EQ(std::get<1>(got[i]), std::get<1>(want[i])) << i;
    EXPECT_NEAR(std::get<2>(got[i]), std::get<2>(want[i]), 1e-6) << i;
  }
}

// Two requests in one step (issue 16: per-request state): each matches its own
// embedding and its own trajectory, so the step's plan is the union of the plans each
// request makes alone, an expert both want at the higher priority. History: request 1
// (embedding (1, 0)) chose expert l at layer l, request 2 (embedding (0, 1)) expert 3 - l.
TEST(Fmoe, InterleavedRequestsPlanWhatEachPlansAlone) {
  auto learned = [] {
    auto f = std::make_unique<FmoePolicy>(kGeo, kOpt);
    learn(*f);
    f->begin_request(RequestInfo{2, {}, {0, 1}, {}});
    one_iteration(*f, {peaked(3), peaked(2), peaked(1), peaked(0)});
    f->end_request(2);
    return f;
  };
  auto alone = [&](int64_t id, std::vector<float> emb, int32_t first) {
    auto f = learned();
    f->begin_request(RequestInfo{id, {}, std::move(emb), {}});
    f->begin_iteration(Phase::Decode, 1);
    LayerRouting r = full(0, peaked(first));
    r.requests = {id};
    f->routed(r);
    return plan_at(*f, 0);
  };
  const Plan a = alone(10, {1, 0}, 0), b = alone(11, {0, 1}, 3);
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(std::get<1>(a[0]), 2) << "request 10 follows history 1 to expert 2 at layer 2";
  EXPECT_EQ(std::get<1>(b[0]), 1) << "request 11 follows history 2 to expert 1 at layer 2";

  auto f = learned();
  f->begin_request(RequestInfo{10, {}, {1, 0}, {}});
  f->begin_request(RequestInfo{11, {}, {0, 1}, {}});
  f->begin_iteration(Phase::Decode, 1);
  std::vector<float> probs = peaked(0);
  const std::vector<float> second = peaked(3);
  probs.insert(probs.end(), second.begin(), second.end());
  f->routed(LayerRouting{0, 2, 4, 1, {0, 3}, {}, probs, {10, 11}});
  // The union, each expert at its best priority, highest first (ties: a's order).
  Plan want = a;
  for (const auto& x : b) {
    auto same = std::find_if(want.begin(), want.end(), [&](const auto& y) {
      return std::get<0>(y) == std::get<0>(x) && std::get<1>(y) == std::get<1>(x);
    });
    if (same == want.end())
      want.push_back(x);
    else
      std::get<2>(*same) = std::max(std::get<2>(*same), std::get<2>(x));
  }
  std::stable_sort(want.begin(), want.end(), [](const auto& x, const auto& y) { return std::get<2>(x) > std::get<2>(y); });
  expect_plan(plan_at(*f, 0), want);
  EXPECT_EQ(f->running_requests(), 2u);
  f->end_request(10);
  EXPECT_EQ(f->running_requests(), 1u);
}

TEST(Fmoe, ThresholdIsClippedOneMinusScore) {
  EXPECT_DOUBLE_EQ(FmoePolicy::threshold(1.0), 0.0);
  EXPECT_DOUBLE_EQ(FmoePolicy::threshold(0.25), 0.75);
  EXPECT_DOUBLE_EQ(FmoePolicy::threshold(0.0), 1.0);
  EXPECT_DOUBLE_EQ(FmoePolicy::threshold(-0.5), 1.0);
}

TEST(Fmoe, SelectionReachesDeltaWithAtLeastTopK) {
  const float p[4] = {0.1f, 0.5f, 0.3f, 0.1f};
  EXPECT_EQ(FmoePolicy::select(p, 4, 0.0, 1), (std::vector<int32_t>{1}));
  EXPECT_EQ(FmoePolicy::select(p, 4, 0.0, 2), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(FmoePolicy::select(p, 4, 0.75, 1), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(FmoePolicy::select(p, 4, 0.85, 1), (std::vector<int32_t>{1, 2, 0}));
  const float q[4] = {0.6f, 0.4f, 0.0f, 0.0f};
  EXPECT_EQ(FmoePolicy::select(q, 4, 1.0, 1), (std::vector<int32_t>{0, 1})) << "zero-probability experts stay out";
}

TEST(Fmoe, PrefetchesTheMatchedMapStepByStep) {
  FmoePolicy f(kGeo, kOpt);
  EXPECT_TRUE(plan_at(f, 0).empty()) << "an empty store predicts nothing";
  learn(f);
  ASSERT_EQ(f.store().size(), 1u);
  // Same embedding and trajectory: scores 1, δ = 0, top-1 of layer l+d alone (§4.2's
  // P_{l+d}) at p/d. Targets below d follow the semantic match, the rest the
  // trajectory; past the last layer the next iteration's first layers (semantic).
  f.begin_request(RequestInfo{2, {}, {2, 0}, {}});
  f.begin_iteration(Phase::Prefill, 0);
  f.routed(full(0, peaked(0)));
  expect_plan(plan_at(f, 0), {{2, 2, 0.35}});
  f.routed(full(1, peaked(1)));
  expect_plan(plan_at(f, 1), {{3, 3, 0.35}});
  f.routed(full(2, peaked(2)));
  expect_plan(plan_at(f, 2), {{0, 0, 0.35}});
  f.routed(full(3, peaked(3)));
  expect_plan(plan_at(f, 3), {{1, 1, 0.35}});
}

TEST(Fmoe, LowSimilarityWidensTheSelection) {
  FmoePolicy f(kGeo, kOpt);
  learn(f);
  // Trajectory (0,0,0,1) vs (.7,.1,.1,.1): score .1/√.52 ≈ .139, δ ≈ .861: experts
  // 2 (.7), 0 (.8), 1 (.9) of layer 2, at p/2.
  f.begin_request(RequestInfo{2, {}, {0, 1}, {}});
  f.begin_iteration(Phase::Prefill, 0);
  f.routed(full(0, {0, 0, 0, 1}));
  expect_plan(plan_at(f, 0), {{2, 2, 0.35}, {2, 0, 0.05}, {2, 1, 0.05}});
  // Orthogonal embedding: semantic score 0, δ = 1: at layer 3 the target is the next
  // iteration's layer 1, all four of its experts.
  f.routed(full(1, peaked(1)));
  f.routed(full(2, peaked(2)));
  f.routed(full(3, peaked(3)));
  expect_plan(plan_at(f, 3), {{1, 1, 0.35}, {1, 0, 0.05}, {1, 2, 0.05}, {1, 3, 0.05}});
}

TEST(Fmoe, EvictsTheSmallestProbabilityTimesFrequency) {
  FmoePolicy f(kGeo, kOpt);
  learn(f);
  f.begin_request(RequestInfo{2, {}, {1, 0}, {}});
  f.begin_iteration(Phase::Decode, 1);
  f.routed(full(0, peaked(0)));
  // p: layers ahead from this iteration's prediction, layer 0 (passed) from the next's;
  // freq = uses + 1 (the load counts as a visit).
  const std::vector<CacheEntryView> all = {
      {{1, 1}, 0, 0, 1, false},  // .7 · 2 = 1.4
      {{1, 0}, 0, 0, 5, false},  // .1 · 6 = .6
      {{2, 2}, 0, 0, 0, true},   // .7 · 1 = .7
      {{3, 0}, 0, 0, 2, false},  // .1 · 3 = .3
      {{0, 3}, 0, 0, 3, false},  // .1 · 4 = .4
      {{2, 0}, 0, 0, 0, true},   // .1 · 1 = .1
  };
  std::vector<CacheEntryView> c = all;
  std::vector<ExpertKey> order;
  while (!c.empty()) {
    const CacheView v{&c, 10, 0};
    const size_t i = f.victim(v, {3, 3});
    order.push_back(c[i].key);
    c.erase(c.begin() + static_cast<std::ptrdiff_t>(i));
  }
  EXPECT_EQ(order, (std::vector<ExpertKey>{{2, 0}, {3, 0}, {0, 3}, {1, 0}, {2, 2}, {1, 1}}));
  // A prefetch evicts only what is worth less than itself: (3,3) has p = .7 > .1, (3,1)
  // has p = .1, not more than (2,0)'s .1 · 1.
  CacheView pv{&all, 10, 0};
  pv.for_prefetch = true;
  EXPECT_EQ(f.victim(pv, {3, 3}), 5u);
  EXPECT_EQ(f.victim(pv, {3, 1}), ExpertPolicy::kDecline);
}

TEST(Fmoe, StoreReplacesTheMostRedundantMapWhenFull) {
  ExpertMapStore s(2, 2, 2, 1);
  const ExpertMap a{{1, 0}, {1, 0, 1, 0}}, b{{0, 1}, {0, 1, 0, 1}}, c{{1, 0}, {0.9f, 0.1f, 1, 0}};
  EXPECT_DOUBLE_EQ(s.redundancy(a, a), 1.0);
  EXPECT_DOUBLE_EQ(s.redundancy(a, b), 0.0);
  EXPECT_GT(s.redundancy(c, a), s.redundancy(c, b));
  EXPECT_EQ(s.add(a), 0u);
  EXPECT_EQ(s.add(b), 1u);
  EXPECT_EQ(s.add(c), 0u) << "c is nearly a: a goes";
  EXPECT_EQ(s.at(0).probs, c.probs);
  EXPECT_EQ(s.add(b), 1u) << "a copy of b replaces b";
  EXPECT_EQ(s.size(), 2u);
}

TEST(Fmoe, MapsFromTopKWeightsWhenProbabilitiesAreMissing) {
  const ExpertGeometry g = ExpertGeometry::uniform(1, 4, 2, 100);
  FmoePolicy f(g, kOpt);
  f.begin_request(RequestInfo{1, {5, 6, 7}, {}, {}});
  f.begin_iteration(Phase::Prefill, 0);
  f.routed(LayerRouting{0, 2, 4, 2, {1, 2, 1, 3}, {0.6f, 0.2f, 1.0f, 1.0f}, {}, {}});
  f.end_iteration();
  f.begin_iteration(Phase::Decode, 1);
  f.routed(LayerRouting{0, 1, 4, 2, {0, 3}, {}, {}, {}});
  f.end_iteration();
  EXPECT_TRUE(f.used_sparse_fallback());
  ASSERT_EQ(f.store().size(), 2u);
  // Token 1: .75/.25 on experts 1/2; token 2: .5/.5 on 1/3; mean over the tokens.
  const std::vector<float> want0 = {0, 0.625f, 0.125f, 0.25f}, want1 = {0.5f, 0, 0, 0.5f};
  for (size_t j = 0; j < 4; ++j) {
    EXPECT_FLOAT_EQ(f.store().at(0).probs[j], want0[j]);
    EXPECT_FLOAT_EQ(f.store().at(1).probs[j], want1[j]);
  }
  // No prompt embedding: the hashed bag of prompt tokens stands in.
  EXPECT_EQ(f.store().at(0).sem.size(), 256u);
  EXPECT_FALSE(FmoePolicy(kGeo, kOpt).used_sparse_fallback());
}

std::string saved(const FmoePolicy& f) {
  std::ostringstream out;
  f.save(out);
  return out.str();
}

TEST(Fmoe, SaveLoadRoundTripsBytesAndDecisions) {
  FmoePolicy a(kGeo, kOpt);
  learn(a);
  a.begin_request(RequestInfo{3, {9, 9, 4}, {}, {}});
  one_iteration(a, {peaked(3), peaked(2), peaked(1), peaked(0)});
  const std::string s1 = saved(a);
  FmoePolicy b(kGeo, kOpt);
  std::istringstream in(s1);
  b.load(in);
  EXPECT_EQ(saved(b), s1);
  for (FmoePolicy* f : {&a, &b}) f->begin_request(RequestInfo{4, {9, 4}, {}, {}});
  for (FmoePolicy* f : {&a, &b}) f->begin_iteration(Phase::Prefill, 0);
  for (int32_t l = 0; l < 4; ++l) {
    for (FmoePolicy* f : {&a, &b}) f->routed(full(l, peaked((l + 1) % 4)));
    const Plan pa = plan_at(a, l), pb = plan_at(b, l);
    EXPECT_FALSE(pa.empty());
    EXPECT_EQ(pa, pb) << "layer " << l;
  }
}

void expect_rejected(const std::string& bytes, const std::string& says) {
  FmoePolicy f(kGeo, kOpt);
  std::istringstream in(bytes);
  try {
    f.load(in);
    FAIL() << "accepted a bad state (" << says << ")";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

TEST(Fmoe, BadStateIsRejected) {
  FmoePolicy a(kGeo, kOpt);
  learn(a);
  const std::string good = saved(a);
  expect_rejected("not a state file", "bad magic");
  expect_rejected(good.substr(0, good.size() - 3), "truncated");
  expect_rejected(good + "x", "trailing");
  std::string nan = good;
  const float q = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan.data() + nan.size() - sizeof q, &q, sizeof q);
  expect_rejected(nan, "non-finite");
  FmoePolicy other(ExpertGeometry::uniform(3, 4, 1, 100), kOpt);
  std::istringstream in(good);
  EXPECT_THROW(other.load(in), InputError);
}

TEST(Fmoe, AsyncMatchingNeverBlocksAndAgreesOnceDone) {
  FmoePolicy sync(kGeo, kOpt);
  FmoeOptions ao = kOpt;
  ao.async = true;
  FmoePolicy async(kGeo, ao);
  learn(sync);
  learn(async);
  ASSERT_EQ(saved(sync), saved(async));

  std::promise<void> gate;
  std::shared_future<void> open = gate.get_future().share();
  std::atomic<bool> entered{false};
  async.set_matcher_hook([&entered, open] {
    entered = true;
    open.wait();
  });
  for (FmoePolicy* f : {&sync, &async}) {
    f->begin_request(RequestInfo{2, {}, {1, 0}, {}});
    f->begin_iteration(Phase::Prefill, 0);
    f->routed(full(0, peaked(0)));
  }
  for (int i = 0; i < 500 && !entered; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(entered) << "the matcher never started";
  // The matcher is stuck in a search: planning must still return, with nothing matched.
  auto planned = std::async(std::launch::async, [&] { return plan_at(async, 0); });
  const bool returned = planned.wait_for(std::chrono::seconds(2)) == std::future_status::ready;
  gate.set_value();
  ASSERT_TRUE(returned) << "plan_prefetch waited for the matcher";
  EXPECT_TRUE(planned.get().empty());
  async.wait_idle();
  EXPECT_EQ(plan_at(async, 0), plan_at(sync, 0));
  for (FmoePolicy* f : {&sync, &async}) f->routed(full(1, peaked(1)));
  async.wait_idle();
  EXPECT_EQ(plan_at(async, 1), plan_at(sync, 1));
}

// Per-iteration semantic keys (Eq. 4). History: one request whose iteration A (key
// (1, 0)) chose expert l at layer l and whose iteration B (key (0, 1)) chose 3 - l.
LayerRouting with_embedding(LayerRouting r, int64_t request, std::vector<float> key) {
  r.embeddings.push_back({request, std::move(key)});
  return r;
}

void keyed_iteration(FmoePolicy& f, int64_t request, std::vector<float> key, const std::vector<std::vector<float>>& layers) {
  f.begin_iteration(Phase::Decode, 0);
  for (size_t l = 0; l < layers.size(); ++l) {
    LayerRouting r = full(static_cast<int64_t>(l), layers[l]);
    f.routed(l == 0 ? with_embedding(r, request, key) : r);
  }
  f.end_iteration();
}

void learn_two_keys(FmoePolicy& f) {
  f.begin_request(RequestInfo{1, {}, {}, {}});
  keyed_iteration(f, 1, {1, 0}, {peaked(0), peaked(1), peaked(2), peaked(3)});
  keyed_iteration(f, 1, {0, 1}, {peaked(3), peaked(2), peaked(1), peaked(0)});
  f.end_request(1);
}

// Each iteration is matched on its own key as soon as its first layer brings it: at
// layer 2 the target is the next iteration's layer 0 (d = 2), planned from the map the
// key matches with score 1 (δ = 0: top-1 at p/d = .7/2). An iteration keyed (0, 1)
// follows B to expert 3, the next one, keyed (1, 0), follows A to expert 0, though
// the request's prompt key (its mean embedding, (1, 0)) stays the same.
TEST(Fmoe, EachIterationMatchesItsOwnEmbedding) {
  FmoePolicy f(kGeo, kOpt);
  EXPECT_TRUE(f.wants_embedding());
  learn_two_keys(f);
  ASSERT_EQ(f.store().size(), 2u);
  EXPECT_EQ(f.store().at(0).sem, (std::vector<float>{1, 0})) << "each map is keyed by its iteration's embedding";
  EXPECT_EQ(f.store().at(1).sem, (std::vector<float>{0, 1}));
  EXPECT_EQ(f.key_counts().embedding, 2u);

  f.begin_request(RequestInfo{2, {}, {1, 0}, {}});
  f.begin_iteration(Phase::Decode, 1);
  f.routed(with_embedding(full(0, peaked(0)), 2, {0, 1}));
  // At the first layer: layer d = 2 from the trajectory (expert 0 at layer 0: A, expert
  // 2, .7/2), and layer 1, planned before from the previous key, again from this
  // iteration's own match (B: expert 2, .7/1).
  expect_plan(plan_at(f, 0), {{1, 2, 0.7}, {2, 2, 0.35}});
  f.routed(full(1, peaked(1)));
  f.routed(full(2, peaked(2)));
  expect_plan(plan_at(f, 2), {{0, 3, 0.35}});
  f.routed(full(3, peaked(3)));
  f.end_iteration();
  f.begin_iteration(Phase::Decode, 2);
  f.routed(with_embedding(full(0, peaked(0)), 2, {1, 0}));
  f.routed(full(1, peaked(1)));
  f.routed(full(2, peaked(2)));
  expect_plan(plan_at(f, 2), {{0, 0, 0.35}});
  const std::vector<std::string> notes = f.notes();
  ASSERT_FALSE(notes.empty());
  EXPECT_NE(notes[0].find("embedding-layer output for 100% of the stored maps"), std::string::npos) << notes[0];

  // fmoe-prompt: the prompt's key for every iteration; embeddings are neither asked
  // for nor read.
  FmoeOptions po = kOpt;
  po.iteration_embedding = false;
  FmoePolicy p(kGeo, po);
  EXPECT_FALSE(p.wants_embedding());
  learn_two_keys(p);
  EXPECT_TRUE(p.store().at(0).sem.empty());
  EXPECT_EQ(p.key_counts().none, 2u);
}

// The step's start (§3.2 step 1: contexts collected before every iteration; §4.2: the
// semantic match guides layers 1..d): given the iteration's embedding before its first
// layer, the policy plans its first d layers from that match at once. Keyed (0, 1), it
// matches B (expert 3 - l) with score 1, δ = 0: top-1 of layers 0 and 1 at p/(l + 1).
// The same embedding with the first layer's routing is not searched again, and
// fmoe-prompt (no iteration keys) plans nothing there.
TEST(Fmoe, TheStepsStartPlansItsFirstLayersFromItsOwnEmbedding) {
  FmoePolicy f(kGeo, kOpt);
  learn_two_keys(f);
  f.begin_request(RequestInfo{2, {}, {1, 0}, {}});
  f.begin_iteration(Phase::Decode, 1);
  f.step_embeddings({{2, {0, 1}}});
  expect_plan(plan_at(f, -1), {{0, 3, 0.7}, {1, 2, 0.35}});
  f.routed(with_embedding(full(0, peaked(3)), 2, {0, 1}));
  // Layer 0: layer d = 2 by the trajectory (B: expert 1, .7/2), layer 1 again from the
  // iteration's match (expert 2, .7/1).
  expect_plan(plan_at(f, 0), {{1, 2, 0.7}, {2, 1, 0.35}});
  EXPECT_EQ(f.matched_plans(), 4u) << "two layers planned at the start, two at layer 0";

  FmoeOptions po = kOpt;
  po.iteration_embedding = false;
  FmoePolicy p(kGeo, po);
  learn_two_keys(p);
  p.begin_request(RequestInfo{2, {}, {}, {}});
  p.begin_iteration(Phase::Decode, 1);
  p.step_embeddings({{2, {0, 1}}});
  EXPECT_TRUE(plan_at(p, -1).empty());
}

// Through the layer protocol on a simulated link (copies 1 s, a cache of 4 experts):
// with the embedding at the step's start layer 0's expert (0, 3) is fetched during the
// layer's 1.5 s dense part and hits; with the embedding only beside layer 0's routing
// (its search comes after the gate) it misses.
TEST(Fmoe, TheStepsStartFetchesLayerZeroBeforeItsRouter) {
  for (bool at_start : {true, false}) {
    FmoePolicy f(kGeo, kOpt);
    learn_two_keys(f);
    SimulatedTransport link(kGeo, LinkProfile{100.0, 0.0, 1});
    ExpertCache cache(kGeo, 400, link, f);
    LayerProtocol protocol(cache);
    f.begin_request(RequestInfo{2, {}, {1, 0}, {}});
    f.begin_iteration(Phase::Decode, 1);
    const std::vector<LayerRouting::StepEmbedding> e = {{2, {0, 1}}};
    if (at_start) protocol.begin_step(e);
    EXPECT_EQ(cache.in_flight({0, 3}), at_start);
    link.advance(1.5);
    LayerRouting r = full(0, peaked(3));
    if (!at_start) r.embeddings = e;
    f.routed(r);
    protocol.run(0, {3}, [&](int32_t, const uint8_t*) { link.advance(0.25); });
    EXPECT_EQ(cache.counters().hits, at_start ? 1u : 0u) << at_start;
    EXPECT_EQ(cache.counters().misses, at_start ? 0u : 1u) << at_start;
  }
}

// Without embeddings in the routing the hashed bag of the prompt's tokens keys the
// maps, and the notes say so.
TEST(Fmoe, BagOfTokensStandsInWithoutEmbeddings) {
  FmoePolicy f(kGeo, kOpt);
  f.begin_request(RequestInfo{1, {5, 6, 5}, {}, {}});
  one_iteration(f, {peaked(0), peaked(1), peaked(2), peaked(3)});
  ASSERT_EQ(f.store().size(), 1u);
  std::vector<float> bag = f.store().at(0).sem;
  ASSERT_EQ(bag.size(), 256u);
  std::sort(bag.begin(), bag.end());
  EXPECT_EQ(bag.back(), 2.0f) << "token 5 twice";
  EXPECT_EQ(bag[bag.size() - 2], 1.0f) << "token 6 once";
  EXPECT_EQ(f.key_counts().token_bag, 1u);
  const std::vector<std::string> notes = f.notes();
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("hashed bag of the prompt's tokens for 100%"), std::string::npos) << notes[0];
}

// The simulator's matcher (§4.3 on the simulated clock): one worker, 1 s a job. A
// late search leaves the previous match in use; once its time is over the new match
// plans. With no cost it decides as the synchronous policy does.
TEST(Fmoe, TimedMatcherUsesThePreviousMatchUntilTheNewOneIsDone) {
  double now = 0;
  FmoeOptions o = kOpt;
  o.clock = [&now] { return now; };
  o.match_seconds = {1.0, 1.0, 1.0};
  FmoePolicy f(kGeo, o);
  learn_two_keys(f);  // all at t = 0: its jobs (inserts, newest searches) queue up
  now = 100;
  EXPECT_EQ(f.store().size(), 2u);
  // t = 100: the prompt key's search runs [100, 101): A.
  f.begin_request(RequestInfo{2, {}, {1, 0}, {}});
  now = 102;
  f.begin_iteration(Phase::Decode, 1);
  // t = 102: the iteration's key (0, 1) is searched in [102, 103); the trajectory
  // searches wait behind it (a whole one takes 1 s, one of l layers l/4 s).
  f.routed(with_embedding(full(0, peaked(0)), 2, {0, 1}));
  f.routed(full(1, peaked(1)));
  f.routed(full(2, peaked(2)));
  now = 102.5;
  expect_plan(plan_at(f, 2), {{0, 0, 0.35}});  // late: A (the prompt key's match) still plans
  EXPECT_EQ(f.late_plans(), 1u);
  now = 103;
  expect_plan(plan_at(f, 2), {{0, 3, 0.35}});  // done: B
  EXPECT_EQ(f.late_plans(), 1u);
  EXPECT_EQ(f.matched_plans(), 2u);
  const std::vector<std::string> notes = f.notes();
  EXPECT_NE(notes.back().find("searches take 1000000 us (semantic) / 1000000 us (whole trajectory); 50.0% of 2 "
                              "matched plans used a late match"),
            std::string::npos)
      << notes.back();

  // No cost: the same plans as without a clock, layer by layer.
  FmoeOptions z = kOpt;
  z.clock = [] { return 0.0; };
  FmoePolicy timed(kGeo, z), sync(kGeo, kOpt);
  for (FmoePolicy* p : {&timed, &sync}) {
    learn_two_keys(*p);
    p->begin_request(RequestInfo{2, {}, {1, 0}, {}});
    p->begin_iteration(Phase::Decode, 1);
  }
  for (int32_t l = 0; l < 4; ++l) {
    for (FmoePolicy* p : {&timed, &sync})
      p->routed(l == 0 ? with_embedding(full(0, peaked(1)), 2, {0.5f, 1}) : full(l, peaked((l + 2) % 4)));
    const Plan a = plan_at(timed, l), b = plan_at(sync, l);
    EXPECT_FALSE(a.empty());
    EXPECT_EQ(a, b) << "layer " << l;
  }
  EXPECT_EQ(timed.late_plans(), 0u);
}

TEST(Fmoe, FactoryNamesTheVariants) {
  PolicyOptions o;
  double t = 0;
  o.clock = [&t] { return t; };
  o.fmoe_semantic_seconds = 0.5;
  for (const char* name : {"fmoe", "fmoe-async", "fmoe-prompt"}) {
    auto p = make_policy(name, kGeo, o);
    EXPECT_EQ(p->name(), name);
    EXPECT_EQ(p->wants_embedding(), std::string(name) != "fmoe-prompt");
  }
}

TEST(Fmoe, FactoryBuildsSyncOrAsync) {
  for (bool async : {false, true}) {
    PolicyOptions o;
    o.async_matching = async;
    auto p = make_policy("fmoe", kGeo, o);
    EXPECT_EQ(p->name(), "fmoe");
    EXPECT_TRUE(p->prefetches());
  }
}

}  // namespace
}  // namespace moeflow

namespace moeflow {
namespace {

// The time of fMoE's Expert Map Matcher on this machine, for the model profiles'
// fmoe_*_seconds (simulate --policy fmoe-async): a store of 1K maps (the paper's
// capacity, full as after learning) at each simulated model's shape, semantic keys of
// 256 numbers (the built-in model's width, and the hashed bag of tokens the other
// traces use). Prints a semantic search, a trajectory search over all layers (and
// half of them: the cost is linear in the layers seen) and an insert that replaces a
// map (it compares the new map with every stored one).
TEST(FmoeMatcher, MeasuresOneSearch) {
  struct Shape {
    const char* name;
    int32_t n_layer, n_expert;
  };
  for (const Shape& s : {Shape{"moeflow-default", 6, 8}, Shape{"mixtral-8x7b", 32, 8}, Shape{"flame-moe-290m", 8, 64}}) {
    const size_t cap = 1024, sem_dim = 256;
    ExpertMapStore store(s.n_layer, s.n_expert, cap, 3);
    uint64_t x = 1;
    auto rnd = [&x] {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      return static_cast<float>((x >> 40) & 0xffff) / 65536.0f;
    };
    auto random_map = [&] {
      ExpertMap m;
      for (size_t i = 0; i < sem_dim; ++i) m.sem.push_back(rnd() - 0.5f);
      for (int32_t i = 0; i < s.n_layer * s.n_expert; ++i) m.probs.push_back(rnd());
      return m;
    };
    for (size_t i = 0; i < cap; ++i) store.add(random_map());
    const ExpertMap q = random_map();
    auto time = [](int reps, const std::function<void()>& f) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < reps; ++r) f();
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    };
    double sink = 0;
    const double sem = time(20, [&] { sink += store.search_semantic(q.sem).score; });
    const double traj = time(20, [&] { sink += store.search_trajectory(q.probs, s.n_layer).score; });
    const double half = time(20, [&] { sink += store.search_trajectory(q.probs, s.n_layer / 2).score; });
    const double ins = time(20, [&] { store.add(random_map()); });
    std::printf("fmoe matcher %-16s semantic %.1f us, trajectory %.1f us (all layers) %.1f us (half), insert %.1f us\n",
                s.name, 1e6 * sem, 1e6 * traj, 1e6 * half, 1e6 * ins);
    for (double t : {sem, traj, ins}) {
      EXPECT_GT(t, 0);
      EXPECT_LT(t, 0.05) << "a pass over 1K maps should take far less than 50 ms";
    }
    EXPECT_NE(sink, 12345.0);
  }
}

}  // namespace
}  // namespace moeflow

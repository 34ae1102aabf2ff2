// eMoE's decisions step by step on hand-made routings (emoe.txt §3.2-3.4).
#include "policy/emoe.h"

#include <gtest/gtest.h>

#include <sstream>

#include "format/error.h"
#include "sim/trace.h"

namespace moeflow {
namespace {

const ExpertGeometry kGeo = ExpertGeometry::uniform(2, 4, 1, 100);

LayerRouting route(int64_t layer, std::vector<int32_t> ids) {
  LayerRouting r;
  r.layer = layer;
  r.n_tok = static_cast<int64_t>(ids.size());
  r.n_expert = 4;
  r.top_k = 1;
  r.experts = std::move(ids);
  return r;
}

// A request of `prompt` tokens routed as `pre` (per layer), then decode steps `dec`.
void run_request(EmoePolicy& p, const std::string& task, const std::vector<std::vector<int32_t>>& pre,
                 const std::vector<std::vector<std::vector<int32_t>>>& dec = {}) {
  p.begin_request(RequestInfo{0, std::vector<int32_t>(pre[0].size(), 1), {}, task});
  p.begin_iteration(Phase::Prefill, 0);
  for (size_t l = 0; l < pre.size(); ++l) p.routed(route(static_cast<int64_t>(l), pre[l]));
  p.end_iteration();
  for (size_t i = 0; i < dec.size(); ++i) {
    p.begin_iteration(Phase::Decode, static_cast<int64_t>(i + 1));
    for (size_t l = 0; l < dec[i].size(); ++l) p.routed(route(static_cast<int64_t>(l), dec[i][l]));
    p.end_iteration();
  }
  p.end_request();
}

std::string saved(const EmoePolicy& p) {
  std::ostringstream s;
  p.save(s);
  return s.str();
}

TEST(Emoe, PredictsEveryPPromptsAndLoadsByEquationTwo) {
  EmoePolicy p(kGeo, {.period = 2});
  p.begin_request(RequestInfo{0, {1, 1, 1}, {}, "code"});
  EXPECT_FALSE(p.predicted_this_request()) << "no history: the first prompt runs on demand";
  PrefetchPlan plan;
  p.routed(route(0, {0, 0, 1}));
  p.plan_prefetch(0, plan);
  EXPECT_TRUE(plan.empty());
  p.routed(route(1, {2, 2, 3}));
  p.begin_iteration(Phase::Decode, 1);
  p.routed(route(0, {0}));
  p.routed(route(1, {2}));
  p.end_request();

  p.begin_request(RequestInfo{1, {1, 1, 1}, {}, "code"});
  ASSERT_TRUE(p.predicted_this_request());
  // f = last prompt's distribution; N = (W + W_o)·s·f = (3 + 1)·1·f.
  EXPECT_EQ(p.expected_tokens(), (std::vector<double>{3, 1, 0, 0, 0, 0, 3, 1}));
  p.plan_prefetch(0, plan);
  // Ranks interleave across layers, the next layer first within a rank.
  ASSERT_EQ(plan.size(), 4u);
  auto pri = [&](ExpertKey k) {
    for (const auto& r : plan)
      if (r.key == k) return r.priority;
    return -1.0;
  };
  EXPECT_DOUBLE_EQ(pri({1, 2}), 1.0);
  EXPECT_DOUBLE_EQ(pri({0, 0}), 0.9);
  EXPECT_DOUBLE_EQ(pri({1, 3}), 0.8);
  EXPECT_DOUBLE_EQ(pri({0, 1}), 0.7);
  plan.clear();
  p.plan_prefetch(1, plan);
  EXPECT_TRUE(plan.empty()) << "the set is loaded once per request";
  p.end_request();

  p.begin_request(RequestInfo{2, {}, {}, "code"});
  EXPECT_FALSE(p.predicted_this_request()) << "the prediction is reused until p prompts have passed";
  p.end_request();
  p.begin_request(RequestInfo{3, {}, {}, "code"});
  EXPECT_TRUE(p.predicted_this_request());
}

TEST(Emoe, EvictsExpertsOutsideThePredictionFirst) {
  EmoePolicy p(kGeo);
  std::vector<CacheEntryView> c(3);
  c[0].key = {0, 0};
  c[0].last_use = 5;
  c[1].key = {1, 3};
  c[1].last_use = 1;
  c[2].key = {0, 2};
  c[2].last_use = 9;
  CacheView v{&c, 10, 0};
  EXPECT_EQ(p.victim(v, {1, 1}), 1u) << "before any prediction: LRU";
  run_request(p, "", {{0, 0, 1}, {2, 2, 3}});
  p.begin_request(RequestInfo{1, {}, {}, ""});
  EXPECT_EQ(p.victim(v, {1, 1}), 2u) << "(0,2) is not predicted";
  c.pop_back();
  EXPECT_EQ(p.victim(v, {1, 1}), 1u) << "(1,3) expects fewer tokens than (0,0)";
}

TEST(Emoe, LayerByLayerChainsTransitionsFromTheFirstLayer) {
  EmoePolicy a(kGeo, {.variant = EmoeVariant::AllLayer, .period = 1});
  EmoePolicy l(kGeo, {.variant = EmoeVariant::LayerByLayer, .period = 1});
  for (EmoePolicy* p : {&a, &l}) {
    run_request(*p, "", {{0, 0, 0}, {2, 2, 2}});
    run_request(*p, "", {{0, 1}, {3, 3}});
    p->begin_request(RequestInfo{2, {}, {}, ""});
  }
  EXPECT_EQ(a.frequency(), (std::vector<double>{0.5, 0.5, 0, 0, 0, 0, 0, 1}));
  // Layer 1 = 0.5·P(·|0) + 0.5·P(·|1) with P(2|0) = 3/4, P(3|0) = 1/4, P(3|1) = 1.
  EXPECT_EQ(l.frequency(), (std::vector<double>{0.5, 0.5, 0, 0, 0, 0, 0.375, 0.625}));
}

TEST(Emoe, TaskProfilesClassifyAndMarkInsensitiveLayers) {
  const std::vector<TaskProfile> tasks = {{"code", {"def ", "return"}, {1}}, {"french", {" le ", " la "}, {}}};
  EXPECT_EQ(classify_task("def f(): return 1", tasks), "code");
  EXPECT_EQ(classify_task("Traduire le chat et la souris", tasks), "french");
  EXPECT_EQ(classify_task("nothing here", tasks), "");
  EmoeOptions opt{.tasks = tasks, .detokenize = [](const std::vector<int32_t>&) { return std::string("def g(): return 2"); }};
  EmoePolicy p(kGeo, opt);
  run_request(p, "", {{0}, {2}});
  p.begin_request(RequestInfo{1, {7}, {}, ""});
  EXPECT_EQ(p.task(), "code");
  // Layer 1 is insensitive for code: s = 0, nothing of it is loaded.
  EXPECT_EQ(p.expected_tokens(), (std::vector<double>{1, 0, 0, 0, 0, 0, 0, 0}));
  p.end_request();
  p.begin_request(RequestInfo{2, {7}, {}, "french"});
  EXPECT_EQ(p.task(), "french") << "a request's label takes precedence over keywords";
}

TEST(Emoe, ShippedTaskProfilesLoad) {
  const auto tasks = load_task_profiles(default_task_profiles_path());
  EXPECT_GE(tasks.size(), 8u);
  EXPECT_EQ(classify_task("import os\ndef main():\n    return 0", tasks), "code");
}

TEST(Emoe, SaveLoadRoundTripsExactly) {
  EmoePolicy a(kGeo, {.variant = EmoeVariant::LayerByLayer, .period = 3});
  run_request(a, "code", {{0, 1, 1}, {2, 3, 3}}, {{{1}, {3}}, {{0}, {2}}});
  run_request(a, "my task", {{3}, {1}}, {{{3}, {1}}});
  const std::string s = saved(a);
  EmoePolicy b(kGeo, {.variant = EmoeVariant::LayerByLayer, .period = 3});
  std::istringstream in(s);
  b.load(in);
  EXPECT_EQ(saved(b), s);
  PrefetchPlan pa, pb;
  for (EmoePolicy* p : {&a, &b}) {
    run_request(*p, "code", {{0}, {2}});
    p->begin_request(RequestInfo{9, {1, 2}, {}, "my task"});
  }
  a.plan_prefetch(0, pa);
  b.plan_prefetch(0, pb);
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].key, pb[i].key);
    EXPECT_EQ(pa[i].priority, pb[i].priority);
  }
  EXPECT_EQ(saved(a), saved(b));
}

TEST(Emoe, BadStateFilesAreRejected) {
  EmoePolicy a(kGeo);
  run_request(a, "code", {{0}, {2}});
  const std::string good = saved(a);
  auto load = [](const std::string& text) {
    EmoePolicy p(kGeo);
    std::istringstream in(text);
    p.load(in);
  };
  EXPECT_THROW(load("moeflow-emoe 2\n"), InputError);
  EXPECT_THROW(load("junk"), InputError);
  EXPECT_THROW(load(good.substr(0, good.size() - 3)), InputError);
  EXPECT_THROW(load(good + "x"), InputError);
  EmoePolicy other(ExpertGeometry::uniform(3, 4, 1, 100));
  std::istringstream in(good);
  EXPECT_THROW(other.load(in), InputError);
}

TEST(Emoe, PredictorAccuracyIsOneOnARepeatedRequest) {
  Trace t;
  t.n_layer = 2;
  t.n_expert = 4;
  t.top_k = 1;
  TraceRequest rq;
  TraceIteration it;
  it.prefill = true;
  for (int32_t l = 0; l < 2; ++l) {
    TraceRecord r;
    r.layer = l;
    r.experts = {{l}, {l + 2}, {}};  // the empty row is a dropped one
    it.layers.push_back(r);
  }
  rq.iterations.push_back(it);
  t.requests.push_back(rq);
  const EmoeAccuracy acc = emoe_predictor_accuracy(t, t, EmoeVariant::AllLayer, 40);
  EXPECT_EQ(acc.requests, 1);
  EXPECT_EQ(acc.predicted_requests, 1);
  EXPECT_EQ(acc.slots, 4);
  EXPECT_EQ(acc.right, 2) << "top-1 of a tie between two experts covers one of them";
}

}  // namespace
}  // namespace moeflow

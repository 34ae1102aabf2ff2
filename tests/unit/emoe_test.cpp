// eMoE's decisions step by step on hand-made routings (emoe.txt §3.2-3.4).
#include "policy/emoe.h"

#include <gtest/gtest.h>

#include <cmath>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "base/error.h"
#include "policy/emoe_sensitivity.h"
#include "format/trace.h"
#include "test_paths.h"

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
  p.end_request(0);
}

std::string saved(const EmoePolicy& p) {
  std::ostringstream s;
  p.save(s);
  return s.str();
}

// Two requests of different tasks whose steps interleave keep their own counts: the
// learned state (each task's last routing and token counts, the transitions) is what
// running them one after the other leaves.
TEST(Emoe, InterleavedRequestsLearnWhatSequentialOnesLearn) {
  const std::vector<std::vector<int32_t>> a_pre = {{0, 1}, {2, 2}}, b_pre = {{3, 3, 1}, {0, 1, 1}};
  const std::vector<std::vector<int32_t>> a_dec = {{1}, {2}}, b_dec = {{3}, {0}};
  EmoePolicy seq(kGeo);
  auto alone = [&](int64_t id, const std::string& task, const auto& pre, const auto& dec) {
    seq.begin_request(RequestInfo{id, std::vector<int32_t>(pre[0].size(), 1), {}, task});
    seq.begin_iteration(Phase::Prefill, 0);
    for (size_t l = 0; l < 2; ++l) seq.routed(route(static_cast<int64_t>(l), pre[l]));
    seq.end_iteration();
    seq.begin_iteration(Phase::Decode, 1);
    for (size_t l = 0; l < 2; ++l) seq.routed(route(static_cast<int64_t>(l), dec[l]));
    seq.end_iteration();
    seq.end_request(id);
  };
  alone(1, "code", a_pre, a_dec);
  alone(2, "prose", b_pre, b_dec);

  EmoePolicy mixed(kGeo);
  mixed.begin_request(RequestInfo{1, {1, 1}, {}, "code"});
  mixed.begin_request(RequestInfo{2, {1, 1, 1}, {}, "prose"});
  mixed.begin_iteration(Phase::Prefill, 0);
  for (size_t l = 0; l < 2; ++l) {
    LayerRouting r = route(static_cast<int64_t>(l), {a_pre[l][0], a_pre[l][1], b_pre[l][0], b_pre[l][1], b_pre[l][2]});
    r.requests = {1, 1, 2, 2, 2};
    mixed.routed(r);
  }
  mixed.end_iteration();
  mixed.begin_iteration(Phase::Decode, 1);
  for (size_t l = 0; l < 2; ++l) {
    LayerRouting r = route(static_cast<int64_t>(l), {a_dec[l][0], b_dec[l][0]});
    r.requests = {1, 2};
    mixed.routed(r);
  }
  mixed.end_iteration();
  mixed.end_request(1);
  mixed.end_request(2);
  // The saved state's lines after the magic, the header (with the prompts since the
  // last prediction) and the current prediction (f_i, N_i): the previous prompt's
  // counts, the transitions and every task's statistics. The predictions differ by
  // definition: the second request began with no finished prompt to predict from.
  auto learned = [](const std::string& text) {
    std::istringstream in(text);
    std::string line, out;
    for (int i = 0; std::getline(in, line); ++i)
      if (i >= 4) out += line + "\n";
    return out;
  };
  EXPECT_EQ(learned(saved(mixed)), learned(saved(seq)));
  EXPECT_NE(learned(saved(mixed)), "");
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
  p.end_request(0);

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
  p.end_request(1);

  p.begin_request(RequestInfo{2, {}, {}, "code"});
  EXPECT_FALSE(p.predicted_this_request()) << "the prediction is reused until p prompts have passed";
  plan.clear();
  p.plan_prefetch(0, plan);
  EXPECT_TRUE(plan.empty()) << "the set is issued when the predictor runs, not for every request (§3.3)";
  p.end_request(2);
  p.begin_request(RequestInfo{3, {}, {}, "code"});
  EXPECT_TRUE(p.predicted_this_request());
  plan.clear();
  p.plan_prefetch(0, plan);
  EXPECT_EQ(plan.size(), 4u) << "a new prediction issues its set";
  p.end_request(3);
}

// Eq. 2 over a batch: N_i = (ΣW_j + T·W_o)·s·f_i. Learned: one "code" request, a
// 3-token prompt and one generated token (W_o = 1), layer 0 routing 0 0 1 then 0:
// f of layer 0 = (3/4, 1/4, 0, 0). Then a request of 5 prompt tokens is running when
// one of 3 begins: ΣW = 3 + 5, T = 2: N = (8 + 2·1)·f -> 7.5, 2.5.
TEST(Emoe, EquationTwoCountsTheBatch) {
  EmoePolicy p(kGeo, {.period = 1});
  run_request(p, "code", {{0, 0, 1}, {2, 2, 3}}, {{{0}, {2}}});
  p.begin_request(RequestInfo{5, {1, 1, 1, 1, 1}, {}, "code"});
  p.begin_iteration(Phase::Prefill, 0);
  p.routed(route(0, {0, 0, 1, 1, 1}));
  p.begin_request(RequestInfo{6, {1, 1, 1}, {}, "code"});
  ASSERT_TRUE(p.predicted_this_request());
  EXPECT_NEAR(p.expected_tokens()[0], 7.5, 1e-12);
  EXPECT_NEAR(p.expected_tokens()[1], 2.5, 1e-12);
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
  p.end_request(1);
  p.begin_request(RequestInfo{2, {7}, {}, "french"});
  EXPECT_EQ(p.task(), "french") << "a request's label takes precedence over keywords";
}

TEST(Emoe, ShippedTaskProfilesLoad) {
  const auto tasks = load_task_profiles(default_task_profiles_path());
  EXPECT_GE(tasks.size(), 8u);
  EXPECT_EQ(classify_task("import os\ndef main():\n    return 0", tasks), "python");
  EXPECT_EQ(classify_task("#include <stdio.h>\nint main(void) { return 0; }", tasks), "c");
  EXPECT_EQ(classify_task("Das ist nicht gut, und ich weiß es.", tasks), "de");
}

// Eq. 2 with a numeric s per (task, layer): N_i = (W + W_o)·s·f_i.
TEST(Emoe, NumericSensitivityScalesEquationTwo) {
  const std::vector<TaskProfile> tasks = {{"a", {}, {}, {0.5, 0.25}}, {"b", {}, {}, {1.0, 0.75}}, {"c", {}, {1}, {}}};
  EmoePolicy p(kGeo, {.tasks = tasks});
  EXPECT_DOUBLE_EQ(p.sensitivity("a", 1), 0.25);
  EXPECT_DOUBLE_EQ(p.sensitivity("c", 1), 0) << "insensitive_layers is the paper's binary s = 0";
  EXPECT_DOUBLE_EQ(p.sensitivity("c", 0), 0.75) << "a task without a row takes the profiled tasks' mean at the layer";
  EXPECT_DOUBLE_EQ(p.sensitivity("unknown", 1), 0.5);
  run_request(p, "a", {{0, 0, 1}, {2, 2, 3}});
  p.begin_request(RequestInfo{1, {1, 1, 1}, {}, "a"});
  // (3 + 0)·0.5·(2/3, 1/3) and (3 + 0)·0.25·(2/3, 1/3).
  const auto& n = p.expected_tokens();
  EXPECT_DOUBLE_EQ(n[0], 1.0);
  EXPECT_DOUBLE_EQ(n[1], 0.5);
  EXPECT_DOUBLE_EQ(n[6], 0.5);
  EXPECT_DOUBLE_EQ(n[7], 0.25);
}

// No L given: every layer gets its top_k, the rest of the budget the largest N_i of
// any layer, so the more sensitive layer gets the extra expert.
TEST(Emoe, TopLIsDerivedFromTheBudgetWeightedBySensitivity) {
  const std::vector<TaskProfile> tasks = {{"t", {}, {}, {0.2, 0.9}}};
  auto held_after = [&](uint64_t budget, int32_t top_l) {
    EmoePolicy p(kGeo, {.top_l = top_l, .budget_bytes = budget, .tasks = tasks});
    // Both layers route evenly over three experts.
    run_request(p, "t", {{0, 1, 2, 0, 1, 2}, {0, 1, 2, 0, 1, 2}});
    p.begin_request(RequestInfo{1, std::vector<int32_t>(6, 1), {}, "t"});
    PrefetchPlan plan;
    p.plan_prefetch(0, plan);
    int64_t held = 0;
    for (int32_t l = 0; l < 2; ++l)
      for (int32_t e = 0; e < 4; ++e) held += p.held({l, e});
    EXPECT_EQ(plan.size(), static_cast<size_t>(held)) << "exactly the held set is prefetched";
    return p.held_per_layer();
  };
  EXPECT_EQ(held_after(300, 0), (std::vector<int32_t>{1, 2})) << "3 experts: one per layer, the third to layer 1 (s 0.9)";
  EXPECT_EQ(held_after(100, 0), (std::vector<int32_t>{1, 0})) << "a budget of one expert: layer 0's best";
  EXPECT_EQ(held_after(10000, 0), (std::vector<int32_t>{3, 3})) << "never an expert with no expected tokens";
  EXPECT_EQ(held_after(300, 2), (std::vector<int32_t>{2, 2})) << "the user's L wins over the budget";
  EXPECT_EQ(held_after(0, 0), (std::vector<int32_t>{3, 3})) << "no budget known: every predicted expert";
}

TEST(Emoe, ExpertsOutsideTheHeldSetAreEvictedFirst) {
  EmoePolicy p(kGeo, {.budget_bytes = 200});
  run_request(p, "", {{0, 0, 0, 1}, {2, 2, 3, 3}});
  p.begin_request(RequestInfo{1, {1, 1, 1, 1}, {}, ""});
  ASSERT_TRUE(p.held({0, 0}));
  ASSERT_FALSE(p.held({0, 1})) << "predicted, but over the budget";
  std::vector<CacheEntryView> c(2);
  c[0].key = {0, 0};
  c[0].last_use = 1;
  c[1].key = {0, 1};
  c[1].last_use = 9;
  EXPECT_EQ(p.victim(CacheView{&c, 10, 0}, {1, 2}), 1u);
}

TEST(Emoe, TaskProfileSensitivityIsValidated) {
  const std::string path = moeflow::testing::scratch_path("tasks") + ".json";
  auto write = [&](const std::string& text) { std::ofstream(path, std::ios::trunc) << text; };
  auto error_of = [&]() -> std::string {
    try {
      load_task_profiles(path);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  write(R"({"tasks":[{"name":"a","keywords":["x"],"sensitivity":[0.5,0.25]}]})");
  EXPECT_EQ(load_task_profiles(path)[0].sensitivity, (std::vector<double>{0.5, 0.25}));
  write(R"({"tasks":[{"name":"a","keywords":[],"sensitivity":[0.5,1.5]}]})");
  EXPECT_NE(error_of().find("tasks[0].sensitivity"), std::string::npos) << error_of();
  write(R"({"tasks":[{"name":"a","keywords":[],"sensitivity":[0.5]},{"name":"b","keywords":[],"sensitivity":[0.5,0.5]}]})");
  EXPECT_NE(error_of().find("tasks[1].sensitivity: 2 layers"), std::string::npos) << error_of();
  // A table for another layer count: an error in a file the user named.
  write(R"({"tasks":[{"name":"a","keywords":[],"sensitivity":[0.5,0.5,0.5]}]})");
  PolicyOptions po;
  po.tasks_path = path;
  try {
    make_emoe_policy(kGeo, po);
    ADD_FAILURE() << "a 3-layer table was accepted for a 2-layer model";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("the model has 2"), std::string::npos) << e.what();
  }
  po.tasks_path.clear();
  po.emoe_variant = "sideways";
  EXPECT_THROW(make_emoe_policy(kGeo, po), InputError);
  std::remove(path.c_str());
}

// A labelled trace: task "sharp" puts nearly all gate mass on its choice at layer 0
// and is flat at layer 1; "flat" is flat everywhere.
Trace labelled_trace(bool with_probs) {
  std::vector<TraceRecord> recs;
  auto add = [&](int64_t req, const std::string& task, int32_t layer, std::vector<int32_t> ids, std::vector<float> probs) {
    TraceRecord r;
    r.request = req;
    r.task = task;
    r.layer = layer;
    r.num_experts = 4;
    r.top_k = 1;
    r.prefill = true;
    for (int32_t e : ids) {
      r.experts.push_back({e});
      if (with_probs) r.probs.push_back(probs);
    }
    r.has_probs = with_probs;
    recs.push_back(r);
  };
  add(0, "sharp", 0, {0, 0}, {1.0f, 0, 0, 0});
  add(0, "sharp", 1, {1, 2}, {0.25f, 0.25f, 0.25f, 0.25f});
  add(1, "flat", 0, {0, 1, 2, 3}, {0.4f, 0.2f, 0.2f, 0.2f});
  add(1, "flat", 1, {0, 1, 2, 3}, {0.25f, 0.25f, 0.25f, 0.25f});
  return group_trace(recs, "labelled");
}

TEST(EmoeSensitivity, GateMassThatRandomRoutingWouldLose) {
  const SensitivityTable s = routing_sensitivity(labelled_trace(true));
  EXPECT_EQ(s.method, "gate-mass");
  ASSERT_EQ(s.by_task.size(), 2u);
  // (p_top − 1/4) / (1 − 1/4): 1 for a certain router, 0 for a flat one.
  EXPECT_DOUBLE_EQ(s.by_task.at("sharp")[0], 1.0);
  EXPECT_DOUBLE_EQ(s.by_task.at("sharp")[1], 0.0);
  EXPECT_NEAR(s.by_task.at("flat")[0], (0.4 - 0.25) / 0.75 / 4, 1e-6) << "one token of four at 0.4, three at 0.2 (clamped to 0)";
  EXPECT_EQ(s.tokens.at("flat"), 8);
}

TEST(EmoeSensitivity, RoutingConcentrationWithoutProbabilities) {
  const SensitivityTable s = routing_sensitivity(labelled_trace(false));
  EXPECT_EQ(s.method, "concentration");
  EXPECT_DOUBLE_EQ(s.by_task.at("sharp")[0], 1.0) << "every token to one expert";
  EXPECT_DOUBLE_EQ(s.by_task.at("sharp")[1], 0.5) << "two experts evenly: 1 − log 2 / log 4";
  EXPECT_NEAR(s.by_task.at("flat")[0], 0.0, 1e-12) << "all four evenly";
}

TEST(EmoeSensitivity, MergedIntoProfilesAndReadBack) {
  std::vector<TaskProfile> profiles = {{"flat", {"kw"}, {}}, {"other", {"zz"}, {}, {0.5, 0.5, 0.5}}};
  merge_sensitivity(profiles, routing_sensitivity(labelled_trace(true)), 0.1);
  const std::string path = moeflow::testing::scratch_path("merged") + ".json";
  save_task_profiles(path, profiles, "test", R"({"trace":"labelled"})");
  const auto back = load_task_profiles(path);
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back[0].name, "flat");
  EXPECT_EQ(back[0].keywords, (std::vector<std::string>{"kw"})) << "keywords are kept";
  EXPECT_EQ(back[0].sensitivity, (std::vector<double>{0.05, 0.0}));
  EXPECT_EQ(back[0].insensitive_layers, (std::vector<int32_t>{0, 1})) << "under --insensitive-below 0.1";
  EXPECT_TRUE(back[1].sensitivity.empty()) << "a row for another layer count is dropped";
  EXPECT_EQ(back[2].name, "sharp") << "tasks the profiles lack are added";
  EXPECT_EQ(back[2].sensitivity, (std::vector<double>{1.0, 0.0}));
  std::remove(path.c_str());
}

// A trace of one unlabelled workload is one task when named: both requests of the
// labelled trace, stripped of their labels, pooled as "all" (layer 0: tokens 0 0 0 1 2 3
// of six, f = (1/2, 1/6, 1/6, 1/6): 1 − H(f)/log 4, H = ½ log 2 + 3·(1/6) log 6).
TEST(EmoeSensitivity, UnlabelledRequestsCountAsTheNamedTask) {
  Trace t = labelled_trace(false);
  for (TraceRequest& rq : t.requests) rq.task.clear();
  EXPECT_TRUE(routing_sensitivity(t).by_task.empty());
  EXPECT_EQ(routing_sensitivity(t).unlabelled_requests, 2);
  const SensitivityTable s = routing_sensitivity(t, "all");
  ASSERT_EQ(s.by_task.size(), 1u);
  const double h = 0.5 * std::log(2.0) + 0.5 * std::log(6.0);
  EXPECT_NEAR(s.by_task.at("all")[0], 1 - h / std::log(4.0), 1e-9);
  EXPECT_EQ(s.tokens.at("all"), 12);
}

// The per-model profiles the simulator picks (profiles/tasks/<model>.json) are what
// `moeflow trace sensitivity --task` measures on the learning split of each shared trace.
TEST(EmoeSensitivity, PerModelProfilesReproduceFromTheSharedTraces) {
  struct Case { const char* profile; const char* trace; size_t learn; const char* task; };
  for (const Case& c : {Case{"mixtral-8x7b", "mixtral-8x7b-instruct-v0.1-fp8_humaneval.jsonl", 1, "humaneval"},
                        Case{"flame-moe-290m", "flame-moe-290m_pretrain-shard0.jsonl", 22, "pretrain"}}) {
    const std::string trace = std::string(MOEFLOW_FIXTURES) + "/../../../shared/traces/" + c.trace;
    if (!std::filesystem::exists(trace)) continue;
    const Trace t = load_trace(trace);
    const auto tasks = load_task_profiles(std::string(MOEFLOW_FIXTURES) + "/../../profiles/tasks/" + c.profile + ".json");
    ASSERT_EQ(tasks.size(), 1u);
    EXPECT_EQ(tasks[0].name, c.task);
    const SensitivityTable s = routing_sensitivity(slice_requests(t, 0, c.learn), c.task);
    ASSERT_EQ(tasks[0].sensitivity.size(), static_cast<size_t>(t.n_layer));
    for (size_t l = 0; l < tasks[0].sensitivity.size(); ++l)
      EXPECT_NEAR(tasks[0].sensitivity[l], s.by_task.at(c.task)[l], 5e-4) << c.profile << " layer " << l << " (saved to 3 decimals)";
  }
}

// The shipped profile is for the built-in model: its task names are the labels of the
// model's traces, and every task has a sensitivity row for each of its layers.
TEST(EmoeSensitivity, ShippedProfileMatchesTheBuiltInModelsTraces) {
  const std::string trace = std::string(MOEFLOW_FIXTURES) + "/../../models/traces/default-heldout.jsonl";
  if (!std::filesystem::exists(trace)) GTEST_SKIP() << "no built-in trace";
  const Trace t = load_trace(trace);
  const auto tasks = load_task_profiles(default_task_profiles_path());
  std::set<std::string> labels;
  for (const TraceRequest& rq : t.requests) labels.insert(rq.task);
  for (const std::string& label : labels) {
    const auto it = std::find_if(tasks.begin(), tasks.end(), [&](const TaskProfile& p) { return p.name == label; });
    ASSERT_NE(it, tasks.end()) << "no profile for the trace's task '" << label << "'";
    EXPECT_EQ(it->sensitivity.size(), static_cast<size_t>(t.n_layer)) << label;
    EXPECT_FALSE(it->keywords.empty()) << label;
  }
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

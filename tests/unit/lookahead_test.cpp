// Lookahead routing end to end: the trace field's reader (hand-written lines, good and
// bad), the recorder's property that with an unchanged hidden state the lookahead of
// layer l at distance h is exactly layer l+h's own choice, the simulator's replay of
// the field to a policy, and `adaptive`'s use of it (the table it learns, the values,
// the prefetch ranked by distance).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "input_error_of.h"
#include "base/error.h"
#include "engine/generator.h"
#include "engine/trace_recorder.h"
#include "engine/transformer.h"
#include "format/gguf.h"
#include "format/routing_trace.h"
#include "format/trace.h"
#include "kernels/cpu/thread_pool.h"
#include "model/model_weights.h"
#include "model/synthetic_model.h"
#include "policy/adaptive.h"
#include "sim/simulator.h"
#include "sim/trace_stats.h"
#include "greedy_run.h"
#include "test_paths.h"

namespace moeflow {
namespace {

std::string error_of(const std::string& line) { return testing::input_error_of([&] { parse_trace_line(line, "t.jsonl:7"); }); }

// 6 layers x 4 experts, top-2, layer 1, two tokens.
const std::string kHead = R"({"request":0,"iter":0,"phase":"decode","layer":1,"num_experts":4,"top_k":2,)";

TEST(LookaheadTrace, ValidLineReadsBackExactly) {
  const TraceRecord r = parse_trace_line(kHead + R"("experts":[[0,1],[2,3]],"lookahead":[[[1,2],[3,0]],[[0,3],[2,1]]]})", "x");
  EXPECT_TRUE(r.has_lookahead);
  EXPECT_EQ(r.lookahead_depth, 2);
  ASSERT_EQ(r.lookahead.size(), 2u);
  EXPECT_EQ(r.lookahead[0], (std::vector<std::vector<int32_t>>{{1, 2}, {3, 0}}));
  EXPECT_EQ(r.lookahead[1], (std::vector<std::vector<int32_t>>{{0, 3}, {2, 1}}));
  const TraceRecord again = parse_trace_line(format_trace_line(r), "y");
  EXPECT_EQ(again.lookahead, r.lookahead);
  EXPECT_EQ(again.lookahead_depth, 2);
  // A dropped token row has no lookahead row either.
  const TraceRecord d = parse_trace_line(kHead + R"("experts":[null,[2,3]],"lookahead":[null,[[0,3]]]})", "x");
  EXPECT_EQ(d.lookahead_depth, 1);
  EXPECT_TRUE(d.lookahead[0].empty());
  EXPECT_NE(format_trace_line(d).find(R"("lookahead":[null,[[0,3]]])"), std::string::npos);
  // Traces recorded before the field: no lookahead, and none written back.
  const TraceRecord old = parse_trace_line(kHead + R"("experts":[[0,1]]})", "x");
  EXPECT_FALSE(old.has_lookahead);
  EXPECT_EQ(old.lookahead_depth, 0);
  EXPECT_EQ(format_trace_line(old).find("lookahead"), std::string::npos);
  EXPECT_FALSE(parse_trace_line(kHead + R"("experts":[[0,1]],"lookahead":null})", "x").has_lookahead);
}

TEST(LookaheadTrace, BadIdsDuplicatesAndLengthsAreNamedWithTheLine) {
  const std::string e = R"("experts":[[0,1],[2,3]],)";
  auto err = [&](const std::string& field) { return error_of(kHead + e + R"("lookahead":)" + field + "}"); };
  EXPECT_NE(err("[[[1,2]],[[0,4]]]").find("t.jsonl:7: lookahead[1][0][1] = 4 is not an expert id in [0, 4)"),
            std::string::npos)
      << err("[[[1,2]],[[0,4]]]");
  EXPECT_NE(err("[[[1,-1]],[[0,3]]]").find("lookahead[0][0][1] = -1"), std::string::npos);
  EXPECT_NE(err("[[[1,1]],[[0,3]]]").find("t.jsonl:7: lookahead[0][0] names expert 1 twice"), std::string::npos);
  EXPECT_NE(err("[[[1,2,3]],[[0,3]]]").find("lookahead[0][0] must be 2 expert ids (top_k)"), std::string::npos);
  EXPECT_NE(err("[[[1,2]]]").find("t.jsonl:7: \"lookahead\" has 1 rows, \"experts\" has 2"), std::string::npos);
  EXPECT_NE(err("[[[1,2],[0,3]],[[0,3]]]").find("lookahead[1] has 1 layers ahead, the rows before it 2"),
            std::string::npos);
  EXPECT_NE(err("[[],[[0,3]]]").find("lookahead[0] has 0 layers ahead"), std::string::npos);
  EXPECT_NE(err("[null,[[0,3]]]").find("lookahead[0] is null but experts[0] is not"), std::string::npos);
  EXPECT_NE(err("{}").find("\"lookahead\" must be an array"), std::string::npos);
  EXPECT_NE(error_of(kHead + R"("experts":[null],"lookahead":[[[0,1]]]})").find("lookahead[0] is given but experts[0] is null"),
            std::string::npos);
  // Past the trace's last layer: layers 0..1 recorded, layer 1 looks one ahead.
  const std::string p = moeflow::testing::scratch_path("la") + ".jsonl";
  {
    std::ofstream f(p);
    f << R"({"request":0,"iter":0,"phase":"decode","layer":0,"num_experts":4,"top_k":2,"experts":[[0,1]],"lookahead":[[[2,3]]]})" << "\n";
    f << kHead << R"("experts":[[0,1]],"lookahead":[[[2,3]]]})" << "\n";
  }
  try {
    load_trace(p);
    ADD_FAILURE() << "a lookahead past the last layer loaded";
  } catch (const InputError& x) {
    EXPECT_NE(std::string(x.what()).find("layer 1: its lookahead covers 1 layers ahead, past the trace's last layer 1"),
              std::string::npos)
        << x.what();
  }
}

// A model whose attention and experts add nothing (their output projections are zero)
// leaves the residual stream as it was at the embedding: every layer's router sees
// the same hidden state through its own norm, so the lookahead of layer l at distance
// h must be exactly the choice layer l+h makes.
// With every layer's output projections zero the hidden state never changes, so the
// lookahead at distance h must be exactly what layer l+h then picks. deepseek2 leads
// with a dense layer: the lookahead of MoE layer l reads model layer l + 1 + h.
void expect_lookahead_equals_later_choice(const SyntheticModelSpec& spec, int32_t n_moe) {
  const std::string path = moeflow::testing::scratch_path("still") + ".gguf";
  write_synthetic_model(spec, path);
  {
    auto g = gguf::GgufFile::open(path);
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    for (const gguf::TensorInfo& t : g->tensors())
      if (t.name.find("attn_output") != std::string::npos || t.name.find("ffn_down") != std::string::npos) {
        const std::vector<char> zeros(t.nbytes, 0);
        f.seekp(static_cast<std::streamoff>(t.file_offset));
        f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
      }
  }
  auto model = Model::load(path);
  const std::string out = moeflow::testing::scratch_path("still") + ".jsonl";
  {
    TraceRecorder rec(out, "still");
    rec.set_lookahead(3);
    rec.begin_request(0, "");
    moeflow::testing::generate_greedy(*model, rec, 0, {5, 17, 40, 99, 123, 7, 250}, 6, 2);
  }
  const Trace t = load_trace(out);
  EXPECT_EQ(t.lookahead_depth, 3);
  int64_t compared = 0, differ_from_own = 0, want = 0;
  for (int32_t l = 0; l < n_moe; ++l) want += std::min(3, n_moe - 1 - l);
  for (const TraceIteration& it : t.requests.at(0).iterations)
    for (int32_t l = 0; l < n_moe; ++l) {
      const TraceRecord& r = it.layers[static_cast<size_t>(l)];
      ASSERT_EQ(r.lookahead_depth, std::min(3, n_moe - 1 - l)) << "cut at the last layer";
      for (size_t tok = 0; tok < r.experts.size(); ++tok)
        for (int32_t h = 1; h <= r.lookahead_depth; ++h) {
          const std::vector<int32_t>& later = it.layers[static_cast<size_t>(l + h)].experts[tok];
          EXPECT_EQ(r.lookahead[tok][static_cast<size_t>(h - 1)], later)
              << "iter " << it.iter << ", layer " << l << ", token " << tok << ", distance " << h;
          ++compared;
          differ_from_own += later != r.experts[tok];
        }
    }
  EXPECT_EQ(compared, (7 + 5) * want);  // prefill 7 tokens, 5 decode steps
  EXPECT_GT(differ_from_own, compared / 4) << "the layers' routers differ: the check is not vacuous";
  std::printf("lookahead = later layer's choice on %lld (token, layer, distance) triples; %lld differ from the own layer's\n",
              static_cast<long long>(compared), static_cast<long long>(differ_from_own));
}

TEST(LookaheadRecorder, EqualsTheLaterLayersChoiceWhenTheHiddenStateDoesNotChange) {
  SyntheticModelSpec spec;
  spec.n_layer = 4;
  expect_lookahead_equals_later_choice(spec, 4);
  SyntheticModelSpec ds;
  ds.arch = Arch::DeepSeek2;
  ds.n_layer = 5;  // a dense layer, then 4 MoE layers
  expect_lookahead_equals_later_choice(ds, 4);
}

// The simulator hands the trace's lookahead to the policy with the routing, tokens of
// the batch's requests one after the other; a policy that wants it but replays a
// trace without it gets a note.
TEST(LookaheadSimulator, ReplaysTheFieldToThePolicy) {
  struct Spy final : public ExpertPolicy {  // simulate() owns and ends it: it reports to `seen`
    explicit Spy(std::vector<LayerRouting>& s) : seen(s) {}
    std::vector<LayerRouting>& seen;
    std::string name() const override { return "spy"; }
    int32_t lookahead_depth() const override { return 1; }
    void routed(const LayerRouting& r) override { seen.push_back(r); }
    size_t victim(const CacheView&, const ExpertKey&) override { return 0; }
  };
  std::vector<TraceRecord> recs;
  for (int64_t q = 0; q < 2; ++q)
    for (int32_t l = 0; l < 2; ++l) {
      TraceRecord r;
      r.request = q;
      r.layer = l;
      r.num_experts = 4;
      r.top_k = 1;
      r.experts = {{static_cast<int32_t>(q + l)}};
      if (l == 0) {
        r.has_lookahead = true;
        r.lookahead_depth = 1;
        r.lookahead = {{{static_cast<int32_t>(3 - q)}}};
      }
      recs.push_back(r);
    }
  const Trace t = group_trace(recs, "hand");
  ModelProfile m;
  m.name = "tiny";
  m.n_layer = 2;
  m.n_expert = 4;
  m.top_k = 1;
  m.expert_bytes = 100;
  HardwareProfile hw;
  hw.link = {100.0, 0.0, 1};
  SimOptions o;
  o.batch = 2;
  std::vector<LayerRouting> seen;
  const SimResult res = simulate(t, m, hw, o, std::make_unique<Spy>(seen));
  ASSERT_EQ(seen.size(), 2u);  // one step of both requests, two layers
  EXPECT_EQ(seen[0].lookahead_depth, 1);
  EXPECT_EQ(seen[0].lookahead, (std::vector<int32_t>{3, 2}));
  EXPECT_EQ(seen[0].requests, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(seen[1].lookahead_depth, 0) << "the last layer looks nowhere";
  for (const std::string& n : res.notes) EXPECT_EQ(n.find("lookahead"), std::string::npos) << n;
  std::vector<TraceRecord> plain = recs;
  for (TraceRecord& r : plain) r.has_lookahead = false, r.lookahead_depth = 0, r.lookahead.clear();
  std::vector<LayerRouting> seen2;
  const SimResult res2 = simulate(group_trace(plain, "old"), m, hw, o, std::make_unique<Spy>(seen2));
  EXPECT_EQ(seen2.at(0).lookahead_depth, 0);
  int notes = 0;
  for (const std::string& n : res2.notes) notes += n.find("reads 1 layers of lookahead routing, the trace carries none") != std::string::npos;
  EXPECT_EQ(notes, 1);
}

// `trace stats`: per distance, the share of the later layer's routed experts the
// lookahead named. Decode tokens: layer 0 names {1,3} for layer 1 (routes {1,2}) and
// {0,2} for layer 2 (routes {0,2}); layer 1 names {3,1} for layer 2. Distance 1: 1 of
// 2 at layer 1, 0 of 2 at layer 2 -> 1/4; distance 2: 2 of 2. The prefill token is
// left out (its lookahead names nothing right).
TEST(LookaheadStats, RecallPerDistanceByHand) {
  auto rec = [](bool prefill, int32_t layer, std::vector<int32_t> experts, std::vector<std::vector<int32_t>> la) {
    TraceRecord r;
    r.iter = prefill ? 0 : 1;
    r.prefill = prefill;
    r.layer = layer;
    r.num_experts = 4;
    r.top_k = 2;
    r.experts = {std::move(experts)};
    r.has_lookahead = !la.empty();
    r.lookahead_depth = static_cast<int32_t>(la.size());
    if (!la.empty()) r.lookahead = {std::move(la)};
    return r;
  };
  const Trace t = group_trace({rec(true, 0, {0, 1}, {{2, 3}, {1, 3}}), rec(true, 1, {0, 1}, {{0, 1}}), rec(true, 2, {1, 2}, {}),
                               rec(false, 0, {0, 1}, {{1, 3}, {0, 2}}), rec(false, 1, {1, 2}, {{3, 1}}),
                               rec(false, 2, {0, 2}, {})},
                              "hand");
  const TraceStats s = compute_trace_stats(t);
  ASSERT_EQ(s.lookahead_recall.size(), 2u);
  EXPECT_DOUBLE_EQ(s.lookahead_recall[0], 0.25);
  EXPECT_DOUBLE_EQ(s.lookahead_recall[1], 1.0);
}

LayerRouting ahead(int32_t layer, std::vector<int32_t> experts, std::vector<int32_t> lookahead, int64_t depth) {
  LayerRouting r;
  r.layer = layer;
  r.n_expert = 4;
  r.top_k = 1;
  r.n_tok = static_cast<int64_t>(experts.size());
  r.experts = std::move(experts);
  r.lookahead = std::move(lookahead);
  r.lookahead_depth = depth;
  return r;
}

// A 3 x 4 model, top-1, one token per step. Each decode step routes layer 0 -> e0,
// layer 1 -> e1, layer 2 -> e2, while layer 0's lookahead says e1 for layer 1 (right)
// and e3 for layer 2 (wrong), and layer 1's says e2 for layer 2 (right).
TEST(AdaptiveLookahead, LearnsHowFarToTrustItAndPrefetchesNearestFirst) {
  const ExpertGeometry g = ExpertGeometry::uniform(3, 4, 1, 100);
  AdaptivePolicy p(g);
  EXPECT_EQ(p.lookahead_depth(), 2);
  EXPECT_EQ(AdaptivePolicy(g, adaptive_options_from_name("adaptive-nolookahead"), "n").lookahead_depth(), 0);
  auto step = [&](bool finish) {
    p.begin_iteration(Phase::Decode, 0);
    p.routed(ahead(0, {0}, {1, 3}, 2));
    if (!finish) return;
    p.routed(ahead(1, {1}, {2}, 1));
    p.routed(ahead(2, {2}, {}, 0));
  };
  for (int i = 0; i < 200; ++i) step(true);
  step(false);  // layer 0 of a new step: its lookahead covers layers 1 (h = 1) and 2 (h = 2)
  EXPECT_EQ(p.lookahead_distance(1), 1);
  EXPECT_EQ(p.lookahead_distance(2), 2);
  EXPECT_EQ(p.lookahead_distance(0), 0);
  // Layer 1: distance 1 was always right, its cells say so; the others were never routed.
  EXPECT_GT(p.reuse_probability({1, 1}), 0.98);
  EXPECT_LT(p.reuse_probability({1, 0}), 0.02);
  // Layer 2: distance 2 named e3, never routed; e2 was routed every time though not
  // named at distance 2, and its cell (not named, table probability ~1) learned that.
  EXPECT_LT(p.reuse_probability({2, 3}), 0.02);
  EXPECT_GT(p.reuse_probability({2, 2}), 0.98);
  // The lookahead sharpens the next visit only: the value's later visits keep the
  // first table's probability.
  const double pn = p.reuse_probability({1, 1}), pt = p.table_probability({1, 1});
  EXPECT_NEAR(p.value({1, 1}, 0), pt / (pt * 1 + 3 * (1 - pn)), 1e-12);
  p.link_state(0, 0);
  PrefetchPlan plan;
  p.plan_prefetch(0, plan);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].key, (ExpertKey{1, 1}));
  EXPECT_EQ(plan[1].key, (ExpertKey{2, 2}));
  EXPECT_GT(plan[0].priority, plan[1].priority) << "the nearer layer first";
  // Layer 1's own routing spends its predictions.
  p.routed(ahead(1, {1}, {2}, 1));
  EXPECT_EQ(p.lookahead_distance(1), 0);
  EXPECT_EQ(p.lookahead_distance(2), 1);
}

// The lookahead table is saved with the rest (state version 2); a version-1 state
// (before the table) still loads, with the table empty.
TEST(AdaptiveLookahead, StateKeepsTheTableAndVersionOneStatesLoad) {
  // Without the request feature: what the running requests routed is not saved.
  const ExpertGeometry g = ExpertGeometry::uniform(3, 4, 1, 100);
  const AdaptiveOptions o = adaptive_options_from_name("adaptive-norequest");
  AdaptivePolicy a(g, o);
  for (int i = 0; i < 20; ++i) {
    a.begin_iteration(Phase::Decode, 0);
    a.routed(ahead(0, {0}, {1, 3}, 2));
    a.routed(ahead(1, {1}, {2}, 1));
    a.routed(ahead(2, {2}, {}, 0));
  }
  std::stringstream saved;
  a.save(saved);
  AdaptivePolicy b(g, o);
  b.load(saved);
  for (AdaptivePolicy* p : {&a, &b}) {
    p->begin_iteration(Phase::Decode, 0);
    p->routed(ahead(0, {0}, {1, 3}, 2));
  }
  EXPECT_EQ(a.reuse_probability({1, 1}), b.reuse_probability({1, 1}));
  EXPECT_EQ(a.reuse_probability({2, 3}), b.reuse_probability({2, 3}));
  std::string v1 = saved.str();
  v1[7] = '1';
  // Version 3's tail goes too: the similarity table, the (empty) request store, the
  // trajectory table, the (empty) paths and the ring's slot, the finished requests.
  v1.resize(v1.size() - 8 - 16 * AdaptivePolicy::kSimilarBuckets * AdaptivePolicy::kSimilarPriorBuckets - 8);
  v1.resize(v1.size() - 8 -
            16 * AdaptivePolicy::kMaxTrajectory * AdaptivePolicy::kSimilarBuckets * AdaptivePolicy::kSimilarPriorBuckets -
            8 - 8 - 8);
  v1.resize(v1.size() - 8 - 16 * AdaptivePolicy::kMaxLookahead * AdaptivePolicy::kShareBuckets * AdaptivePolicy::kPriorBuckets);
  std::stringstream old(v1);
  AdaptivePolicy c(g, o);
  c.load(old);
  c.begin_iteration(Phase::Decode, 0);
  c.routed(ahead(0, {0}, {1, 3}, 2));
  EXPECT_EQ(c.reuse_probability({1, 1}), c.table_probability({1, 1})) << "an empty lookahead cell keeps the table's p";
  std::string cut = saved.str();
  cut.resize(cut.size() - 16);
  std::stringstream truncated(cut);
  EXPECT_THROW(AdaptivePolicy(g).load(truncated), InputError);
}

}  // namespace
}  // namespace moeflow

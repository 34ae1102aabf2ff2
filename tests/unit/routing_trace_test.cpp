// Routing traces: the recorder's lines read back exactly, the reader accepts what real
// recorders produce (null rows, missing prefill, no probabilities) and names what is
// wrong in a bad line, and trace statistics match a hand-made case.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "input_error_of.h"
#include "engine/generator.h"
#include "engine/trace_recorder.h"
#include "engine/transformer.h"
#include "base/error.h"
#include "format/routing_trace.h"
#include "kernels/cpu/thread_pool.h"
#include "model/model_weights.h"
#include "format/trace.h"
#include "sim/trace_stats.h"
#include "greedy_run.h"
#include "test_paths.h"

namespace moeflow {
namespace {

std::string write_lines(const std::vector<std::string>& lines) {
  const std::string p = moeflow::testing::scratch_path("trace") + ".jsonl";
  std::ofstream f(p);
  for (const auto& l : lines) f << l << "\n";
  return p;
}

std::string error_of(const std::string& line) { return testing::input_error_of([&] { parse_trace_line(line, "t.jsonl:7"); }); }

TEST(RoutingTrace, RecorderWritesOneLinePerIterationAndLayerThatReadsBack) {
  auto model = Model::load(moeflow::testing::fixture_path("qwen3moe-f32.gguf"));
  const std::string path = moeflow::testing::scratch_path("rec") + ".jsonl";
  {
    TraceRecorder rec(path, "fixture");
    rec.begin_request(3, "code");
    moeflow::testing::generate_greedy(*model, rec, 3, {1, 2, 3, 4, 5}, 4);
    EXPECT_EQ(rec.lines_written(), 4 * model->config().n_layer);  // prefill + 3 decode steps
  }
  const Trace t = load_trace(path);
  ASSERT_EQ(t.requests.size(), 1u);
  EXPECT_EQ(t.requests[0].id, 3);
  EXPECT_EQ(t.requests[0].task, "code");
  ASSERT_EQ(t.requests[0].iterations.size(), 4u);
  EXPECT_TRUE(t.requests[0].iterations[0].prefill);
  EXPECT_EQ(t.requests[0].iterations[0].tokens, (std::vector<int32_t>{1, 2, 3, 4, 5}));
  EXPECT_FALSE(t.requests[0].iterations[1].prefill);
  EXPECT_EQ(t.n_layer, model->config().n_layer);
  EXPECT_TRUE(t.has_probs);
  const TraceRecord& r = t.requests[0].iterations[0].layers[0];
  ASSERT_EQ(r.experts.size(), 5u);
  ASSERT_EQ(r.probs[0].size(), static_cast<size_t>(model->config().n_expert));
  // The chosen experts are the most probable ones, and the weights are renormalised.
  float best = 0;
  for (float p : r.probs[0]) best = std::max(best, p);
  EXPECT_NEAR(r.probs[0][static_cast<size_t>(r.experts[0][0])], best, 1e-5);
  float wsum = 0;
  for (float w : r.weights[0]) wsum += w;
  EXPECT_NEAR(wsum, 1.0f, 1e-4);
  // format -> parse is exact.
  const TraceRecord again = parse_trace_line(format_trace_line(r), "x");
  EXPECT_EQ(again.experts, r.experts);
  EXPECT_EQ(again.weights, r.weights);
  EXPECT_EQ(again.probs, r.probs);
  std::filesystem::remove(path);
}

TEST(RoutingTrace, NullRowsMissingPrefillAndNoProbsAreAccepted) {
  const std::string p = write_lines({
      R"({"model":"m","request":1,"num_experts":4,"top_k":2,"iter":1,"phase":"decode","layer":0,"experts":[[0,1]],"weights":[[0.6,0.4]],"probs":null})",
      R"({"model":"m","request":1,"num_experts":4,"top_k":2,"iter":1,"phase":"decode","layer":1,"experts":[null],"weights":[null],"probs":null})",
      R"({"model":"m","request":1,"num_experts":4,"top_k":2,"iter":2,"phase":"decode","layer":0,"experts":[[2,3]],"weights":null,"probs":null})",
      ""});
  const Trace t = load_trace(p);
  EXPECT_EQ(t.n_layer, 2);
  EXPECT_EQ(t.dropped_rows, 1);
  EXPECT_FALSE(t.has_probs);
  ASSERT_EQ(t.requests.size(), 1u);
  ASSERT_EQ(t.requests[0].iterations.size(), 2u);
  EXPECT_EQ(t.requests[0].iterations[0].iter, 1);
  EXPECT_TRUE(t.requests[0].iterations[0].layers[1].experts[0].empty());
  EXPECT_TRUE(t.requests[0].iterations[1].layers[1].experts.empty());  // layer 1 not recorded at iter 2
  std::filesystem::remove(p);
}

TEST(RoutingTrace, BadLinesNameTheFieldAndTheLine) {
  const std::string ok = R"("request":0,"iter":0,"phase":"decode","layer":0,"num_experts":4,"top_k":2)";
  EXPECT_NE(error_of("{not json").find("t.jsonl:7: not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(R"({"iter":0,"phase":"decode","layer":0,"num_experts":4,"top_k":2,"experts":[[0,1]]})")
                .find("missing field \"request\""),
            std::string::npos);
  EXPECT_NE(error_of("{" + ok + R"(,"experts":[[0,9]]})").find("experts[0][1] = 9"), std::string::npos);
  EXPECT_NE(error_of("{" + ok + R"(,"experts":[[0]]})").find("has 1 ids, top_k is 2"), std::string::npos);
  EXPECT_NE(error_of("{" + ok + R"(,"experts":[[0,1]],"weights":[[0.5,0.5],[1,0]]})").find("\"weights\" has 2 rows"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"request":0,"iter":0,"phase":"warmup","layer":0,"num_experts":4,"top_k":2,"experts":[]})")
                .find("\"phase\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"request":0,"iter":0,"phase":"decode","layer":0,"num_experts":4,"top_k":5,"experts":[]})")
                .find("\"top_k\" = 5"),
            std::string::npos);
  EXPECT_NE(error_of("{" + ok + "}").find("\"experts\" is missing"), std::string::npos);
}

TEST(TraceStats, HandMadeTrace) {
  // Two layers, 4 experts, top-1. Request "a": tokens go 0->1, 0->1; request "b": 2->3.
  std::vector<std::string> lines;
  auto line = [](int req, const char* task, int iter, int layer, int e) {
    return std::string(R"({"request":)") + std::to_string(req) + R"(,"task":")" + task + R"(","iter":)" +
           std::to_string(iter) + R"(,"phase":")" + (iter == 0 ? "prefill" : "decode") + R"(","layer":)" +
           std::to_string(layer) + R"(,"num_experts":4,"top_k":1,"experts":[[)" + std::to_string(e) + "]]}";
  };
  for (int it = 0; it < 2; ++it) {
    lines.push_back(line(0, "a", it, 0, 0));
    lines.push_back(line(0, "a", it, 1, 1));
  }
  for (int it = 0; it < 2; ++it) {
    lines.push_back(line(1, "b", it, 0, 2));
    lines.push_back(line(1, "b", it, 1, 3));
  }
  const std::string p = write_lines(lines);
  const TraceStats s = compute_trace_stats(load_trace(p));
  EXPECT_DOUBLE_EQ(s.popularity[0][0], 0.5);
  EXPECT_DOUBLE_EQ(s.popularity[0][2], 0.5);
  EXPECT_DOUBLE_EQ(s.popularity[1][1], 0.5);
  EXPECT_DOUBLE_EQ(s.affinity_top1_hit, 1.0);  // 0 is always followed by 1, 2 by 3
  EXPECT_DOUBLE_EQ(s.affinity_chance, 0.25);
  EXPECT_DOUBLE_EQ(s.temporal_overlap, 0.0);  // one decode step per request: no pairs
  ASSERT_EQ(s.working_sets.size(), 2u);
  EXPECT_DOUBLE_EQ(s.working_sets[0].prefill_fraction, 2.0 / 8.0);
  EXPECT_DOUBLE_EQ(s.task_divergence.at("a"), 0.5);  // disjoint halves of the popularity
  EXPECT_DOUBLE_EQ(s.task_popularity.at("b")[1][3], 1.0);
  std::filesystem::remove(p);
}

TEST(RoutingTrace, ReadsTheSharedRealTracesAsIs) {
  const std::string dir = std::string(MOEFLOW_FIXTURES) + "/../../../shared/traces";
  const std::string mixtral = dir + "/mixtral-8x7b-instruct-v0.1-fp8_humaneval.jsonl";
  if (!std::filesystem::exists(mixtral)) GTEST_SKIP() << "no shared/ beside the checkout";
  const Trace t = load_trace(mixtral);
  EXPECT_EQ(t.n_layer, 32);
  EXPECT_EQ(t.n_expert, 8);
  EXPECT_EQ(t.requests.size(), 2u);
  EXPECT_GT(t.dropped_rows, 0);
  EXPECT_FALSE(t.has_probs);
}

}  // namespace
}  // namespace moeflow

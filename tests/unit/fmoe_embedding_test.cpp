// fMoE's per-iteration semantic key (Eq. 4) end to end: the trace field's reader
// (hand-written lines, good and bad), the projection that keeps traces small, the
// engine's pooled embedding rows as the recorder writes them (against rows read from
// the model file), the simulator's replay of the field to a policy, and fmoe-async's
// matcher on the simulated clock (no cost: the synchronous decisions).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "input_error_of.h"
#include "base/error.h"
#include "engine/embedding_projection.h"
#include "engine/generator.h"
#include "engine/offloaded_experts.h"
#include "engine/trace_recorder.h"
#include "engine/transformer.h"
#include "experts/expert_cache.h"
#include "experts/expert_store.h"
#include "experts/file_transport.h"
#include "format/routing_trace.h"
#include "format/trace.h"
#include "kernels/cpu/thread_pool.h"
#include "model/model_weights.h"
#include "policy/fmoe.h"
#include "sim/simulator.h"
#include "tensor/dtype.h"
#include "greedy_run.h"
#include "test_paths.h"

namespace moeflow {
namespace {

std::string error_of(const std::string& line) { return testing::input_error_of([&] { parse_trace_line(line, "t.jsonl:9"); }); }

const std::string kHead = R"({"request":0,"iter":0,"phase":"decode","layer":0,"num_experts":4,"top_k":1,"experts":[[2]],)";

TEST(FmoeEmbeddingTrace, FieldReadsBackAndBadOnesAreNamedWithTheLine) {
  const TraceRecord r = parse_trace_line(kHead + R"("embedding_dim":3,"embedding":[0.5,-0.25,1e-3]})", "x");
  EXPECT_EQ(r.embedding, (std::vector<float>{0.5f, -0.25f, 1e-3f}));
  const TraceRecord again = parse_trace_line(format_trace_line(r), "y");
  EXPECT_EQ(again.embedding, r.embedding);
  EXPECT_NE(format_trace_line(r).find(R"("embedding_dim":3)"), std::string::npos);
  // Older traces: none, and none written back.
  const TraceRecord old = parse_trace_line(kHead.substr(0, kHead.size() - 1) + "}", "x");
  EXPECT_TRUE(old.embedding.empty());
  EXPECT_EQ(format_trace_line(old).find("embedding"), std::string::npos);

  auto err = [&](const std::string& fields) { return error_of(kHead + fields + "}"); };
  EXPECT_NE(err(R"("embedding_dim":3,"embedding":[1,2])").find("t.jsonl:9: \"embedding\" has 2 numbers, \"embedding_dim\" is 3"),
            std::string::npos)
      << err(R"("embedding_dim":3,"embedding":[1,2])");
  EXPECT_NE(err(R"("embedding_dim":2,"embedding":[1,"a"])").find("t.jsonl:9: embedding[1] is not a number"),
            std::string::npos);
  EXPECT_NE(err(R"("embedding_dim":2,"embedding":[1,1e39])").find("t.jsonl:9: embedding[1] = 1e+39 is not a finite float"),
            std::string::npos)
      << err(R"("embedding_dim":2,"embedding":[1,1e39])");
  EXPECT_NE(err(R"("embedding":[1])").find("t.jsonl:9: field \"embedding\" is given without \"embedding_dim\""),
            std::string::npos);
  EXPECT_NE(err(R"("embedding_dim":1)").find("\"embedding_dim\" is given without \"embedding\""), std::string::npos);
  EXPECT_NE(err(R"("embedding_dim":0,"embedding":[])").find("field \"embedding_dim\" = 0 is outside [1, 65536]"),
            std::string::npos);
  EXPECT_NE(err(R"("embedding_dim":1,"embedding":{"a":1})").find("\"embedding\" must be an array of numbers"),
            std::string::npos);
  EXPECT_NE(err(R"("embedding_dim":1.5,"embedding":[1])").find("\"embedding_dim\" must be an integer"), std::string::npos);

  // One trace, one length.
  const std::string p = moeflow::testing::scratch_path("emb") + ".jsonl";
  {
    std::ofstream f(p);
    f << kHead << R"("embedding_dim":2,"embedding":[1,2]})" << "\n";
    f << R"({"request":0,"iter":1,"phase":"decode","layer":0,"num_experts":4,"top_k":1,"experts":[[1]],"embedding_dim":3,"embedding":[1,2,3]})"
      << "\n";
  }
  const std::string e = testing::input_error_of([&] { load_trace(p); });
  EXPECT_NE(e.find("record of request 0, iter 1, layer 0: an embedding of 3 numbers, the first record's has 2"),
            std::string::npos)
      << e;
}

// y_i = Σ_j s(i, j) x_j / sqrt(N), by hand from the signs; a row no wider than N is
// kept; the signs are balanced, and random directions keep their cosines roughly.
TEST(EmbeddingProjection, ByHandAndKeepsCosines) {
  const std::vector<float> x = {1, 2, 3};
  const std::vector<float> y = project_embedding(x, 2);
  ASSERT_EQ(y.size(), 2u);
  for (int64_t i = 0; i < 2; ++i)
    EXPECT_FLOAT_EQ(y[static_cast<size_t>(i)],
                    static_cast<float>((projection_sign(i, 0) * 1 + projection_sign(i, 1) * 2 + projection_sign(i, 2) * 3) /
                                       std::sqrt(2.0)));
  EXPECT_EQ(project_embedding(x, 3), x);
  EXPECT_EQ(project_embedding(x, 8), x);
  int plus = 0;
  for (int64_t i = 0; i < 64; ++i)
    for (int64_t j = 0; j < 256; ++j) plus += projection_sign(i, j) > 0;
  EXPECT_NEAR(plus / (64.0 * 256.0), 0.5, 0.02);
  // Two 256-wide vectors at cosine 0.6: projected to 64, still about 0.6.
  std::vector<float> a(256), b(256);
  for (size_t j = 0; j < 256; ++j) {
    const float u = std::sin(0.37f * static_cast<float>(j) + 1), v = std::cos(1.91f * static_cast<float>(j));
    a[j] = u;
    b[j] = 0.6f * u + 0.8f * v;
  }
  auto cos = [](const std::vector<float>& p, const std::vector<float>& q) {
    double d = 0, np = 0, nq = 0;
    for (size_t i = 0; i < p.size(); ++i) d += p[i] * q[i], np += p[i] * p[i], nq += q[i] * q[i];
    return d / std::sqrt(np * nq);
  };
  const double full = cos(a, b);
  EXPECT_NEAR(cos(project_embedding(a, 64), project_embedding(b, 64)), full, 0.15) << "full-width cosine " << full;
}

// The recorder writes each iteration's embedding on its first layer's line: the mean
// of the model's embedding rows of the prompt for the prefill, the row of the fed
// token for each decode step (read here straight from the model's tok_embd), at the
// recorder's 5 decimals; projected, the projection of that.
TEST(FmoeEmbeddingRecorder, RecordsTheMeanEmbeddingRowOfEachIteration) {
  auto model = Model::load(moeflow::testing::fixture_path("qwen3moe-f32.gguf"));
  const int64_t D = model->config().n_embd;
  const MatrixRef& emb = model->weights().tok_embd;
  auto row = [&](int32_t t) {
    std::vector<float> r(static_cast<size_t>(D));
    dequantize_row(emb.dtype, emb.data + emb.row_bytes() * static_cast<size_t>(t), r.data(), D);
    return r;
  };
  for (const int64_t dim : {D, int64_t{4}}) {
    const std::string path = moeflow::testing::scratch_path("embrec") + ".jsonl";
    {
      TraceRecorder rec(path, "fixture");
      rec.set_embedding_dim(dim);
      rec.begin_request(0, "");
      moeflow::testing::generate_greedy(*model, rec, 0, {1, 2, 3, 4, 5}, 3);
    }
    const Trace t = load_trace(path);
    EXPECT_EQ(t.embedding_dim, dim);
    const auto& its = t.requests.at(0).iterations;
    ASSERT_EQ(its.size(), 3u);
    for (const TraceIteration& it : its) {
      std::vector<float> want(static_cast<size_t>(D), 0.0f);
      for (int32_t tok : it.tokens) {
        const std::vector<float> r = row(tok);
        for (int64_t j = 0; j < D; ++j) want[static_cast<size_t>(j)] += r[static_cast<size_t>(j)] / static_cast<float>(it.tokens.size());
      }
      want = project_embedding(want, dim);
      ASSERT_EQ(it.embedding.size(), static_cast<size_t>(dim)) << "iter " << it.iter;
      for (size_t j = 0; j < want.size(); ++j) EXPECT_NEAR(it.embedding[j], want[j], 6e-6) << "iter " << it.iter << ", " << j;
      EXPECT_FALSE(it.layers[0].embedding.empty());
      for (size_t l = 1; l < it.layers.size(); ++l) EXPECT_TRUE(it.layers[l].embedding.empty()) << "first layer only";
    }
    EXPECT_EQ(its[0].tokens.size(), 5u) << "the prefill's five rows pooled";
  }
}

// In the engine fMoE gets the keys from the forward pass through the offloaded-expert
// source: its first map (the prefill) is keyed by the prompt's mean embedding row,
// each decode iteration's by the row of the token it fed.
TEST(FmoeEmbeddingEngine, TheOffloadedEngineKeysEachIterationsMap) {
  auto model = Model::load(moeflow::testing::fixture_path("mixtral-f32.gguf"));
  const std::vector<int32_t> prompt = {1, 17, 42, 5, 99, 7, 250, 3};
  ThreadPool pool(2);
  Transformer tf(*model, &pool, 64);
  ExpertStore store(*model);
  const ExpertGeometry& g = store.geometry();
  FmoePolicy pol(g);  // synchronous: the store is complete when the run ends
  FileTransport transport(store, 2);
  ExpertCache cache(g, g.min_budget(), transport, pol);
  OffloadedExperts src(model->config(), store, cache, OnMiss::Load);
  tf.set_expert_source(&src);
  src.begin_request(RequestInfo{0, prompt, {}, ""});
  GenerateOptions opt;
  opt.n_predict = 4;
  opt.stop_at_eog = false;
  opt.sampler.temperature = 0;
  const std::vector<int32_t> out = generate(tf, prompt, opt, nullptr, nullptr).generated;
  src.end_request();
  tf.set_expert_source(nullptr);
  ASSERT_EQ(out.size(), 4u);
  ASSERT_EQ(pol.store().size(), 4u) << "the prefill and three decode steps (the last token is not fed)";
  EXPECT_EQ(pol.key_counts().embedding, 4u);
  EXPECT_EQ(pol.store().at(0).sem, prompt_embedding(*model, prompt));
  for (size_t i = 1; i < 4; ++i) EXPECT_EQ(pol.store().at(i).sem, prompt_embedding(*model, {out[i - 1]})) << "decode " << i;
}

// simulate() owns and ends it: it reports the routings to `seen` and, when given
// `events`, the order of its calls there.
struct Spy final : public ExpertPolicy {
  explicit Spy(std::vector<LayerRouting>& s, std::vector<std::string>* e = nullptr) : seen(s), events(e) {}
  std::vector<LayerRouting>& seen;
  std::vector<std::string>* events;
  std::string name() const override { return "spy"; }
  bool prefetches() const override { return events != nullptr; }
  bool wants_embedding() const override { return true; }
  void step_embeddings(const std::vector<LayerRouting::StepEmbedding>& e) override {
    if (events) events->push_back("embeddings " + std::to_string(e.size()));
  }
  void routed(const LayerRouting& r) override {
    seen.push_back(r);
    if (events) events->push_back("routed " + std::to_string(r.layer));
  }
  void plan_prefetch(int32_t layer_now, PrefetchPlan&) override {
    if (events) events->push_back("plan " + std::to_string(layer_now));
  }
  size_t victim(const CacheView&, const ExpertKey&) override { return 0; }
};

// Each step's embeddings reach the policy before its first layer, and its plan for
// the step's start is asked right after (fMoE's first d layers, §3.2 step 1).
void expect_embeddings_before_each_first_layer(const std::vector<std::string>& events, const std::string& embeddings) {
  int steps = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i] != "routed 0") continue;
    ++steps;
    ASSERT_GE(i, 2u);
    EXPECT_EQ(events[i - 2], embeddings) << "event " << i;
    EXPECT_EQ(events[i - 1], "plan -1") << "event " << i;
  }
  EXPECT_GE(steps, 2);
  EXPECT_EQ(std::count(events.begin(), events.end(), embeddings), steps);
}

TEST(FmoeEmbeddingEngine, TheEmbeddingsReachThePolicyBeforeTheFirstLayer) {
  auto model = Model::load(moeflow::testing::fixture_path("mixtral-f32.gguf"));
  ThreadPool pool(2);
  Transformer tf(*model, &pool, 64);
  ExpertStore store(*model);
  std::vector<LayerRouting> seen;
  std::vector<std::string> events;
  Spy pol(seen, &events);
  FileTransport transport(store, 2);
  ExpertCache cache(store.geometry(), store.geometry().min_budget(), transport, pol);
  OffloadedExperts src(model->config(), store, cache, OnMiss::Load);
  tf.set_expert_source(&src);
  GenerateOptions opt;
  opt.n_predict = 3;
  opt.stop_at_eog = false;
  opt.sampler.temperature = 0;
  generate(tf, {1, 17, 42}, opt, nullptr, nullptr);
  src.end_request();
  tf.set_expert_source(nullptr);
  expect_embeddings_before_each_first_layer(events, "embeddings 1");
}

ModelProfile tiny_profile() {
  ModelProfile m;
  m.name = "tiny";
  m.n_layer = 2;
  m.n_expert = 4;
  m.top_k = 1;
  m.expert_bytes = 100;
  return m;
}

// The simulator hands each iteration's embedding to the policy before the step's first
// layer and with it, one per request of the step (in the step's order), as the engine
// does.
TEST(FmoeEmbeddingSimulator, ReplaysTheFieldWithTheFirstLayer) {
  std::vector<TraceRecord> recs;
  for (int64_t q = 0; q < 2; ++q)
    for (int32_t l = 0; l < 2; ++l) {
      TraceRecord r;
      r.request = 10 + q;
      r.layer = l;
      r.num_experts = 4;
      r.top_k = 1;
      r.experts = {{static_cast<int32_t>(q + l)}};
      if (l == 0) r.embedding = {static_cast<float>(q), 1};
      recs.push_back(r);
    }
  HardwareProfile hw;
  hw.link = {100.0, 0.0, 1};
  SimOptions o;
  o.batch = 2;
  std::vector<LayerRouting> seen;
  std::vector<std::string> events;
  const SimResult res =
      simulate(group_trace(recs, "hand"), tiny_profile(), hw, o, std::make_unique<Spy>(seen, &events));
  EXPECT_EQ(events, (std::vector<std::string>{"embeddings 2", "plan -1", "routed 0", "plan 0", "routed 1", "plan 1"}));
  ASSERT_EQ(seen.size(), 2u);
  ASSERT_EQ(seen[0].embeddings.size(), 2u);
  EXPECT_EQ(seen[0].embeddings[0].request, 10);
  EXPECT_EQ(seen[0].embeddings[0].values, (std::vector<float>{0, 1}));
  EXPECT_EQ(seen[0].embeddings[1].request, 11);
  EXPECT_EQ(seen[0].embeddings[1].values, (std::vector<float>{1, 1}));
  EXPECT_TRUE(seen[1].embeddings.empty());
  for (const std::string& n : res.notes) EXPECT_EQ(n.find("embedding"), std::string::npos) << n;

  for (TraceRecord& r : recs) r.embedding.clear();
  std::vector<LayerRouting> seen2;
  const SimResult res2 = simulate(group_trace(recs, "old"), tiny_profile(), hw, o, std::make_unique<Spy>(seen2));
  EXPECT_TRUE(seen2.at(0).embeddings.empty());
  int notes = 0;
  for (const std::string& n : res2.notes) notes += n.find("the trace carries none") != std::string::npos;
  EXPECT_EQ(notes, 1);
}

// On the built-in trace (first 12 requests): fmoe-async with a matcher that costs
// nothing decides as fmoe; with the measured costs some plans use a late match and
// the result says how many.
TEST(FmoeEmbeddingSimulator, AsyncMatcherWithoutCostIsTheSynchronousPolicy) {
  const Trace all = load_trace(std::string(MOEFLOW_SOURCE_DIR_FOR_TESTS) + "/models/traces/default-heldout.jsonl");
  ASSERT_GT(all.embedding_dim, 0) << "the built-in trace carries embeddings";
  const Trace t = slice_requests(all, 0, 12);
  ModelProfile m = load_model_profile("moeflow-default");
  const HardwareProfile hw = load_hardware_profile("nvme");
  SimOptions o;
  o.warmup_requests = 8;
  o.policy = "fmoe";
  const SimResult sync = simulate(t, m, hw, o);
  o.policy = "fmoe-async";
  const SimResult timed = simulate(t, m, hw, o);
  ModelProfile free = m;
  free.fmoe_semantic_seconds = free.fmoe_trajectory_seconds = free.fmoe_insert_seconds = 0;
  const SimResult zero = simulate(t, free, hw, o);
  EXPECT_EQ(zero.counters.hits, sync.counters.hits);
  EXPECT_EQ(zero.counters.misses, sync.counters.misses);
  EXPECT_DOUBLE_EQ(zero.stall_seconds, sync.stall_seconds);
  bool late = false, keyed = false;
  for (const std::string& n : timed.notes) {
    late = late || n.find("plans used a late match") != std::string::npos;
    keyed = keyed || n.find("embedding-layer output for 100%") != std::string::npos;
  }
  EXPECT_TRUE(late);
  EXPECT_TRUE(keyed);
  std::printf("fmoe %.1f%%, fmoe-async %.1f%% (no cost: %.1f%%) on 4 requests of the built-in trace\n", 100 * sync.hit_rate,
              100 * timed.hit_rate, 100 * zero.hit_rate);
}

}  // namespace
}  // namespace moeflow

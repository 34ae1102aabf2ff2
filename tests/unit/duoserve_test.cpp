// DuoServe-MoE (policy/duoserve.h): the ExpertMLP's gradients and learning, the
// popularity/affinity statistics, the policy's prefetch decisions, its state file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "policy/duoserve.h"
#include "policy/policy_factory.h"

using namespace moeflow;

namespace {

// Small widths keep the tests fast; the policy's default is the paper's 2048..64.
DuoserveOptions small_options() {
  DuoserveOptions o;
  o.mlp.widths = {64, 32};
  o.mlp.lr = 1e-2f;
  o.mlp.batch = 32;
  o.epochs = 20;
  return o;
}

// The mapping every test model follows: expert e at layer l -> (3e + 1) mod M at l+1.
int32_t succ(int32_t e, int32_t m) { return (3 * e + 1) % m; }

ActivationPath mapped_path(int32_t a, int32_t b, int32_t n_layer, int32_t m) {
  ActivationPath p;
  std::vector<int32_t> cur = {a, b};
  for (int32_t l = 0; l < n_layer; ++l) {
    p.push_back(cur);
    cur = {succ(cur[0], m), succ(cur[1], m)};
  }
  return p;
}

// One iteration through the policy: rows[l] = experts of every token at layer l.
void feed(ExpertPolicy& p, Phase ph, const std::vector<std::vector<int32_t>>& rows, int32_t k, int32_t m,
          std::vector<PrefetchPlan>* plans = nullptr) {
  p.begin_iteration(ph, 0);
  for (size_t l = 0; l < rows.size(); ++l) {
    LayerRouting r;
    r.layer = static_cast<int64_t>(l);
    r.n_expert = m;
    r.top_k = k;
    r.experts = rows[l];
    r.n_tok = static_cast<int64_t>(rows[l].size()) / k;
    p.routed(r);
    PrefetchPlan plan;
    p.plan_prefetch(static_cast<int32_t>(l), plan);
    if (plans) plans->push_back(plan);
  }
  p.end_iteration();
}

void learn_mapping(ExpertPolicy& p, int32_t n_layer, int32_t m, int iters) {
  p.begin_request({});
  for (int i = 0; i < iters; ++i) {
    const int32_t a = i % m, b = (a + 1 + (i / m) % (m - 1)) % m;
    const ActivationPath path = mapped_path(a, b, n_layer, m);
    feed(p, Phase::Decode, path, 2, m);
  }
  p.end_request(0);
}

std::vector<int32_t> keys_of(const PrefetchPlan& plan, int32_t* layer) {
  std::vector<int32_t> ids;
  for (const PrefetchRequest& r : plan) {
    ids.push_back(r.key.expert);
    *layer = r.key.layer;
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace

TEST(ExpertMlp, GradientMatchesFiniteDifferences) {
  MlpConfig cfg;
  cfg.widths = {6, 4};
  cfg.dropout = 0;
  ExpertMlp net(5, 3, cfg);
  std::vector<float> x(4 * 5), y(4 * 3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(1.7f * static_cast<float>(i) + 0.3f);
  for (size_t i = 0; i < y.size(); ++i) y[i] = (i * 7 % 3 == 0) ? 1.0f : 0.0f;
  ASSERT_EQ(net.n_params(), 5u * 6 + 2 * 6 + 6 * 4 + 2 * 4 + 4 * 3 + 3);  // W, BN gamma/beta, ..., output W and bias
  net.loss_and_grad(x.data(), y.data(), 4, false);
  std::vector<float> analytic(net.n_params());
  int nonzero = 0;
  for (size_t i = 0; i < analytic.size(); ++i) {
    analytic[i] = net.grad(i);
    nonzero += std::fabs(analytic[i]) > 1e-4f;
  }
  EXPECT_GT(nonzero, 60);
  const float eps = 1e-3f;
  for (size_t i = 0; i < net.n_params(); ++i) {
    const float keep = net.param(i);
    net.param(i) = keep + eps;
    const double up = net.loss_and_grad(x.data(), y.data(), 4, false);
    net.param(i) = keep - eps;
    const double down = net.loss_and_grad(x.data(), y.data(), 4, false);
    net.param(i) = keep;
    const double numeric = (up - down) / (2.0 * eps);
    EXPECT_NEAR(analytic[i], numeric, 1e-3 + 0.05 * std::fabs(numeric)) << "parameter " << i;
  }
}

TEST(ExpertMlp, LearnsANextLayerMappingInAFewHundredSteps) {
  const int32_t m = 8;
  MlpConfig cfg;
  cfg.widths = {32, 16};
  cfg.lr = 1e-2f;
  cfg.batch = 32;
  ExpertMlp net(m, m, cfg);
  std::vector<float> x, y;
  for (int i = 0; i < 256; ++i) {
    const int32_t e = i % m;
    for (int32_t j = 0; j < m; ++j) {
      x.push_back(j == e ? 1.0f : 0.0f);
      y.push_back(j == succ(e, m) ? 1.0f : 0.0f);
    }
  }
  net.fit(x, y, 256, 25);  // 8 batches x 25 epochs = 200 steps
  const std::vector<float> out = net.predict(x.data(), 256);
  int right = 0;
  for (int i = 0; i < 256; ++i) {
    const float* o = &out[static_cast<size_t>(i * m)];
    right += std::max_element(o, o + m) - o == succ(i % m, m);
  }
  EXPECT_GT(right, 0.95 * 256);
}

TEST(DuoserveStats, PopularityAndAffinityOfAHandMadeTrace) {
  // Two tokens of a 2-layer, 4-expert top-2 model, and one with a dropped row.
  Trace t;
  t.n_layer = 2;
  t.n_expert = 4;
  t.top_k = 2;
  TraceRequest rq;
  TraceIteration it;
  it.layers.resize(2);
  it.layers[0].experts = {{0, 1}, {0, 2}, {3, 1}};
  it.layers[1].experts = {{2, 3}, {2, 1}};  // the third token's row was dropped
  rq.iterations.push_back(it);
  t.requests.push_back(rq);
  const std::vector<ActivationPath> paths = activation_paths(t, true, true);
  ASSERT_EQ(paths.size(), 3u);
  EXPECT_TRUE(paths[2][1].empty());
  DuoserveStats s(2, 4);
  for (const ActivationPath& p : paths) s.add(p);
  EXPECT_EQ(s.popularity(0), (std::vector<float>{2 / 6.f, 2 / 6.f, 1 / 6.f, 1 / 6.f}));  // Eq. 2
  EXPECT_EQ(s.popularity(1), (std::vector<float>{0, 0.25f, 0.5f, 0.25f}));
  // Eq. 3: expert 0 at layer 0 was followed by {2,3} and {2,1}.
  EXPECT_EQ(s.affinity(0, {0}), (std::vector<float>{0, 0.25f, 0.5f, 0.25f}));
  EXPECT_EQ(s.affinity(0, {1}), (std::vector<float>{0, 0, 0.5f, 0.5f}));
  EXPECT_EQ(s.affinity(0, {0, 1}), (std::vector<float>{0, 0.125f, 0.5f, 0.375f}));
  EXPECT_EQ(s.affinity(0, {3}), (std::vector<float>(4, 0.25f)));  // never followed: uniform
  // The state vector: h (layers below the target), p_target, a_{target-1,target}.
  std::vector<float> st(static_cast<size_t>(state_size(2, 4)));
  build_state(s, paths[0], 1, st.data());
  EXPECT_EQ(st, (std::vector<float>{1, 1, 0, 0, 0, 0, 0, 0, 0, 0.25f, 0.5f, 0.25f, 0, 0.125f, 0.5f, 0.375f}));
}

TEST(Duoserve, DecodePrefetchesThePredictedExpertsOfTheNextLayer) {
  const int32_t nl = 4, m = 8;
  const ExpertGeometry g = ExpertGeometry::uniform(nl, m, 2, 100);
  for (bool train : {false, true}) {
    auto p = make_duoserve_policy(g, small_options());
    learn_mapping(*p, nl, m, 200);
    if (train) p->finish_learning();  // else: popularity/affinity fallback while learning
    std::vector<PrefetchPlan> plans;
    p->begin_request({});
    feed(*p, Phase::Decode, mapped_path(5, 2, nl, m), 2, m, &plans);
    ASSERT_EQ(plans.size(), static_cast<size_t>(nl));
    std::vector<int32_t> cur = {5, 2};
    for (int32_t l = 0; l + 1 < nl; ++l) {
      cur = {succ(cur[0], m), succ(cur[1], m)};
      std::vector<int32_t> want = cur;
      std::sort(want.begin(), want.end());
      int32_t layer = -1;
      EXPECT_EQ(keys_of(plans[static_cast<size_t>(l)], &layer), want) << "layer " << l << (train ? " (MLP)" : " (fallback)");
      EXPECT_EQ(layer, l + 1);
    }
    EXPECT_TRUE(plans.back().empty()) << "the last layer prefetches nothing (layer 0 loads after its gate)";
  }
}

TEST(Duoserve, PrefillStreamsEveryLayerInsteadOfPrefetching) {
  const int32_t nl = 3, m = 8;
  const ExpertGeometry g = ExpertGeometry::uniform(nl, m, 2, 100);
  auto p = make_duoserve_policy(g, small_options());
  learn_mapping(*p, nl, m, 100);  // affinity: e at l -> succ(e) at l+1
  p->begin_request({});
  p->begin_iteration(Phase::Prefill, 0);
  std::vector<int32_t> order;
  // Before layer 0's router: every expert, by popularity (the learnt paths start
  // everywhere, so every expert is in the order).
  ASSERT_TRUE(p->stream_order(0, order));
  EXPECT_EQ(order.size(), static_cast<size_t>(m));
  // Layer 0 routes two tokens: {1, 4} and {1, 6}.
  LayerRouting r;
  r.layer = 0;
  r.n_expert = m;
  r.top_k = 2;
  r.n_tok = 2;
  r.experts = {1, 4, 1, 6};
  p->routed(r);
  PrefetchPlan plan;
  p->plan_prefetch(0, plan);
  EXPECT_TRUE(plan.empty()) << "prefill loads through the two-slot pipeline, not by prefetch";
  // The routed layer streams the expert with the most tokens first, then the others
  // it needs, then the rest.
  ASSERT_TRUE(p->stream_order(0, order));
  ASSERT_EQ(order.size(), static_cast<size_t>(m));
  EXPECT_EQ(order[0], 1);
  EXPECT_EQ((std::vector<int32_t>{std::min(order[1], order[2]), std::max(order[1], order[2])}), (std::vector<int32_t>{4, 6}));
  // Layer 1, before its router: by the tokens expected from the affinity of layer 0's
  // choices: succ(4) = 5 and succ(1) = 4 for the first token, succ(6) = 3 and 4 for
  // the second; 4 (both tokens) is the head the pipeline fetches.
  ASSERT_TRUE(p->stream_order(1, order));
  EXPECT_EQ(order[0], 4);
  EXPECT_EQ((std::vector<int32_t>{std::min(order[1], order[2]), std::max(order[1], order[2])}), (std::vector<int32_t>{3, 5}));
  p->end_iteration();
  // Decode does not stream: the predictor prefetches instead.
  p->begin_iteration(Phase::Decode, 1);
  EXPECT_FALSE(p->stream_order(0, order));
  EXPECT_FALSE(p->stream_order(1, order));
  p->end_iteration();
  // Other policies never stream.
  EXPECT_FALSE(make_policy("lru", g)->stream_order(0, order));
}

TEST(Duoserve, SaveLoadRoundTripsExactly) {
  const int32_t nl = 4, m = 8;
  const ExpertGeometry g = ExpertGeometry::uniform(nl, m, 2, 100);
  for (bool train : {false, true}) {
    auto p = make_duoserve_policy(g, small_options());
    learn_mapping(*p, nl, m, 60);
    if (train) p->finish_learning();
    std::ostringstream a;
    p->save(a);
    const std::string path = testing::TempDir() + "duoserve_state.bin";
    {
      std::ofstream f(path, std::ios::binary);
      f << a.str();
    }
    PolicyOptions po;
    po.state_path = path;
    auto q = make_policy("duoserve", g, po);
    std::ostringstream b;
    q->save(b);
    EXPECT_EQ(a.str(), b.str());
    for (auto [x, y] : {std::pair{0, 1}, {3, 6}, {7, 2}}) {
      std::vector<PrefetchPlan> pp, qp;
      feed(*p, Phase::Decode, mapped_path(x, y, nl, m), 2, m, &pp);
      feed(*q, Phase::Decode, mapped_path(x, y, nl, m), 2, m, &qp);
      ASSERT_EQ(pp.size(), qp.size());
      for (size_t l = 0; l < pp.size(); ++l) {
        ASSERT_EQ(pp[l].size(), qp[l].size());
        for (size_t i = 0; i < pp[l].size(); ++i) {
          EXPECT_EQ(pp[l][i].key, qp[l][i].key);
          EXPECT_EQ(pp[l][i].priority, qp[l][i].priority);
        }
      }
    }
    std::remove(path.c_str());
  }
}

TEST(Duoserve, BadStateIsRejected) {
  const ExpertGeometry g = ExpertGeometry::uniform(4, 8, 2, 100);
  auto p = make_duoserve_policy(g, small_options());
  learn_mapping(*p, 4, 8, 40);
  p->finish_learning();
  std::ostringstream good;
  p->save(good);
  const std::string s = good.str();
  auto rejects = [&](const std::string& bytes, const ExpertGeometry& geo) {
    auto q = make_duoserve_policy(geo, small_options());
    std::istringstream in(bytes);
    EXPECT_THROW(q->load(in), InputError);
  };
  rejects("not a state file at all", g);
  rejects(s.substr(0, s.size() / 2), g);  // truncated
  rejects(s + "x", g);                    // trailing bytes
  rejects(s, ExpertGeometry::uniform(4, 16, 2, 100));  // another model
  std::string flipped = s;
  flipped[8] = 7;  // top-k field
  rejects(flipped, g);
}

TEST(Duoserve, AccuracyCountsTable3Metrics) {
  const int32_t nl = 3, m = 8;
  DuoservePredictor pred(nl, m, 2, small_options());
  for (int i = 0; i < 40; ++i) pred.observe(mapped_path(i % m, (i + 3) % m, nl, m));
  Trace t;
  t.n_layer = nl;
  t.n_expert = m;
  t.top_k = 2;
  TraceRequest rq;
  for (const auto& [a, b] : std::vector<std::pair<int32_t, int32_t>>{{0, 3}, {1, 4}}) {
    TraceIteration it;
    const ActivationPath p = mapped_path(a, b, nl, m);
    for (int32_t l = 0; l < nl; ++l) {
      TraceRecord r;
      r.experts = {p[static_cast<size_t>(l)]};
      it.layers.push_back(r);
    }
    it.layers[2].experts[0] = {p[2][0], (p[2][1] + 1) % m};  // one of two right at layer 2
    rq.iterations.push_back(it);
  }
  t.requests.push_back(rq);
  const PredictorAccuracy acc = evaluate_predictor(pred, t);  // affinity fallback: exact here
  EXPECT_EQ(acc.samples, 4);
  EXPECT_EQ(acc.all_right, 2);
  EXPECT_EQ(acc.at_least_one, 4);
}

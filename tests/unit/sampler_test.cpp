#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <map>
#include <vector>

#include "base/error.h"
#include "engine/sampler.h"

namespace moeflow {

TEST(Sampler, GreedyPicksArgmaxWithTiesToLowerId) {
  std::vector<float> l = {0.1f, 2.0f, 2.0f, -1.0f};
  Sampler s(SamplerOptions{.temperature = 0.0f, .top_k = 40, .top_p = 0.95f, .seed = 1});
  EXPECT_EQ(s.sample(l.data(), 4), 1);
}

TEST(Sampler, SameSeedSameSequence) {
  std::vector<float> l = {1.0f, 1.1f, 0.9f, 1.05f, 0.2f};
  const SamplerOptions o{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 7};
  Sampler a(o), b(o);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a.sample(l.data(), 5), b.sample(l.data(), 5));
}

TEST(Sampler, TopKOneIsGreedy) {
  std::vector<float> l = {1.0f, 3.0f, 2.9f};
  Sampler s(SamplerOptions{.temperature = 5.0f, .top_k = 1, .top_p = 1.0f, .seed = 3});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(l.data(), 3), 1);
}

TEST(Sampler, TopPKeepsOnlyTheNucleus) {
  // p ~ {0.88, 0.12, 0.0...}: top_p 0.5 keeps only the first.
  std::vector<float> l = {4.0f, 2.0f, -10.0f, -10.0f};
  Sampler s(SamplerOptions{.temperature = 1.0f, .top_k = 0, .top_p = 0.5f, .seed = 3});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(l.data(), 4), 0);
}

TEST(Sampler, TemperatureSamplingFollowsTheDistribution) {
  std::vector<float> l = {0.0f, std::log(3.0f)};  // p = {0.25, 0.75}
  Sampler s(SamplerOptions{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .seed = 11});
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ones += s.sample(l.data(), 2);
  EXPECT_NEAR(static_cast<double>(ones) / n, 0.75, 0.02);
}

// The one-pass top-k selection keeps exactly the candidates (and order) a partial sort
// of the whole vocabulary by (logit desc, id asc) keeps, ties included: the sampled
// sequences of the same seed are identical.
TEST(Sampler, TopKSelectionEqualsAFullPartialSort) {
  auto reference = [](const std::vector<float>& logits, const SamplerOptions& o, std::mt19937_64& rng) {
    std::vector<std::pair<float, int32_t>> c;
    for (size_t i = 0; i < logits.size(); ++i) c.push_back({logits[i] / o.temperature, static_cast<int32_t>(i)});
    auto by = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
    std::partial_sort(c.begin(), c.begin() + o.top_k, c.end(), by);
    const size_t k = static_cast<size_t>(o.top_k);
    std::vector<double> p(k);
    double sum = 0;
    for (size_t i = 0; i < k; ++i) sum += (p[i] = std::exp(static_cast<double>(c[i].first - c[0].first)));
    size_t n = k;
    if (o.top_p < 1.0f) {
      double acc = 0;
      for (size_t i = 0; i < k; ++i) {
        acc += p[i] / sum;
        if (acc >= o.top_p) {
          n = i + 1;
          break;
        }
      }
      sum = 0;
      for (size_t i = 0; i < n; ++i) sum += p[i];
    }
    double r = std::uniform_real_distribution<double>(0.0, sum)(rng);
    for (size_t i = 0; i < n; ++i)
      if ((r -= p[i]) <= 0) return c[i].second;
    return c[n - 1].second;
  };
  std::mt19937 gen(5);
  for (int trial = 0; trial < 20; ++trial) {
    // Logits on a coarse grid: many exact ties, some across the k-th place.
    std::vector<float> l(1000 + 997 * trial);
    for (auto& x : l) x = static_cast<float>(static_cast<int>(gen() % 64)) / 8.0f;
    const SamplerOptions o{.temperature = 0.5f + 0.1f * static_cast<float>(trial % 7),
                           .top_k = 1 + 13 * (trial % 5),
                           .top_p = trial % 2 ? 0.9f : 1.0f,
                           .seed = static_cast<uint64_t>(trial)};
    Sampler s(o);
    std::mt19937_64 rng(o.seed);
    for (int i = 0; i < 30; ++i) ASSERT_EQ(s.sample(l.data(), static_cast<int64_t>(l.size())), reference(l, o, rng))
        << "trial " << trial << " draw " << i;
  }
}

// Repetition penalties, greedy so that each pick is computed by hand.
std::vector<int32_t> greedy_run(SamplerOptions o, const std::vector<float>& l, const std::vector<int32_t>& prompt,
                                int n) {
  o.temperature = 0;
  Sampler s(o);
  s.add_prompt(prompt);
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.sample(l.data(), static_cast<int64_t>(l.size())));
  return out;
}

TEST(Sampler, FrequencyPenaltyGrowsWithEachUse) {
  SamplerOptions o;
  o.frequency_penalty = 0.3f;
  // 0 at 2.0, 1.7, then 1.4 < 1.5: token 1; then 1.4 against 1.2, 1.1 against 1.2, ...
  EXPECT_EQ(greedy_run(o, {2.0f, 1.5f, 0.0f}, {}, 6), (std::vector<int32_t>{0, 0, 1, 0, 1, 0}));
}

TEST(Sampler, PresencePenaltyCountsOnce) {
  SamplerOptions o;
  o.presence_penalty = 0.55f;
  // 0 (2.0), then 1.45 < 1.5: token 1; then 1.45 beats 1.4 and 0.95 for good.
  EXPECT_EQ(greedy_run(o, {2.0f, 1.5f, 1.4f}, {}, 5), (std::vector<int32_t>{0, 1, 0, 0, 0}));
  // The prompt is not "generated": it does not count.
  EXPECT_EQ(greedy_run(o, {2.0f, 1.5f, 1.4f}, {0, 0}, 2), (std::vector<int32_t>{0, 1}));
}

TEST(Sampler, RepeatPenaltyLooksBackOverThePromptAndItsWindow) {
  SamplerOptions o;
  o.repeat_penalty = 1.2f;
  o.repeat_last_n = 2;
  // Prompt {0}: 2.0 / 1.2 = 1.67 < 1.8: token 1; window {0, 1}: 1.67 > 1.5: token 0;
  // window {1, 0}: token 0; window {0, 0}: 1.8 is back: token 1.
  EXPECT_EQ(greedy_run(o, {2.0f, 1.8f, -1.0f, -0.5f}, {0}, 5), (std::vector<int32_t>{1, 0, 0, 1, 0}));
  // A negative logit is multiplied: -1.2 < -1.1, then both penalized (-1.2 > -1.32).
  o.repeat_last_n = -1;
  EXPECT_EQ(greedy_run(o, {-1.0f, -1.1f}, {0}, 2), (std::vector<int32_t>{1, 0}));
  // repeat_last_n 0 turns it off.
  o.repeat_last_n = 0;
  EXPECT_EQ(greedy_run(o, {2.0f, 1.8f}, {0}, 2), (std::vector<int32_t>{0, 0}));
  // A long run stays right as the window's history is trimmed: against the window
  // counted afresh at every step.
  o.repeat_last_n = 5;
  const std::vector<float> l = {1.0f, 0.95f, 0.9f, -0.2f};
  const std::vector<int32_t> prompt = {3, 1, 3};
  const std::vector<int32_t> r = greedy_run(o, l, prompt, 60);
  std::vector<int32_t> history = prompt;
  for (size_t i = 0; i < r.size(); ++i) {
    std::vector<float> p = l;
    for (size_t t = 0; t < p.size(); ++t) {
      const size_t from = history.size() > 5 ? history.size() - 5 : 0;
      if (std::find(history.begin() + static_cast<std::ptrdiff_t>(from), history.end(), static_cast<int32_t>(t)) !=
          history.end())
        p[t] = p[t] > 0 ? p[t] / 1.2f : p[t] * 1.2f;
    }
    EXPECT_EQ(r[i], argmax(p.data(), static_cast<int64_t>(p.size()))) << i;
    history.push_back(r[i]);
  }
}

TEST(Sampler, LogitBiasBansAndFavours) {
  SamplerOptions o;
  o.logit_bias = {{0, -100.0f}, {2, 0.6f}};
  // 2.0 - 100 is out; 1.5 against 1.4 + 0.6 = 2.0: token 2.
  EXPECT_EQ(greedy_run(o, {2.0f, 1.5f, 1.4f}, {}, 3), (std::vector<int32_t>{2, 2, 2}));
  // With temperature: a banned token never comes.
  o.temperature = 1.0f;
  o.logit_bias = {{1, -100.0f}};
  Sampler s(o);
  const std::vector<float> l = {0.0f, 0.1f, 0.0f};
  for (int i = 0; i < 200; ++i) EXPECT_NE(s.sample(l.data(), 3), 1);
  // An id past the vocabulary is an error, not a write past the logits.
  o.logit_bias = {{3, 1.0f}};
  Sampler past(o);
  EXPECT_THROW(past.sample(l.data(), 3), InputError);
}

TEST(Sampler, AConstraintLeavesOnlyTheTokensItAllows) {
  const std::vector<float> l = {5.0f, 1.0f, 0.5f, 4.0f};
  const std::vector<uint8_t> odd = {0, 1, 0, 1};
  Sampler g(SamplerOptions{.temperature = 0.0f});
  EXPECT_EQ(g.sample(l.data(), 4, odd), 3);
  for (const int32_t k : {0, 2, 40}) {
    Sampler s(SamplerOptions{.temperature = 2.0f, .top_k = k, .top_p = 1.0f, .seed = 5});
    for (int i = 0; i < 300; ++i) EXPECT_EQ(s.sample(l.data(), 4, odd) % 2, 1) << k;
  }
  EXPECT_THROW(g.sample(l.data(), 4, std::vector<uint8_t>(4, 0)), InputError);
  EXPECT_THROW(g.sample(l.data(), 4, std::vector<uint8_t>(3, 1)), InputError);  // not one entry per token
}

TEST(Sampler, PenaltiesOutOfRangeAreRefused) {
  for (auto set : std::vector<void (*)(SamplerOptions&)>{
           [](SamplerOptions& o) { o.presence_penalty = 2.5f; }, [](SamplerOptions& o) { o.frequency_penalty = -3; },
           [](SamplerOptions& o) { o.frequency_penalty = NAN; }, [](SamplerOptions& o) { o.repeat_penalty = 0; },
           [](SamplerOptions& o) { o.repeat_penalty = INFINITY; }, [](SamplerOptions& o) { o.repeat_last_n = -2; },
           [](SamplerOptions& o) { o.logit_bias = {{-1, 1.0f}}; }, [](SamplerOptions& o) { o.logit_bias = {{1, 100.5f}}; },
           [](SamplerOptions& o) { o.logit_bias = {{1, NAN}}; }}) {
    SamplerOptions o;
    set(o);
    EXPECT_THROW(Sampler{o}, InputError);
  }
}

}  // namespace moeflow

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "engine/sampler.h"

namespace moeflow {

TEST(Sampler, GreedyPicksArgmaxWithTiesToLowerId) {
  std::vector<float> l = {0.1f, 2.0f, 2.0f, -1.0f};
  Sampler s(SamplerOptions{0.0f, 40, 0.95f, 1});
  EXPECT_EQ(s.sample(l.data(), 4), 1);
}

TEST(Sampler, SameSeedSameSequence) {
  std::vector<float> l = {1.0f, 1.1f, 0.9f, 1.05f, 0.2f};
  Sampler a(SamplerOptions{1.0f, 0, 1.0f, 7}), b(SamplerOptions{1.0f, 0, 1.0f, 7});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a.sample(l.data(), 5), b.sample(l.data(), 5));
}

TEST(Sampler, TopKOneIsGreedy) {
  std::vector<float> l = {1.0f, 3.0f, 2.9f};
  Sampler s(SamplerOptions{5.0f, 1, 1.0f, 3});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(l.data(), 3), 1);
}

TEST(Sampler, TopPKeepsOnlyTheNucleus) {
  // p ~ {0.88, 0.12, 0.0...}: top_p 0.5 keeps only the first.
  std::vector<float> l = {4.0f, 2.0f, -10.0f, -10.0f};
  Sampler s(SamplerOptions{1.0f, 0, 0.5f, 3});
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(l.data(), 4), 0);
}

TEST(Sampler, TemperatureSamplingFollowsTheDistribution) {
  std::vector<float> l = {0.0f, std::log(3.0f)};  // p = {0.25, 0.75}
  Sampler s(SamplerOptions{1.0f, 0, 1.0f, 11});
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) ones += s.sample(l.data(), 2);
  EXPECT_NEAR(static_cast<double>(ones) / n, 0.75, 0.02);
}

}  // namespace moeflow

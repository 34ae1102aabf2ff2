// Expert popularity prediction (src/plan/popularity.h, serverless-moe Sec. III-B).
#include <gtest/gtest.h>

#include <cmath>

#include "plan/popularity.h"

namespace moeflow::plan {
namespace {

RoutedToken tok(int32_t pos, int32_t id, std::vector<std::vector<int32_t>> experts) {
  RoutedToken t;
  t.position = pos;
  t.token_id = id;
  t.experts = std::move(experts);
  return t;
}

TEST(PlanPopularity, PosteriorByHand) {
  // One layer, 2 experts, top-1. Profile: token 5 -> e0 twice, token 7 -> e1 once.
  PopularityTable t(1, 2, 1);
  t.observe(tok(0, 5, {{0}}));
  t.observe(tok(1, 5, {{0}}));
  t.observe(tok(2, 7, {{1}}));
  // Token 7 at position 2: prior e0 (2+1)/(3+2), e1 (1+1)/(3+2); token likelihood
  // (0+1)/(2+3) vs (1+1)/(1+3); position likelihood (0+1)/(2+4) vs (1+1)/(1+4):
  // e0 0.6*0.2*0.1667 = 0.02, e1 0.4*0.5*0.4 = 0.08 -> e1.
  EXPECT_EQ(t.predict(tok(2, 7, {{1}}), 0, Features::token_and_position), std::vector<int32_t>{1});
  // By frequency alone e0 wins (2 of 3).
  EXPECT_EQ(t.predict(tok(2, 7, {{1}}), 0, Features::frequency), std::vector<int32_t>{0});
  EXPECT_EQ(t.count({0, PopularityTable::kToken, 5, 0}), 2);
  EXPECT_EQ(t.count({0, PopularityTable::kPosition, 2, 1}), 1);
}

TEST(PlanPopularity, PositionSeparatesWhatTokenIdCannot) {
  // The same token id goes to e0 at even positions and e1 at odd ones (Sec. II-C, Fig. 3).
  std::vector<RoutedToken> learn, test;
  for (int i = 0; i < 40; ++i) learn.push_back(tok(i % 4, 3, {{i % 2}}));
  for (int i = 0; i < 8; ++i) test.push_back(tok(i % 4, 3, {{i % 2}}));
  PopularityTable t(1, 2, 1);
  t.observe(learn);
  const auto real = real_load(test, 1, 2);
  const LoadError paper = load_error(real, t.predicted_load(test, Features::token_and_position));
  const LoadError lina = load_error(real, t.predicted_load(test, Features::token_only));
  EXPECT_EQ(paper.mean_abs, 0);
  EXPECT_EQ(lina.mean_abs, 4);  // all 8 on one expert: |4-8| and |4-0|
  EXPECT_EQ(lina.relative, 1);
}

TEST(PlanPopularity, SetCountKeepsTotalsAndDroppedRowsAreNotCounted) {
  PopularityTable t(1, 2, 1);
  t.observe(tok(0, 1, {{0}}));
  t.set_count({0, PopularityTable::kToken, 9, 1}, 50);  // a new key (Alg. 2, K2)
  EXPECT_EQ(t.predict(tok(0, 9, {{}}), 0, Features::token_only), std::vector<int32_t>{1});
  EXPECT_EQ(t.keys().size(), 3u);
  // A dropped row (empty) is neither predicted nor real.
  const std::vector<RoutedToken> ts{tok(0, 1, {{}}), tok(0, 1, {{0}})};
  EXPECT_EQ(t.predicted_load(ts, Features::token_only)[0][0] + t.predicted_load(ts, Features::token_only)[0][1], 1);
  EXPECT_EQ(real_load(ts, 1, 2)[0][0], 1);
}

}  // namespace
}  // namespace moeflow::plan

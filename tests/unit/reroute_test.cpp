// eMoE rerouting, the one rule engine and simulator share: hand-computed cases.
#include "experts/reroute.h"

#include <gtest/gtest.h>

namespace moeflow {
namespace {

LayerRouting routing(std::vector<int32_t> experts, std::vector<float> probs, int64_t n_tok) {
  LayerRouting r;
  r.n_tok = n_tok;
  r.n_expert = 6;
  r.top_k = 2;
  r.experts = std::move(experts);
  r.probs = std::move(probs);
  return r;
}

TEST(Reroute, MissingExpertTakesTheMostProbableUnusedResidentOne) {
  // Token 0 chose 0 and 3; 0 is not resident. Resident {1, 3, 5}: 1 (p 0.2) beats
  // 5 (0.1); 3 is already used. Slots re-sorted by probability: 3 (0.3), 1 (0.2).
  // Token 1 chose 3 and 5, both resident: untouched.
  LayerRouting r = routing({0, 3, 3, 5}, {0.4f, 0.2f, 0.0f, 0.3f, 0.0f, 0.1f,  //
                                          0.0f, 0.1f, 0.1f, 0.5f, 0.0f, 0.3f},
                           2);
  uint64_t slots = 0;
  const std::vector<int64_t> changed = reroute_to_resident(r, {1, 3, 5}, [](int32_t) { return 0.0; }, &slots);
  EXPECT_EQ(changed, std::vector<int64_t>({0}));
  EXPECT_EQ(slots, 1u);
  EXPECT_EQ(r.experts, std::vector<int32_t>({3, 1, 3, 5}));
}

TEST(Reroute, WithoutProbabilitiesTheCallersScoreRanks) {
  // Both of token 0's experts are missing: resident {2, 4, 5} scored 1, 7, 3 -> 4, then 5.
  LayerRouting r = routing({0, 1}, {}, 1);
  uint64_t slots = 0;
  const double score[6] = {0, 0, 1, 0, 7, 3};
  reroute_to_resident(r, {2, 4, 5}, [&](int32_t e) { return score[e]; }, &slots);
  EXPECT_EQ(r.experts, std::vector<int32_t>({4, 5}));
  EXPECT_EQ(slots, 2u);
}

TEST(Reroute, FewerThanTopKResidentLeavesTheRouting) {
  LayerRouting r = routing({0, 1}, {}, 1);
  uint64_t slots = 0;
  EXPECT_TRUE(reroute_to_resident(r, {4}, [](int32_t) { return 1.0; }, &slots).empty());
  EXPECT_EQ(r.experts, std::vector<int32_t>({0, 1}));
  EXPECT_EQ(slots, 0u);
}

}  // namespace
}  // namespace moeflow

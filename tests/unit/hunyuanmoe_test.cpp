// hunyuan-moe beyond the reference logits (reference_test.cpp) and the batched and
// offloaded runs (engine_test.cpp): what the config reads, that normalising q and k
// after RoPE (not before, as Qwen3 does) and the shared expert move the logits, and the
// shared expert's size falling back to feed_forward_length as llama.cpp reads it.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "eval_logits.h"
#include "gguf_rewrite.h"
#include "input_error_of.h"
#include "engine/transformer.h"
#include "model/model_weights.h"
#include "test_paths.h"

namespace moeflow {
namespace {

using gguf::Value;
using testing::all_logits;
using testing::max_rel_change;

const std::string kFixture = testing::fixture_path("hunyuan-moe-f32.gguf");
const std::string p = "hunyuan-moe.";
const std::vector<int32_t> kTokens = {5, 71, 290, 12, 256, 100, 7};


TEST(HunyuanMoe, ConfigReadsWhatTheConverterWrites) {
  auto m = Model::load(kFixture);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.arch, Arch::HunyuanMoe);
  EXPECT_TRUE(c.rope_neox);
  EXPECT_EQ(c.qk_norm, QkNorm::PerHead);
  EXPECT_TRUE(c.qk_norm_after_rope);
  EXPECT_TRUE(c.norm_topk);
  EXPECT_EQ(c.n_ff_shexp, 64);
  EXPECT_FALSE(c.shared_expert_gate);
  // Without expert_shared_feed_forward_length llama.cpp takes feed_forward_length.
  auto fallback = Model::load(testing::rewrite_gguf(kFixture, "hunyuan-ff", {{p + "feed_forward_length", Value::make_u32(64)}},
                                                    {p + "expert_shared_feed_forward_length"}));
  EXPECT_EQ(fallback->config().n_ff_shexp, 64);
  const std::string e = testing::input_error_of([&] {
    Model::load(testing::rewrite_gguf(kFixture, "hunyuan-bad", {}, {p + "expert_shared_feed_forward_length", p + "feed_forward_length"}));
  });
  EXPECT_NE(e.find(p + "expert_shared_feed_forward_length is missing"), std::string::npos) << e;
}

// The order of the q/k norms and RoPE, and the shared expert, each move the logits far
// past the reference test's bound (1e-4), so that test checks both.
TEST(HunyuanMoe, NormsAfterRopeAndTheSharedExpertMoveTheLogits) {
  auto m = Model::load(kFixture);
  const std::vector<float> base = all_logits(*m, kTokens);
  const int64_t V = m->config().n_vocab;
  auto before = Model::load(kFixture);
  const_cast<ModelConfig&>(before->config()).qk_norm_after_rope = false;  // Qwen3's order, same weights
  const double order = max_rel_change(all_logits(*before, kTokens), base, V);
  std::set<std::string> shared;
  for (int l = 0; l < 2; ++l)
    for (const char* n : {"ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight"})
      shared.insert("blk." + std::to_string(l) + "." + n);
  auto no_shared_file = testing::rewrite_gguf(kFixture, "hunyuan-noshared", {}, {}, shared);
  const std::string e = testing::input_error_of([&] { Model::load(no_shared_file); });
  EXPECT_NE(e.find("blk.0.ffn_gate_shexp.weight"), std::string::npos) << "every layer has the shared MLP: " << e;
  auto m2 = Model::load(kFixture);
  for (auto& L : const_cast<ModelWeights&>(m2->weights()).layers) L.shexp = {};
  const double s = max_rel_change(all_logits(*m2, kTokens), base, V);
  std::printf("[ hunyuan-moe ] logits change with the norms before RoPE %.3f, without the shared expert %.3f\n", order, s);
  EXPECT_GT(order, 1e-2);
  EXPECT_GT(s, 1e-2);
}

}  // namespace
}  // namespace moeflow

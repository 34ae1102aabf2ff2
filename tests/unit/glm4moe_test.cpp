// glm4moe beyond the reference logits (reference_test.cpp) and the batched and
// offloaded runs (engine_test.cpp): what the config reads from the file, GLM-4.5-Air's
// form without q/k norms, and metadata validation naming the bad key.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
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

Value u32(int64_t v) { return Value::make_u32(static_cast<uint32_t>(v)); }

const std::string kFixture = testing::fixture_path("glm4moe-f32.gguf");
const std::string p = "glm4moe.";

std::string load_error(const std::string& path) { return testing::input_error_of([&] { Model::load(path); }); }

using testing::all_logits;

TEST(Glm4Moe, ConfigReadsWhatTheConverterWrites) {
  auto m = Model::load(kFixture);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.arch, Arch::Glm4Moe);
  EXPECT_TRUE(c.rope_neox);
  EXPECT_EQ(c.rot_dim, 8) << "RoPE on half of the 16-dim heads";
  EXPECT_TRUE(c.attn_qkv_bias);
  EXPECT_EQ(c.qk_norm, QkNorm::PerHead);
  EXPECT_EQ(std::string(c.ffn_norm_name), "post_attention_norm");
  EXPECT_EQ(c.n_dense_lead, 1);
  EXPECT_EQ(c.n_ff_dense, 64);
  EXPECT_EQ(c.n_ff_shexp, 2 * 32);
  EXPECT_FALSE(c.shared_expert_gate);
  EXPECT_EQ(c.router_scoring, RouterScoring::Sigmoid);
  EXPECT_TRUE(c.norm_topk);
  EXPECT_EQ(c.expert_weights_scale, 2.5f);
  const ModelWeights& w = m->weights();
  EXPECT_EQ(w.layers[0].gate_inp.data, nullptr) << "the dense layer has no router";
  EXPECT_NE(w.layers[0].ffn.gate.data, nullptr);
  EXPECT_EQ(w.layers[1].choice_bias.size(), 8u);
  // The gating function's key absent (or llama.cpp's 0, "none"): sigmoid, as llama.cpp reads these files.
  auto absent = Model::load(testing::rewrite_gguf(kFixture, "glm4moe", {}, {p + "expert_gating_func"}));
  EXPECT_EQ(absent->config().router_scoring, RouterScoring::Sigmoid);
  auto softmax = Model::load(testing::rewrite_gguf(kFixture, "glm4moe", {{p + "expert_gating_func", u32(1)}}));
  EXPECT_EQ(softmax->config().router_scoring, RouterScoring::Softmax);
}

// GLM-4.5-Air has no q/k norms: the file without them loads as that form, and runs.
TEST(Glm4Moe, WithoutQkNormsAsTheAirModel) {
  std::set<std::string> drop;
  for (int l = 0; l < 3; ++l)
    for (const char* n : {"attn_q_norm.weight", "attn_k_norm.weight"}) drop.insert("blk." + std::to_string(l) + "." + n);
  auto air = Model::load(testing::rewrite_gguf(kFixture, "glm4moe-air", {}, {}, drop));
  EXPECT_EQ(air->config().qk_norm, QkNorm::None);
  auto full = Model::load(kFixture);
  const std::vector<int32_t> tokens = {5, 71, 290, 12, 256, 100};
  const std::vector<float> a = all_logits(*air, tokens), b = all_logits(*full, tokens);
  ASSERT_EQ(a.size(), b.size());
  for (float x : a) ASSERT_TRUE(std::isfinite(x));
  EXPECT_NE(a, b) << "the norms change the attention";
}

TEST(Glm4Moe, BadMetadataIsAnInputErrorNamingTheKey) {
  const std::vector<std::pair<std::map<std::string, Value>, std::string>> cases = {
      {{{p + "expert_gating_func", u32(3)}}, p + "expert_gating_func = 3 is not supported"},
      {{{p + "leading_dense_block_count", u32(3)}}, p + "leading_dense_block_count"},
      {{{p + "nextn_predict_layers", u32(3)}}, p + "nextn_predict_layers"},
      {{{p + "expert_shared_count", u32(100000)}}, p + "expert_shared_count"},
      {{{p + "expert_weights_scale", Value::make_f32(NAN)}}, p + "expert_weights_scale"},
      {{{p + "expert_group_count", u32(3)}}, p + "expert_group_count"},
      {{{p + "rope.dimension_count", u32(18)}}, p + "rope.dimension_count"},
      // Sizes the tensors disagree with: the tensor is named.
      {{{p + "leading_dense_block_count", u32(2)}}, "blk.1.ffn_gate.weight"},
      {{{p + "feed_forward_length", u32(96)}}, "blk.0.ffn_gate.weight"},
      {{{p + "expert_shared_count", u32(1)}}, "blk.1.ffn_gate_shexp.weight"},
  };
  for (const auto& [set, needle] : cases) {
    const std::string e = load_error(testing::rewrite_gguf(kFixture, "glm4moe", set));
    EXPECT_NE(e.find(needle), std::string::npos) << "expected '" << needle << "' in: " << e;
  }
  // The dense layers' size is required when there are dense layers.
  const std::string e = load_error(testing::rewrite_gguf(kFixture, "glm4moe", {}, {p + "feed_forward_length"}));
  EXPECT_NE(e.find(p + "feed_forward_length"), std::string::npos) << e;
  EXPECT_EQ(load_error(kFixture), "");
}

}  // namespace
}  // namespace moeflow

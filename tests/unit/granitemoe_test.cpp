// granitemoe beyond the reference logits (reference_test.cpp) and the batched and
// offloaded runs (engine_test.cpp): what the config reads from the file, that each of
// Granite's four multipliers moves the logits (so the reference comparison tests each),
// and metadata validation naming the bad key.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
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

const std::string kFixture = testing::fixture_path("granitemoe-f32.gguf");
const std::string kShared = testing::fixture_path("granitemoe-shared-q8_0.gguf");
const std::string p = "granitemoe.";
const std::vector<int32_t> kTokens = {5, 71, 290, 12, 256, 100, 7};

std::string load_error(const std::string& path) { return testing::input_error_of([&] { Model::load(path); }); }


TEST(GraniteMoe, ConfigReadsWhatTheConverterWrites) {
  auto m = Model::load(kFixture);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.arch, Arch::GraniteMoe);
  EXPECT_FALSE(c.rope_neox) << "Llama's adjacent pairs";
  EXPECT_TRUE(c.norm_topk) << "a softmax over the top-k logits";
  EXPECT_EQ(c.embedding_scale, 12.0f);
  EXPECT_EQ(c.residual_scale, 0.22f);
  EXPECT_EQ(c.attention_scale, 1.0f / 16);
  EXPECT_EQ(c.logit_scale, 6.0f);
  EXPECT_EQ(c.n_ff_shexp, 0) << "GraniteMoe has no shared expert";
  EXPECT_EQ(m->weights().output.data, m->weights().tok_embd.data) << "tied embeddings";
  auto shared = Model::load(kShared);
  EXPECT_EQ(shared->config().n_ff_shexp, 128);
  EXPECT_FALSE(shared->config().shared_expert_gate);
  EXPECT_NE(shared->weights().layers[1].shexp.down.data, nullptr);
}

// Each multiplier set to what a model without it would use moves the logits a hundred
// times the reference test's bound (1e-4) or more, so that test checks every one.
TEST(GraniteMoe, EachMultiplierMovesTheLogits) {
  auto m = Model::load(kFixture);
  const std::vector<float> base = all_logits(*m, kTokens);
  const int64_t V = m->config().n_vocab;
  const std::vector<std::pair<std::string, float>> neutral = {
      {"embedding_scale", 1.0f}, {"residual_scale", 1.0f}, {"attention.scale", 0.0f}};
  for (const auto& [key, v] : neutral) {
    auto other = Model::load(testing::rewrite_gguf(kFixture, "granitemoe-neutral", {{p + key, Value::make_f32(v)}}));
    const double change = max_rel_change(all_logits(*other, kTokens), base, V);
    std::printf("[ granitemoe ] %s = %g: logits change by %.3f\n", key.c_str(), v, change);
    EXPECT_GT(change, 1e-2) << key;
  }
  // The logit scale divides: at 3 instead of 6 every logit doubles.
  auto half = Model::load(testing::rewrite_gguf(kFixture, "granitemoe-logits", {{p + "logit_scale", Value::make_f32(3.0f)}}));
  const std::vector<float> doubled = all_logits(*half, kTokens);
  ASSERT_EQ(doubled.size(), base.size());
  for (size_t i = 0; i < base.size(); ++i) ASSERT_NEAR(doubled[i], 2 * base[i], 1e-6 * (1 + std::fabs(base[i]))) << i;
}

TEST(GraniteMoe, BadMetadataIsAnInputErrorNamingTheKey) {
  for (const char* key : {"embedding_scale", "residual_scale", "attention.scale", "logit_scale"})
    for (float bad : {NAN, INFINITY, -1.0f}) {
      const std::string e = load_error(testing::rewrite_gguf(kFixture, "granitemoe-bad", {{p + key, Value::make_f32(bad)}}));
      EXPECT_NE(e.find(p + key), std::string::npos) << bad << ": " << e;
    }
  // The logit scale is required and divides; the others, absent or 0, mean none.
  const std::string missing = load_error(testing::rewrite_gguf(kFixture, "granitemoe-bad", {}, {p + "logit_scale"}));
  EXPECT_NE(missing.find(p + "logit_scale is missing"), std::string::npos) << missing;
  const std::string zero =
      load_error(testing::rewrite_gguf(kFixture, "granitemoe-bad", {{p + "logit_scale", Value::make_f32(0)}}));
  EXPECT_NE(zero.find(p + "logit_scale = 0 must be positive"), std::string::npos) << zero;
  auto none = Model::load(testing::rewrite_gguf(kFixture, "granitemoe-none", {{p + "embedding_scale", Value::make_f32(0)}},
                                                {p + "residual_scale", p + "attention.scale"}));
  EXPECT_EQ(none->config().embedding_scale, 1.0f);
  EXPECT_EQ(none->config().residual_scale, 1.0f);
  EXPECT_EQ(none->config().attention_scale, 0.0f) << "1/sqrt(head_dim)";
  // A shared expert the file declares but does not hold: the tensor is named.
  const std::string e = load_error(testing::rewrite_gguf(
      kFixture, "granitemoe-bad", {{p + "expert_shared_feed_forward_length", Value::make_u32(64)}}));
  EXPECT_NE(e.find("blk.0.ffn_gate_shexp.weight"), std::string::npos) << e;
  EXPECT_EQ(load_error(kFixture), "");
}

// The optional attn_output.bias (llama.cpp loads it when present): a zero bias leaves
// the floats as they were, another one moves them.
TEST(GraniteMoe, AnAttentionOutputBiasIsAddedWhenTheFileHasOne) {
  auto base = Model::load(kFixture);
  const std::vector<float> ref = all_logits(*base, kTokens);
  const int64_t D = base->config().n_embd;
  for (float v : {0.0f, 0.5f}) {
    std::vector<float> bias(static_cast<size_t>(D));
    for (int64_t i = 0; i < D; ++i) bias[static_cast<size_t>(i)] = v * static_cast<float>((i % 7) - 3);
    const std::string path = testing::add_f32_tensors(kFixture, "granitemoe-bo",
                                                      {{"blk.0.attn_output.bias", {{static_cast<uint64_t>(D)}, bias}},
                                                       {"blk.1.attn_output.bias", {{static_cast<uint64_t>(D)}, bias}}});
    auto m = Model::load(path);
    EXPECT_TRUE(m->config().attn_out_bias);
    const std::vector<float> got = all_logits(*m, kTokens);
    if (v == 0) EXPECT_EQ(got, ref);
    else EXPECT_GT(max_rel_change(got, ref, m->config().n_vocab), 1e-2);
  }
}

}  // namespace
}  // namespace moeflow

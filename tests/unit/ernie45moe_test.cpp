// ernie4_5-moe beyond the reference logits (reference_test.cpp) and the batched and
// offloaded runs (engine_test.cpp): what the config reads from the file, that the
// choice bias and the shared expert move the logits, the optional q/k/v biases, and
// metadata validation naming the bad key.
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
using testing::all_logits;
using testing::max_rel_change;

const std::string kFixture = testing::fixture_path("ernie4_5-moe-f32.gguf");
const std::string p = "ernie4_5-moe.";
const std::vector<int32_t> kTokens = {5, 71, 290, 12, 256, 100, 7};

std::string load_error(const std::string& path) { return testing::input_error_of([&] { Model::load(path); }); }
Value u32(int64_t v) { return Value::make_u32(static_cast<uint32_t>(v)); }


TEST(Ernie45Moe, ConfigReadsWhatTheConverterWrites) {
  auto m = Model::load(kFixture);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.arch, Arch::Ernie45Moe);
  EXPECT_FALSE(c.rope_neox);
  EXPECT_TRUE(c.norm_topk);
  EXPECT_EQ(c.router_scoring, RouterScoring::Softmax);
  EXPECT_FALSE(c.attn_qkv_bias) << "the releases' use_bias is false";
  EXPECT_EQ(c.n_dense_lead, 1);
  EXPECT_EQ(c.n_ff_dense, 64);
  EXPECT_EQ(c.n_ff_shexp, 64);
  EXPECT_FALSE(c.shared_expert_gate);
  const ModelWeights& w = m->weights();
  EXPECT_EQ(w.layers[0].gate_inp.data, nullptr) << "the dense layer has no router";
  EXPECT_EQ(w.layers[1].choice_bias.size(), 8u);
  EXPECT_EQ(w.output.data, w.tok_embd.data) << "tied embeddings";
}

// Without its choice bias or its shared expert the fixture's logits move far past the
// reference test's bound (1e-4), so that test checks both.
TEST(Ernie45Moe, TheChoiceBiasAndTheSharedExpertMoveTheLogits) {
  auto m = Model::load(kFixture);
  const std::vector<float> base = all_logits(*m, kTokens);
  const int64_t V = m->config().n_vocab;
  std::set<std::string> bias, shared;
  for (int l = 1; l < 3; ++l) {
    bias.insert("blk." + std::to_string(l) + ".exp_probs_b.bias");
    for (const char* n : {"ffn_gate_shexp.weight", "ffn_up_shexp.weight", "ffn_down_shexp.weight"})
      shared.insert("blk." + std::to_string(l) + "." + n);
  }
  auto no_bias = Model::load(testing::rewrite_gguf(kFixture, "ernie-nobias", {}, {}, bias));
  EXPECT_TRUE(no_bias->weights().layers[1].choice_bias.empty());
  const double b = max_rel_change(all_logits(*no_bias, kTokens), base, V);
  auto no_shared = Model::load(
      testing::rewrite_gguf(kFixture, "ernie-noshared", {}, {p + "expert_shared_feed_forward_length"}, shared));
  const double s = max_rel_change(all_logits(*no_shared, kTokens), base, V);
  std::printf("[ ernie4_5-moe ] logits change without the choice bias %.3f, without the shared expert %.3f\n", b, s);
  EXPECT_GT(b, 1e-2);
  EXPECT_GT(s, 1e-2);
}

// use_bias: q/k/v biases when the file has them (llama.cpp loads them as optional). A
// zero bias leaves the floats unchanged, another moves them.
TEST(Ernie45Moe, QkvBiasesAreAddedWhenTheFileHasThem) {
  auto base = Model::load(kFixture);
  const std::vector<float> ref = all_logits(*base, kTokens);
  const ModelConfig& c = base->config();
  const uint64_t q = static_cast<uint64_t>(c.n_head * c.head_dim), kv = static_cast<uint64_t>(c.n_head_kv * c.head_dim);
  for (float v : {0.0f, 0.5f}) {
    std::map<std::string, std::pair<std::vector<uint64_t>, std::vector<float>>> add;
    for (int l = 0; l < 3; ++l)
      for (auto [name, n] : {std::pair{"attn_q.bias", q}, {"attn_k.bias", kv}, {"attn_v.bias", kv}}) {
        std::vector<float> x(n);
        for (uint64_t i = 0; i < n; ++i) x[i] = v * static_cast<float>(static_cast<int>(i % 5) - 2);
        add["blk." + std::to_string(l) + "." + name] = {{n}, x};
      }
    auto m = Model::load(testing::add_f32_tensors(kFixture, "ernie-qkv", add));
    EXPECT_TRUE(m->config().attn_qkv_bias);
    const std::vector<float> got = all_logits(*m, kTokens);
    if (v == 0) EXPECT_EQ(got, ref);
    else EXPECT_GT(max_rel_change(got, ref, c.n_vocab), 1e-2);
  }
}

TEST(Ernie45Moe, BadMetadataIsAnInputErrorNamingTheKey) {
  const std::vector<std::pair<std::map<std::string, Value>, std::string>> cases = {
      {{{p + "interleave_moe_layer_step", u32(2)}}, p + "interleave_moe_layer_step is not 1"},
      {{{p + "interleave_moe_layer_step", u32(0)}}, p + "interleave_moe_layer_step"},
      {{{p + "leading_dense_block_count", u32(3)}}, p + "leading_dense_block_count"},
      {{{p + "expert_shared_feed_forward_length", u32(1u << 30)}}, p + "expert_shared_feed_forward_length"},
      // Sizes the tensors disagree with: the tensor is named.
      {{{p + "leading_dense_block_count", u32(2)}}, "blk.1.ffn_gate.weight"},
      {{{p + "feed_forward_length", u32(96)}}, "blk.0.ffn_gate.weight"},
      {{{p + "expert_shared_feed_forward_length", u32(32)}}, "blk.1.ffn_gate_shexp.weight"},
  };
  for (const auto& [set, needle] : cases) {
    const std::string e = load_error(testing::rewrite_gguf(kFixture, "ernie-bad", set));
    EXPECT_NE(e.find(needle), std::string::npos) << "expected '" << needle << "' in: " << e;
  }
  for (const char* key : {"leading_dense_block_count", "interleave_moe_layer_step"}) {
    const std::string e = load_error(testing::rewrite_gguf(kFixture, "ernie-bad", {}, {p + key}));
    EXPECT_NE(e.find(p + key + " is missing"), std::string::npos) << e;
  }
  EXPECT_EQ(load_error(kFixture), "");
}

}  // namespace
}  // namespace moeflow

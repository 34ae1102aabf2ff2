// deepseek2 beyond the reference logits (reference_test.cpp) and the batched and
// offloaded runs (engine_test.cpp): metadata validation names the bad key, the expert
// machinery sees the MoE layers only, group-limited routing, and attention with
// values narrower than keys.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "eval_logits.h"
#include "gguf_rewrite.h"
#include "input_error_of.h"
#include "base/error.h"
#include "engine/expert_groups.h"
#include "engine/transformer.h"
#include "experts/expert_store.h"
#include "format/gguf.h"
#include "kernels/cpu/attention.h"
#include "model/model_weights.h"
#include "test_paths.h"

namespace moeflow {
namespace {

using gguf::Value;

Value u32(int64_t v) { return Value::make_u32(static_cast<uint32_t>(v)); }

const std::string kFixture = testing::fixture_path("deepseek2-f32.gguf");

std::string rewrite_file(const std::string& src, const std::map<std::string, Value>& set,
                         const std::set<std::string>& remove = {}) {
  return testing::rewrite_gguf(src, "deepseek2", set, remove);
}

std::string rewrite(const std::map<std::string, Value>& set, const std::set<std::string>& remove = {}) {
  return rewrite_file(kFixture, set, remove);
}

std::string load_error(const std::string& path) { return testing::input_error_of([&] { Model::load(path); }); }

TEST(DeepSeek2, BadMetadataIsAnInputErrorNamingTheKey) {
  const std::string p = "deepseek2.";
  struct Bad {
    std::map<std::string, Value> set;
    std::set<std::string> remove;
    std::string needle;
  };
  const std::vector<Bad> cases = {
      {{}, {p + "attention.kv_lora_rank"}, p + "attention.kv_lora_rank is missing"},
      {{{p + "attention.key_length", u32(16)}}, {}, p + "attention.key_length"},  // = the rope dims
      {{{p + "attention.head_count_kv", u32(2)}}, {}, p + "attention.head_count_kv"},
      {{{p + "expert_gating_func", u32(3)}}, {}, p + "expert_gating_func = 3 is not supported"},
      // *_mla keys on a file in the expanded form: its key_length is not the latent's.
      {{{p + "attention.key_length_mla", u32(32)}}, {}, p + "attention.key_length = 32 must be kv_lora_rank"},
      {{{p + "expert_group_count", u32(3)}}, {}, p + "expert_group_count"},
      {{{p + "expert_group_count", u32(4)}, {p + "expert_group_used_count", u32(0)}}, {}, p + "expert_group_used_count"},
      {{{p + "leading_dense_block_count", u32(3)}}, {}, p + "leading_dense_block_count"},
      {{{p + "rope.scaling.type", Value::make_string("linear")}}, {}, p + "rope.scaling.type"},
      {{{p + "rope.scaling.factor", Value::make_f32(NAN)}}, {}, p + "rope.scaling.factor"},
      {{{p + "expert_weights_scale", Value::make_f32(-1.0f)}}, {}, p + "expert_weights_scale"},
      {{{p + "attention.value_length", u32(0)}}, {}, p + "attention.value_length"},
      // Sizes the tensors disagree with: the tensor is named.
      {{{p + "attention.kv_lora_rank", u32(16)}}, {}, "blk.0.attn_kv_a_mqa.weight"},
      {{{p + "attention.q_lora_rank", u32(32)}}, {}, "blk.0.attn_q_a.weight"},
      {{{p + "leading_dense_block_count", u32(2)}}, {}, "blk.1.ffn_gate.weight"},
      {{{p + "leading_dense_block_count", u32(0)}}, {}, "blk.0.ffn_gate_inp.weight"},
      {{{p + "expert_shared_count", u32(1)}}, {}, "blk.1.ffn_gate_shexp.weight"},
  };
  for (const Bad& b : cases) {
    const std::string e = load_error(rewrite(b.set, b.remove));
    EXPECT_NE(e.find(b.needle), std::string::npos) << "expected '" << b.needle << "' in: " << e;
  }
  EXPECT_EQ(load_error(kFixture), "");
}

// The fixture in the form llama.cpp's converter has written since 2025: attn_kv_b split
// into attn_k_b (each head's k rows transposed) and attn_v_b, the latent's MQA sizes in
// key_length / value_length / head_count_kv, the per-head ones under *_mla.
std::string split_form() {
  auto f = gguf::GgufFile::open(kFixture);
  const std::string p = "deepseek2.";
  const int64_t H = 4, R = 32, rope = 16, nope = 16, hv = 16, w = nope + hv;
  gguf::GgufWriter out(f->alignment());
  const std::map<std::string, Value> set = {{p + "attention.key_length", u32(R + rope)},
                                            {p + "attention.value_length", u32(R)},
                                            {p + "attention.head_count_kv", u32(1)},
                                            {p + "attention.key_length_mla", u32(nope + rope)},
                                            {p + "attention.value_length_mla", u32(hv)}};
  for (const std::string& k : f->metadata_order()) out.set(k, set.count(k) ? set.at(k) : f->get(k));
  for (const auto& [k, v] : set)
    if (!f->has(k)) out.set(k, v);
  const auto bytes = [](const std::vector<float>& v) {
    const auto* b = reinterpret_cast<const uint8_t*>(v.data());
    return std::vector<uint8_t>(b, b + v.size() * sizeof(float));
  };
  for (const auto& t : f->tensors()) {
    const size_t at = t.name.find("attn_kv_b.weight");
    if (at == std::string::npos) {
      out.add_tensor(t.name, t.dims, t.dtype, std::vector<uint8_t>(t.data, t.data + t.nbytes));
      continue;
    }
    const float* kv = reinterpret_cast<const float*>(t.data);  // [H * w][R]
    std::vector<float> kb(static_cast<size_t>(H * R * nope)), vb(static_cast<size_t>(H * hv * R));
    for (int64_t h = 0; h < H; ++h)
      for (int64_t r = 0; r < R; ++r) {
        for (int64_t j = 0; j < nope; ++j) kb[(h * R + r) * nope + j] = kv[(h * w + j) * R + r];
        for (int64_t i = 0; i < hv; ++i) vb[(h * hv + i) * R + r] = kv[(h * w + nope + i) * R + r];
      }
    const std::string blk = t.name.substr(0, at);
    out.add_tensor(blk + "attn_k_b.weight", {uint64_t(nope), uint64_t(R), uint64_t(H)}, DType::F32, bytes(kb));
    out.add_tensor(blk + "attn_v_b.weight", {uint64_t(R), uint64_t(hv), uint64_t(H)}, DType::F32, bytes(vb));
  }
  const std::string path = testing::scratch_path("deepseek2_split") + ".gguf";
  out.write(path);
  return path;
}

using testing::all_logits;

TEST(DeepSeek2, TheSplitKvBFormGivesTheSameFloats) {
  auto expanded = Model::load(kFixture);
  auto split = Model::load(split_form());
  EXPECT_TRUE(split->config().mla.split_kv_b);
  EXPECT_EQ(split->config().head_dim, 32);
  EXPECT_EQ(split->config().v_head_dim(), 16);
  EXPECT_EQ(split->config().n_head_kv, 4);
  const std::vector<int32_t> tokens = {5, 71, 290, 12, 256, 100, 33, 199, 7, 64};
  const std::vector<float> want = all_logits(*expanded, tokens);
  EXPECT_EQ(all_logits(*split, tokens), want) << "mapped";
  split->make_resident(true, nullptr);
  EXPECT_EQ(all_logits(*split, tokens), want) << "resident";
  // The cache holds one row of [latent | rope key] and the latent as the value per
  // position and layer: 64 positions x 3 layers x (32 + 16 + 32) floats.
  EXPECT_EQ(Transformer(*expanded, nullptr, 64, DType::F32).kv_bytes(), uint64_t{64 * 3 * (32 + 16 + 32) * 4});
  // The split tensors' shapes are checked against the *_mla sizes.
  const std::string bad = rewrite_file(split_form(), {{"deepseek2.attention.value_length_mla", u32(8)}});
  EXPECT_NE(load_error(bad).find("blk.0.attn_v_b.weight"), std::string::npos) << load_error(bad);
}

// DeepSeek-V3's multi-token-prediction block as newer converters keep it: one more block
// (a copy of the last one, plus the nextn.* tensors) counted in block_count and named by
// nextn_predict_layers. It is not run: the logits are the file's without it.
TEST(DeepSeek2, TheMultiTokenPredictionBlockIsNotRun) {
  const std::string v3 = testing::fixture_path("deepseek-v3-f32.gguf");
  auto f = gguf::GgufFile::open(v3);
  gguf::GgufWriter w(f->alignment());
  const std::string p = "deepseek2.";
  for (const std::string& k : f->metadata_order()) w.set(k, k == p + "block_count" ? u32(4) : f->get(k));
  w.set(p + "nextn_predict_layers", u32(1));
  for (const auto& t : f->tensors()) {
    const std::vector<uint8_t> bytes(t.data, t.data + t.nbytes);
    w.add_tensor(t.name, t.dims, t.dtype, bytes);
    if (t.name.rfind("blk.2.", 0) == 0) w.add_tensor("blk.3." + t.name.substr(6), t.dims, t.dtype, bytes);
  }
  w.add_tensor("blk.3.nextn.eh_proj.weight", {128, 64}, DType::F32, std::vector<uint8_t>(128 * 64 * 4));
  const std::string with_mtp = testing::scratch_path("deepseek-v3-mtp") + ".gguf";
  w.write(with_mtp);
  auto plain = Model::load(v3);
  auto mtp = Model::load(with_mtp);
  EXPECT_EQ(mtp->config().n_layer, 3);
  const std::vector<int32_t> tokens = {5, 71, 290, 12, 256, 100, 33, 199};
  EXPECT_EQ(all_logits(*mtp, tokens), all_logits(*plain, tokens));
  EXPECT_EQ(mtp->weights().dense_bytes, plain->weights().dense_bytes) << "the unread block's bytes";
  EXPECT_EQ(mtp->weights().expert_bytes, plain->weights().expert_bytes);
  // Every block a prediction block leaves nothing to run.
  const std::string e = load_error(rewrite_file(v3, {{p + "nextn_predict_layers", u32(3)}}));
  EXPECT_NE(e.find(p + "nextn_predict_layers"), std::string::npos) << e;
}

TEST(DeepSeek2, ConfigReadsWhatTheConverterWrites) {
  auto m = Model::load(kFixture);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.arch, Arch::DeepSeek2);
  EXPECT_EQ(c.n_layer, 3);
  EXPECT_EQ(c.n_dense_lead, 1);
  EXPECT_EQ(c.n_moe_layer(), 2);
  EXPECT_EQ(c.head_dim, 32);
  EXPECT_EQ(c.v_head_dim(), 16);
  EXPECT_EQ(c.rot_dim, 16);
  EXPECT_EQ(c.mla.nope_dim, 16);
  EXPECT_EQ(c.mla.q_lora_rank, 0);
  EXPECT_EQ(c.mla.kv_lora_rank, 32);
  EXPECT_EQ(c.n_ff_shexp, 2 * c.n_ff_expert);
  EXPECT_FALSE(c.rope_neox);
  EXPECT_FLOAT_EQ(c.expert_weights_scale, 1.5f);
  // mscale = 1 + 0.0707 ln 4; the scale is mscale^2 / sqrt(32).
  const double mscale = 1.0 + 0.0707 * std::log(4.0);
  EXPECT_NEAR(c.mla.kq_scale, mscale * mscale / std::sqrt(32.0), 1e-6);
}

// The store, the cache and the policies number the MoE layers 0..n_moe_layer()-1:
// expert layer l is model layer l + leading_dense_block_count.
TEST(DeepSeek2, TheExpertStoreSeesTheMoeLayersOnly) {
  auto m = Model::load(kFixture);
  const ExpertStore store(*m, nullptr);
  EXPECT_EQ(store.geometry().n_layer, 2);
  EXPECT_EQ(store.geometry().n_expert, 8);
  const gguf::GgufFile& f = m->file();
  for (int32_t l = 0; l < 2; ++l) {
    const ExpertMatrices e = store.mapped({l, 3});
    const auto& t = f.tensor("blk." + std::to_string(l + 1) + ".ffn_up_exps.weight");
    EXPECT_EQ(e.up.data, t.data + 3 * e.up.bytes()) << "expert layer " << l;
  }
  EXPECT_EQ(m->weights().layers[0].gate_inp.data, nullptr) << "the dense layer has no router";
}

TEST(DeepSeek2, GroupLimitedRoutingKeepsTheBestGroups) {
  ModelConfig c;
  c.n_expert = 8;
  c.n_expert_group = 4;
  c.n_expert_group_used = 2;
  // Groups {0,1} {2,3} {4,5} {6,7}: best 0.30 (group 2), 0.25 (group 0); group 3's
  // two 0.2s lose to group 0's best even though they beat its second.
  const float p[8] = {0.25f, 0.01f, 0.02f, 0.02f, 0.30f, 0.0f, 0.20f, 0.20f};
  float out[8];
  limit_to_groups(c, p, out);
  const float x = -INFINITY;
  const float want[8] = {0.25f, 0.01f, x, x, 0.30f, 0.0f, x, x};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], want[i]) << i;
  // Ties between groups go to the lower id.
  const float tie[8] = {0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.3f};
  limit_to_groups(c, tie, out);
  const float want_tie[8] = {0.1f, 0.1f, x, x, x, x, 0.1f, 0.3f};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], want_tie[i]) << i;
}

// DeepSeek-V3's choice bias from a hostile file: a wrong length or a NaN is an error
// naming the tensor.
TEST(DeepSeek2, ABadChoiceBiasIsAnInputErrorNamingIt) {
  const std::string v3 = testing::fixture_path("deepseek-v3-f32.gguf");
  const std::string name = "blk.2.exp_probs_b.bias";
  auto with_bias = [&](const std::vector<float>& bias) {
    auto f = gguf::GgufFile::open(v3);
    gguf::GgufWriter w(f->alignment());
    for (const std::string& k : f->metadata_order()) w.set(k, f->get(k));
    for (const auto& t : f->tensors()) {
      if (t.name != name) {
        w.add_tensor(t.name, t.dims, t.dtype, std::vector<uint8_t>(t.data, t.data + t.nbytes));
        continue;
      }
      const auto* b = reinterpret_cast<const uint8_t*>(bias.data());
      w.add_tensor(t.name, {bias.size()}, DType::F32, std::vector<uint8_t>(b, b + bias.size() * sizeof(float)));
    }
    const std::string out = testing::scratch_path("deepseek-v3") + ".gguf";
    w.write(out);
    return out;
  };
  EXPECT_EQ(load_error(with_bias(std::vector<float>(12, 0.1f))), "");
  for (const std::vector<float>& bad : {std::vector<float>(11, 0.1f), std::vector<float>{0, 0, 0, NAN, 0, 0, 0, 0, 0, 0, 0, 0}}) {
    const std::string e = load_error(with_bias(bad));
    EXPECT_NE(e.find(name), std::string::npos) << e;
  }
}

// DeepSeek-V3 scores a group by the sum of its two best (sigmoid scores plus the choice
// bias, which may be negative): the same scores as above keep groups 3 and 2 (0.40 and
// 0.30 against group 0's 0.26), where V2's rule kept 2 and 0.
TEST(DeepSeek2, SigmoidRoutingScoresAGroupByItsTwoBest) {
  ModelConfig c;
  c.n_expert = 8;
  c.n_expert_group = 4;
  c.n_expert_group_used = 2;
  c.router_scoring = RouterScoring::Sigmoid;
  const float x = -INFINITY;
  const float p[8] = {0.25f, 0.01f, 0.02f, 0.02f, 0.30f, 0.0f, 0.20f, 0.20f};
  float out[8];
  limit_to_groups(c, p, out);
  const float want[8] = {x, x, x, x, 0.30f, 0.0f, 0.20f, 0.20f};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], want[i]) << i;
  // Negative sums (biased scores below zero) rank as numbers, not as masked experts.
  const float neg[8] = {-0.5f, -0.5f, -0.2f, -0.9f, -0.3f, -0.8f, -0.6f, -0.4f};  // -1.0 -1.1 -1.1 -1.0
  limit_to_groups(c, neg, out);
  const float want_neg[8] = {-0.5f, -0.5f, x, x, x, x, -0.6f, -0.4f};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], want_neg[i]) << i;
  // Groups of one expert: the sum is that expert's score (6 and 7 tie: the lower id).
  c.n_expert_group = 8;
  c.n_expert_group_used = 3;
  limit_to_groups(c, p, out);
  const float want_one[8] = {0.25f, x, x, x, 0.30f, x, 0.20f, x};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], want_one[i]) << i;
}

// Values narrower than keys, in a pool of their own, and an explicit softmax scale:
// the SIMD kernel and the reference against a plain double loop written here.
TEST(DeepSeek2, AttentionWithNarrowerValuesAndAScale) {
  const int64_t H = 3, hk = 24, hv = 8, B = 4, n_blocks = 5, n_tok = 3, pos0 = 9;
  const int64_t ks = H * B * hk + 3, vs = H * B * hv + 7;  // gaps between blocks
  cpu::AttentionShape s{H, H, hk, B, ks, DType::F32};
  s.v_head_dim = hv;
  s.v_block_stride = vs;
  s.scale = 0.37f;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(n_blocks * ks)), v(static_cast<size_t>(n_blocks * vs));
  std::vector<float> q(static_cast<size_t>(n_tok * H * hk));
  for (auto* a : {&k, &v, &q})
    for (auto& x : *a) x = nd(rng);
  const std::vector<int32_t> table = {3, 0, 4, 1};
  std::vector<cpu::AttentionQuery> tok;
  for (int64_t t = 0; t < n_tok; ++t) tok.push_back({pos0 + t, table.data()});
  std::vector<float> got(static_cast<size_t>(n_tok * H * hv)), ref(got.size());
  cpu::attention(s, q.data(), n_tok, tok.data(), k.data(), v.data(), got.data(), nullptr);
  cpu::attention_reference(s, q.data(), n_tok, tok.data(), k.data(), v.data(), ref.data());
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t n = pos0 + t + 1;
      std::vector<double> w(static_cast<size_t>(n));
      double mx = -1e300, sum = 0;
      for (int64_t p = 0; p < n; ++p) {
        const float* kr = k.data() + table[p / B] * ks + h * B * hk + p % B;  // keys transposed: element i at i * B
        double d = 0;
        for (int64_t i = 0; i < hk; ++i) d += static_cast<double>(q[(t * H + h) * hk + i]) * kr[i * B];
        w[p] = d * 0.37;
        mx = std::max(mx, w[p]);
      }
      for (auto& x : w) sum += x = std::exp(x - mx);
      for (int64_t i = 0; i < hv; ++i) {
        double o = 0;
        for (int64_t p = 0; p < n; ++p) o += w[p] / sum * v[table[p / B] * vs + h * B * hv + (p % B) * hv + i];
        EXPECT_NEAR(got[(t * H + h) * hv + i], o, 1e-5) << t << " " << h << " " << i;
        EXPECT_NEAR(ref[(t * H + h) * hv + i], o, 1e-6) << t << " " << h << " " << i;
      }
    }
}

}  // namespace
}  // namespace moeflow

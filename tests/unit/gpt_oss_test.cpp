// gpt-oss's pieces on their own: the clamped SwiGLU kernel against its scalar
// definition, YaRN's frequencies at the ends of the ramp, and the config's
// validation naming the bad key. (The whole model is checked against the NumPy
// reference in reference_test.cpp, batched and offloaded in engine_test.cpp.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "gguf_rewrite.h"
#include "input_error_of.h"
#include "backend/cpu/cpu_backend.h"
#include "base/error.h"
#include "engine/forward_pass.h"
#include "engine/logits_file.h"
#include "engine/transformer.h"
#include "format/gguf.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/swiglu_oai.h"
#include "model/model_weights.h"
#include "model/rope_yarn.h"
#include "test_paths.h"

namespace moeflow {
namespace {

using gguf::GgufFile;
using gguf::GgufWriter;
using gguf::Value;

const std::string kModel = testing::fixture_path("gpt-oss-f32.gguf");

// SIMD against the double-precision definition over values on both sides of both
// clamps and a tail that is not a whole vector; out may alias gate.
TEST(SwigluOai, MatchesReference) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> uni(-12.0f, 12.0f);
  const int64_t n = 1000 + 5;
  std::vector<float> gate(n), up(n), ref(n), out(n);
  for (int64_t i = 0; i < n; ++i) gate[i] = uni(rng), up[i] = uni(rng);
  gate[0] = 1e30f, gate[1] = -1e30f, gate[2] = 7.0f, gate[3] = -60.0f, up[4] = -1e30f, up[5] = 1e30f;
  cpu::swiglu_oai_reference(gate.data(), up.data(), ref.data(), n);
  cpu::swiglu_oai(gate.data(), up.data(), out.data(), n);
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isfinite(out[i])) << "gate " << gate[i] << " up " << up[i];
    if (std::abs(ref[i]) > 1e-20)
      worst = std::max(worst, std::abs(out[i] - ref[i]) / std::abs(static_cast<double>(ref[i])));
  }
  std::printf("swiglu_oai: max relative error %.2e\n", worst);
  EXPECT_LT(worst, 1e-6);
  // The clamps: a gate above 7 acts as 7, an up beyond +-7 as +-7.
  const float g[3] = {7.0f, 100.0f, 3.0f}, u[3] = {2.0f, 2.0f, 50.0f};
  float o[3];
  cpu::swiglu_oai_reference(g, u, o, 3);
  EXPECT_EQ(o[0], o[1]);
  EXPECT_NEAR(o[2], 3.0 / (1.0 + std::exp(-1.702 * 3.0)) * 8.0, 1e-5);
  cpu::swiglu_oai(gate.data(), up.data(), gate.data(), n);
  EXPECT_EQ(gate, out);
}

// Below the ramp (i <= low) a pair keeps its frequency, above it (i >= high) the
// frequency is divided by the factor, and in between it blends linearly in i; the
// ends are gpt-oss's unrounded correction dimensions. With factor 1 (no extension)
// the angles are plain RoPE's.
TEST(RopeYarn, FrequenciesFollowTheRamp) {
  YarnScaling y;
  y.factor = 32;
  y.orig_ctx = 4096;
  const double base = 150000;
  const int64_t d = 64;
  const std::vector<double> inv = yarn_inv_freq(y, base, d);
  const auto corr = [&](double rot) { return d * std::log(4096.0 / (rot * 2 * M_PI)) / (2 * std::log(base)); };
  const double low = corr(32), high = corr(1);  // 8.09 and 17.40 (unrounded)
  ASSERT_EQ(inv.size(), 32u);
  for (int64_t i = 0; i < 32; ++i) {
    const double plain = std::pow(base, -2.0 * static_cast<double>(i) / d);
    const double t = std::min(1.0, std::max(0.0, (static_cast<double>(i) - low) / (high - low)));
    EXPECT_NEAR(inv[i], plain * (1 - t) + plain / 32 * t, 1e-15 * std::max(1.0, plain)) << i;
  }
  EXPECT_EQ(inv[0], 1.0);
  EXPECT_DOUBLE_EQ(inv[31], std::pow(base, -62.0 / 64) / 32);

  // Truncated (HF's default, llama.cpp's always): the ramp runs from pair 8 to 18.
  y.truncate = true;
  const std::vector<double> tr = yarn_inv_freq(y, base, d);
  for (int64_t i = 0; i < 32; ++i) {
    const double plain = std::pow(base, -2.0 * static_cast<double>(i) / d);
    const double t = std::min(1.0, std::max(0.0, (static_cast<double>(i) - 8.0) / 10.0));
    EXPECT_NEAR(tr[i], plain * (1 - t) + plain / 32 * t, 1e-15 * std::max(1.0, plain)) << i;
  }

  y.factor = 1;
  std::vector<float> a(d), b(d);
  yarn_angles(yarn_inv_freq(y, base, d), 1.0, 1234, a.data());
  cpu::rope_angles(1234, d, static_cast<float>(base), b.data());
  for (int64_t i = 0; i < d; ++i) EXPECT_NEAR(a[i], b[i], 1e-6) << i;
}

// A copy of the gpt-oss fixture with keys set, keys dropped and tensors dropped.
std::string rewrite(const std::map<std::string, Value>& set, const std::set<std::string>& drop_keys = {},
                    const std::set<std::string>& drop_tensors = {}) {
  return testing::rewrite_gguf(kModel, "gpt-oss", set, drop_keys, drop_tensors);
}

std::string load_error(const std::string& path) { return testing::input_error_of([&] { Model::load(path); }); }

TEST(GptOssConfig, LoadsAsWritten) {
  auto m = Model::load(kModel);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.arch, Arch::GptOss);
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_TRUE(layer_slides(c, 0));
  EXPECT_FALSE(layer_slides(c, 1));
  EXPECT_DOUBLE_EQ(c.yarn.factor, 32);
  EXPECT_EQ(c.yarn.orig_ctx, 4096);
  EXPECT_NEAR(c.yarn.attn_factor, 0.1 * std::log(32.0) + 1, 1e-12);
  const LayerWeights& L = m->weights().layers[0];
  EXPECT_EQ(L.attn_sinks.size(), static_cast<size_t>(c.n_head));
  EXPECT_EQ(L.bo.size(), static_cast<size_t>(c.n_embd));
  EXPECT_EQ(L.gate_inp_b.size(), static_cast<size_t>(c.n_expert));
  EXPECT_EQ(L.down_exps_b.size(), static_cast<size_t>(c.n_expert * c.n_embd));
}

TEST(GptOssConfig, BadKeysAreNamed) {
  const std::string p = "gpt-oss.";
  const struct {
    std::map<std::string, Value> set;
    std::set<std::string> drop;
    const char* key;
  } cases[] = {
      {{}, {p + "attention.sliding_window"}, "gpt-oss.attention.sliding_window"},
      {{{p + "attention.sliding_window", Value::make_u32(0)}}, {}, "gpt-oss.attention.sliding_window"},
      {{{p + "rope.scaling.type", Value::make_string("linear")}}, {}, "gpt-oss.rope.scaling.type"},
      {{}, {p + "rope.scaling.factor"}, "gpt-oss.rope.scaling.factor"},
      {{{p + "rope.scaling.factor", Value::make_f32(std::nanf(""))}}, {}, "gpt-oss.rope.scaling.factor"},
      {{{p + "rope.scaling.factor", Value::make_f32(0.5f)}}, {}, "gpt-oss.rope.scaling.factor"},
      {{}, {p + "rope.scaling.original_context_length"}, "gpt-oss.rope.scaling.original_context_length"},
      {{{p + "rope.scaling.yarn_beta_slow", Value::make_f32(64.0f)}}, {}, "gpt-oss.rope.scaling.yarn_beta_slow"},
      {{{p + "rope.scaling.yarn_beta_fast", Value::make_f32(-1.0f)}}, {}, "gpt-oss.rope.scaling.yarn_beta_fast"},
  };
  for (const auto& c : cases) {
    const std::string err = load_error(rewrite(c.set, c.drop));
    EXPECT_NE(err.find(c.key), std::string::npos) << c.key << ": '" << err << "'";
  }
  // Each gpt-oss tensor is required and named when missing.
  for (const char* t : {"blk.1.attn_sinks.weight", "blk.0.attn_output.bias", "blk.0.ffn_gate_inp.bias",
                        "blk.1.ffn_up_exps.bias", "blk.0.ffn_down_exps.bias", "blk.1.post_attention_norm.weight"}) {
    const std::string err = load_error(rewrite({}, {}, {t}));
    EXPECT_NE(err.find(t), std::string::npos) << t << ": '" << err << "'";
  }
  // A NaN in an expert bias (copied out at load, unlike the expert matrices) is named.
  auto f = GgufFile::open(kModel);
  GgufWriter w(f->alignment());
  for (const std::string& k : f->metadata_order()) w.set(k, f->get(k));
  for (const auto& t : f->tensors()) {
    std::vector<uint8_t> bytes(t.data, t.data + t.nbytes);
    if (t.name == "blk.0.ffn_gate_exps.bias") {
      const float nan = std::nanf("");
      std::memcpy(bytes.data() + 12, &nan, 4);
    }
    w.add_tensor(t.name, t.dims, t.dtype, std::move(bytes));
  }
  const std::string nan_model = testing::scratch_path("gpt-oss-nan") + ".gguf";
  w.write(nan_model);
  const std::string err = load_error(nan_model);
  EXPECT_NE(err.find("blk.0.ffn_gate_exps.bias"), std::string::npos) << err;
}

// One sequence's tokens [t0, t0 + len) of `tokens` as a step, every token's logits
// wanted; `sliding`: the sliding layers' table where they have a pool of their own.
void fill_step(StepTokens& step, const std::vector<int32_t>& tokens, int64_t t0, int64_t len, const int32_t* table,
               const int32_t* sliding) {
  step.clear();
  for (int64_t t = t0; t < t0 + len; ++t) {
    step.tokens.push_back(tokens[static_cast<size_t>(t)]);
    step.pos.push_back(t);
    step.requests.push_back(0);
    step.blocks.push_back(table);
    if (sliding) step.sliding_blocks.push_back(sliding);
    step.logits_rows.push_back(t - t0);
  }
  step.n_single = len == 1 ? 1 : 0;
}

// The sliding window of the even layers starts inside KV blocks and spans several
// when blocks hold 3 positions (taken after another sequence's, so not from block 0):
// the 24 positions of the reference fixture, as one prefill step and token by token,
// give bit for bit the floats of the default 32-position blocks.
TEST(GptOssModel, WindowAcrossKvBlocksGivesTheSameFloats) {
  for (const char* name : {"gpt-oss-f32", "gpt-oss-mxfp4"}) {
    auto model = Model::load(testing::fixture_path(std::string(name) + ".gguf"));
    const LogitsRecord ref = read_logits_file(testing::fixture_path(std::string(name) + ".logits"));
    const int64_t n = static_cast<int64_t>(ref.tokens.size()), V = ref.n_vocab;
    ThreadPool pool(2);
    for (bool one_step : {true, false}) {
      Transformer tf(*model, &pool, 64, DType::F32);
      std::vector<float> want, l;
      if (one_step) {
        tf.eval(ref.tokens.data(), n, true, want);
      } else {
        for (int64_t t = 0; t < n; ++t) {
          tf.eval(ref.tokens.data() + t, 1, false, l);
          want.insert(want.end(), l.begin(), l.end());
        }
      }
      CpuBackend backend(&pool);
      KvBlockPool kv = make_kv_pool(*model, backend, 20, DType::F32, 3);
      ForwardPass fwd(*model, backend, kv);
      std::vector<int32_t> other, table;
      ASSERT_TRUE(kv.reserve(other, 7));
      ASSERT_TRUE(kv.reserve(table, n));
      std::vector<float> got;
      StepTokens step;
      for (int64_t t0 = 0; t0 < n; t0 += one_step ? n : 1) {
        const int64_t len = one_step ? n : 1;
        fill_step(step, ref.tokens, t0, len, table.data(), nullptr);
        fwd.run(step, l);
        got.insert(got.end(), l.begin(), l.end());
      }
      ASSERT_EQ(got.size(), static_cast<size_t>(n * V));
      EXPECT_TRUE(got == want) << name << (one_step ? ": one step" : ": token by token");
    }
  }
}

// The sliding layers in a pool of their own, which keeps only their window: blocks of
// 3 positions, the window (8) across three of them; after each step the blocks wholly
// before the next token's window go back, their entries released (nothing reads
// them: a read would land before the mapping). The pool holds 5 blocks, fewer than
// the 24 positions take, so it runs only by reusing them, and the floats are the
// Transformer's (every layer in one pool), a token at a time and in chunks of 5.
TEST(GptOssModel, SlidingLayersInAPoolOfTheirOwnKeepOnlyTheirWindow) {
  for (const char* name : {"gpt-oss-f32", "gpt-oss-mxfp4"}) {
    auto model = Model::load(testing::fixture_path(std::string(name) + ".gguf"));
    const ModelConfig& c = model->config();
    ASSERT_EQ(c.sliding_window, 8);
    ASSERT_EQ(kv_pool_layers(c, KvLayers::Sliding), (c.n_layer + 1) / 2);
    ASSERT_EQ(kv_pool_layers(c, KvLayers::Full) + kv_pool_layers(c, KvLayers::Sliding), c.n_layer);
    const LogitsRecord ref = read_logits_file(testing::fixture_path(std::string(name) + ".logits"));
    const int64_t n = static_cast<int64_t>(ref.tokens.size()), V = ref.n_vocab;
    ThreadPool pool(2);
    for (int64_t chunk : {1, 5}) {
      Transformer tf(*model, &pool, 64, DType::F32);
      std::vector<float> want, l;
      for (int64_t t = 0; t < n; t += chunk) {
        tf.eval(ref.tokens.data() + t, std::min(chunk, n - t), true, l);
        want.insert(want.end(), l.begin(), l.end());
      }
      CpuBackend backend(&pool);
      KvBlockPool kv = make_kv_pool(*model, backend, 20, DType::F32, 3, KvLayers::Full);
      KvBlockPool sliding = make_kv_pool(*model, backend, 5, DType::F32, 3, KvLayers::Sliding);
      ForwardPass fwd(*model, backend, kv, &sliding);
      std::vector<int32_t> table, window_table;
      std::vector<float> got;
      StepTokens step;
      for (int64_t t0 = 0; t0 < n; t0 += chunk) {
        const int64_t len = std::min(chunk, n - t0);
        ASSERT_TRUE(kv.reserve(table, t0 + len));
        ASSERT_TRUE(sliding.reserve(window_table, t0 + len)) << name << ": position " << t0;
        fill_step(step, ref.tokens, t0, len, table.data(), window_table.data());
        fwd.run(step, l);
        got.insert(got.end(), l.begin(), l.end());
        // The next token, at t0 + len, reads from t0 + len - 7 on.
        sliding.release_before(window_table, t0 + len - c.sliding_window + 1);
      }
      ASSERT_EQ(got.size(), static_cast<size_t>(n * V));
      EXPECT_TRUE(got == want) << name << ", chunks of " << chunk;
      EXPECT_EQ(sliding.first_held(window_table), (n - c.sliding_window + 1) / 3 * 3);
      EXPECT_LE(sliding.peak_used_blocks(), chunk == 1 ? 4 : 5) << name << ", chunks of " << chunk;
      // A step without the sliding tables is refused, not run on the wrong pool.
      step.sliding_blocks.clear();
      try {
        fwd.run(step, l);
        ADD_FAILURE() << "a step without its sliding-layer tables ran";
      } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("block tables"), std::string::npos) << e.what();
      }
    }
  }
}

// The table operations a pool of sliding-window rows relies on: blocks released from
// the front (a walk that stops at the first entry already released), shared and
// released again with released entries among them, and the memory touched, the peak
// held, since blocks go out most recently freed first.
TEST(KvBlockPool, ReleasedEntriesAreSkippedAndFreedBlocksReusedFirst) {
  ThreadPool pool(1);
  CpuBackend backend(&pool);
  KvBlockPool kv(backend, 1, 1, 4, 10, 4);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(kv.reserve(a, 20));  // blocks 0-4
  EXPECT_EQ(a, (std::vector<int32_t>{0, 1, 2, 3, 4}));
  kv.release_before(a, 7);  // block 0 holds 0-3 only; block 1 holds 4-7, 7 still needed
  EXPECT_EQ(a[0], KvBlockPool::kReleased);
  EXPECT_EQ(a[1], 1);
  EXPECT_EQ(kv.first_held(a), 4);
  EXPECT_EQ(kv.free_blocks(), 6);
  kv.release_before(a, 12);  // blocks 1 and 2 (positions 4-11) too
  EXPECT_EQ(kv.first_held(a), 12);
  EXPECT_EQ(kv.free_blocks(), 8);
  kv.release_before(a, 2);  // nothing before what is already released
  EXPECT_EQ(kv.free_blocks(), 8);
  kv.share(b, a, 4);  // three released entries, one shared block
  EXPECT_EQ(b, (std::vector<int32_t>{KvBlockPool::kReleased, KvBlockPool::kReleased, KvBlockPool::kReleased, 3}));
  EXPECT_EQ(kv.held_alone(a), 1) << "block 4 only";
  EXPECT_EQ(kv.held_alone(b), 0);
  ASSERT_TRUE(kv.reserve(b, 24));  // b's fifth and sixth: the blocks freed last (1, then 2)
  EXPECT_EQ(b[4], 1);
  EXPECT_EQ(b[5], 2);
  EXPECT_EQ(kv.peak_used_blocks(), 5);
  kv.release(a);
  EXPECT_EQ(kv.free_blocks(), 7) << "3 is b's too";
  kv.shrink(b, 16);
  EXPECT_EQ(kv.free_blocks(), 9);
  kv.release(b);
  EXPECT_EQ(kv.free_blocks(), 10);
  EXPECT_EQ(kv.peak_used_blocks(), 5) << "blocks 5-9 were never taken";
}

}  // namespace
}  // namespace moeflow

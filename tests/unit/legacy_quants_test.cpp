// Q4_1, Q5_0 and Q5_1 (tensor/legacy_quants.h): ggml's ids and sizes, dequantisation
// against the format's definition written out from the bytes, hand-made blocks, the
// quantisers' rounding bound, non-finite scales found, llama.cpp's fallback types in
// the k-quant mixes, and whole models: logits of the quantised fixture beside the f32
// one's, ranked by bits; resident and offloaded runs giving the same tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/perplexity.h"
#include "cli/quant_mix.h"
#include "format/gguf.h"
#include "engine/transformer.h"
#include "tensor/dtype.h"
#include "tensor/finite_check.h"
#include "tensor/legacy_quants.h"
#include "eval_logits.h"
#include "run_json.h"
#include "test_paths.h"

namespace moeflow {
namespace {

using moeflow::testing::run_json;

const DType kLegacy[] = {DType::Q4_1, DType::Q5_0, DType::Q5_1};

// Weight j of a block from the bytes, as the format defines it (tensor/legacy_quants.h):
// f16 d [f16 m] [qh as a little-endian u32] qs[16].
float definition_weight(DType t, const uint8_t* blk, int j) {
  uint16_t dh, mh = 0;
  std::memcpy(&dh, blk, 2);
  const bool with_min = t != DType::Q5_0;
  if (with_min) std::memcpy(&mh, blk + 2, 2);
  const uint8_t* qs = blk + dtype_info(t).type_size - 16;
  int q = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
  if (t != DType::Q4_1) {
    const uint8_t* p = blk + (with_min ? 4 : 2);
    const uint32_t qh = p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24;
    q |= static_cast<int>((qh >> j) & 1) << 4;
  }
  const float d = fp16_to_fp32(dh);
  return with_min ? d * static_cast<float>(q) + fp16_to_fp32(mh) : d * static_cast<float>(q - 16);
}

TEST(LegacyQuants, FormatsAndGgmlIds) {
  const uint32_t ids[] = {3, 6, 7};
  const int sizes[] = {20, 22, 24};
  const char* names[] = {"q4_1", "q5_0", "q5_1"};
  for (int k = 0; k < 3; ++k) {
    DType t;
    ASSERT_TRUE(dtype_from_ggml(ids[k], t));
    EXPECT_EQ(t, kLegacy[k]);
    EXPECT_EQ(dtype_info(t).block_size, 32);
    EXPECT_EQ(dtype_info(t).type_size, sizes[k]);
    EXPECT_STREQ(dtype_name(t), names[k]);
    DType back;
    ASSERT_TRUE(dtype_from_name(names[k], back));
    EXPECT_EQ(back, t);
    EXPECT_TRUE(dtype_is_quantized(t) && dtype_is_file_type(t) && dtype_is_legacy_quant(t));
    EXPECT_FALSE(dtype_is_kquant(t));
    EXPECT_EQ(row_bytes(t, 1408), static_cast<size_t>(44 * sizes[k]));  // 1408: not whole super-blocks
    EXPECT_THROW(row_bytes(t, 48), std::invalid_argument);
  }
}

TEST(LegacyQuants, DequantizeMatchesTheDefinitionExactly) {
  constexpr int kBlocks = 64;
  std::mt19937 rng(11);
  for (DType t : kLegacy) {
    const size_t bs = static_cast<size_t>(dtype_info(t).type_size);
    std::vector<uint8_t> blocks(bs * kBlocks);
    for (auto& b : blocks) b = static_cast<uint8_t>(rng());
    for (int b = 0; b < kBlocks; ++b) {  // finite scales (any bits elsewhere)
      const uint16_t d = fp32_to_fp16(std::ldexp(1.0f + static_cast<float>(b % 7) / 8, b % 9 - 6));
      const uint16_t m = fp32_to_fp16(-static_cast<float>(b % 5) * 0.37f);
      std::memcpy(&blocks[b * bs], &d, 2);
      if (t != DType::Q5_0) std::memcpy(&blocks[b * bs + 2], &m, 2);
    }
    std::vector<float> got(kBlocks * 32);
    dequantize_row(t, blocks.data(), got.data(), kBlocks * 32);
    int differ = 0;
    for (int b = 0; b < kBlocks; ++b)
      for (int j = 0; j < 32; ++j) differ += got[b * 32 + j] != definition_weight(t, blocks.data() + b * bs, j);
    EXPECT_EQ(differ, 0) << dtype_name(t);
  }
}

// One block by hand: d = 0.5, weight j's quant j (Q4_1: j % 16); Q4_1 / Q5_1 with m = -2.
TEST(LegacyQuants, HandMadeBlocks) {
  const uint16_t half = fp32_to_fp16(0.5f), m = fp32_to_fp16(-2.0f);
  {
    BlockQ4_1 b{};
    b.d = half;
    b.m = m;
    for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (15 - j) << 4);
    float y[32];
    dequantize_row(DType::Q4_1, &b, y, 32);
    for (int j = 0; j < 16; ++j) {
      EXPECT_EQ(y[j], 0.5f * j - 2.0f) << j;
      EXPECT_EQ(y[j + 16], 0.5f * (15 - j) - 2.0f) << j;
    }
  }
  BlockQ5_0 b0{};
  BlockQ5_1 b1{};
  b0.d = b1.d = half;
  b1.m = m;
  for (int j = 0; j < 16; ++j) b0.qs[j] = b1.qs[j] = static_cast<uint8_t>(j | j << 4);  // nibble j % 16 for weight j
  const uint8_t qh[4] = {0x00, 0x00, 0xff, 0xff};  // the fifth bit set for weights 16..31
  std::memcpy(b0.qh, qh, 4);
  std::memcpy(b1.qh, qh, 4);
  float y0[32], y1[32];
  dequantize_row(DType::Q5_0, &b0, y0, 32);
  dequantize_row(DType::Q5_1, &b1, y1, 32);
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(y0[j], 0.5f * (j - 16)) << j;  // q = j
    EXPECT_EQ(y1[j], 0.5f * j - 2.0f) << j;
  }
}

// Every weight within half a step (plus the f16 rounding of d and m) of its value, but
// for the symmetric types' top step (d = max / -8 or -16 makes -max's opposite one step
// short); the 5-bit types at about half the 4-bit ones' error.
TEST(LegacyQuants, QuantizeRoundsToTheNearestStep) {
  constexpr int64_t n = 32 * 512;
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.3f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = g(rng);
  std::map<DType, double> rms;
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1}) {
    std::vector<uint8_t> q(row_bytes(t, n));
    std::vector<float> y(n);
    quantize_row(t, x.data(), q.data(), n);
    dequantize_row(t, q.data(), y.data(), n);
    double se = 0, sx = 0, worst = 0;
    for (int64_t b = 0; b < n / 32; ++b) {
      float lo = x[b * 32], hi = lo, amax = 0;
      for (int j = 0; j < 32; ++j) {
        lo = std::min(lo, x[b * 32 + j]);
        hi = std::max(hi, x[b * 32 + j]);
        amax = std::max(amax, std::fabs(x[b * 32 + j]));
      }
      const double step = t == DType::Q4_1 ? (hi - lo) / 15 : t == DType::Q5_1 ? (hi - lo) / 31
                          : t == DType::Q5_0               ? amax / 16
                                                           : amax / 8;
      for (int j = 0; j < 32; ++j) {
        const double e = std::fabs(static_cast<double>(y[b * 32 + j]) - x[b * 32 + j]);
        worst = std::max(worst, e / step);
        se += e * e;
        sx += static_cast<double>(x[b * 32 + j]) * x[b * 32 + j];
      }
    }
    rms[t] = std::sqrt(se / sx);
    std::printf("%s: round trip relative RMS %.4f, worst error %.3f steps\n", dtype_name(t), rms[t], worst);
    EXPECT_LT(worst, t == DType::Q4_1 || t == DType::Q5_1 ? 0.52 : 1.01) << dtype_name(t);  // the symmetric types clip their top step
  }
  EXPECT_LT(rms[DType::Q4_1], rms[DType::Q4_0]);
  EXPECT_LT(rms[DType::Q5_0], 0.6 * rms[DType::Q4_0]);
  EXPECT_LT(rms[DType::Q5_1], 0.6 * rms[DType::Q4_1]);
}

TEST(LegacyQuants, NonFiniteScalesAreFound) {
  std::vector<float> x(32 * 8, 1.5f);
  for (DType t : kLegacy) {
    std::vector<uint8_t> q(row_bytes(t, 256));
    quantize_row(t, x.data(), q.data(), 256);
    EXPECT_EQ(first_non_finite(t, q.data(), 256), -1) << dtype_name(t);
    const size_t bs = static_cast<size_t>(dtype_info(t).type_size);
    const uint16_t inf = 0x7c00;
    std::vector<uint8_t> bad = q;
    std::memcpy(&bad[5 * bs], &inf, 2);  // block 5's d
    EXPECT_EQ(first_non_finite(t, bad.data(), 256), 5 * 32) << dtype_name(t);
    if (t != DType::Q5_0) {
      bad = q;
      std::memcpy(&bad[3 * bs + 2], &inf, 2);  // block 3's m
      EXPECT_EQ(first_non_finite(t, bad.data(), 256), 3 * 32) << dtype_name(t);
      std::memcpy(&bad[6 * bs], &inf, 2);  // and block 6's d: the first one counts
      EXPECT_EQ(first_non_finite(t, bad.data(), 256), 3 * 32) << dtype_name(t);
    }
  }
}

// llama.cpp's fallbacks for rows that are no whole super-blocks (DeepSeek-V2-Lite's and
// Qwen1.5-MoE's 1408-wide expert down projections).
TEST(LegacyQuants, MixesFallBackAsLlamaCppDoes) {
  cli::MixModel m;
  m.n_layer = 8;
  m.n_expert = 64;
  m.n_gqa = 1;
  using cli::QuantMix;
  using cli::quant_mix_tensor_type;
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q4_K_M, m, "blk.1.ffn_down_exps.weight", 1408), DType::Q5_0);
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q4_K_M, m, "blk.0.ffn_down_exps.weight", 1408), DType::Q8_0);  // Q6_K there
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q5_K_M, m, "blk.1.ffn_down_exps.weight", 1408), DType::Q5_1);
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q3_K_M, m, "blk.1.ffn_gate_exps.weight", 1408), DType::IQ4_NL);
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q2_K, m, "blk.1.ffn_gate_exps.weight", 1408), DType::IQ4_NL);
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q4_K_M, m, "blk.1.ffn_down_exps.weight", 1400), DType::F16);
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q4_K_M, m, "blk.1.ffn_down_exps.weight", 2048), DType::Q4_K);
}

// The f32 fixture quantised to each type: the logits move from the f32 ones by clearly
// less than q4_0 moves them for the 5-bit types, about as much for Q4_1 (16 steps from
// a minimum: on these zero-mean random weights no better than q4_0's), an order of
// magnitude less for q8_0 (a decoding error would move them by ~1).
TEST(LegacyQuants, QuantisedModelsStayCloseToF32) {
  const std::string in = testing::fixture_path("mixtral-f32.gguf");
  const std::unique_ptr<Model> f32 = Model::load(in);
  const std::vector<int32_t> prompt = {1, 5, 17, 42, 99, 7, 3, 250, 11, 64};
  const std::vector<float> ref = testing::all_logits(*f32, prompt);
  const int64_t n_vocab = f32->config().n_vocab;
  std::map<DType, double> change;
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0}) {
    const std::string out = testing::scratch_path(std::string("legacy_") + dtype_name(t)) + ".gguf";
    cli::quantize_model(in, out, t);
    const std::unique_ptr<Model> q = Model::load(out);
    const std::vector<float> got = testing::all_logits(*q, prompt);
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      num += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
      den += static_cast<double>(ref[i]) * ref[i];
    }
    change[t] = std::sqrt(num / den);
    std::printf("%s: logits' relative change from f32 %.4f (the largest of a position %.4f)\n", dtype_name(t),
                change[t], testing::max_rel_change(got, ref, n_vocab));
    std::remove(out.c_str());
  }
  EXPECT_LT(change[DType::Q5_0], 0.75 * change[DType::Q4_0]);
  EXPECT_LT(change[DType::Q5_1], 0.75 * change[DType::Q4_0]);
  EXPECT_LT(change[DType::Q4_1], 1.25 * change[DType::Q4_0]);
  EXPECT_LT(change[DType::Q8_0], 0.2 * change[DType::Q5_1]);
  EXPECT_LT(change[DType::Q4_0], 0.35);
}


// A Q4_K_M file of a model whose expert FFN is 384 wide (as DeepSeek-V2-Lite's 1408: no
// whole super-blocks, whole groups of 128 columns, so on AVX-512 VNNI its q5_0 rows are
// interleaved) has q5_0 / q8_0 down projections (a Q3_K_M file iq4_nl ones; an iq4_xs
// file keeps them q8_0 beside its iq4_xs gate and up); they and
// make-model's q5_1 / q4_1 models run all-resident and with a 25% LRU cache (experts
// repacked as they are read), the same greedy tokens each way (a batched step's tokens against each alone: Nl4Vnni.*
// and the int8 kernels' tests in matmul_test).
TEST(LegacyQuants, ModelsRunResidentAndOffloadedAlike) {
  const std::string bin = MOEFLOW_BINARY;
  const std::string shape =
      " --embd 256 --ff 384 --layers 3 --heads 4 --kv-heads 2 --head-dim 64 --experts 8 --top-k 2 --vocab 300";
  const std::string q8 = testing::scratch_path("legacy_q8") + ".gguf";
  const std::string q4km = testing::scratch_path("legacy_q4km") + ".gguf";
  const std::string q3km = testing::scratch_path("legacy_q3km") + ".gguf";
  const std::string iq4xs = testing::scratch_path("legacy_iq4xs") + ".gguf";
  const std::string q51 = testing::scratch_path("legacy_q51") + ".gguf";
  const std::string q41 = testing::scratch_path("legacy_q41") + ".gguf";
  int status = -1;
  std::string o = testing::run_command(bin + " make-model -o " + q8 + " --dtype q8_0" + shape + " 2>&1", &status);
  ASSERT_EQ(status, 0) << o;
  o = testing::run_command(bin + " quantize -i " + q8 + " -o " + q4km + " --type q4_k_m 2>&1", &status);
  ASSERT_EQ(status, 0) << o;
  o = testing::run_command(bin + " quantize -i " + q8 + " -o " + q3km + " --type q3_k_m 2>&1", &status);
  ASSERT_EQ(status, 0) << o;
  o = testing::run_command(bin + " quantize -i " + q8 + " -o " + iq4xs + " --type iq4_xs 2>&1", &status);
  ASSERT_EQ(status, 0) << o;
  for (const auto& [path, type] : {std::pair{q51, "q5_1"}, std::pair{q41, "q4_1"}}) {
    o = testing::run_command(bin + " make-model -o " + path + " --dtype " + type + shape + " 2>&1", &status);
    ASSERT_EQ(status, 0) << o;
  }
  {
    auto f = gguf::GgufFile::open(q4km);
    std::map<std::string, DType> types;
    for (const auto& t : f->tensors()) types[t.name] = t.dtype;
    EXPECT_EQ(types["blk.1.ffn_down_exps.weight"], DType::Q5_0);  // Q4_K asked, 384 columns
    EXPECT_EQ(types["blk.2.ffn_down_exps.weight"], DType::Q8_0);  // Q6_K asked
    EXPECT_EQ(types["blk.1.ffn_up_exps.weight"], DType::Q4_K);
    f = gguf::GgufFile::open(q3km);
    for (const auto& t : f->tensors()) types[t.name] = t.dtype;
    EXPECT_EQ(types["blk.1.ffn_down_exps.weight"], DType::IQ4_NL);  // Q3_K asked, 384 columns
    f = gguf::GgufFile::open(iq4xs);
    for (const auto& t : f->tensors()) types[t.name] = t.dtype;
    EXPECT_EQ(types["blk.1.ffn_up_exps.weight"], DType::IQ4_XS);
    EXPECT_EQ(types["blk.1.ffn_down_exps.weight"], DType::Q8_0) << "a lone type keeps rows it cannot hold as they were";
  }
  for (const std::string& m : {q4km, q3km, iq4xs, q51, q41}) {
    const std::string common = " -m " + m + " --prompt-tokens 5,17,42,99,7 -n 12 --temp 0 --ignore-eos --json --threads 2";
    const nlohmann::json all = run_json("run" + common);
    const nlohmann::json lru = run_json("run" + common + " --policy lru --expert-budget 25%");
    ASSERT_TRUE(all.contains("tokens")) << m;
    EXPECT_EQ(all["tokens"].size(), 12u);
    EXPECT_EQ(all["tokens"], lru["tokens"]) << m;
    EXPECT_GT(lru["cache"]["misses"].get<uint64_t>(), 0u) << m;
  }
  for (const std::string& p : {q8, q4km, q3km, iq4xs, q51, q41}) std::remove(p.c_str());
}

}  // namespace
}  // namespace moeflow

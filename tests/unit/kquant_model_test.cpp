// k-quant models end to end: llama.cpp's mixes (cli/quant_mix.h) tensor by tensor, and
// the real binary quantising a synthetic model to Q4_K_M and running it all resident and
// with experts streamed through a 25% cache (greedy tokens must agree).
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/quant_mix.h"
#include "format/gguf.h"
#include "run_json.h"
#include "test_paths.h"

namespace moeflow {
namespace {

using moeflow::testing::run_json;

using cli::MixModel;
using cli::QuantMix;
using cli::quant_mix_tensor_type;
using moeflow::testing::run_command;

std::string blk(int i, const char* what) { return "blk." + std::to_string(i) + "." + what; }

TEST(QuantMix, Q4KMFollowsLlamaCppRules) {
  MixModel m;
  m.n_layer = 8;
  m.n_expert = 4;
  m.n_gqa = 2;
  // use_more_bits over 8 layers: 0 (first eighth), 7 (last eighth), 3 and 6 (every third).
  for (int i = 0; i < 8; ++i) {
    const bool more = i == 0 || i == 3 || i == 6 || i == 7;
    const DType want = more ? DType::Q6_K : DType::Q4_K;
    EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q4_K_M, m, blk(i, "attn_v.weight"), 256), want) << i;
    EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q4_K_M, m, blk(i, "ffn_down_exps.weight"), 256), want) << i;
    EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q4_K_M, m, blk(i, "ffn_up_exps.weight"), 256), DType::Q4_K);
    EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q4_K_M, m, blk(i, "attn_q.weight"), 256), DType::Q4_K);
    EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q4_K_M, m, blk(i, "attn_k.weight"), 256), DType::Q4_K);
    EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q4_K_M, m, blk(i, "attn_output.weight"), 256), DType::Q4_K);
  }
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q4_K_M, m, "output.weight", 256), DType::Q6_K);
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q4_K_M, m, "token_embd.weight", 256), DType::Q4_K);
  m.tied_output = true;
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q4_K_M, m, "token_embd.weight", 256), DType::Q6_K);
  // Rows of 384 columns are no whole super-blocks: a 32-block type instead.
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q4_K_M, m, blk(1, "attn_q.weight"), 384), DType::Q5_0);
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q3_K_M, m, blk(1, "attn_q.weight"), 384), DType::IQ4_NL);
  // Eight experts (Mixtral): attn_v and attn_k q8_0, attn_output q5_k.
  m.n_expert = 8;
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q4_K_M, m, blk(1, "attn_v.weight"), 256), DType::Q8_0);
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q4_K_M, m, blk(1, "attn_k.weight"), 256), DType::Q8_0);
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q4_K_M, m, blk(1, "attn_output.weight"), 256), DType::Q5_K);
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q5_K_M, m, blk(1, "attn_output.weight"), 256), DType::Q5_K);
}

TEST(QuantMix, OtherMixes) {
  MixModel m;
  m.n_layer = 32;
  m.n_expert = 128;
  m.n_gqa = 8;
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q4_K_S, m, blk(3, "attn_v.weight"), 256), DType::Q5_K);
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q4_K_S, m, blk(4, "attn_v.weight"), 256), DType::Q4_K);
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q4_K_S, m, blk(3, "ffn_down_exps.weight"), 256), DType::Q5_K);
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q4_K_S, m, blk(4, "ffn_down_exps.weight"), 256), DType::Q4_K);
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q3_K_M, m, blk(1, "attn_v.weight"), 256), DType::Q5_K);
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q3_K_M, m, blk(2, "attn_v.weight"), 256), DType::Q4_K);
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q3_K_M, m, blk(1, "ffn_down_exps.weight"), 256), DType::Q5_K);
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q3_K_M, m, blk(6, "ffn_down_exps.weight"), 256), DType::Q4_K);  // (6-4)%3==2
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q3_K_M, m, blk(5, "ffn_down_exps.weight"), 256), DType::Q3_K);
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q3_K_M, m, blk(5, "attn_output.weight"), 256), DType::Q4_K);
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q3_K_M, m, blk(5, "ffn_gate_exps.weight"), 256), DType::Q3_K);
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q2_K, m, blk(5, "attn_v.weight"), 256), DType::Q4_K);  // gqa 8
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q2_K, m, blk(5, "ffn_down_exps.weight"), 256), DType::Q3_K);
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q5_K_S, m, blk(5, "attn_v.weight"), 256), DType::Q5_K);
  EXPECT_EQ(quant_mix_tensor_type(QuantMix::Q6_K, m, blk(5, "ffn_down_exps.weight"), 256), DType::Q6_K);
  QuantMix mix;
  EXPECT_TRUE(cli::quant_mix_from_name("Q4_K_M", mix));
  EXPECT_EQ(mix, QuantMix::Q4_K_M);
  EXPECT_FALSE(cli::quant_mix_from_name("q4_k", mix));  // a dtype
}


// make-model (q8_0) -> quantize q4_k_m, and make-model --dtype q6_k directly: each runs,
// and greedy tokens agree between all-resident weights and experts read by byte range
// into a 25% LRU cache.
TEST(KquantModel, RunsResidentAndOffloadedWithTheSameTokens) {
  const std::string bin = MOEFLOW_BINARY;
  const std::string q8 = moeflow::testing::scratch_path("kq_q8") + ".gguf";
  const std::string q4km = moeflow::testing::scratch_path("kq_q4km") + ".gguf";
  const std::string q6 = moeflow::testing::scratch_path("kq_q6") + ".gguf";
  const std::string shape =
      " --embd 256 --ff 256 --layers 3 --heads 4 --kv-heads 2 --head-dim 64 --experts 8 --top-k 2 --vocab 300";
  int status = -1;
  std::string o = run_command(bin + " make-model -o " + q8 + " --dtype q8_0" + shape + " 2>&1", &status);
  ASSERT_EQ(status, 0) << o;
  o = run_command(bin + " quantize -i " + q8 + " -o " + q4km + " --type q4_k_m 2>&1", &status);
  ASSERT_EQ(status, 0) << o;
  o = run_command(bin + " make-model -o " + q6 + " --dtype q6_k" + shape + " 2>&1", &status);
  ASSERT_EQ(status, 0) << o;
  {
    auto f = gguf::GgufFile::open(q4km);
    std::map<std::string, DType> types;
    for (const auto& t : f->tensors()) types[t.name] = t.dtype;
    EXPECT_EQ(types["blk.1.ffn_up_exps.weight"], DType::Q4_K);
    EXPECT_EQ(types["blk.1.attn_q.weight"], DType::Q4_K);
    EXPECT_EQ(types["output.weight"], DType::Q6_K);
    EXPECT_EQ(types["blk.0.attn_v.weight"], DType::Q8_0);  // eight experts
    EXPECT_EQ(types["blk.1.attn_output.weight"], DType::Q5_K);
    EXPECT_EQ(types["blk.2.ffn_down_exps.weight"], DType::Q6_K);  // use_more_bits(2, 3): the last eighth
    EXPECT_EQ(types["blk.1.ffn_down_exps.weight"], DType::Q4_K);
    EXPECT_EQ(types["blk.1.ffn_gate_inp.weight"], DType::F32);    // router kept
    EXPECT_EQ(f->get("general.file_type").as_int("general.file_type"), 15);
  }
  for (const std::string& m : {q4km, q6}) {
    const std::string common = " -m " + m + " --prompt-tokens 5,17,42,99,7 -n 16 --temp 0 --ignore-eos --json --threads 2";
    const nlohmann::json all = run_json("run" + common);
    const nlohmann::json lru = run_json("run" + common + " --policy lru --expert-budget 25%");
    ASSERT_TRUE(all.contains("tokens")) << m;
    EXPECT_EQ(all["tokens"].size(), 16u);
    EXPECT_EQ(all["tokens"], lru["tokens"]) << m;
    ASSERT_TRUE(lru.contains("cache"));
    EXPECT_GT(lru["cache"]["misses"].get<uint64_t>(), 0u);
  }
  std::remove(q8.c_str());
  std::remove(q4km.c_str());
  std::remove(q6.c_str());
}

}  // namespace
}  // namespace moeflow

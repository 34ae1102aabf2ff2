// `moeflow quantize`: requantised fixtures keep their metadata, convert exactly the
// weight matrices, dequantise to within the target type's error, and still run close
// to the original.
#include <gtest/gtest.h>

#include <cstring>

#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/perplexity.h"
#include "engine/transformer.h"
#include "base/error.h"
#include "format/gguf.h"
#include "kernels/cpu/thread_pool.h"
#include "model/model_weights.h"
#include "test_paths.h"

namespace moeflow {
namespace {

std::vector<float> dequant(const gguf::TensorInfo& t) {
  std::vector<float> v(t.n_elements());
  const int64_t cols = static_cast<int64_t>(t.dims[0]);
  const int64_t rows = static_cast<int64_t>(t.n_elements()) / cols;
  for (int64_t r = 0; r < rows; ++r)
    dequantize_row(t.dtype, t.data + row_bytes(t.dtype, cols) * static_cast<size_t>(r), v.data() + r * cols, cols);
  return v;
}

std::vector<float> last_logits(const Model& m, const std::vector<int32_t>& toks) {
  ThreadPool pool(1);
  Transformer tf(m, &pool, 64);
  std::vector<float> logits;
  tf.eval(toks.data(), static_cast<int64_t>(toks.size()), true, logits);
  return logits;
}

TEST(Quantize, Q8_0KeepsMetadataConvertsMatricesWithinErrorAndStillRuns) {
  const std::string in = testing::fixture_path("mixtral-f32.gguf");
  const std::string out = testing::scratch_path("quant") + ".gguf";
  const cli::QuantizeStats st = cli::quantize_model(in, out, DType::Q8_0);
  auto a = gguf::GgufFile::open(in);
  auto b = gguf::GgufFile::open(out);
  // Metadata: every key copied, file type updated.
  for (const auto& [k, v] : a->metadata()) {
    ASSERT_TRUE(b->has(k)) << k;
    if (k != "general.file_type") {
      EXPECT_EQ(b->get(k).to_display(1000), v.to_display(1000)) << k;
    }
  }
  EXPECT_EQ(b->get("general.file_type").as_int("t"), 7);
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  EXPECT_EQ(st.n_tensors, static_cast<int64_t>(a->tensors().size()));
  int64_t converted = 0;
  for (const auto& ta : a->tensors()) {
    const gguf::TensorInfo& tb = b->tensor(ta.name);
    EXPECT_EQ(ta.dims, tb.dims) << ta.name;
    const bool matrix = ta.dims.size() >= 2 && ta.name.find("ffn_gate_inp") == std::string::npos;
    EXPECT_EQ(tb.dtype, matrix ? DType::Q8_0 : DType::F32) << ta.name;
    converted += matrix;
    const std::vector<float> x = dequant(ta), y = dequant(tb);
    // q8_0: |error| <= d/2 with d = amax/127 per block of 32.
    for (size_t blk = 0; blk < x.size(); blk += 32) {
      float amax = 0;
      for (size_t i = blk; i < std::min(x.size(), blk + 32); ++i) amax = std::max(amax, std::abs(x[i]));
      // d = amax/127 is stored as f16 (relative error 2^-11, times |q| <= 127).
      const float tol = matrix ? amax / 127.0f * (0.5f + 127.0f / 2048.0f) * 1.01f + 1e-7f : 0.0f;
      for (size_t i = blk; i < std::min(x.size(), blk + 32); ++i)
        ASSERT_LE(std::abs(x[i] - y[i]), tol) << ta.name << " element " << i;
    }
  }
  EXPECT_EQ(st.n_converted, converted);
  EXPECT_GT(converted, 0);
  EXPECT_LT(st.bytes_out, st.bytes_in);

  // The quantised model loads and gives nearly the same logits.
  auto ma = Model::load(in);
  auto mb = Model::load(out);
  const std::vector<int32_t> toks = {256, 5, 17, 99, 3, 250, 42, 7};
  const std::vector<float> la = last_logits(*ma, toks), lb = last_logits(*mb, toks);
  ASSERT_EQ(la.size(), lb.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < la.size(); ++i) {
    num += (la[i] - lb[i]) * static_cast<double>(la[i] - lb[i]);
    den += static_cast<double>(la[i]) * la[i];
  }
  EXPECT_LT(std::sqrt(num / den), 0.02);
  std::remove(out.c_str());
}

TEST(Quantize, RoundTripsThroughEveryTypeAndBackToF32) {
  const std::string in = testing::fixture_path("mixtral-f32.gguf");
  for (DType t : {DType::F16, DType::BF16, DType::Q4_0, DType::F32}) {
    const std::string out = testing::scratch_path("quant_rt") + ".gguf";
    const std::string back = testing::scratch_path("quant_back") + ".gguf";
    cli::quantize_model(in, out, t);
    cli::quantize_model(out, back, DType::F32);
    auto b = gguf::GgufFile::open(back);
    for (const auto& tb : b->tensors()) EXPECT_EQ(tb.dtype, DType::F32) << tb.name;
    EXPECT_NO_THROW(Model::load(back));
    std::remove(out.c_str());
    std::remove(back.c_str());
  }
}

TEST(Quantize, KeepsRowsThatAreNotWholeBlocks) {
  // qwen3moe-q8_0 has q8_0 matrices; to q4_0 they convert (rows of 64/32); its
  // 1-D q/k norm tensors stay f32.
  const std::string in = testing::fixture_path("qwen3moe-q8_0.gguf");
  const std::string out = testing::scratch_path("quant_q4") + ".gguf";
  cli::quantize_model(in, out, DType::Q4_0);
  auto b = gguf::GgufFile::open(out);
  for (const auto& t : b->tensors()) {
    if (t.dims.size() == 1) {
      EXPECT_EQ(t.dtype, DType::F32) << t.name;
    } else if (t.name.find("ffn_gate_inp") == std::string::npos && t.dims[0] % 32 == 0) {
      EXPECT_EQ(t.dtype, DType::Q4_0) << t.name;
    }
  }
  EXPECT_NO_THROW(Model::load(out));
  std::remove(out.c_str());
}

TEST(Quantize, OverrideKvSetsMetadataAndKeepsTensorsByteForByte) {
  // Same type in and out: every tensor is copied as it is; only the keys change.
  const std::string in = testing::fixture_path("qwen3moe-q8_0.gguf");
  const std::string out = testing::scratch_path("okv") + ".gguf";
  cli::quantize_model(in, out, DType::Q8_0, {},
                      {cli::parse_override_kv("tokenizer.ggml.pre=str:gpt-2"),
                       cli::parse_override_kv("moeflow.test.n=int:-7"), cli::parse_override_kv("moeflow.test.b=bool:true"),
                       cli::parse_override_kv("moeflow.test.f=float:0.5")});
  auto a = gguf::GgufFile::open(in), b = gguf::GgufFile::open(out);
  EXPECT_EQ(b->find("tokenizer.ggml.pre")->as_string("pre"), "gpt-2");
  EXPECT_EQ(b->find("moeflow.test.n")->type, gguf::ValueType::INT32);
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (size_t i = 0; i < a->tensors().size(); ++i) {
    const auto &ta = a->tensors()[i], &tb = b->tensors()[i];
    ASSERT_EQ(ta.nbytes, tb.nbytes) << ta.name;
    EXPECT_EQ(std::memcmp(ta.data, tb.data, ta.nbytes), 0) << ta.name;
  }
  std::remove(out.c_str());
  for (const char* bad : {"novalue", "=str:x", "k=str", "k=int:1.5", "k=int:99999999999", "k=bool:yes",
                          "k=float:abc", "k=u8:1"})
    EXPECT_THROW(cli::parse_override_kv(bad), cli::UsageError) << bad;
}

TEST(Quantize, UnimplementedPreTokenizerIsNamedInAWarning) {
  // A byte-level BPE model whose pre-tokenizer regex we do not implement still runs,
  // with a warning that names the file, the key and its value.
  const std::string out = testing::scratch_path("pre") + ".gguf";
  cli::quantize_model(testing::fixture_path("qwen3moe-q8_0.gguf"), out, DType::Q8_0, {},
                      {cli::parse_override_kv("tokenizer.ggml.pre=str:tekken")});
  const testing::BinaryResult r = testing::run_moeflow("run -m " + out + " -p hello -n 1 -t 1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(out + ": tokenizer.ggml.pre 'tekken' names a pre-tokenizer moeflow does not implement"),
            std::string::npos) << r.out;
  std::remove(out.c_str());
}

TEST(Quantize, RejectsBadInputs) {
  const std::string in = testing::fixture_path("mixtral-f32.gguf");
  EXPECT_THROW(cli::quantize_model(in, in, DType::Q8_0), InputError);
  EXPECT_THROW(cli::quantize_model("/nonexistent.gguf", testing::scratch_path("q") + ".gguf", DType::Q8_0), InputError);
  EXPECT_THROW(cli::quantize_model(testing::fixture_path("prompt.txt"), testing::scratch_path("q") + ".gguf", DType::Q8_0),
               InputError);
}

using moeflow::testing::run_command;

TEST(QuantizeCli, FlagsAndErrors) {
  const std::string bin = MOEFLOW_BINARY;
  const std::string in = testing::fixture_path("mixtral-f32.gguf");
  const std::string out = testing::scratch_path("quant_cli") + ".gguf";
  int status = -1;
  std::string o = run_command(bin + " quantize -i " + in + " -o " + out + " --type q8_0 2>&1", &status);
  EXPECT_EQ(status, 0) << o;
  EXPECT_NE(o.find("q8_0"), std::string::npos) << o;
  o = run_command(bin + " run -m " + out + " --prompt-tokens 1,2,3 -n 4 --temp 0 2>&1", &status);
  EXPECT_EQ(status, 0) << o;
  o = run_command(bin + " quantize -i " + in + " -o " + out + " --type tq1_0 2>&1", &status);
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_NE(o.find("unknown type"), std::string::npos) << o;
  run_command(bin + " quantize -i " + in + " --type q8_0 2>&1", &status);
  EXPECT_EQ(WEXITSTATUS(status), 2);
  o = run_command(bin + " quantize -i " + in + " -o " + in + " --type q8_0 2>&1", &status);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_NE(o.find("same file"), std::string::npos) << o;
  std::remove(out.c_str());
}

}  // namespace
}  // namespace moeflow

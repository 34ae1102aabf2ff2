// The lattice i-quants (tensor/iq_lattice.h): the grids against checksums of ggml's
// tables, the sign table's rule, dequantisation of fixed blocks against ggml's own
// dequantize_row_* output (checksums of the floats it gives for the same bytes), a
// hand-decoded weight of each type, ids and sizes, non-finite scales found, the writer's
// refusal; and a model whose experts are in all seven types: its logits equal those of
// the same model with those experts dequantised to f32, and it gives the same tokens
// resident and offloaded.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/transformer.h"
#include "kernels/cpu/int8_avx2.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/nl4_vnni.h"
#include "kernels/cpu/q4_vnni.h"
#include "kernels/cpu/thread_pool.h"
#include "format/gguf.h"
#include "tensor/dtype.h"
#include "tensor/finite_check.h"
#include "tensor/iq_lattice.h"
#include "eval_logits.h"
#include "alone_and_together.h"
#include "float_vectors.h"
#include "int8_rounded.h"
#include "run_json.h"
#include "test_paths.h"

namespace moeflow {
namespace {

using moeflow::testing::run_json;

const DType kLattice[] = {DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS,
                          DType::IQ3_S,   DType::IQ1_S,  DType::IQ1_M};

uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// FNV-1a of ggml's tables (iq2xxs_grid ... iq1s_grid, each point's bytes in order), taken
// from llama.cpp's ggml-common.h at c392e5094.
TEST(IqGrid, PointsMatchTheFormatsChecksums) {
  const struct {
    IqGrid g;
    int points;
    uint64_t sum;
  } grids[] = {{IqGrid::Iq2xxs, 256, 0xbb4ee025b5ac6e8eull}, {IqGrid::Iq2xs, 512, 0xc9b1ee61e79909bdull},
               {IqGrid::Iq2s, 1024, 0x123edd38a3b62b90ull},  {IqGrid::Iq3xxs, 256, 0xdfa5dc83d6a155d5ull},
               {IqGrid::Iq3s, 512, 0xfa37020c25b44829ull},   {IqGrid::Iq1s, 2048, 0x6703ed863501ae2eull}};
  for (const auto& c : grids) {
    ASSERT_EQ(iq_grid_points(c.g), c.points);
    std::vector<uint8_t> bytes;
    for (int i = 0; i < c.points; ++i) {
      const uint8_t* p = iq_grid_point(c.g, i);
      bytes.insert(bytes.end(), p, p + iq_grid_width(c.g));
    }
    EXPECT_EQ(fnv1a(bytes.data(), bytes.size()), c.sum) << static_cast<int>(c.g);
  }
  // The sign bytes: i with an eighth bit that makes the count of set bits even.
  EXPECT_EQ(iq_sign_byte(0), 0);
  EXPECT_EQ(iq_sign_byte(1), 129);
  EXPECT_EQ(iq_sign_byte(3), 3);
  EXPECT_EQ(iq_sign_byte(127), 255);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(__builtin_popcount(iq_sign_byte(i)) % 2, 0) << i;
}

// The blocks both sides decode: bytes from an LCG, each super-block's scale 0.5 (IQ1_M's
// f16 is the top nibbles of its four scale words).
std::vector<uint8_t> lcg_blocks(DType t, int nb, uint32_t seed, int scale_exp = -1) {
  std::vector<uint8_t> out(static_cast<size_t>(dtype_info(t).type_size) * static_cast<size_t>(nb));
  random_lattice_blocks(static_cast<int>(t), nb, seed, scale_exp, out.data());
  return out;
}

// FNV-1a of the float bits ggml's dequantize_row_iq* (llama.cpp c392e5094) gave for
// lcg_blocks(t, 8, 1000 + k): bit-equal dequantisation.
TEST(IqLattice, DequantizeGivesGgmlsFloats) {
  const uint64_t ggml_sums[] = {0x8d3f092072b62fc7ull, 0x598a44f513ffa5a1ull, 0x14c576de67958638ull,
                                0x6db68ac0cd235532ull, 0x6d27a13af5f78bd7ull, 0x8186cf4b3e87ea2full,
                                0x9bfa3201eef74a66ull};
  for (int k = 0; k < 7; ++k) {
    const DType t = kLattice[k];
    const std::vector<uint8_t> blocks = lcg_blocks(t, 8, 1000u + static_cast<uint32_t>(k));
    std::vector<float> y(8 * 256);
    dequantize_row(t, blocks.data(), y.data(), 8 * 256);
    EXPECT_EQ(fnv1a(reinterpret_cast<const uint8_t*>(y.data()), y.size() * 4), ggml_sums[k]) << dtype_name(t);
  }
}

// One weight of each type decoded by hand from the format (tensor/iq_lattice.h).
TEST(IqLattice, OneWeightByHand) {
  const float d = 0.5f;
  {  // IQ2_XXS, block 1, group 2, weight 5: index byte 2 of a0, signs 7 bits at 14 of a1, s = a1 >> 28.
    const std::vector<uint8_t> blk = lcg_blocks(DType::IQ2_XXS, 1, 7);
    uint32_t a[2];
    std::memcpy(a, blk.data() + 2 + 8 * 1, 8);
    const uint8_t g = iq_grid_point(IqGrid::Iq2xxs, a[0] >> 16 & 255)[5];
    const bool neg = iq_sign_byte(a[1] >> 14 & 127) >> 5 & 1;
    std::vector<float> y(256);
    dequantize_row(DType::IQ2_XXS, blk.data(), y.data(), 256);
    EXPECT_EQ(y[32 + 16 + 5], d * (0.5f + static_cast<float>(a[1] >> 28)) * 0.25f * g * (neg ? -1.0f : 1.0f));
  }
  {  // IQ1_S, block 3, group 1, weight 7: index qs[13] | bits 3..5 of qh[3] << 8.
    const std::vector<uint8_t> blk = lcg_blocks(DType::IQ1_S, 1, 9);
    uint16_t qh;
    std::memcpy(&qh, blk.data() + 34 + 2 * 3, 2);
    const auto v = static_cast<int8_t>(iq_grid_point(IqGrid::Iq1s, blk[2 + 13] | (qh >> 3 & 7) << 8)[7]);
    const float scale = d * static_cast<float>(2 * (qh >> 12 & 7) + 1), delta = qh & 0x8000 ? -0.125f : 0.125f;
    std::vector<float> y(256);
    dequantize_row(DType::IQ1_S, blk.data(), y.data(), 256);
    EXPECT_EQ(y[96 + 8 + 7], scale * (static_cast<float>(v) + delta));
  }
}

TEST(IqLattice, IdsSizesChecksAndNoWriter) {
  const struct {
    DType t;
    uint32_t id;
    const char* name;
    int bytes;
  } types[] = {{DType::IQ2_XXS, 16, "iq2_xxs", 66}, {DType::IQ2_XS, 17, "iq2_xs", 74}, {DType::IQ3_XXS, 18, "iq3_xxs", 98},
               {DType::IQ1_S, 19, "iq1_s", 50},     {DType::IQ3_S, 21, "iq3_s", 110},  {DType::IQ2_S, 22, "iq2_s", 82},
               {DType::IQ1_M, 29, "iq1_m", 56}};
  for (const auto& c : types) {
    DType t;
    ASSERT_TRUE(dtype_from_ggml(c.id, t));
    EXPECT_EQ(t, c.t);
    EXPECT_STREQ(dtype_name(t), c.name);
    EXPECT_EQ(dtype_info(t).block_size, 256);
    EXPECT_EQ(dtype_info(t).type_size, c.bytes);
    EXPECT_TRUE(dtype_is_quantized(t) && dtype_is_lattice_iquant(t));
    EXPECT_THROW(row_bytes(t, 1408), std::invalid_argument);
    std::vector<float> x(256, 1.0f);
    std::vector<uint8_t> q(static_cast<size_t>(c.bytes));
    EXPECT_THROW(quantize_row(t, x.data(), q.data(), 256), std::invalid_argument) << c.name;
    std::vector<uint8_t> blocks = lcg_blocks(t, 4, 3);
    EXPECT_EQ(first_non_finite(t, blocks.data(), 1024), -1) << c.name;
    if (t != DType::IQ1_M) {
      blocks[2 * static_cast<size_t>(c.bytes) + 1] = 0x7c;  // block 2's d: infinity
      blocks[2 * static_cast<size_t>(c.bytes)] = 0x00;
      EXPECT_EQ(first_non_finite(t, blocks.data(), 1024), 512) << c.name;
    }
  }
  int status = -1;
  const std::string o = testing::run_command(std::string(MOEFLOW_BINARY) + " quantize -i " +
                                                 testing::fixture_path("mixtral-f32.gguf") + " -o " +
                                                 testing::scratch_path("iq_out") + ".gguf --type iq2_xxs 2>&1",
                                             &status);
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_NE(o.find("does not write it"), std::string::npos) << o;
}

// The AVX2 int8 kernels (int8_avx2.h: every AVX2 CPU, the VNNI kernels switched on or
// off) on int8 activations against the float64 product of the dequantised weights with
// the rounded activation; the generic f32 path on int16 ones
// against the f32 product; two threads, one row at a time and a batched step's tokens
// giving the same floats.
// The VNNI kernels switched off for the second pass (the lattice types take the AVX2
// kernel either way; the other kernels around it change).
struct VnniOff {
  bool was = cpu::q4_vnni_enabled();
  explicit VnniOff(bool off) { if (off) cpu::set_q4_vnni_enabled(false); }
  ~VnniOff() { cpu::set_q4_vnni_enabled(was); }
};

TEST(IqLattice, KernelsMatchTheReference) {
  using namespace cpu;
  ThreadPool pool(2);
  std::mt19937 rng(31);
  for (bool off : {false, true}) {
  const VnniOff sw(off);
  for (DType t : kLattice) {
    const bool vnni = int8_avx2_type(t, RowLayout::gguf);  // the int8 kernel, with or without VNNI
    double worst = 0;
    for (int64_t rows : {1, 5, 13}) {
      for (int64_t cols : {256, 768}) {
        const size_t rb = row_bytes(t, cols);
        std::vector<uint8_t> W(rb * static_cast<size_t>(rows) + 1);  // +1: rows need not be aligned
        uint8_t* w = W.data() + 1;
        random_lattice_blocks(static_cast<int>(t), static_cast<int>(rows * cols / 256),
                              static_cast<uint32_t>(rows * 7 + cols), -6, w);
        const std::vector<float> x = testing::random_vec(static_cast<size_t>(cols), rng), x8 = testing::int8_rounded(x);
        const size_t n = static_cast<size_t>(rows);
        std::vector<float> ref8(n), ref(n), y(n, NAN), y2(n, NAN), y16(n, NAN);
        matvec_reference(t, w, rows, cols, x8.data(), ref8.data());
        matvec_reference(t, w, rows, cols, x.data(), ref.data());
        const MatvecJob job{t, RowLayout::gguf, w, rows, cols, x.data(), y.data(), true};
        matvec_batch(&job, 1, nullptr);
        const double e = testing::rel_err(y, vnni ? ref8 : ref);
        worst = std::max(worst, e);
        EXPECT_LT(e, 1e-5) << dtype_name(t) << " " << rows << "x" << cols;
        const MatvecJob job2{t, RowLayout::gguf, w, rows, cols, x.data(), y2.data(), true};
        matvec_batch(&job2, 1, &pool);
        EXPECT_EQ(y2, y) << "two threads";
        const MatvecJob job16{t, RowLayout::gguf, w, rows, cols, x.data(), y16.data(), false};
        matvec_batch(&job16, 1, nullptr);
        EXPECT_LT(testing::rel_err(y16, ref), 1e-5) << dtype_name(t) << ": the generic path";
      }
    }
    std::printf("  %s (%s): against the reference %.2e (relative RMS)\n", dtype_name(t),
                vnni ? "AVX2, int8 activations" : "generic", worst);
    const int64_t rows = 41, cols = 512, n_tok = 7;
    const size_t rb = row_bytes(t, cols);
    std::vector<uint8_t> w(rb * rows);
    random_lattice_blocks(static_cast<int>(t), static_cast<int>(rows * cols / 256), 77, -6, w.data());
    const std::vector<float> X = testing::random_vec(static_cast<size_t>(n_tok * cols), rng);
    const auto [alone, together] = testing::alone_and_together(t, w.data(), rows, cols, X, n_tok, pool);
    EXPECT_EQ(together, alone) << dtype_name(t);
  }
  }
}


// make-model's f32 model with its experts replaced by random i-quant blocks of all
// seven types (scale 1/512), and its twin with those blocks dequantised to f32.
TEST(IqLattice, ModelEqualsItsDequantisedTwinAndOffloadsLosslessly) {
  const std::string bin = MOEFLOW_BINARY;
  const std::string f32 = testing::scratch_path("iq_f32") + ".gguf";
  int status = -1;
  const std::string o = testing::run_command(
      bin + " make-model -o " + f32 +
          " --dtype f32 --embd 256 --ff 256 --layers 3 --heads 4 --kv-heads 2 --head-dim 64 --experts 8 --top-k 2"
          " --vocab 300 2>&1",
      &status);
  ASSERT_EQ(status, 0) << o;
  const std::map<std::string, DType> types = {
      {"blk.0.ffn_gate_exps.weight", DType::IQ2_XXS}, {"blk.0.ffn_up_exps.weight", DType::IQ2_XS},
      {"blk.0.ffn_down_exps.weight", DType::IQ2_S},   {"blk.1.ffn_gate_exps.weight", DType::IQ3_XXS},
      {"blk.1.ffn_up_exps.weight", DType::IQ3_S},     {"blk.1.ffn_down_exps.weight", DType::IQ1_S},
      {"blk.2.ffn_gate_exps.weight", DType::IQ1_M},   {"blk.2.ffn_up_exps.weight", DType::IQ2_XXS},
      {"blk.2.ffn_down_exps.weight", DType::IQ3_S}};
  const std::string iq = testing::scratch_path("iq_model") + ".gguf";
  const std::string twin = testing::scratch_path("iq_twin") + ".gguf";
  {
    auto f = gguf::GgufFile::open(f32);
    gguf::GgufWriter wq(f->alignment()), wt(f->alignment());
    for (const std::string& k : f->metadata_order()) {
      wq.set(k, f->get(k));
      wt.set(k, f->get(k));
    }
    uint32_t seed = 1;
    for (const auto& t : f->tensors()) {
      std::vector<uint8_t> bytes(t.data, t.data + t.nbytes);
      const auto it = types.find(t.name);
      if (it == types.end()) {
        wq.add_tensor(t.name, t.dims, t.dtype, bytes);
        wt.add_tensor(t.name, t.dims, t.dtype, bytes);
        continue;
      }
      const DType q = it->second;
      const int64_t n = static_cast<int64_t>(t.n_elements());
      const std::vector<uint8_t> blocks = lcg_blocks(q, static_cast<int>(n / 256), seed++, -9);
      std::vector<float> w(static_cast<size_t>(n));
      dequantize_row(q, blocks.data(), w.data(), n);
      const auto* wb = reinterpret_cast<const uint8_t*>(w.data());
      wq.add_tensor(t.name, t.dims, q, blocks);
      wt.add_tensor(t.name, t.dims, DType::F32, std::vector<uint8_t>(wb, wb + w.size() * 4));
    }
    wq.write(iq);
    wt.write(twin);
  }
  const std::unique_ptr<Model> mq = Model::load(iq), mt = Model::load(twin);
  const std::vector<int32_t> prompt = {1, 5, 17, 42, 99, 7, 3, 250};
  const std::vector<float> lq = testing::all_logits(*mq, prompt), lt = testing::all_logits(*mt, prompt);
  const double change = testing::max_rel_change(lq, lt, mq->config().n_vocab);
  std::printf("i-quant experts against their f32 twin: largest relative change of a position's logits %.2e\n", change);
  EXPECT_LT(change, 1e-5);
  const std::string common = " -m " + iq + " --prompt-tokens 5,17,42,99,7 -n 12 --temp 0 --ignore-eos --json --threads 2";
  const nlohmann::json all = run_json("run" + common);
  const nlohmann::json lru = run_json("run" + common + " --policy lru --expert-budget 25%");
  ASSERT_TRUE(all.contains("tokens"));
  EXPECT_EQ(all["tokens"].size(), 12u);
  EXPECT_EQ(all["tokens"], lru["tokens"]);
  EXPECT_GT(lru["cache"]["misses"].get<uint64_t>(), 0u);
  for (const std::string& p : {f32, iq, twin}) std::remove(p.c_str());
}

}  // namespace
}  // namespace moeflow

// CpuBackend::products: which arithmetic a product of several tokens takes. Where the
// weights take the integer mat-vec kernels (integer_kernels_for: rows interleaved in
// fours on AVX-512 VNNI CPUs; k-quant, IQ4 and MXFP4 rows in GGUF's layout on int8
// activations) every token takes them, a prompt's as well as decode's, so each token's
// row of the product equals that token's one-token product bit for bit; the other
// products keep the f32 mat-mul.
#include "backend/cpu/cpu_backend.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/q4_vnni.h"
#include "tensor/dtype.h"

namespace moeflow {
namespace {

struct Matrix {
  DType dtype;
  RowLayout layout;
  int64_t rows, cols;
  std::vector<uint8_t> bytes;  // in `layout`
};

Matrix random_matrix(const CpuBackend& be, DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const size_t rb = row_bytes(t, cols);
  std::vector<uint8_t> gguf(rb * static_cast<size_t>(rows));
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (float& v : row) v = dist(rng);
    quantize_row(t, row.data(), gguf.data() + rb * static_cast<size_t>(r), cols);
  }
  Matrix m{t, be.layout_for(t, rows, cols), rows, cols, std::vector<uint8_t>(gguf.size())};
  be.place(m.layout, t, gguf.data(), rows, cols, m.bytes.data());
  return m;
}

TEST(CpuBackend, PromptTokensTakeTheDecodeArithmeticOnTheIntegerKernels) {
  std::mt19937 rng(17);
  const int64_t rows = 256, cols = 512, n_tok = 37;  // several of the kernels' passes of tokens, and a rest
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> X(static_cast<size_t>(n_tok * cols));
  for (float& v : X) v = dist(rng);
  int gguf_integer = 0;  // products in GGUF's layout that took the integer kernels
  for (const char* act : {"int16", "int8", "auto"}) {
    for (bool repack : {true, false}) {
      CpuBackend be(2, repack, parse_activation_precision(act));
      for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::Q3_K, DType::Q2_K}) {
        const Matrix m = random_matrix(be, t, rows, cols, rng);
        const std::string what = std::string(dtype_name(t)) + " " + row_layout_name(m.layout) + ", " + act;
        std::vector<float> chunk(static_cast<size_t>(n_tok * rows)), alone(chunk.size());
        const Product p{t, m.layout, m.bytes.data(), rows, cols, X.data(), n_tok, chunk.data()};
        be.products(&p, 1);
        for (int64_t k = 0; k < n_tok; ++k) {
          const Product one{t, m.layout, m.bytes.data(), rows, cols, X.data() + k * cols, 1, alone.data() + k * rows};
          be.products(&one, 1);
        }
        if (integer_kernels_for(t, m.layout, int8_activations_for(parse_activation_precision(act), t))) {
          for (size_t i = 0; i < chunk.size(); ++i)
            ASSERT_EQ(chunk[i], alone[i]) << what << ": token " << i / rows << " row " << i % rows;
          gguf_integer += m.layout == RowLayout::gguf;
          continue;
        }
        // The f32 mat-mul, whose floats are cpu::matmul's.
        std::vector<float> f32(chunk.size());
        cpu::matmul(t, m.bytes.data(), rows, cols, X.data(), n_tok, f32.data(), nullptr, m.layout);
        for (size_t i = 0; i < chunk.size(); ++i) ASSERT_EQ(chunk[i], f32[i]) << what;
      }
      if (repack && cpu::q4_vnni_enabled()) {
        EXPECT_EQ(be.layout_for(DType::Q4_0, rows, cols), RowLayout::rows_x4) << act << ": the test covers no interleaved rows";
      }
    }
  }
  // Q2_K / Q3_K (never interleaved) and --no-repack's k-quants on int8 activations.
  if (cpu::q4_vnni_enabled()) {
    EXPECT_GE(gguf_integer, 8) << "the test covers no k-quant rows in GGUF's layout";
  }
}

// The integer prompt products stay within their activations' rounding of the f32
// mat-mul on the same (interleaved) weights.
TEST(CpuBackend, PromptProductsOnInterleavedRowsAreCloseToF32) {
  if (!cpu::q4_vnni_enabled()) GTEST_SKIP() << "no AVX-512 VNNI: no interleaved rows";
  std::mt19937 rng(5);
  const int64_t rows = 128, cols = 1024, n_tok = 12;
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> X(static_cast<size_t>(n_tok * cols));
  for (float& v : X) v = dist(rng);
  for (const auto& [act, bound] : {std::pair{"int16", 1e-4}, {"int8", 2e-2}}) {
    CpuBackend be(2, true, parse_activation_precision(act));
    for (DType t : {DType::Q4_0, DType::Q8_0}) {
      const Matrix m = random_matrix(be, t, rows, cols, rng);
      ASSERT_EQ(m.layout, RowLayout::rows_x4);
      std::vector<float> got(static_cast<size_t>(n_tok * rows)), f32(got.size());
      const Product p{t, m.layout, m.bytes.data(), rows, cols, X.data(), n_tok, got.data()};
      be.products(&p, 1);
      cpu::matmul(t, m.bytes.data(), rows, cols, X.data(), n_tok, f32.data(), nullptr, m.layout);  // dequantised quads, f32
      double num = 0, den = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        num += (got[i] - f32[i]) * (got[i] - f32[i]);
        den += f32[i] * f32[i];
      }
      const double rel = std::sqrt(num / den);
      std::printf("  %s, %s activations: prompt products against f32, relative RMS %.2e\n", dtype_name(t), act, rel);
      EXPECT_LT(rel, bound) << dtype_name(t) << " " << act;
      EXPECT_GT(rel, 0.0) << dtype_name(t) << " " << act << ": still the f32 mat-mul";
    }
  }
}

// The batched host ops give each row or head exactly what the kernel gives it alone:
// softmax_rows row by row, rope_heads head by head at their stride (the heads' other
// floats untouched).
TEST(CpuBackend, SoftmaxRowsAndRopeHeadsEqualTheirRowsAlone) {
  CpuBackend be(2);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  std::vector<float> logits(5 * 8);
  for (float& v : logits) v = u(rng);
  std::vector<float> rows = logits, alone = logits;
  be.softmax_rows(rows.data(), 5, 8);
  for (int r = 0; r < 5; ++r) cpu::softmax(alone.data() + r * 8, 8);
  EXPECT_EQ(rows, alone);

  const int64_t n_heads = 6, stride = 40, rot = 32;  // stride > rot: each head's tail stays
  std::vector<float> cs(static_cast<size_t>(rot));
  cpu::rope_angles(17, rot, 10000.0f, cs.data());
  for (bool neox : {false, true}) {
    std::vector<float> heads(static_cast<size_t>(n_heads * stride));
    for (float& v : heads) v = u(rng);
    std::vector<float> one = heads;
    const std::vector<float> before = heads;
    be.rope_heads(heads.data(), n_heads, stride, rot, cs.data(), neox);
    for (int64_t h = 0; h < n_heads; ++h) cpu::rope_apply(one.data() + h * stride, rot, cs.data(), neox);
    EXPECT_EQ(heads, one) << "neox " << neox;
    EXPECT_NE(heads, before);
    for (int64_t h = 0; h < n_heads; ++h)
      for (int64_t i = rot; i < stride; ++i) EXPECT_EQ(heads[h * stride + i], before[h * stride + i]);
  }
}

// op_times: each operation's calls and wall time while set_op_timing is on, none while
// off (the host ops are called per token, so the clock is read only when asked); the
// times between two readings are their difference.
TEST(CpuBackend, OpTimesCountEachOperationOnlyWhileOn) {
  CpuBackend be(2);
  const std::vector<Backend::OpTime> zero = be.op_times();
  ASSERT_EQ(zero.size(), 5u);
  const char* names[] = {"products", "attention", "kv_store", "expert_ffns", "host ops"};
  for (size_t k = 0; k < zero.size(); ++k) {
    EXPECT_EQ(zero[k].op, names[k]);
    EXPECT_EQ(zero[k].calls, 0u);
    EXPECT_EQ(zero[k].seconds, 0.0);
  }
  std::mt19937 rng(3);
  const Matrix m = random_matrix(be, DType::Q8_0, 64, 256, rng);
  std::vector<float> x(256, 0.5f), y(64), w(256, 1.0f), n(256);
  const Product p{DType::Q8_0, m.layout, m.bytes.data(), 64, 256, x.data(), 1, y.data()};
  auto work = [&] {
    be.products(&p, 1);
    be.rmsnorm_rows(x.data(), w.data(), n.data(), 1, 256, 1e-5f);
    be.softmax_rows(n.data(), 2, 128);
  };
  work();
  for (const Backend::OpTime& o : be.op_times()) EXPECT_EQ(o.calls, 0u) << o.op << ": counted while off";
  const std::vector<Backend::OpTime> before = be.op_times();
  be.set_op_timing(true);
  const auto t0 = std::chrono::steady_clock::now();
  work();
  work();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  be.set_op_timing(false);
  work();
  const std::vector<Backend::OpTime> d = Backend::op_times_between(before, be.op_times());
  EXPECT_EQ(d[0].calls, 2u);  // products
  EXPECT_EQ(d[4].calls, 4u);  // two norms and two softmaxes
  for (size_t k : {1u, 2u, 3u}) EXPECT_EQ(d[k].calls, 0u) << d[k].op;
  double inside = 0;
  for (const Backend::OpTime& o : d) {
    EXPECT_GE(o.seconds, 0.0) << o.op;
    inside += o.seconds;
  }
  EXPECT_GT(d[0].seconds, 0.0);
  EXPECT_LE(inside, wall);
}

}  // namespace
}  // namespace moeflow

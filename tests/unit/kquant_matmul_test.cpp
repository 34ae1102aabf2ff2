// Mat-vec and mat-mul products of k-quant weights against matvec_reference (each row
// dequantised, dotted in double): the generic path (every k-quant; VNNI switched off)
// and the VNNI kernels of kquant_vnni.h (every k-quant) on CPUs that have them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/cpu/kquant_matvec.h"
#include "kernels/cpu/kquant_vnni.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/q4_vnni.h"
#include "kernels/cpu/rows_x4_vnni.h"
#include "kernels/cpu/thread_pool.h"
#include "tensor/dtype.h"
#include "float_vectors.h"

namespace moeflow::cpu {
namespace {

using testing::random_vec;
using testing::rel_err;

// The k-quants, and the 4-bit non-linear and legacy types that share their generic path.
const DType kKquants[] = {DType::Q2_K,   DType::Q3_K,   DType::Q4_K,  DType::Q5_K, DType::Q6_K, DType::IQ4_NL,
                          DType::IQ4_XS, DType::MXFP4, DType::Q4_1, DType::Q5_0, DType::Q5_1};

std::vector<uint8_t> make_weights(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  const size_t rb = row_bytes(t, cols);
  std::vector<uint8_t> w(rb * static_cast<size_t>(rows) + 1);  // +1: the matrix starts unaligned below
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = g(rng);
    quantize_row(t, row.data(), w.data() + 1 + rb * static_cast<size_t>(r), cols);
  }
  return w;
}

// Error relative to the products' magnitude, sqrt(sum e^2 / sum m^2), m[r] = sum_c
// |W[r][c] x[c]|: a single random row's dot can cancel to near zero, where an error
// relative to the result says nothing about the kernel.
double magnitude_err(DType t, const uint8_t* W, int64_t rows, int64_t cols, const float* x, const float* y,
                     const float* ref) {
  std::vector<float> w(static_cast<size_t>(cols));
  double se = 0, sm = 0;
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(t, W + row_bytes(t, cols) * static_cast<size_t>(r), w.data(), cols);
    double m = 0;
    for (int64_t c = 0; c < cols; ++c) m += std::fabs(static_cast<double>(w[c]) * x[c]);
    const double e = static_cast<double>(y[r]) - ref[r];
    se += e * e;
    sm += m * m;
  }
  return std::sqrt(se / sm);
}

// Restores the VNNI switch however the test ends.
struct VnniSwitch {
  bool was = q4_vnni_enabled();
  explicit VnniSwitch(bool on) { set_q4_vnni_enabled(on); }
  ~VnniSwitch() { set_q4_vnni_enabled(was); }
};

// Rows not a multiple of the kernels' group of 4 (and of the batch's group of 8), columns
// 256, 768, 2048, 4096, 1 and 2 threads. Error relative to the products' magnitude
// (magnitude_err). Generic path: f32 dots, bound 1e-6; VNNI: the activation rounded to
// int16 per 32 columns (2^-16 of its largest magnitude), bound 1e-5.
void check_matvec(bool vnni) {
  VnniSwitch sw(vnni);
  std::mt19937 rng(42);
  ThreadPool two(2);
  for (DType t : kKquants) {
    const bool integer = vnni && kquant_vnni_type(t);
    double worst = 0;
    for (int64_t cols : {256, 768, 2048, 4096})
      for (int64_t rows : {1, 3, 5, 13, 67}) {
        const std::vector<uint8_t> w = make_weights(t, rows, cols, rng);
        const std::vector<float> x = random_vec(static_cast<size_t>(cols), rng);
        std::vector<float> ref(static_cast<size_t>(rows)), y1(ref.size()), y2(ref.size());
        matvec_reference(t, w.data() + 1, rows, cols, x.data(), ref.data());
        matvec(t, w.data() + 1, rows, cols, x.data(), y1.data(), nullptr);
        matvec(t, w.data() + 1, rows, cols, x.data(), y2.data(), &two);
        const double e = magnitude_err(t, w.data() + 1, rows, cols, x.data(), y1.data(), ref.data());
        worst = std::max(worst, e);
        EXPECT_LT(e, integer ? 1e-5 : 1e-6) << dtype_name(t) << " " << rows << "x" << cols;
        for (size_t i = 0; i < y1.size(); ++i) ASSERT_EQ(y1[i], y2[i]) << "1 vs 2 threads, row " << i;
      }
    std::printf("%s mat-vec (%s): worst error vs matvec_reference, relative to sum |w x|: %.3g (bound %g)\n",
                dtype_name(t), integer ? "VNNI int16" : "f32 kernels", worst, integer ? 1e-5 : 1e-6);
  }
}

TEST(KquantMatmul, MatvecGenericMatchesReference) { check_matvec(false); }

TEST(KquantMatmul, MatvecVnniMatchesReference) {
  if (!cpu_has_avx512_vnni()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  check_matvec(true);
}

// The AVX-512 dequantisation (Q4_K, Q6_K; what prefill's tiles and the generic mat-vec
// use) against dequantize_row, bit for bit, on quantised and on random-byte blocks.
TEST(KquantMatmul, Avx512DequantIsBitIdentical) {
  if (!cpu_has_avx512_vnni()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  VnniSwitch sw(true);
  std::mt19937 rng(3);
  for (DType t : kKquants) {
    const int64_t nb = 40;
    std::vector<uint8_t> w = make_weights(t, 1, 256 * nb, rng);
    std::vector<float> want(256 * nb), got(256 * nb);
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1 && (t == DType::Q4_K || t == DType::Q6_K)) {
        // Random bytes but the f16 super-block scales (kept finite from the quantiser):
        // Q4_K's d, dmin at bytes 0-3, Q6_K's d at 208-209.
        const size_t bs = static_cast<size_t>(dtype_info(t).type_size);
        const size_t scale_at = t == DType::Q4_K ? 0 : 208, scale_len = t == DType::Q4_K ? 4 : 2;
        for (int64_t b = 0; b < nb; ++b)
          for (size_t i = 0; i < bs; ++i)
            if (i < scale_at || i >= scale_at + scale_len) w[1 + static_cast<size_t>(b) * bs + i] = static_cast<uint8_t>(rng());
      }
      dequantize_row(t, w.data() + 1, want.data(), 256 * nb);
      kquant_dequant(t, w.data() + 1, nb, got.data());
      double max_err = 0;
      for (size_t i = 0; i < want.size(); ++i) max_err = std::max(max_err, static_cast<double>(std::fabs(want[i] - got[i])));
      if (pass == 1) std::printf("%s: kquant_dequant vs dequantize_row, max |error| %g\n", dtype_name(t), max_err);
      EXPECT_EQ(max_err, 0.0) << dtype_name(t) << " pass " << pass;
    }
  }
}

// The activation packings with AVX-512 write the references' bytes: int16 values over
// their whole range (both byte planes, the sums), and int8 from floats with blocks of
// zeros, of one huge value, of tiny values and of mixed signs.
TEST(KquantMatmul, Avx512PackingsAreByteIdentical) {
  if (!cpu_has_avx512_vnni()) GTEST_SKIP() << "no AVX-512 VNNI on this CPU";
  std::mt19937 rng(17);
  const int64_t cols = 256 * 6;
  std::vector<int16_t> qx(static_cast<size_t>(cols));
  std::vector<float> dx(static_cast<size_t>(cols / 32)), x(static_cast<size_t>(cols));
  for (auto& v : qx) v = static_cast<int16_t>(static_cast<int32_t>(rng() % 65536) - 32768);
  for (int i = 0; i < 32; ++i) qx[static_cast<size_t>(i)] = i % 2 ? -32768 : 32767;
  for (auto& d : dx) d = std::uniform_real_distribution<float>(1e-4f, 1.0f)(rng);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (auto& v : x) v = nd(rng);
  for (int i = 0; i < 32; ++i) x[static_cast<size_t>(32 + i)] = 0.0f;                 // a block of zeros
  x[70] = 3e30f;                                                                        // one huge value
  for (int i = 0; i < 32; ++i) x[static_cast<size_t>(96 + i)] = 1e-30f * (i % 3 - 1);  // tiny, mixed signs
  std::vector<uint8_t> want(kquant_x_bytes(cols)), got(kquant_x_bytes(cols));
  kquant_vnni_pack_x_reference(qx.data(), dx.data(), cols, want.data());
  kquant_vnni_pack_x(qx.data(), dx.data(), cols, got.data());
  EXPECT_EQ(got, want) << "int16";
  std::fill(got.begin(), got.end(), uint8_t{0xa5});
  kquant_vnni_pack_x8_reference(x.data(), cols, want.data());
  kquant_vnni_pack_x8(x.data(), cols, got.data());
  EXPECT_EQ(got, want) << "int8";
}

// Prefill: the tiles dequantised through DequantSpan, every token against the reference.
TEST(KquantMatmul, MatmulMatchesReference) {
  std::mt19937 rng(5);
  ThreadPool two(2);
  for (DType t : kKquants) {
    double worst = 0;
    for (int64_t cols : {256, 4352})  // 4352: a second 4096-column tile of one block
      for (int64_t rows : {3, 9}) {
        const int64_t n_tok = 7;
        const std::vector<uint8_t> w = make_weights(t, rows, cols, rng);
        const std::vector<float> X = random_vec(static_cast<size_t>(cols * n_tok), rng);
        std::vector<float> Y(static_cast<size_t>(rows * n_tok)), Y2(Y.size()), ref(static_cast<size_t>(rows));
        matmul(t, w.data() + 1, rows, cols, X.data(), n_tok, Y.data(), nullptr);
        matmul(t, w.data() + 1, rows, cols, X.data(), n_tok, Y2.data(), &two);
        for (int64_t k = 0; k < n_tok; ++k) {
          matvec_reference(t, w.data() + 1, rows, cols, X.data() + k * cols, ref.data());
          const double e = rel_err(Y.data() + k * rows, ref.data(), ref.size());
          worst = std::max(worst, e);
          EXPECT_LT(e, 1e-5) << dtype_name(t) << " token " << k;
        }
        for (size_t i = 0; i < Y.size(); ++i) ASSERT_EQ(Y[i], Y2[i]) << "1 vs 2 threads";
      }
    std::printf("%s mat-mul: worst relative error vs matvec_reference %.3g (bound 1e-5)\n", dtype_name(t), worst);
  }
}

// 32-column blocks (IQ4_NL, MXFP4, Q4_1, Q5_0, Q5_1) in rows that are no whole number
// of 256 columns: the generic path's last chunk is short.
TEST(KquantMatmul, ShortLastChunkOf32ColumnTypes) {
  std::mt19937 rng(17);
  for (DType t : {DType::IQ4_NL, DType::MXFP4, DType::Q4_1, DType::Q5_0, DType::Q5_1})
    for (int64_t cols : {32, 96, 288}) {
      const int64_t rows = 7;
      const std::vector<uint8_t> w = make_weights(t, rows, cols, rng);
      const std::vector<float> x = random_vec(static_cast<size_t>(cols * 3), rng);
      std::vector<float> ref(rows), y(rows), Y(static_cast<size_t>(rows * 3));
      matvec_reference(t, w.data() + 1, rows, cols, x.data(), ref.data());
      matvec(t, w.data() + 1, rows, cols, x.data(), y.data(), nullptr);
      EXPECT_LT(magnitude_err(t, w.data() + 1, rows, cols, x.data(), y.data(), ref.data()), 1e-6) << dtype_name(t) << cols;
      matmul(t, w.data() + 1, rows, cols, x.data(), 3, Y.data(), nullptr);
      for (int k = 0; k < 3; ++k) {
        matvec_reference(t, w.data() + 1, rows, cols, x.data() + k * cols, ref.data());
        EXPECT_LT(magnitude_err(t, w.data() + 1, rows, cols, x.data() + k * cols, Y.data() + k * rows, ref.data()), 1e-6)
            << dtype_name(t) << cols << " token " << k;
      }
    }
}

// A batch mixing k-quants with one activation (attn_k q4_k and attn_v q6_k in a
// Q4_K_M file): each job gets its own type's kernel from the shared packing.
TEST(KquantMatmul, MixedBatchSharesTheActivation) {
  std::mt19937 rng(9);
  const int64_t cols = 512, rows = 12;
  const std::vector<float> x = random_vec(cols, rng);
  const DType types[] = {DType::Q4_K, DType::Q6_K, DType::Q8_0, DType::Q4_0, DType::Q5_K, DType::Q4_K};
  std::vector<std::vector<uint8_t>> ws;
  std::vector<std::vector<float>> ys(6, std::vector<float>(rows));
  std::vector<MatvecJob> jobs;
  for (int k = 0; k < 6; ++k) {
    ws.push_back(make_weights(types[k], rows, cols, rng));
    jobs.push_back({types[k], RowLayout::gguf, ws.back().data() + 1, rows, cols, x.data(), ys[static_cast<size_t>(k)].data()});
  }
  ThreadPool two(2);
  matvec_batch(jobs.data(), jobs.size(), &two);
  for (int k = 0; k < 6; ++k) {
    std::vector<float> ref(rows);
    matvec_reference(types[k], ws[static_cast<size_t>(k)].data() + 1, rows, cols, x.data(), ref.data());
    const double e = rel_err(ys[static_cast<size_t>(k)].data(), ref.data(), ref.size());
    EXPECT_LT(e, 1e-4) << dtype_name(types[k]);
  }
}

}  // namespace
}  // namespace moeflow::cpu

namespace moeflow::cpu {
namespace {

// Per-token jobs on one matrix (a batched decode step) give each token the lone mat-vec's
// floats for every k-quant (each token's mat-vec over a piece of rows the others then
// read from cache), rows left over after the groups of four; 1 and 2 threads.
TEST(KquantMatmul, PerTokenJobsMatchSeparateMatvecsBitForBit) {
  std::mt19937 rng(61);
  for (DType t : kKquants) {
    for (int64_t rows : {6, 67}) {
      const int64_t cols = 512;
      const std::vector<uint8_t> w = make_weights(t, rows, cols, rng);
      const uint8_t* W = w.data() + 1;
      for (int64_t n : {2, 3, 5, 9}) {
        const std::vector<float> X = random_vec(static_cast<size_t>(n * cols), rng);
        std::vector<float> alone(static_cast<size_t>(n * rows));
        for (int64_t k = 0; k < n; ++k)
          matvec(t, W, rows, cols, X.data() + k * cols, alone.data() + k * rows, nullptr);
        for (int threads : {1, 2}) {
          ThreadPool pool(threads);
          std::vector<float> got(alone.size(), NAN);
          const MatmulJob job{t, RowLayout::gguf, W, rows, cols, X.data(), n, got.data(), true};
          matmul_batch(&job, 1, &pool);
          EXPECT_EQ(got, alone) << dtype_name(t) << " " << rows << " rows, " << n << " tokens, " << threads << " threads";
        }
      }
    }
  }
}

}  // namespace
}  // namespace moeflow::cpu

namespace moeflow::cpu {
namespace {

// k-quants on int8 activations (MatvecJob::x_int8, `--activations int8`): every
// k-quant's VNNI kernel equals the float64 product of the weights with the activation as
// int8 rounds it (rows_x4_x8_values: the same rounding, quantize_x8.h) to float rounding,
// and a batched step's per-token jobs give each token the lone mat-vec's floats.
TEST(KquantMatmul, Int8ActivationsMatchTheRoundedActivationsProduct) {
  if (!q4_vnni_enabled()) GTEST_SKIP() << "no AVX-512 VNNI: the option is ignored";
  std::mt19937 rng(67);
  const DType types[] = {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  for (DType t : types) {
    const int64_t rows = 37, cols = 768;
    const std::vector<uint8_t> w = make_weights(t, rows, cols, rng);
    const uint8_t* W = w.data() + 1;
    const std::vector<float> x = random_vec(static_cast<size_t>(cols), rng);
    std::vector<float> x8(x.size()), ref8(static_cast<size_t>(rows)), ref(ref8.size()), y(ref8.size(), NAN);
    rows_x4_x8_values(x.data(), cols, x8.data());
    matvec_reference(t, W, rows, cols, x8.data(), ref8.data());
    matvec_reference(t, W, rows, cols, x.data(), ref.data());
    const MatvecJob job{t, RowLayout::gguf, W, rows, cols, x.data(), y.data(), true};
    matvec_batch(&job, 1, nullptr);
    const double e8 = magnitude_err(t, W, rows, cols, x8.data(), y.data(), ref8.data());
    const double e = magnitude_err(t, W, rows, cols, x.data(), y.data(), ref.data());
    std::printf("  %s int8 activations: %.2e against the rounded activation's product, %.2e against f32's\n",
                dtype_name(t), e8, e);
    EXPECT_LT(e8, 1e-6) << dtype_name(t);
    EXPECT_LT(e, 1e-2) << dtype_name(t);
    for (int64_t n : {3, 6}) {
      const std::vector<float> X = random_vec(static_cast<size_t>(n * cols), rng);
      std::vector<float> alone(static_cast<size_t>(n * rows)), got(alone.size(), NAN);
      for (int64_t k = 0; k < n; ++k) {
        const MatvecJob one{t, RowLayout::gguf, W, rows, cols, X.data() + k * cols, alone.data() + k * rows, true};
        matvec_batch(&one, 1, nullptr);
      }
      ThreadPool pool(2);
      const MatmulJob step{t, RowLayout::gguf, W, rows, cols, X.data(), n, got.data(), true, true};
      matmul_batch(&step, 1, &pool);
      EXPECT_EQ(got, alone) << dtype_name(t) << ", " << n << " tokens";
    }
  }
}

}  // namespace
}  // namespace moeflow::cpu

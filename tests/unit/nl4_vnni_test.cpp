// IQ4_NL, IQ4_XS, MXFP4, Q4_1, Q5_0 and Q5_1 mat-vecs on int8 activations (nl4_vnni.h): against the float64
// product of the weights with the rounded activation (the kernel's only rounding), and
// within the activation's rounding of the f32 product; any count of blocks (odd ones
// pair with zeros; gpt-oss's 2880 columns; IQ4_XS's super-blocks); MXFP4's subnormal
// and large scales; the
// same floats one row at a time, in groups, from a prepared plan, on two threads and
// as a batched step's per-token jobs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/nl4_vnni.h"
#include "kernels/cpu/q4_vnni.h"
#include "kernels/cpu/thread_pool.h"
#include "tensor/dtype.h"
#include "alone_and_together.h"
#include "float_vectors.h"
#include "int8_rounded.h"

namespace moeflow::cpu {
namespace {

using testing::int8_rounded;
using testing::random_vec;
using testing::rel_err;

TEST(Nl4Vnni, MatchesTheProductWithTheRoundedActivation) {
  if (!q4_vnni_enabled()) GTEST_SKIP() << "no AVX-512 VNNI (on AVX2 these types take int8_avx2.h: Int8Avx2.*)";
  std::mt19937 rng(29);
  ThreadPool pool(2);
  for (DType t : {DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4, DType::Q4_1, DType::Q5_0, DType::Q5_1}) {
    ASSERT_TRUE(nl4_vnni_type(t));
    double worst = 0, worst_f32 = 0;
    for (int64_t rows : {1, 3, 4, 7, 13}) {
      for (int64_t cols : {32, 96, 256, 2880, 3072}) {
        if (cols % dtype_info(t).block_size) continue;  // IQ4_XS: super-blocks of 256
        const size_t rb = row_bytes(t, cols);
        std::vector<uint8_t> W(rb * static_cast<size_t>(rows) + 1);  // +1: rows need not be aligned
        uint8_t* w = W.data() + 1;
        for (int64_t r = 0; r < rows; ++r) {
          const std::vector<float> row = random_vec(static_cast<size_t>(cols), rng);
          quantize_row(t, row.data(), w + rb * static_cast<size_t>(r), cols);
        }
        if (t == DType::MXFP4 && cols >= 96) {  // the subnormal scales 2^-128, 2^-127, and 2^72
          w[0] = 0;
          w[17] = 1;
          w[34] = 200;
        }
        const std::vector<float> x = random_vec(static_cast<size_t>(cols), rng), x8 = int8_rounded(x);
        const size_t n = static_cast<size_t>(rows);
        std::vector<float> ref8(n), ref(n), y(n, NAN), y2(n, NAN), yp(n, NAN);
        matvec_reference(t, w, rows, cols, x8.data(), ref8.data());
        matvec_reference(t, w, rows, cols, x.data(), ref.data());
        const MatvecJob job{t, RowLayout::gguf, w, rows, cols, x.data(), y.data(), true};
        matvec_batch(&job, 1, nullptr);
        const double e = rel_err(y, ref8);
        worst = std::max(worst, e);
        if (rows >= 7) worst_f32 = std::max(worst_f32, rel_err(y, ref));
        EXPECT_LT(e, 1e-5) << dtype_name(t) << " " << rows << "x" << cols;
        // Against the f32 product: the activation's rounding, over enough rows (one dot
        // product alone may cancel to anything).
        if (rows >= 7) {
          EXPECT_LT(rel_err(y, ref), 0.1) << dtype_name(t) << " " << rows << "x" << cols;
        }
        const MatvecJob job2{t, RowLayout::gguf, w, rows, cols, x.data(), y2.data(), true};
        matvec_batch(&job2, 1, &pool);
        EXPECT_EQ(y2, y) << "two threads";
        MatvecPlan plan;
        plan.prepare({t, RowLayout::gguf, w, rows, cols, x.data(), yp.data(), true});
        for (int64_t r = rows; r > 0; --r) plan.rows(r - 1, r);
        EXPECT_EQ(yp, y) << "one row at a time";
        // int16 activations keep the generic f32 path: the f32 product.
        std::vector<float> y16(n, NAN);
        const MatvecJob job16{t, RowLayout::gguf, w, rows, cols, x.data(), y16.data(), false};
        matvec_batch(&job16, 1, nullptr);
        EXPECT_LT(rel_err(y16, ref), 1e-5) << dtype_name(t) << ": the generic path";
      }
    }
    std::printf("  %s: against the rounded activation %.2e, against f32 %.2e (relative RMS)\n", dtype_name(t), worst,
                worst_f32);
    // A batched step's tokens on one matrix (passes of four tokens and a rest, groups of
    // four rows and a rest): each token gets its own mat-vec's floats.
    const int64_t rows = 41, cols = t == DType::IQ4_XS ? 3072 : 2880, n_tok = 7;
    std::mt19937 step_rng(101 + static_cast<int>(t));  // the draws above stay as they were
    const size_t rb = row_bytes(t, cols);
    std::vector<uint8_t> w(rb * rows);
    for (int64_t r = 0; r < rows; ++r) {
      const std::vector<float> row = random_vec(static_cast<size_t>(cols), step_rng);
      quantize_row(t, row.data(), w.data() + rb * static_cast<size_t>(r), cols);
    }
    const std::vector<float> X = random_vec(static_cast<size_t>(n_tok * cols), step_rng);
    const auto [alone, together] = testing::alone_and_together(t, w.data(), rows, cols, X, n_tok, pool);
    EXPECT_EQ(together, alone) << dtype_name(t);
  }
}

}  // namespace
}  // namespace moeflow::cpu

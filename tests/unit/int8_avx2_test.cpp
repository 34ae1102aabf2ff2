// q4_0, q8_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, IQ4_NL, IQ4_XS and MXFP4 mat-vecs on int8 activations with AVX2 (int8_avx2.h), the
// path of CPUs without AVX-512 VNNI (on one that has it the VNNI kernels are switched
// off for the test): against the float64 product of the weights with the rounded
// activation (the kernels' only rounding), and within the activation's rounding of the
// f32 product; the same floats for one row at a time, on two threads, from a prepared
// plan and as a batched step's per-token jobs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/cpu/int8_avx2.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/q4_vnni.h"
#include "kernels/cpu/quantize_x8.h"
#include "kernels/cpu/thread_pool.h"
#include "tensor/dtype.h"
#include "float_vectors.h"
#include "int8_rounded.h"

namespace moeflow::cpu {
namespace {

using testing::int8_rounded;
using testing::random_vec;
using testing::rel_err;

constexpr DType kTypes[] = {DType::Q4_0,   DType::Q8_0,   DType::Q2_K,  DType::Q3_K, DType::Q4_K,
                             DType::Q5_K,   DType::Q6_K,   DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4,
                             DType::Q4_1,   DType::Q5_0,   DType::Q5_1};

// The VNNI kernels off for the test's duration, so the AVX2 ones run where both exist.
struct WithoutVnni {
  bool was = q4_vnni_enabled();
  WithoutVnni() { set_q4_vnni_enabled(false); }
  ~WithoutVnni() { set_q4_vnni_enabled(was); }
};

// The types whose activation is rounded per 256 columns (int8_avx2.h).
bool on_super_grid(DType t) { return dtype_is_kquant(t) || t == DType::IQ4_XS; }

std::vector<uint8_t> random_rows(DType t, int64_t rows, int64_t cols, std::mt19937& rng, size_t skew) {
  const size_t rb = row_bytes(t, cols);
  std::vector<uint8_t> W(rb * static_cast<size_t>(rows) + skew);
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<float> row = random_vec(static_cast<size_t>(cols), rng);
    quantize_row(t, row.data(), W.data() + skew + rb * static_cast<size_t>(r), cols);
  }
  return W;
}

TEST(Int8Avx2, PackingIsTheInt8BlocksAndTheirScales) {
  std::mt19937 rng(5);
  const int64_t cols = 96;
  std::vector<float> x = random_vec(static_cast<size_t>(cols), rng);
  for (int j = 32; j < 64; ++j) x[static_cast<size_t>(j)] = 0.0f;  // a block of zeros: scale 0
  for (DType t : {DType::Q8_0, DType::IQ4_NL}) {
    std::vector<uint8_t> p(int8_avx2_x_bytes(t, cols));
    ASSERT_EQ(p.size(), static_cast<size_t>(cols + 3 * 4)) << dtype_name(t);
    int8_avx2_pack_x8(t, x.data(), cols, p.data());
    const auto* q = reinterpret_cast<const int8_t*>(p.data());
    const auto* d = reinterpret_cast<const float*>(p.data() + cols);
    for (int b = 0; b < 3; ++b) {
      int8_t want[32];
      EXPECT_EQ(d[b], quantize_x8_block(x.data() + 32 * b, want)) << dtype_name(t) << " block " << b;
      for (int j = 0; j < 32; ++j)
        EXPECT_EQ(q[32 * b + j], want[j]) << dtype_name(t) << " block " << b << " element " << j;
    }
    EXPECT_EQ(d[1], 0.0f);
  }
}

// q4_0 and MXFP4: blocks in quads a, b, c, d, each quad's values as [a0-15 b0-15 a16-31
// b16-31 c0-15 d0-15 c16-31 d16-31] (the order of the kernel's unpacked nibbles), then
// per quad the blocks' scales as [d_a d_a d_c d_c d_b d_b d_d d_d] and o c in the same
// order, o half the offset that makes the quants unsigned (8 for q4_0, 12 for MXFP4);
// zero blocks after the last one.
TEST(Int8Avx2, QuadPackingInterleavesFourBlocks) {
  std::mt19937 rng(7);
  const int64_t cols = 160;  // 5 blocks: a second quad of one block and three of zeros
  std::vector<float> x = random_vec(static_cast<size_t>(cols), rng);
  int8_t want[8][32] = {};
  float d[8] = {}, c[8] = {};
  for (int b = 0; b < 5; ++b) {
    d[b] = quantize_x8_block(x.data() + 32 * b, want[b]);
    int32_t sum = 0;
    for (int j = 0; j < 32; ++j) sum += want[b][j];
    c[b] = -d[b] * static_cast<float>(sum);
  }
  const int lane_block[8] = {0, 0, 2, 2, 1, 1, 3, 3};
  for (DType t : {DType::Q4_0, DType::MXFP4}) {
    const float o = t == DType::Q4_0 ? 4.0f : 6.0f;
    std::vector<uint8_t> p(int8_avx2_x_bytes(t, cols));
    ASSERT_EQ(p.size(), static_cast<size_t>(2 * (128 + 16 * 4))) << dtype_name(t);
    for (bool reference : {false, true}) {
      if (reference) int8_avx2_pack_x8_reference(t, x.data(), cols, p.data());
      else int8_avx2_pack_x8(t, x.data(), cols, p.data());
      const auto* q = reinterpret_cast<const int8_t*>(p.data());
      const auto* dc = reinterpret_cast<const float*>(p.data() + 256);
      for (int g = 0; g < 2; ++g) {
        for (int i = 0; i < 128; ++i) {
          // byte i: pair i / 64; in it element 16 (i / 32 % 2) + i % 16 of its first block,
          // or of its second when bit 4 is set
          const int block = 4 * g + 2 * (i / 64) + (i / 16) % 2, element = 16 * ((i / 32) % 2) + i % 16;
          EXPECT_EQ(q[128 * g + i], want[block][element]) << dtype_name(t) << " quad " << g << " byte " << i;
        }
        for (int lane = 0; lane < 8; ++lane) {
          const int block = 4 * g + lane_block[lane];
          EXPECT_EQ(dc[16 * g + lane], d[block]) << dtype_name(t) << " quad " << g << " lane " << lane;
          EXPECT_EQ(dc[16 * g + 8 + lane], o * c[block]) << dtype_name(t) << " quad " << g << " lane " << lane;
        }
      }
      EXPECT_EQ(dc[16 + 4], 0.0f) << dtype_name(t);  // a padding block
      EXPECT_FALSE(std::signbit(dc[16 + 8 + 4])) << dtype_name(t) << ": a padding block's c is +0";
    }
  }
}

// The AVX2 packing against the element-by-element reference, byte for byte: every type,
// an odd and an even number of blocks, a block of zeros, one huge value, tiny values of
// mixed signs, and values that round to exactly half.
TEST(Int8Avx2, PackingMatchesTheReferenceByteForByte) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (DType t : kTypes)
    for (int64_t cols : {160, 256, 1440, 2048}) {  // 160, 1440: an odd number of blocks
      if (on_super_grid(t) && cols % 256 != 0) continue;
      std::vector<float> x(static_cast<size_t>(cols + 32));
      for (auto& v : x) v = nd(rng);
      for (int i = 0; i < 32; ++i) x[static_cast<size_t>(32 + i)] = 0.0f;                 // a block of zeros
      x[70] = 3e30f;                                                                        // one huge value
      for (int i = 0; i < 32; ++i) x[static_cast<size_t>(96 + i)] = 1e-30f * (i % 3 - 1);  // tiny, mixed signs
      // A block whose values are k + 1/2 times its scale (127 / 127.0 at the largest): ties.
      for (int i = 0; i < 32; ++i) x[static_cast<size_t>(128 + i)] = i == 0 ? 127.0f : (i % 16) + 0.5f;
      for (size_t skew : {size_t{0}, size_t{1}}) {  // the activation as allocated, or 4 bytes off
        std::vector<uint8_t> want(int8_avx2_x_bytes(t, cols)), got(want.size(), 0xa5);
        int8_avx2_pack_x8_reference(t, x.data() + skew, cols, want.data());
        int8_avx2_pack_x8(t, x.data() + skew, cols, got.data());
        EXPECT_EQ(got, want) << dtype_name(t) << " cols " << cols << " skew " << skew;
      }
    }
}

// The k-quants and IQ4_XS: int8 per 256 columns, then the sums per 16 columns.
TEST(Int8Avx2, SuperBlockPackingIsTheInt8ValuesTheirScalesAndSums) {
  std::mt19937 rng(6);
  const int64_t cols = 768;
  std::vector<float> x = random_vec(static_cast<size_t>(cols), rng);
  for (int j = 256; j < 512; ++j) x[static_cast<size_t>(j)] = 0.0f;  // a super-block of zeros: scale 0
  x[700] = 40.0f;  // one large value sets its super-block's scale
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_XS}) {
    std::vector<uint8_t> p(int8_avx2_x_bytes(t, cols));
    ASSERT_EQ(p.size(), static_cast<size_t>(cols + 3 * 4 + 48 * 2)) << dtype_name(t);
    int8_avx2_pack_x8(t, x.data(), cols, p.data());
    const auto* q = reinterpret_cast<const int8_t*>(p.data());
    const auto* d = reinterpret_cast<const float*>(p.data() + cols);
    const auto* bs = reinterpret_cast<const int16_t*>(d + 3);
    for (int s = 0; s < 3; ++s) {
      int8_t want[256];
      EXPECT_EQ(d[s], quantize_x8<256>(x.data() + 256 * s, want)) << dtype_name(t) << " super-block " << s;
      for (int j = 0; j < 256; ++j) EXPECT_EQ(q[256 * s + j], want[j]) << dtype_name(t) << " element " << 256 * s + j;
      for (int h = 0; h < 16; ++h) {
        int32_t sum = 0;
        for (int j = 0; j < 16; ++j) sum += want[16 * h + j];
        EXPECT_EQ(bs[16 * s + h], sum) << dtype_name(t) << " super-block " << s << " sum " << h;
      }
    }
    EXPECT_EQ(d[1], 0.0f);
    EXPECT_EQ(d[2], 40.0f / 127.0f);
    EXPECT_EQ(q[700], 127);
  }
}

TEST(Int8Avx2, MatchesTheProductWithTheRoundedActivation) {
  WithoutVnni off;
  if (!int8_avx2_type(DType::Q4_0, RowLayout::gguf)) GTEST_SKIP() << "no AVX2 / FMA";
  std::mt19937 rng(31);
  ThreadPool pool(2);
  for (DType t : kTypes) {
    ASSERT_TRUE(int8_avx2_type(t, RowLayout::gguf)) << dtype_name(t);
    EXPECT_FALSE(int8_avx2_type(t, RowLayout::rows_x4)) << dtype_name(t);
    double worst = 0, worst_f32 = 0;
    for (int64_t rows : {1, 3, 4, 7, 13}) {
      for (int64_t cols : {32, 96, 256, 768, 2816}) {
        if (cols % dtype_info(t).block_size) continue;  // the k-quants: super-blocks of 256
        std::vector<uint8_t> W = random_rows(t, rows, cols, rng, 1);  // rows need not be aligned
        uint8_t* w = W.data() + 1;
        if (t == DType::MXFP4 && cols >= 96) {  // the subnormal scales 2^-128, 2^-127, and 2^72
          w[0] = 0;
          w[17] = 1;
          w[34] = 200;
        }
        const std::vector<float> x = random_vec(static_cast<size_t>(cols), rng);
        const std::vector<float> x8 = on_super_grid(t) ? int8_rounded<256>(x) : int8_rounded(x);
        const size_t n = static_cast<size_t>(rows);
        std::vector<float> ref8(n), ref(n), y(n, NAN), y2(n, NAN), yp(n, NAN);
        matvec_reference(t, w, rows, cols, x8.data(), ref8.data());
        matvec_reference(t, w, rows, cols, x.data(), ref.data());
        const MatvecJob job{t, RowLayout::gguf, w, rows, cols, x.data(), y.data(), true};
        matvec_batch(&job, 1, nullptr);
        const double e = rel_err(y, ref8);
        worst = std::max(worst, e);
        EXPECT_LT(e, 1e-5) << dtype_name(t) << " " << rows << "x" << cols;
        // Against the f32 product: the activation's rounding, over enough rows (one dot
        // product alone may cancel to anything).
        if (rows >= 7) {
          worst_f32 = std::max(worst_f32, rel_err(y, ref));
          EXPECT_LT(rel_err(y, ref), 0.05) << dtype_name(t) << " " << rows << "x" << cols;
        }
        const MatvecJob job2{t, RowLayout::gguf, w, rows, cols, x.data(), y2.data(), true};
        matvec_batch(&job2, 1, &pool);
        EXPECT_EQ(y2, y) << dtype_name(t) << ": two threads";
        MatvecPlan plan;
        plan.prepare({t, RowLayout::gguf, w, rows, cols, x.data(), yp.data(), true});
        for (int64_t r = rows; r > 0; --r) plan.rows(r - 1, r);
        EXPECT_EQ(yp, y) << dtype_name(t) << ": one row at a time";
        // Without int8 activations the Highway kernels: the f32 product (q8_0's int16
        // kernel within ~2e-5 of it).
        std::vector<float> y16(n, NAN);
        const MatvecJob job16{t, RowLayout::gguf, w, rows, cols, x.data(), y16.data(), false};
        matvec_batch(&job16, 1, nullptr);
        EXPECT_LT(rel_err(y16, ref), t == DType::Q8_0 ? 1e-4 : 1e-5) << dtype_name(t) << ": the Highway kernel";
      }
    }
    std::printf("  %s AVX2 int8: against the rounded activation %.2e, against f32 %.2e (relative RMS)\n",
                dtype_name(t), worst, worst_f32);
  }
}

// q4_0 and MXFP4 rows take their blocks in fours: every count of blocks past the last
// quad (none, 1, 2, 3), alone and as a batched step's tokens, against the float64
// product with the rounded activation.
TEST(Int8Avx2, QuadRowsEndingInOneToThreeBlocks) {
  WithoutVnni off;
  if (!int8_avx2_type(DType::Q4_0, RowLayout::gguf)) GTEST_SKIP() << "no AVX2 / FMA";
  std::mt19937 rng(53);
  ThreadPool pool(2);
  for (DType t : {DType::Q4_0, DType::MXFP4})
    for (int64_t cols : {128, 160, 192, 224, 2880}) {  // 4, 5, 6, 7 and 90 blocks
      const int64_t rows = 9, n_tok = 3;
      const std::vector<uint8_t> w = random_rows(t, rows, cols, rng, 0);
      const std::vector<float> X = random_vec(static_cast<size_t>(n_tok * cols), rng);
      std::vector<float> alone(static_cast<size_t>(n_tok * rows)), together(alone.size(), NAN);
      for (int64_t k = 0; k < n_tok; ++k) {
        const float* x = X.data() + k * cols;
        const std::vector<float> x8 = int8_rounded(std::vector<float>(x, x + cols));
        std::vector<float> ref8(static_cast<size_t>(rows));
        matvec_reference(t, w.data(), rows, cols, x8.data(), ref8.data());
        const MatvecJob one{t, RowLayout::gguf, w.data(), rows, cols, x, alone.data() + k * rows, true};
        matvec_batch(&one, 1, nullptr);
        const std::vector<float> y(alone.begin() + k * rows, alone.begin() + (k + 1) * rows);
        EXPECT_LT(rel_err(y, ref8), 1e-5) << dtype_name(t) << " " << cols << " columns, token " << k;
      }
      const MatmulJob step{t, RowLayout::gguf, w.data(), rows, cols, X.data(), n_tok, together.data(), true, true};
      matmul_batch(&step, 1, &pool);
      EXPECT_EQ(together, alone) << dtype_name(t) << " " << cols << " columns";
    }
}

// The extremes of every type's integer sums: all quants at their largest and smallest,
// activation blocks at +-127, the k-quants' largest scales and mins.
TEST(Int8Avx2, ExtremeQuantsAndScalesStayExact) {
  WithoutVnni off;
  if (!int8_avx2_type(DType::Q4_0, RowLayout::gguf)) GTEST_SKIP() << "no AVX2 / FMA";
  const int64_t cols = 512;
  std::vector<float> x(static_cast<size_t>(cols));
  for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(c)] = (c / 32) % 2 ? -1.0f : 1.0f;  // q_x = +-127
  for (DType t : kTypes) {
    for (int sign : {1, -1}) {
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t c = 0; c < cols; ++c) row[static_cast<size_t>(c)] = static_cast<float>(sign) * (c % 7 == 0 ? 0.25f : 1.0f);
      const size_t rb = row_bytes(t, cols);
      std::vector<uint8_t> w(rb);
      quantize_row(t, row.data(), w.data(), cols);
      float ref8 = 0, y = NAN;
      const std::vector<float> x8 = on_super_grid(t) ? int8_rounded<256>(x) : int8_rounded(x);
      matvec_reference(t, w.data(), 1, cols, x8.data(), &ref8);
      const MatvecJob job{t, RowLayout::gguf, w.data(), 1, cols, x.data(), &y, true};
      matvec_batch(&job, 1, nullptr);
      EXPECT_NEAR(y, ref8, 1e-5 * std::fabs(ref8) + 1e-6) << dtype_name(t) << " sign " << sign;
    }
  }
}

TEST(Int8Avx2, BatchedTokensGetTheirOwnMatvecsFloats) {
  WithoutVnni off;
  if (!int8_avx2_type(DType::Q4_0, RowLayout::gguf)) GTEST_SKIP() << "no AVX2 / FMA";
  std::mt19937 rng(47);
  ThreadPool pool(2);
  for (DType t : kTypes) {
    // Passes of four tokens and a rest; the rows split between two threads.
    const int64_t rows = 41, cols = 768;
    const std::vector<uint8_t> w = random_rows(t, rows, cols, rng, 0);
    for (int64_t n_tok : {2, 7}) {
      const std::vector<float> X = random_vec(static_cast<size_t>(n_tok * cols), rng);
      std::vector<float> alone(static_cast<size_t>(n_tok * rows)), together(alone.size(), NAN);
      for (int64_t k = 0; k < n_tok; ++k) {
        const MatvecJob one{t, RowLayout::gguf, w.data(), rows, cols, X.data() + k * cols, alone.data() + k * rows, true};
        matvec_batch(&one, 1, nullptr);
      }
      const MatmulJob step{t, RowLayout::gguf, w.data(), rows, cols, X.data(), n_tok, together.data(), true, true};
      matmul_batch(&step, 1, &pool);
      EXPECT_EQ(together, alone) << dtype_name(t) << ", " << n_tok << " tokens";
      // The same tokens through a plan of several jobs on the matrix (an expert's tokens).
      std::vector<float> planned(alone.size(), NAN);
      std::vector<MatvecJob> jobs;
      for (int64_t k = 0; k < n_tok; ++k)
        jobs.push_back({t, RowLayout::gguf, w.data(), rows, cols, X.data() + k * cols, planned.data() + k * rows, true});
      MatvecPlan plan;
      plan.prepare(jobs.data(), jobs.size());
      plan.rows(0, 17);
      plan.rows(17, rows);
      EXPECT_EQ(planned, alone) << dtype_name(t) << ", " << n_tok << " tokens, planned";
    }
  }
}

}  // namespace
}  // namespace moeflow::cpu

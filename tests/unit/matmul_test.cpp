#include "kernels/cpu/matmul.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/cpu/q4_vnni.h"
#include "kernels/cpu/rows_x4_vnni.h"
#include "kernels/cpu/roofline.h"
#include "kernels/cpu/thread_pool.h"
#include "tensor/dtype.h"
#include "tensor/rows_x4.h"
#include "float_vectors.h"

namespace moeflow::cpu {
namespace {

using testing::random_vec;
using testing::rel_err;

const DType kAllTypes[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0};

struct Weights {
  std::vector<uint8_t> bytes;
};

Weights make_weights(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  Weights w;
  const size_t rb = row_bytes(t, cols);
  w.bytes.resize(rb * static_cast<size_t>(rows) + 1);  // +1: W need not be aligned
  std::vector<float> row(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = uni(rng);
    quantize_row(t, row.data(), w.bytes.data() + rb * static_cast<size_t>(r), cols);
  }
  return w;
}


// ---------------------------------------------------------------------------------
// Thread pool.

TEST(ThreadPool, CoversRangeOnceAlignedToGrain) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1000, 100003}) {
      for (int64_t grain : {1, 4, 32}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> chunks{0};
        std::atomic<bool> bad{false};
        pool.parallel_for(
            n,
            [&](int64_t b, int64_t e, int tid) {
              if (tid < 0 || tid >= threads || b >= e || b % grain != 0 || e > n) bad = true;
              if (e != n && e % grain != 0) bad = true;
              ++chunks;
              for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
            },
            grain);
        EXPECT_FALSE(bad) << threads << " " << n << " " << grain;
        EXPECT_LE(chunks.load(), threads);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1);
      }
    }
  }
}

TEST(ThreadPool, Sums) {
  ThreadPool pool(3);
  const int64_t n = 1 << 20;
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  for (int rep = 0; rep < 20; ++rep) {
    std::vector<int64_t> partial(3, 0);
    pool.parallel_for(n, [&](int64_t b, int64_t e, int tid) {
      int64_t s = 0;
      for (int64_t i = b; i < e; ++i) s += v[static_cast<size_t>(i)];
      partial[static_cast<size_t>(tid)] += s;
    });
    EXPECT_EQ(partial[0] + partial[1] + partial[2], n * (n - 1) / 2);
  }
}

TEST(ThreadPool, ExceptionsPropagate) {
  ThreadPool pool(3);
  for (int rep = 0; rep < 50; ++rep) {
    // Thrown by a worker's chunk.
    EXPECT_THROW(pool.parallel_for(300,
                                   [&](int64_t b, int64_t, int) {
                                     if (b >= 100) throw std::runtime_error("worker");
                                   }),
                 std::runtime_error);
    // Thrown by the caller's chunk 0 while workers still run.
    std::atomic<int> done{0};
    EXPECT_THROW(pool.parallel_for(300,
                                   [&](int64_t b, int64_t, int) {
                                     if (b == 0) throw std::logic_error("caller");
                                     std::this_thread::sleep_for(std::chrono::microseconds(50));
                                     ++done;
                                   }),
                 std::logic_error);
    EXPECT_EQ(done.load(), 2);  // parallel_for waited for the workers
    // Every chunk throws: exactly one exception comes out.
    EXPECT_THROW(pool.parallel_for(3, [](int64_t, int64_t, int) { throw 42; }), int);
    // The pool still works afterwards.
    std::atomic<int64_t> s{0};
    pool.parallel_for(1000, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) s += i;
    });
    EXPECT_EQ(s.load(), 999 * 1000 / 2);
  }
}

TEST(ThreadPool, ManyTinyCalls) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    std::atomic<int64_t> total{0};
    const int calls = 20000;
    const auto t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < calls; ++c) {
      pool.parallel_for(threads * 4, [&](int64_t b, int64_t e, int) { total += e - b; }, 1);
    }
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(total.load(), int64_t{calls} * threads * 4);
    std::printf("  pool(%d): %.2f us per parallel_for (%u hw threads)\n", threads, us / calls,
                std::thread::hardware_concurrency());
    // Sleep past the spin window so the next calls must wake the workers from the cv.
    for (int c = 0; c < 5; ++c) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      pool.parallel_for(threads, [&](int64_t b, int64_t e, int) { total += e - b; }, 1);
    }
    EXPECT_EQ(total.load(), int64_t{calls} * threads * 4 + 5 * threads);
  }
}

TEST(ThreadPool, SmallRangesUseFewerChunks) {
  ThreadPool pool(3);
  std::atomic<int> calls{0};
  pool.parallel_for(1, [&](int64_t b, int64_t e, int tid) {
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 1);
    EXPECT_EQ(tid, 0);
    ++calls;
  });
  EXPECT_EQ(calls.load(), 1);
  // Alternate tiny and full jobs so idle workers see generations with no chunk.
  for (int rep = 0; rep < 2000; ++rep) {
    std::atomic<int64_t> s{0};
    const int64_t n = rep % 3 + 1;
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) { s += e - b; });
    ASSERT_EQ(s.load(), n);
  }
}

// ---------------------------------------------------------------------------------
// matvec / matmul against the scalar reference.

struct Shape {
  int64_t rows, cols;
};

// matvec's bound against the f64 reference. q8_0 mat-vecs (and q4_0 ones on the VNNI
// path) read the activation as int16 blocks (2^-16 of a block's largest magnitude per
// element), so their error is ~2e-5 rather than f32 rounding; the model-level bound is
// 1e-3.
double matvec_tolerance(DType t) { return t == DType::Q8_0 || t == DType::Q4_0 ? 1e-4 : 1e-5; }

std::vector<int64_t> cols_for(DType t) {
  // 160 and 288: whole groups of four blocks (the VNNI q4_0 kernel's unit) and a tail.
  if (dtype_is_quantized(t)) return {32, 96, 160, 288, 1024, 4096};
  return {32, 40, 96, 1000, 4096};  // float types may have a tail that is not a vector
}

TEST(Matmul, MatvecMatchesReference) {
  std::mt19937 rng(42);
  ThreadPool pool3(3);
  ThreadPool pool1(1);
  for (DType t : kAllTypes) {
    double worst = 0;
    for (int64_t rows : {37, 1, 130, 4}) {
      for (int64_t cols : cols_for(t)) {
        const Weights w = make_weights(t, rows, cols, rng);
        const std::vector<float> x = random_vec(static_cast<size_t>(cols), rng);
        std::vector<float> ref(static_cast<size_t>(rows));
        matvec_reference(t, w.bytes.data(), rows, cols, x.data(), ref.data());
        for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool1, &pool3}) {
          std::vector<float> y(static_cast<size_t>(rows), NAN);
          matvec(t, w.bytes.data(), rows, cols, x.data(), y.data(), pool);
          const double e = rel_err(y, ref);
          worst = std::max(worst, e);
          EXPECT_LT(e, matvec_tolerance(t)) << dtype_name(t) << " rows " << rows << " cols " << cols;
        }
        // Unaligned weight pointer.
        std::vector<uint8_t> shifted(w.bytes.size());
        std::memcpy(shifted.data() + 1, w.bytes.data(), w.bytes.size() - 1);
        std::vector<float> y(static_cast<size_t>(rows));
        matvec(t, shifted.data() + 1, rows, cols, x.data(), y.data(), &pool3);
        EXPECT_LT(rel_err(y, ref), matvec_tolerance(t)) << dtype_name(t) << " unaligned";
      }
    }
    std::printf("  matvec %-5s worst relative error vs reference: %.3e\n", dtype_name(t), worst);
  }
}

// The q4_0 VNNI kernel against the f32 kernel it replaces, and both against the
// reference: row counts that leave single rows after the groups of four (several rows
// each: the relative error of one dot product with cancellation says little), columns with
// and without a tail of blocks after the groups of 128, unaligned weights.
TEST(Matmul, Q4VnniMatchesF32Kernel) {
  if (!q4_vnni_enabled()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI + VBMI";
  std::mt19937 rng(7);
  ThreadPool pool2(2);
  double worst_vnni = 0, worst_f32 = 0, worst_diff = 0;
  for (int64_t rows : {3, 5, 64, 131}) {  // 3 and 5: rows left over after groups of four
    for (int64_t cols : {128, 160, 416, 2048}) {
      const Weights w = make_weights(DType::Q4_0, rows, cols, rng);
      std::vector<uint8_t> shifted(w.bytes.size() + 3);
      std::memcpy(shifted.data() + 3, w.bytes.data(), w.bytes.size());
      const std::vector<float> x = random_vec(static_cast<size_t>(cols), rng);
      std::vector<float> ref(static_cast<size_t>(rows)), y_vnni(ref.size()), y_f32(ref.size());
      matvec_reference(DType::Q4_0, w.bytes.data(), rows, cols, x.data(), ref.data());
      matvec(DType::Q4_0, shifted.data() + 3, rows, cols, x.data(), y_vnni.data(), &pool2);
      set_q4_vnni_enabled(false);
      matvec(DType::Q4_0, w.bytes.data(), rows, cols, x.data(), y_f32.data(), &pool2);
      set_q4_vnni_enabled(true);
      worst_vnni = std::max(worst_vnni, rel_err(y_vnni, ref));
      worst_f32 = std::max(worst_f32, rel_err(y_f32, ref));
      worst_diff = std::max(worst_diff, rel_err(y_vnni, y_f32));
      EXPECT_LT(rel_err(y_vnni, ref), 1e-4) << "rows " << rows << " cols " << cols;
      EXPECT_LT(rel_err(y_f32, ref), 1e-5) << "rows " << rows << " cols " << cols;
    }
  }
  std::printf("  q4_0 matvec relative error vs reference: VNNI %.3e, f32 kernel %.3e; between them %.3e\n",
              worst_vnni, worst_f32, worst_diff);
}

// Rows interleaved in fours (RowLayout::rows_x4) against GGUF's layout. Bit for bit on
// every path but one: the VNNI kernels of both q4_0 layouts (same integer sums, same
// order of float operations), the Highway kernels on rebuilt rows when VNNI is off,
// prefill's tiles, mat-vec batches that mix layouts over one activation (each packs
// its own). The exception is q8_0's VNNI kernel, which sums a whole block in integers
// before converting (the int16 Highway kernel converts partial sums): within q8_0's
// mat-vec tolerance of the reference.
TEST(Matmul, RowsX4MatchGgufLayout) {
  std::mt19937 rng(11);
  ThreadPool pool2(2);
  for (DType ft : {DType::Q4_0, DType::Q8_0}) {
    constexpr RowLayout kX4 = RowLayout::rows_x4;
    double worst = 0;
    for (int64_t rows : {4, 12, 132}) {  // 132: the threads' groups of 8 rows leave a quad
      for (int64_t cols : {128, 768, 2048, 4224}) {  // 4224: prefill's tiles span 4096 columns, then 128
        const Weights w = make_weights(ft, rows, cols, rng);
        std::vector<uint8_t> x4(w.bytes.size() + 3);  // + 3: unaligned, as a sub-range may be
        uint8_t* const W4 = x4.data() + 3;
        repack_rows_x4(ft, w.bytes.data(), rows, cols, W4);
        const std::vector<float> x = random_vec(static_cast<size_t>(cols), rng);
        const size_t n = static_cast<size_t>(rows);
        std::vector<float> ref(n), ref4(n), y(n), y4(n);
        matvec_reference(ft, w.bytes.data(), rows, cols, x.data(), ref.data());
        matvec_reference(ft, W4, rows, cols, x.data(), ref4.data(), kX4);
        EXPECT_EQ(ref4, ref) << "the reference reads the interleaved rows";
        for (bool vnni : {true, false}) {
          if (vnni && !q4_vnni_enabled()) continue;
          set_q4_vnni_enabled(vnni);
          const bool same_floats = ft == DType::Q4_0 || !vnni;
          for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2}) {
            matvec(ft, w.bytes.data(), rows, cols, x.data(), y.data(), pool);
            matvec(ft, W4, rows, cols, x.data(), y4.data(), pool, kX4);
            if (same_floats) {
              EXPECT_EQ(y4, y) << dtype_name(ft) << " rows_x4 " << rows << "x" << cols << (vnni ? " VNNI" : " Highway");
            }
          }
          worst = std::max(worst, rel_err(y4, ref));
          EXPECT_LT(rel_err(y4, ref), matvec_tolerance(ft)) << dtype_name(ft) << " rows_x4 " << rows << "x" << cols;
          for (int64_t n_tok : {2, 7}) {
            const std::vector<float> X = random_vec(static_cast<size_t>(cols * n_tok), rng);
            std::vector<float> Y(n * static_cast<size_t>(n_tok)), Y4(Y.size());
            matmul(ft, w.bytes.data(), rows, cols, X.data(), n_tok, Y.data(), &pool2);
            matmul(ft, W4, rows, cols, X.data(), n_tok, Y4.data(), &pool2, kX4);
            EXPECT_EQ(Y4, Y) << dtype_name(ft) << " rows_x4 " << rows << "x" << cols << " n_tok " << n_tok;
          }
          // A batch: both layouts over one x (the packings differ), and a second x.
          const std::vector<float> x2 = random_vec(static_cast<size_t>(cols), rng);
          std::vector<float> b_plain(n), b_x4(n), b_x4_x2(n), want_x2(n);
          const MatvecJob jobs[3] = {{ft, kX4, W4, rows, cols, x.data(), b_x4.data()},
                                     {ft, RowLayout::gguf, w.bytes.data(), rows, cols, x.data(), b_plain.data()},
                                     {ft, kX4, W4, rows, cols, x2.data(), b_x4_x2.data()}};
          matvec_batch(jobs, 3, &pool2);
          matvec(ft, W4, rows, cols, x2.data(), want_x2.data(), nullptr, kX4);
          EXPECT_EQ(b_x4, y4);
          EXPECT_EQ(b_plain, y);
          EXPECT_EQ(b_x4_x2, want_x2);
        }
        set_q4_vnni_enabled(true);
      }
    }
    std::printf("  %s rows_x4 matvec worst relative error vs reference: %.3e (VNNI %s)\n", dtype_name(ft), worst,
                q4_vnni_enabled() ? "on this CPU" : "absent: the Highway kernels on rebuilt rows");
    std::vector<float> x(128), y(6);
    std::vector<uint8_t> w(6 * row_bytes(ft, 128));
    EXPECT_THROW(matvec(ft, w.data(), 6, 128, x.data(), y.data(), nullptr, kX4), std::invalid_argument);
  }
}

TEST(Matmul, MatmulMatchesReference) {
  std::mt19937 rng(43);
  ThreadPool pool3(3);
  ThreadPool pool1(1);
  for (DType t : kAllTypes) {
    double worst = 0;
    for (int64_t rows : {37, 1, 130, 8}) {
      for (int64_t cols : cols_for(t)) {
        const Weights w = make_weights(t, rows, cols, rng);
        for (int64_t n_tok : {1, 2, 3, 17, 64}) {
          if (cols * rows * n_tok > 130 * 1024 * 64) continue;  // keep the test quick
          const std::vector<float> X =
              random_vec(static_cast<size_t>(cols * n_tok), rng);
          std::vector<float> ref(static_cast<size_t>(rows * n_tok));
          for (int64_t tk = 0; tk < n_tok; ++tk)
            matvec_reference(t, w.bytes.data(), rows, cols, X.data() + tk * cols,
                             ref.data() + tk * rows);
          for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool1, &pool3}) {
            std::vector<float> Y(static_cast<size_t>(rows * n_tok), NAN);
            matmul(t, w.bytes.data(), rows, cols, X.data(), n_tok, Y.data(), pool);
            const double e = rel_err(Y, ref);
            worst = std::max(worst, e);
            // One token goes through matvec.
            EXPECT_LT(e, n_tok == 1 ? matvec_tolerance(t) : 1e-5)
                << dtype_name(t) << " rows " << rows << " cols " << cols << " n_tok " << n_tok;
          }
        }
      }
    }
    std::printf("  matmul %-5s worst relative error vs reference: %.3e\n", dtype_name(t), worst);
  }
}

// Runs the batch `jobs` (each y replaced by a fresh output) on no pool, 2 and 3
// threads: output i must equal want[i] exactly every time.
void expect_batch_gives(std::vector<MatvecJob> jobs, const std::vector<std::vector<float>>& want) {
  ThreadPool pool2(2), pool3(3);
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
    std::vector<std::vector<float>> ys;
    for (MatvecJob& j : jobs) {
      ys.emplace_back(static_cast<size_t>(j.rows), NAN);
      j.y = ys.back().data();
    }
    matvec_batch(jobs.data(), jobs.size(), pool);
    for (size_t i = 0; i < jobs.size(); ++i)
      EXPECT_EQ(ys[i], want[i]) << dtype_name(jobs[i].dtype) << " job " << i << ", " << (pool ? pool->size() : 1)
                                << " threads";
  }
}

TEST(Matmul, BatchMatchesSeparateMatvecsBitForBit) {
  // A decode step's batch: matrices of every dtype and shape, some sharing an
  // activation (q, k, v), one with no columns. Each output must be exactly what a
  // lone matvec gives (the lossless offloading tests rely on it: the all-resident
  // run batches, offloaded experts compute one by one), for any thread count.
  std::mt19937 rng(45);
  struct Case {
    DType t;
    int64_t rows, cols;
    int x;  // which activation
  };
  const Case cases[] = {{DType::Q8_0, 130, 1024, 0}, {DType::Q8_0, 37, 1024, 0}, {DType::Q4_0, 64, 1024, 0},
                        {DType::F16, 9, 96, 1},      {DType::Q8_0, 200, 96, 1},  {DType::F32, 5, 0, 1},
                        {DType::BF16, 300, 1024, 0}, {DType::Q8_0, 1, 4096, 2}};
  std::vector<std::vector<float>> xs = {random_vec(1024, rng), random_vec(96, rng), random_vec(4096, rng)};
  std::vector<Weights> ws;
  for (const Case& c : cases) ws.push_back(make_weights(c.t, c.rows, c.cols, rng));
  std::vector<std::vector<float>> alone;
  for (size_t i = 0; i < std::size(cases); ++i) {
    alone.emplace_back(static_cast<size_t>(cases[i].rows), NAN);
    matvec(cases[i].t, ws[i].bytes.data(), cases[i].rows, cases[i].cols, xs[cases[i].x].data(), alone[i].data(),
           nullptr);
  }
  std::vector<MatvecJob> jobs;
  for (size_t i = 0; i < std::size(cases); ++i)
    jobs.push_back({cases[i].t, RowLayout::gguf, ws[i].bytes.data(), cases[i].rows, cases[i].cols,
                    xs[cases[i].x].data(), nullptr});
  expect_batch_gives(jobs, alone);
}

// The threads of a batch's section share its activations' quantising and packing
// (matmul.cpp, BatchInputs): one activation read by every kind of kernel at once
// (int16 and int8, interleaved and GGUF rows, q4_0, q8_0 and Q4_K), so the jobs share
// blocks, share packings, and pack from blocks another thread writes; each output
// must be exactly the lone mat-vec's.
TEST(Matmul, BatchSharesActivationPreparationBitForBit) {
  std::mt19937 rng(46);
  struct Case {
    DType t;
    RowLayout layout;
    bool x_int8;
    int x;
  };
  const Case cases[] = {{DType::Q8_0, RowLayout::gguf, false, 0},    {DType::Q4_0, RowLayout::rows_x4, false, 0},
                        {DType::Q4_0, RowLayout::gguf, false, 0},    {DType::Q4_K, RowLayout::gguf, false, 0},
                        {DType::Q4_0, RowLayout::rows_x4, true, 0},  {DType::Q4_K, RowLayout::gguf, true, 0},
                        {DType::Q8_0, RowLayout::rows_x4, true, 1},  {DType::Q8_0, RowLayout::rows_x4, false, 1},
                        {DType::Q4_0, RowLayout::rows_x4, true, 2},  {DType::Q4_0, RowLayout::rows_x4, true, 3},
                        {DType::Q6_K, RowLayout::gguf, false, 1},    {DType::Q4_0, RowLayout::rows_x4, false, 2}};
  const int64_t rows = 64, cols = 1024;
  std::vector<std::vector<float>> xs;
  for (int i = 0; i < 4; ++i) xs.push_back(random_vec(cols, rng));
  std::vector<std::vector<uint8_t>> ws;
  std::vector<std::vector<float>> alone;
  std::vector<MatvecJob> jobs;
  for (const Case& c : cases) {
    const Weights w = make_weights(c.t, rows, cols, rng);
    ws.emplace_back(w.bytes.size());
    if (c.layout == RowLayout::rows_x4) rows_x4_repack(c.t, w.bytes.data(), rows, cols, ws.back().data());
    else ws.back() = w.bytes;
    alone.emplace_back(static_cast<size_t>(rows), NAN);
    const MatvecJob j{c.t, c.layout, ws.back().data(), rows, cols, xs[static_cast<size_t>(c.x)].data(),
                      alone.back().data(), c.x_int8};
    matvec_batch(&j, 1, nullptr);
    jobs.push_back(j);
  }
  expect_batch_gives(jobs, alone);
}

TEST(Matmul, InterleavedBatchReadInPairsMatchesSeparateMatvecsBitForBit) {
  // Consecutive interleaved jobs of one type and shape are read two at a time, a quad
  // of each in turn (an expert's gate and up on one activation, two experts' down
  // projections on two): each output must still be exactly the lone mat-vec's, with
  // pairs, a job left over after a pair, and a shape change breaking a run.
  std::mt19937 rng(47);
  struct Case {
    DType t;
    int64_t rows, cols;
    int x;
  };
  const Case cases[] = {{DType::Q4_0, 256, 768, 0}, {DType::Q4_0, 256, 768, 0}, {DType::Q4_0, 256, 768, 1},
                        {DType::Q4_0, 64, 768, 1},  {DType::Q8_0, 128, 256, 2}, {DType::Q8_0, 128, 256, 2},
                        {DType::Q4_0, 768, 2048, 3}, {DType::Q4_0, 768, 2048, 4}};
  std::vector<std::vector<float>> xs = {random_vec(768, rng), random_vec(768, rng), random_vec(256, rng),
                                        random_vec(2048, rng), random_vec(2048, rng)};
  std::vector<std::vector<uint8_t>> w4;
  std::vector<std::vector<float>> alone;
  for (const Case& c : cases) {
    const Weights w = make_weights(c.t, c.rows, c.cols, rng);
    w4.emplace_back(w.bytes.size());
    rows_x4_repack(c.t, w.bytes.data(), c.rows, c.cols, w4.back().data());
    alone.emplace_back(static_cast<size_t>(c.rows), NAN);
    matvec(c.t, w4.back().data(), c.rows, c.cols, xs[static_cast<size_t>(c.x)].data(), alone.back().data(), nullptr,
           RowLayout::rows_x4);
  }
  std::vector<MatvecJob> jobs;
  for (size_t i = 0; i < std::size(cases); ++i)
    jobs.push_back({cases[i].t, RowLayout::rows_x4, w4[i].data(), cases[i].rows, cases[i].cols,
                    xs[static_cast<size_t>(cases[i].x)].data(), nullptr});
  expect_batch_gives(jobs, alone);
}

// Per-token jobs (a batched decode step: each token its own mat-vec, the matrix read
// once for all) give each token the lone mat-vec's floats: every file type and, on
// VNNI CPUs, both interleaved types (the multi-token kernel, 1 to 4 tokens a pass and
// a remainder); 1-3 threads; beside a mat-mul job in the same batch.
TEST(Matmul, PerTokenJobsMatchSeparateMatvecsBitForBit) {
  std::mt19937 rng(49);
  struct Case {
    DType t;
    int64_t rows, cols;
    RowLayout layout = RowLayout::gguf;
  };
  std::vector<Case> cases;
  for (DType t : kAllTypes) cases.push_back({t, 72, 256});
  cases.push_back({DType::Q8_0, 300, 768});
  if (q4_vnni_enabled()) {
    cases.push_back({DType::Q4_0, 264, 768, RowLayout::rows_x4});
    cases.push_back({DType::Q8_0, 96, 2048, RowLayout::rows_x4});
    // An odd count of quads: the tiles of two take them from the range's two halves, the
    // last tile holds one.
    cases.push_back({DType::Q8_0, 132, 768, RowLayout::rows_x4});
    cases.push_back({DType::Q4_0, 132, 768, RowLayout::rows_x4});
    cases.push_back({DType::Q4_0, 8, 128, RowLayout::rows_x4});
  }
  for (const Case& c : cases) {
    const bool x4 = c.layout == RowLayout::rows_x4;
    const Weights w = make_weights(c.t, c.rows, c.cols, rng);
    std::vector<uint8_t> wx(w.bytes.size());
    if (x4) rows_x4_repack(c.t, w.bytes.data(), c.rows, c.cols, wx.data());
    const uint8_t* W = x4 ? wx.data() : w.bytes.data();
    const std::string name = std::string(dtype_name(c.t)) + (x4 ? " rows_x4" : "");
    for (int64_t n : {2, 3, 4, 5, 9}) {
      const std::vector<float> X = random_vec(static_cast<size_t>(n * c.cols), rng);
      std::vector<float> alone(static_cast<size_t>(n * c.rows));
      for (int64_t t = 0; t < n; ++t)
        matvec(c.t, W, c.rows, c.cols, X.data() + t * c.cols, alone.data() + t * c.rows, nullptr, c.layout);
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        std::vector<float> got(alone.size(), NAN);
        const MatmulJob job{c.t, c.layout, W, c.rows, c.cols, X.data(), n, got.data(), true};
        matmul_batch(&job, 1, &pool);
        EXPECT_EQ(got, alone) << name << " " << c.rows << "x" << c.cols << ", " << n << " tokens, "
                              << threads << " threads";
        // Beside a mat-mul of the same matrix: neither changes the other.
        std::vector<float> mm(static_cast<size_t>(n * c.rows)), mm_alone(mm.size());
        matmul(c.t, W, c.rows, c.cols, X.data(), n, mm_alone.data(), nullptr, c.layout);
        std::fill(got.begin(), got.end(), NAN);
        const MatmulJob both[2] = {{c.t, c.layout, W, c.rows, c.cols, X.data(), n, got.data(), true},
                                   {c.t, c.layout, W, c.rows, c.cols, X.data(), n, mm.data()}};
        matmul_batch(both, 2, &pool);
        EXPECT_EQ(got, alone) << name << ", per-token beside a mat-mul";
        EXPECT_EQ(mm, mm_alone) << name << ", the mat-mul beside per-token jobs";
      }
    }
  }
}

// Two matrices' per-token jobs on the same tokens (an expert's gate and up in a
// batched decode step), which matvec_batch reads as a pair of interleaved matrices:
// each token gets each matrix's lone mat-vec floats, on int16 and int8 activations,
// 2 to 9 tokens, 1 to 3 threads; and a second matrix on other tokens is no pair.
TEST(Matmul, PairedPerTokenJobsMatchSeparateMatvecsBitForBit) {
  if (!q4_vnni_enabled()) GTEST_SKIP() << "interleaved rows need AVX-512 VNNI";
  std::mt19937 rng(51);
  for (DType t : {DType::Q4_0, DType::Q8_0}) {
    const int64_t rows = 264, cols = 768;
    std::vector<uint8_t> wx[2];
    for (auto& w : wx) {
      const Weights raw = make_weights(t, rows, cols, rng);
      w.resize(raw.bytes.size());
      rows_x4_repack(t, raw.bytes.data(), rows, cols, w.data());
    }
    for (bool int8 : {false, true})
      for (int64_t n : {2, 3, 4, 5, 9}) {
        const std::vector<float> X = random_vec(static_cast<size_t>(n * cols), rng);
        const std::vector<float> X2 = random_vec(static_cast<size_t>(n * cols), rng);
        for (bool same_tokens : {true, false}) {
          const float* x1 = same_tokens ? X.data() : X2.data();
          std::vector<float> alone[2];
          for (int m = 0; m < 2; ++m) {
            alone[m].resize(static_cast<size_t>(n * rows));
            for (int64_t k = 0; k < n; ++k) {
              const MatvecJob one{t, RowLayout::rows_x4, wx[m].data(), rows, cols, (m ? x1 : X.data()) + k * cols,
                                  alone[m].data() + k * rows, int8};
              matvec_batch(&one, 1, nullptr);
            }
          }
          for (int threads : {1, 2, 3}) {
            ThreadPool pool(threads);
            std::vector<float> got[2] = {std::vector<float>(alone[0].size(), NAN),
                                         std::vector<float>(alone[1].size(), NAN)};
            const MatmulJob jobs[2] = {
                {t, RowLayout::rows_x4, wx[0].data(), rows, cols, X.data(), n, got[0].data(), true, int8},
                {t, RowLayout::rows_x4, wx[1].data(), rows, cols, x1, n, got[1].data(), true, int8}};
            matmul_batch(jobs, 2, &pool);
            for (int m = 0; m < 2; ++m)
              EXPECT_EQ(got[m], alone[m]) << dtype_name(t) << (int8 ? " int8" : " int16") << ", matrix " << m << ", "
                                          << n << " tokens, " << threads << " threads"
                                          << (same_tokens ? "" : ", other tokens");
          }
        }
      }
  }
}

// Interleaved rows on int8 activations (MatvecJob::x_int8, `--activations int8`):
// the products equal the float64 product of the weights with the activation as the
// packing rounds it (rows_x4_x8_values) to float rounding, since the integer sums are
// exact; against the f32 activation they carry int8's rounding (printed). And every
// path gives a token the same floats: alone, paired, 1-12 tokens per pass (the kernel
// takes up to eight), per-token jobs beside a mat-mul, a prepared plan's row chunks.
TEST(Matmul, Int8ActivationsOnInterleavedRows) {
  if (!q4_vnni_enabled()) GTEST_SKIP() << "this CPU has no AVX-512 VNNI: the int16 kernels run (the option is ignored)";
  std::mt19937 rng(53);
  ThreadPool pool2(2);
  for (DType ft : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL, DType::IQ4_XS, DType::Q8_0,
                   DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    double worst_rounded = 0, worst_f32 = 0;
    for (int64_t rows : {12, 264, 268}) {  // 268: an odd count of quads, the last tile of two holds one
      for (int64_t cols : {dtype_info(ft).block_size == 256 ? int64_t{256} : int64_t{128}, int64_t{768}, int64_t{2048}}) {
        const Weights w = make_weights(ft, rows, cols, rng);
        std::vector<uint8_t> w4(w.bytes.size());
        rows_x4_repack(ft, w.bytes.data(), rows, cols, w4.data());
        const uint8_t* W4 = w4.data();
        const size_t n = static_cast<size_t>(rows);
        const std::vector<float> x = random_vec(static_cast<size_t>(cols), rng);
        std::vector<float> x8(x.size()), ref8(n), ref(n), y(n, NAN);
        rows_x4_x8_values(x.data(), cols, x8.data());
        matvec_reference(ft, w.bytes.data(), rows, cols, x8.data(), ref8.data());
        matvec_reference(ft, w.bytes.data(), rows, cols, x.data(), ref.data());
        const MatvecJob job{ft, RowLayout::rows_x4, W4, rows, cols, x.data(), y.data(), true};
        matvec_batch(&job, 1, nullptr);
        worst_rounded = std::max(worst_rounded, rel_err(y, ref8));
        worst_f32 = std::max(worst_f32, rel_err(y, ref));
        EXPECT_LT(rel_err(y, ref8), 2e-6) << dtype_name(ft) << " " << rows << "x" << cols;
        EXPECT_LT(rel_err(y, ref), 2e-2) << dtype_name(ft) << " " << rows << "x" << cols;
        // Two tokens beside each other on two threads: the pairs' kernel.
        const std::vector<float> x2 = random_vec(static_cast<size_t>(cols), rng);
        std::vector<float> y2(n, NAN), b1(n, NAN), b2(n, NAN);
        const MatvecJob lone2{ft, RowLayout::rows_x4, W4, rows, cols, x2.data(), y2.data(), true};
        matvec_batch(&lone2, 1, nullptr);
        std::vector<uint8_t> w4b(w4);  // another matrix of the same shape: read as a pair
        const MatvecJob pair[2] = {{ft, RowLayout::rows_x4, W4, rows, cols, x.data(), b1.data(), true},
                                   {ft, RowLayout::rows_x4, w4b.data(), rows, cols, x2.data(), b2.data(), true}};
        matvec_batch(pair, 2, &pool2);
        EXPECT_EQ(b1, y);
        EXPECT_EQ(b2, y2);
        // A prepared plan's rows, in chunks.
        std::vector<float> yp(n, NAN);
        MatvecPlan plan;
        plan.prepare({ft, RowLayout::rows_x4, W4, rows, cols, x.data(), yp.data(), true});
        for (int64_t r = rows; r > 0; r -= 4) plan.rows(r - 4, r);
        EXPECT_EQ(yp, y);
        if (rows < 264) continue;
        for (int64_t n_tok : {2, 5, 8, 9, 12}) {
          const std::vector<float> X = random_vec(static_cast<size_t>(n_tok * cols), rng);
          std::vector<float> alone(static_cast<size_t>(n_tok) * n, NAN);
          for (int64_t t = 0; t < n_tok; ++t) {
            const MatvecJob one{ft, RowLayout::rows_x4, W4, rows, cols, X.data() + t * cols, alone.data() + t * rows, true};
            matvec_batch(&one, 1, nullptr);
          }
          for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2}) {
            std::vector<float> got(alone.size(), NAN), mm(alone.size(), NAN), mm_alone(alone.size());
            matmul(ft, W4, rows, cols, X.data(), n_tok, mm_alone.data(), nullptr, RowLayout::rows_x4);
            const MatmulJob both[2] = {{ft, RowLayout::rows_x4, W4, rows, cols, X.data(), n_tok, got.data(), true, true},
                                       {ft, RowLayout::rows_x4, W4, rows, cols, X.data(), n_tok, mm.data(), false, true}};
            matmul_batch(both, 2, pool);
            EXPECT_EQ(got, alone) << dtype_name(ft) << " " << n_tok << " tokens per step";
            EXPECT_EQ(mm, mm_alone) << "a mat-mul (prefill) keeps its f32 activations";
          }
        }
      }
    }
    std::printf("  %s rows_x4, int8 activations: worst relative error %.3e vs the rounded activation's product, "
                "%.3e vs the f32 activation's\n",
                dtype_name(ft), worst_rounded, worst_f32);
  }
}

// A prepared mat-vec whose rows two threads take in chunks, from the front and the
// back (moe_forward's expert-per-thread decode), gives the lone mat-vec's floats.
TEST(Matmul, PlanRowsInAnyChunksMatchTheMatvecBitForBit) {
  std::mt19937 rng(48);
  for (DType t : kAllTypes)
    for (bool interleaved : {false, true}) {
      const int64_t rows = 96, cols = 256;
      if (interleaved && !rows_x4_supports(t)) continue;
      const Weights w = make_weights(t, rows, cols, rng);
      std::vector<uint8_t> w4;
      const void* W = w.bytes.data();
      const RowLayout layout = interleaved ? RowLayout::rows_x4 : RowLayout::gguf;
      if (interleaved) {
        w4.resize(w.bytes.size());
        rows_x4_repack(t, w.bytes.data(), rows, cols, w4.data());
        W = w4.data();
      }
      const std::vector<float> x = random_vec(cols, rng);
      std::vector<float> alone(rows, NAN), y(rows, NAN);
      matvec(t, W, rows, cols, x.data(), alone.data(), nullptr, layout);
      MatvecPlan plan;
      plan.prepare({t, layout, W, rows, cols, x.data(), y.data()});
      EXPECT_EQ(plan.n_rows(), rows);
      std::thread back([&] {
        for (int64_t r = rows; r > 48; r -= 8) plan.rows(r - 8, r);
      });
      for (int64_t r = 0; r < 48; r += 16) plan.rows(r, r + 16);
      back.join();
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_EQ(y[r], alone[r]) << dtype_name(t) << " " << row_layout_name(layout) << " row " << r;
      EXPECT_THROW(plan.rows(0, rows + 1), std::invalid_argument);
      if (interleaved) {
        EXPECT_THROW(plan.rows(2, 8), std::invalid_argument);  // quads only
      }
      // Three tokens' mat-vecs on the matrix (an expert's tokens in a batched decode
      // step), on int16 and int8 activations: the rows of all three at once, in chunks
      // from both ends, give what matvec_batch gives the same jobs, and each token the
      // lone mat-vec's floats.
      for (bool int8 : {false, true}) {
        if (interleaved && rows_x4_int8_only(t) && !int8) continue;
        std::vector<std::vector<float>> xs, lone, batch, got;
        std::vector<MatvecJob> jobs;
        for (int k = 0; k < 3; ++k) {
          xs.push_back(random_vec(cols, rng));
          lone.emplace_back(rows, NAN);
          batch.emplace_back(rows, NAN);
          got.emplace_back(rows, NAN);
        }
        for (int k = 0; k < 3; ++k) {
          const MatvecJob one{t, layout, W, rows, cols, xs[k].data(), lone[k].data(), int8};
          matvec_batch(&one, 1, nullptr);
          jobs.push_back({t, layout, W, rows, cols, xs[k].data(), batch[k].data(), int8});
        }
        matvec_batch(jobs.data(), jobs.size(), nullptr);
        for (int k = 0; k < 3; ++k) jobs[k].y = got[k].data();
        plan.prepare(jobs.data(), jobs.size());
        std::thread from_back([&] {
          for (int64_t r = rows; r > 40; r -= 8) plan.rows(r - 8, r);
        });
        for (int64_t r = 0; r < 40; r += 8) plan.rows(r, r + 8);
        from_back.join();
        for (int k = 0; k < 3; ++k) {
          EXPECT_EQ(got[k], batch[k]) << dtype_name(t) << " " << row_layout_name(layout) << " token " << k
                                      << (int8 ? " int8" : " int16");
          EXPECT_EQ(got[k], lone[k]) << dtype_name(t) << " " << row_layout_name(layout) << " token " << k
                                     << (int8 ? " int8" : " int16");
        }
      }
      MatvecJob other{t, layout, nullptr, rows, cols, x.data(), y.data()};
      const MatvecJob mixed[2] = {{t, layout, W, rows, cols, x.data(), y.data()}, other};
      EXPECT_THROW(plan.prepare(mixed, 2), std::invalid_argument);  // one matrix only
    }
}

TEST(Matmul, BatchMatchesSeparateMatmulsBitForBit) {
  // A prefill layer's batch: every selected expert's gate and up products, each with
  // its own number of tokens (one token takes the mat-vec path, as in matmul; zero
  // tokens and zero columns do nothing / write zeros). Each output must equal a lone
  // matmul exactly (offloaded experts compute one by one), for any thread count.
  std::mt19937 rng(46);
  struct Case {
    DType t;
    int64_t rows, cols, n_tok;
  };
  const Case cases[] = {{DType::Q8_0, 130, 1024, 7}, {DType::Q8_0, 37, 1024, 1}, {DType::Q4_0, 64, 1024, 13},
                        {DType::F16, 9, 96, 2},      {DType::Q8_0, 200, 96, 0},  {DType::F32, 5, 0, 3},
                        {DType::BF16, 300, 1024, 6}, {DType::Q4_0, 3, 4096, 1},  {DType::F32, 41, 160, 5}};
  std::vector<Weights> ws;
  std::vector<std::vector<float>> xs, alone;
  for (const Case& c : cases) {
    ws.push_back(make_weights(c.t, c.rows, c.cols, rng));
    xs.push_back(random_vec(static_cast<size_t>(std::max<int64_t>(1, c.n_tok * c.cols)), rng));
    alone.emplace_back(static_cast<size_t>(c.rows * c.n_tok), NAN);
    matmul(c.t, ws.back().bytes.data(), c.rows, c.cols, xs.back().data(), c.n_tok, alone.back().data(), nullptr);
  }
  ThreadPool pool2(2), pool3(3);
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &pool2, &pool3}) {
    std::vector<std::vector<float>> ys;
    std::vector<MatmulJob> jobs;
    for (size_t i = 0; i < std::size(cases); ++i) {
      const Case& c = cases[i];
      ys.emplace_back(static_cast<size_t>(c.rows * c.n_tok), NAN);
      jobs.push_back({c.t, RowLayout::gguf, ws[i].bytes.data(), c.rows, c.cols, xs[i].data(), c.n_tok, ys[i].data()});
    }
    matmul_batch(jobs.data(), jobs.size(), pool);
    for (size_t i = 0; i < std::size(cases); ++i)
      for (size_t r = 0; r < ys[i].size(); ++r)
        ASSERT_EQ(ys[i][r], alone[i][r]) << dtype_name(cases[i].t) << " job " << i << " element " << r;
  }
}

TEST(Matmul, LargeColsManyTokens) {
  // cols > 4096 with 64 tokens: several column tiles (kKc = 4096) accumulate into Y.
  std::mt19937 rng(44);
  ThreadPool pool(2);
  for (DType t : kAllTypes) {
    const int64_t rows = 19, cols = 8192 + 96, n_tok = 64;
    const Weights w = make_weights(t, rows, cols, rng);
    const std::vector<float> X = random_vec(static_cast<size_t>(cols * n_tok), rng);
    std::vector<float> ref(static_cast<size_t>(rows * n_tok)), Y(ref.size());
    for (int64_t tk = 0; tk < n_tok; ++tk)
      matvec_reference(t, w.bytes.data(), rows, cols, X.data() + tk * cols, ref.data() + tk * rows);
    matmul(t, w.bytes.data(), rows, cols, X.data(), n_tok, Y.data(), &pool);
    const double e = rel_err(Y, ref);
    std::printf("  matmul %-5s 19x8288 x 64 tokens: relative error %.3e\n", dtype_name(t), e);
    EXPECT_LT(e, 1e-5);
  }
}

TEST(Matmul, RejectsPartialBlocks) {
  std::vector<uint8_t> w(1024);
  std::vector<float> x(64), y(4);
  EXPECT_THROW(matvec(DType::Q8_0, w.data(), 1, 48, x.data(), y.data(), nullptr),
               std::invalid_argument);
  EXPECT_THROW(matmul(DType::Q4_0, w.data(), 1, 40, x.data(), 1, y.data(), nullptr),
               std::invalid_argument);
}

TEST(Roofline, SmokeTest) {
  ThreadPool pool(2);
  const double gbs = measure_triad_bandwidth_gbs(&pool, 4 << 20);
  const double gflops = measure_peak_fma_gflops(&pool);
  const double gmacs = measure_peak_int8_gmacs(&pool);
  std::printf("  triad (4 MiB arrays, 2 threads): %.1f GB/s, peak FMA: %.1f GFLOP/s, peak int8: %.1f G multiply-adds/s\n",
              gbs, gflops, gmacs);
  EXPECT_GT(gbs, 0.1);
  EXPECT_GT(gflops, 0.1);
  if (cpu_has_avx512_vnni()) {
    // One vpdpbusd does 64 multiply-adds where an FMA does 16 f32 ones (2 flops each).
    EXPECT_GT(gmacs, 0.5 * gflops) << "int8 VNNI below the f32 FMA rate";
  } else {
    EXPECT_EQ(gmacs, 0.0);
  }
  const double avx2 = measure_peak_int8_avx2_gmacs(&pool);
  std::printf("  peak int8 without VNNI (AVX2 vpmaddubsw + vpmaddwd): %.1f G multiply-adds/s\n", avx2);
  if (__builtin_cpu_supports("avx2")) {
    // Each pair does 32 multiply-adds where an FMA does 16 flops, and AVX2 cores issue
    // one to two of either a cycle (the Zen 3 VM measured 0.5-2.5x the FMA probe's rate
    // in different sessions, by which of its pipes a neighbour on its cores contended for).
    EXPECT_GT(avx2, 0.25 * gflops);
  } else {
    EXPECT_EQ(avx2, 0.0);
  }
}

}  // namespace
}  // namespace moeflow::cpu

#include "kernels/cpu/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <cstdio>
#include <random>
#include <vector>

#include "kernels/cpu/thread_pool.h"

namespace moeflow::cpu {
namespace {

struct Case {
  int64_t n_head, n_head_kv, head_dim, pad;  // pad: extra floats per cached position
  int64_t n_tok, pos0;
};

// SIMD attention against the double-precision reference on fixed random inputs:
// head sizes that are and are not whole vectors, grouped-query and plain heads, one
// decode token after a long cache and a prefill block after a short one; groups of
// 3, 8 (two chunks of four heads), 5 (a chunk of four and one of one) and 7 query
// heads per kv head.
TEST(Attention, MatchesReference) {
  const Case cases[] = {{12, 4, 64, 0, 1, 159},  {12, 4, 64, 0, 9, 0},   {4, 4, 80, 0, 3, 40},
                        {6, 2, 20, 3, 5, 11},    {2, 1, 7, 1, 1, 0},     {8, 2, 128, 0, 2, 300},
                        {16, 16, 256, 4, 1, 33}, {32, 4, 64, 0, 1, 77}, {10, 2, 32, 2, 4, 20},
                        {7, 1, 16, 0, 2, 50}};
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool(3);
  for (const Case& c : cases) {
    const AttentionShape s{c.n_head, c.n_head_kv, c.head_dim, c.n_head_kv * c.head_dim + c.pad};
    const int64_t n_ctx = c.pos0 + c.n_tok;
    std::vector<float> q(static_cast<size_t>(c.n_tok * c.n_head * c.head_dim));
    std::vector<float> k(static_cast<size_t>(n_ctx * s.kv_stride)), v(k.size());
    for (auto& x : q) x = 2.0f * nd(rng);  // scores spread enough to make softmax peaky
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    std::vector<float> ref(q.size()), one(q.size()), many(q.size());
    attention_reference(s, q.data(), c.n_tok, c.pos0, k.data(), v.data(), ref.data());
    attention(s, q.data(), c.n_tok, c.pos0, k.data(), v.data(), one.data(), nullptr);
    attention(s, q.data(), c.n_tok, c.pos0, k.data(), v.data(), many.data(), &pool);
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      num += (one[i] - ref[i]) * (one[i] - ref[i]);
      den += ref[i] * ref[i];
    }
    const double rel = std::sqrt(num / den);
    std::printf("heads %lld/%lld dim %lld, %lld tokens after %lld: relative error %.2e\n",
                static_cast<long long>(c.n_head), static_cast<long long>(c.n_head_kv),
                static_cast<long long>(c.head_dim), static_cast<long long>(c.n_tok),
                static_cast<long long>(c.pos0), rel);
    EXPECT_LT(rel, 1e-5);
    EXPECT_EQ(one, many) << "threads must not change the result";

    // The same cache stored head-major (as KvCache keeps it: one [n_ctx][head_dim]
    // plane per kv head, plus a gap): the same numbers, bit for bit.
    const int64_t plane = n_ctx * c.head_dim + 5;
    std::vector<float> kh(static_cast<size_t>(c.n_head_kv * plane)), vh(kh.size());
    for (int64_t g = 0; g < c.n_head_kv; ++g)
      for (int64_t p = 0; p < n_ctx; ++p)
        for (int64_t d = 0; d < c.head_dim; ++d) {
          kh[g * plane + p * c.head_dim + d] = k[p * s.kv_stride + g * c.head_dim + d];
          vh[g * plane + p * c.head_dim + d] = v[p * s.kv_stride + g * c.head_dim + d];
        }
    const AttentionShape sh{c.n_head, c.n_head_kv, c.head_dim, c.head_dim, plane};
    std::vector<float> head_major(q.size()), head_major_ref(q.size());
    attention(sh, q.data(), c.n_tok, c.pos0, kh.data(), vh.data(), head_major.data(), &pool);
    attention_reference(sh, q.data(), c.n_tok, c.pos0, kh.data(), vh.data(), head_major_ref.data());
    EXPECT_EQ(head_major, one) << "head-major cache";
    EXPECT_EQ(head_major_ref, ref) << "head-major cache, reference";

    // An f16 cache (as KvCache keeps it for quantised models): against the reference
    // reading the same halves, the same bound; threads change nothing.
    std::vector<uint16_t> k16(kh.size()), v16(vh.size());
    kv_store(DType::F16, kh.data(), k16.data(), static_cast<int64_t>(kh.size()));
    kv_store(DType::F16, vh.data(), v16.data(), static_cast<int64_t>(vh.size()));
    AttentionShape s16 = sh;
    s16.kv_type = DType::F16;
    std::vector<float> h16(q.size()), h16_one(q.size()), h16_ref(q.size());
    attention(s16, q.data(), c.n_tok, c.pos0, k16.data(), v16.data(), h16.data(), &pool);
    attention(s16, q.data(), c.n_tok, c.pos0, k16.data(), v16.data(), h16_one.data(), nullptr);
    attention_reference(s16, q.data(), c.n_tok, c.pos0, k16.data(), v16.data(), h16_ref.data());
    num = den = 0;
    for (size_t i = 0; i < h16_ref.size(); ++i) {
      num += (h16[i] - h16_ref[i]) * (h16[i] - h16_ref[i]);
      den += h16_ref[i] * h16_ref[i];
    }
    std::printf("  f16 cache: relative error %.2e\n", std::sqrt(num / den));
    EXPECT_LT(std::sqrt(num / den), 1e-5) << "f16 cache";
    EXPECT_EQ(h16, h16_one) << "f16 cache: threads must not change the result";
  }
}

// kv_store's f16 conversion (SIMD) rounds exactly as the scalar fp32_to_fp16: nearest
// even, subnormals, overflow to infinity, signed zeros, NaN stays NaN.
TEST(Attention, KvStoreRoundsAsTheScalarConversion) {
  std::vector<float> x = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.0f, 65520.0f, 1e9f, -1e9f, 6.1e-5f, 3e-7f,
                          5.96e-8f, 2.98e-8f, 1e-30f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 0.1f, 3.14159f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()};
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 10.0f);
  for (int i = 0; i < 1000; ++i) x.push_back(nd(rng));
  std::vector<uint16_t> got(x.size());
  kv_store(DType::F16, x.data(), got.data(), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(got[i], fp32_to_fp16(x[i])) << x[i];
  const float nan = std::numeric_limits<float>::quiet_NaN();
  uint16_t h;
  kv_store(DType::F16, &nan, &h, 1);
  EXPECT_TRUE(std::isnan(fp16_to_fp32(h)));
  EXPECT_THROW(kv_store(DType::BF16, x.data(), got.data(), 1), std::invalid_argument);
}

}  // namespace
}  // namespace moeflow::cpu

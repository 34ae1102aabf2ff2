#include "kernels/cpu/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>
#include <cstdio>
#include <random>
#include <vector>

#include <hwy/targets.h>

#include "float_vectors.h"
#include "kernels/cpu/thread_pool.h"

namespace moeflow::cpu {
namespace {

struct Case {
  int64_t n_head, n_head_kv, head_dim, block_len;
  int64_t n_tok, pos0;
};

using testing::rel_err;

// Head sizes that are and are not whole vectors (and multiples of 32 or not),
// grouped-query and plain heads, one decode token after a long cache and a prefill
// block after a short one; groups of 3, 4, 8, 5 and 7 query heads per kv head; blocks
// of 1, 3, 16, 32 positions and one block for everything. Prefill blocks of one-head
// groups, whose consecutive tokens share a job (up to eight, fewer on more threads),
// also at a head size that is not whole vectors, and one of more rows than a kernel
// call takes, over more positions than a span (attention.cpp: kSpan).
const Case kCases[] = {{12, 4, 64, 32, 1, 159},  {12, 4, 64, 32, 9, 0},   {4, 4, 80, 3, 3, 40},
                       {6, 2, 20, 16, 5, 11},    {2, 1, 7, 1, 1, 0},      {8, 2, 128, 32, 2, 300},
                       {16, 16, 256, 16, 1, 33}, {32, 4, 64, 400, 1, 77}, {10, 2, 32, 3, 4, 20},
                       {7, 1, 16, 32, 2, 50},    {8, 8, 64, 16, 11, 70},  {4, 4, 20, 3, 11, 5},
                       {8, 2, 64, 16, 6, 600}};

// SIMD attention against the double-precision reference on fixed random inputs
// (kCases; a group of eight as one job of eight heads, or two of four), the blocks
// taken from the pool in a scrambled order (block tables as a paged cache gives them).
TEST(Attention, MatchesReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool(3), wide_pool(16);
  for (const Case& c : kCases) {
    const int64_t n_ctx = c.pos0 + c.n_tok;
    const int64_t n_blocks = (n_ctx + c.block_len - 1) / c.block_len + 2;  // two never used
    const int64_t stride = c.n_head_kv * c.block_len * c.head_dim + 5;      // a gap between blocks
    const AttentionShape s{c.n_head, c.n_head_kv, c.head_dim, c.block_len, stride};
    std::vector<int32_t> table(static_cast<size_t>(n_blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    std::vector<int32_t> sorted = table;
    std::sort(sorted.begin(), sorted.end());
    ASSERT_TRUE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) << "a block used twice";
    std::vector<AttentionQuery> tok(static_cast<size_t>(c.n_tok));
    for (int64_t t = 0; t < c.n_tok; ++t) tok[t] = {c.pos0 + t, table.data()};
    std::vector<float> q(static_cast<size_t>(c.n_tok * c.n_head * c.head_dim));
    std::vector<float> k(static_cast<size_t>(n_blocks * stride)), v(k.size());
    for (auto& x : q) x = 2.0f * nd(rng);  // scores spread enough to make softmax peaky
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    std::vector<float> ref(q.size()), one(q.size()), many(q.size());
    attention_reference(s, q.data(), c.n_tok, tok.data(), k.data(), v.data(), ref.data());
    attention(s, q.data(), c.n_tok, tok.data(), k.data(), v.data(), one.data(), nullptr);
    attention(s, q.data(), c.n_tok, tok.data(), k.data(), v.data(), many.data(), &pool);
    // More threads than jobs of eight heads: jobs of four (kernels/cpu/attention.cpp),
    // the same floats.
    std::vector<float> wide(q.size());
    attention(s, q.data(), c.n_tok, tok.data(), k.data(), v.data(), wide.data(), &wide_pool);
    EXPECT_EQ(wide, one) << "jobs of four heads against eight";
    const double rel = rel_err(one, ref);
    std::printf("heads %lld/%lld dim %lld, blocks of %lld, %lld tokens after %lld: relative error %.2e\n",
                static_cast<long long>(c.n_head), static_cast<long long>(c.n_head_kv),
                static_cast<long long>(c.head_dim), static_cast<long long>(c.block_len),
                static_cast<long long>(c.n_tok), static_cast<long long>(c.pos0), rel);
    EXPECT_LT(rel, 1e-5);
    EXPECT_EQ(one, many) << "threads must not change the result";

    // The same rows in one contiguous block (block table {0}): the same floats, bit for
    // bit. Each token alone in a call, too.
    const int64_t one_stride = c.n_head_kv * n_ctx * c.head_dim;
    const AttentionShape s1{c.n_head, c.n_head_kv, c.head_dim, n_ctx, one_stride};
    std::vector<float> k1(static_cast<size_t>(one_stride)), v1(k1.size());
    for (int64_t g = 0; g < c.n_head_kv; ++g)
      for (int64_t p = 0; p < n_ctx; ++p)
        for (int64_t d = 0; d < c.head_dim; ++d) {
          const int64_t plane = table[p / c.block_len] * stride + g * c.block_len * c.head_dim;
          k1[(g * c.head_dim + d) * n_ctx + p] = k[plane + d * c.block_len + p % c.block_len];  // keys transposed
          v1[(g * n_ctx + p) * c.head_dim + d] = v[plane + (p % c.block_len) * c.head_dim + d];
        }
    const int32_t zero = 0;
    std::vector<AttentionQuery> tok1(tok.size());
    for (size_t t = 0; t < tok.size(); ++t) tok1[t] = {tok[t].pos, &zero};
    std::vector<float> contiguous(q.size()), singles(q.size());
    attention(s1, q.data(), c.n_tok, tok1.data(), k1.data(), v1.data(), contiguous.data(), &pool);
    EXPECT_EQ(contiguous, one) << "one contiguous block";
    const int64_t qs = c.n_head * c.head_dim;
    for (int64_t t = 0; t < c.n_tok; ++t)
      attention(s, q.data() + t * qs, 1, &tok[t], k.data(), v.data(), singles.data() + t * qs, nullptr);
    EXPECT_EQ(singles, one) << "a token alone in a call";

    // An f16 cache: against the reference reading the same halves, the same bound;
    // threads change nothing.
    std::vector<uint16_t> k16(k.size()), v16(v.size());
    kv_store(DType::F16, k.data(), k16.data(), static_cast<int64_t>(k.size()));
    kv_store(DType::F16, v.data(), v16.data(), static_cast<int64_t>(v.size()));
    AttentionShape s16 = s;
    s16.kv_type = DType::F16;
    std::vector<float> h16(q.size()), h16_one(q.size()), h16_ref(q.size());
    attention(s16, q.data(), c.n_tok, tok.data(), k16.data(), v16.data(), h16.data(), &pool);
    attention(s16, q.data(), c.n_tok, tok.data(), k16.data(), v16.data(), h16_one.data(), nullptr);
    attention_reference(s16, q.data(), c.n_tok, tok.data(), k16.data(), v16.data(), h16_ref.data());
    std::printf("  f16 cache: relative error %.2e\n", rel_err(h16, h16_ref));
    EXPECT_LT(rel_err(h16, h16_ref), 1e-5) << "f16 cache";
    EXPECT_EQ(h16, h16_one) << "f16 cache: threads must not change the result";
  }
}

// A Q8_0 cache (int8 and a float scale per position and 32 elements of a row, after
// each plane), filled through kv_store_slot as the pool fills it: the SIMD kernel
// against the reference reading the same int8 and scales (the f32 path's bound), on
// the cases above (head sizes that are and are not multiples of the 32-element group:
// 7, 16, 20, 80; blocks of 1, 3, 16, 32 and 400 scrambled in the pool); threads and a
// token alone change nothing; and against the unquantized f32 cache, the rounding
// printed beside an f16 cache's. On every SIMD target this CPU runs (AVX-512's 16
// lanes, AVX2's 8, SSE4's 4: a vector's share of a 32-element group differs).
TEST(Attention, Q8CacheMatchesReference) {
  std::printf("targets:");
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) std::printf(" %s", hwy::TargetName(target));
  std::printf("\n");
  std::mt19937 rng(17);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool(3);
  for (const Case& c : kCases) {
    const int64_t n_ctx = c.pos0 + c.n_tok, L = c.block_len, hd = c.head_dim, G = c.n_head_kv;
    const int64_t n_blocks = (n_ctx + L - 1) / L + 1;
    AttentionShape s8{c.n_head, G, hd, L, 0, DType::Q8_0};
    s8.block_stride = G * s8.k_plane() + 8;  // a gap between blocks (planes hold floats: 4-byte steps)
    const AttentionShape s32{c.n_head, G, hd, L, G * L * hd, DType::F32};
    AttentionShape s16 = s32;
    s16.kv_type = DType::F16;
    std::vector<int32_t> table(static_cast<size_t>(n_blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    // float storage keeps the int8 planes' scales aligned
    std::vector<float> k8(static_cast<size_t>(n_blocks * s8.block_stride / 4)), v8(k8.size());
    std::vector<float> k32(static_cast<size_t>(n_blocks * s32.block_stride)), v32(k32.size());
    std::vector<uint16_t> k16(k32.size()), v16(k32.size());
    for (int64_t p = 0; p < n_ctx; ++p) {
      std::vector<float> kr(static_cast<size_t>(G * hd)), vr(kr.size());
      for (auto& x : kr) x = nd(rng);
      for (auto& x : vr) x = nd(rng);
      const int64_t b = table[p / L], row = p % L;
      auto* b8 = reinterpret_cast<int8_t*>(k8.data()) + b * s8.block_stride;
      auto* bv8 = reinterpret_cast<int8_t*>(v8.data()) + b * s8.block_stride;
      kv_store_slot(DType::Q8_0, kr.data(), G, hd, {b8, s8.k_plane(), L, row, true});
      kv_store_slot(DType::Q8_0, vr.data(), G, hd, {bv8, s8.v_plane(), L, row, false});
      kv_store_slot(DType::F32, kr.data(), G, hd, {k32.data() + b * s32.block_stride, L * hd, L, row, true});
      kv_store_slot(DType::F32, vr.data(), G, hd, {v32.data() + b * s32.block_stride, L * hd, L, row, false});
      kv_store_slot(DType::F16, kr.data(), G, hd, {k16.data() + b * s32.block_stride, L * hd, L, row, true});
      kv_store_slot(DType::F16, vr.data(), G, hd, {v16.data() + b * s32.block_stride, L * hd, L, row, false});
    }
    std::vector<AttentionQuery> tok(static_cast<size_t>(c.n_tok));
    for (int64_t t = 0; t < c.n_tok; ++t) tok[t] = {c.pos0 + t, table.data()};
    std::vector<float> q(static_cast<size_t>(c.n_tok * c.n_head * hd));
    for (auto& x : q) x = 2.0f * nd(rng);
    std::vector<float> ref(q.size()), one(q.size()), many(q.size()), singles(q.size()), exact(q.size()), h16(q.size());
    attention_reference(s8, q.data(), c.n_tok, tok.data(), k8.data(), v8.data(), ref.data());
    const int64_t qs = c.n_head * hd;
    // Every target: against the reference, and a token alone in a call gets the same
    // floats (prefill runs of four rows where there are 16 registers, eight with 32).
    for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
      hwy::SetSupportedTargetsForTest(target);
      std::vector<float> got(q.size());
      attention(s8, q.data(), c.n_tok, tok.data(), k8.data(), v8.data(), got.data(), &pool);
      EXPECT_LT(rel_err(got, ref), 1e-5) << hwy::TargetName(target);
      for (int64_t t = 0; t < c.n_tok; ++t)
        attention(s8, q.data() + t * qs, 1, &tok[t], k8.data(), v8.data(), singles.data() + t * qs, nullptr);
      EXPECT_EQ(singles, got) << hwy::TargetName(target) << ": a token alone in a call";
    }
    hwy::SetSupportedTargetsForTest(0);
    attention(s8, q.data(), c.n_tok, tok.data(), k8.data(), v8.data(), one.data(), nullptr);
    attention(s8, q.data(), c.n_tok, tok.data(), k8.data(), v8.data(), many.data(), &pool);
    for (int64_t t = 0; t < c.n_tok; ++t)
      attention(s8, q.data() + t * qs, 1, &tok[t], k8.data(), v8.data(), singles.data() + t * qs, nullptr);
    attention_reference(s32, q.data(), c.n_tok, tok.data(), k32.data(), v32.data(), exact.data());
    attention_reference(s16, q.data(), c.n_tok, tok.data(), k16.data(), v16.data(), h16.data());
    const double rel = rel_err(one, ref), rounding = rel_err(one, exact), rounding16 = rel_err(h16, exact);
    std::printf("q8_0 cache, heads %lld/%lld dim %lld, blocks of %lld, %lld tokens after %lld: relative error %.2e; "
                "against the f32 cache %.2e (f16 cache %.2e)\n",
                static_cast<long long>(c.n_head), static_cast<long long>(G), static_cast<long long>(hd),
                static_cast<long long>(L), static_cast<long long>(c.n_tok), static_cast<long long>(c.pos0), rel,
                rounding, rounding16);
    EXPECT_LT(rel, 1e-5);
    EXPECT_EQ(one, many) << "threads must not change the result";
    EXPECT_EQ(singles, one) << "a token alone in a call";
    // int8 with a scale per 32 elements rounds each element to within 1/254 of its
    // group's largest: ~20x f16's error, a few parts per thousand of the output.
    EXPECT_LT(rounding, 2e-2);
    EXPECT_GT(rounding, rounding16) << "the int8 rounding is coarser than f16's";

    // gpt-oss's sliding window (starting inside a block) and sinks over the same cache.
    std::vector<float> sinks(static_cast<size_t>(c.n_head));
    for (auto& x : sinks) x = nd(rng);
    AttentionShape sw = s8;
    sw.window = std::max<int64_t>(1, n_ctx / 3);
    sw.sinks = sinks.data();
    attention_reference(sw, q.data(), c.n_tok, tok.data(), k8.data(), v8.data(), ref.data());
    attention(sw, q.data(), c.n_tok, tok.data(), k8.data(), v8.data(), one.data(), &pool);
    EXPECT_LT(rel_err(one, ref), 1e-5) << "window " << sw.window << " and sinks";
  }

  // Values narrower than keys in a pool of their own (DeepSeek's latent attention: one
  // kv head, keys of the latent and the rope part), and a softmax scale of its own.
  const int64_t H = 8, hd = 96, vd = 64, L = 32, n_ctx = 70, n_blocks = 3;
  AttentionShape s{H, 1, hd, L, 0, DType::Q8_0};
  s.v_head_dim = vd;
  s.block_stride = s.k_plane();
  s.v_block_stride = s.v_plane();
  s.scale = 0.3f;
  std::vector<float> k8(static_cast<size_t>(n_blocks * s.block_stride / 4)), v8(static_cast<size_t>(n_blocks * s.v_block_stride / 4));
  const std::vector<int32_t> table = {2, 0, 1};
  for (int64_t p = 0; p < n_ctx; ++p) {
    std::vector<float> kr(static_cast<size_t>(hd));
    for (auto& x : kr) x = nd(rng);
    auto* kb = reinterpret_cast<int8_t*>(k8.data()) + table[p / L] * s.block_stride;
    auto* vb = reinterpret_cast<int8_t*>(v8.data()) + table[p / L] * s.v_block_stride;
    kv_store_slot(DType::Q8_0, kr.data(), 1, hd, {kb, s.k_plane(), L, p % L, true});
    kv_store_slot(DType::Q8_0, kr.data(), 1, vd, {vb, s.v_plane(), L, p % L, false});  // the value: the key's first vd
  }
  const std::vector<AttentionQuery> tok = {{n_ctx - 1, table.data()}, {40, table.data()}};
  std::vector<float> q(static_cast<size_t>(2 * H * hd));
  for (auto& x : q) x = nd(rng);
  std::vector<float> ref(static_cast<size_t>(2 * H * vd)), got(ref.size());
  attention_reference(s, q.data(), 2, tok.data(), k8.data(), v8.data(), ref.data());
  attention(s, q.data(), 2, tok.data(), k8.data(), v8.data(), got.data(), &pool);
  std::printf("q8_0 cache, keys of %lld and values of %lld: relative error %.2e\n", static_cast<long long>(hd),
              static_cast<long long>(vd), rel_err(got, ref));
  EXPECT_LT(rel_err(got, ref), 1e-5);
  // A q8_0 cache's blocks hold floats: a stride that misaligns them is refused.
  AttentionShape odd = s;
  odd.block_stride += 2;
  std::vector<float> more(k8.size() + 2);
  EXPECT_THROW(attention(odd, q.data(), 1, tok.data(), more.data(), v8.data(), got.data(), nullptr), std::invalid_argument);
}

// The Q8_0 store: each group of 32 elements of a row (the last one shorter) gets scale
// max |x| / 127 and q = round(x / scale), keys' scales per column of positions, values'
// after their row; every element reads back within half a step; a zero group stays
// zero; a group with a NaN reads back NaN and one with an infinity non-finite, the
// other groups untouched; nothing outside the position's elements and scales written.
TEST(Attention, Q8StoreQuantizesEachGroupOfARow) {
  const int64_t L = 4, n = 70, rows = 2;  // groups of 32, 32 and 6
  const int64_t groups = 3, plane = kv_plane_size(DType::Q8_0, L, n);
  ASSERT_EQ(plane, L * n + groups * L * 4);
  EXPECT_EQ(kv_plane_size(DType::Q8_0, 3, 7), 24 + 1 * 3 * 4) << "int8 part padded to 4 bytes";
  EXPECT_EQ(kv_plane_size(DType::F16, 3, 7), 21);
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(rows * n));
  for (auto& e : x) e = nd(rng);
  for (int64_t d = 32; d < 64; ++d) x[static_cast<size_t>(n + d)] = 0.0f;  // row 1's second group: zeros
  for (bool keys : {true, false}) {
    std::vector<float> buf(static_cast<size_t>(rows * plane / 4), -9.0f);
    auto* p8 = reinterpret_cast<int8_t*>(buf.data());
    const std::vector<float> before = buf;
    const int64_t row = 2;
    kv_store_slot(DType::Q8_0, x.data(), rows, n, {p8, plane, L, row, keys});
    for (int64_t r = 0; r < rows; ++r) {
      const int8_t* q = p8 + r * plane;
      const auto* sc = reinterpret_cast<const float*>(q + L * n);
      for (int64_t g = 0; g < groups; ++g) {
        float amax = 0;
        for (int64_t d = g * 32; d < std::min(n, g * 32 + 32); ++d) amax = std::max(amax, std::fabs(x[r * n + d]));
        const float scale = sc[keys ? g * L + row : row * groups + g];
        EXPECT_EQ(scale, amax / 127.0f) << "row " << r << " group " << g << (keys ? " keys" : " values");
        for (int64_t d = g * 32; d < std::min(n, g * 32 + 32); ++d) {
          const int8_t e = q[keys ? d * L + row : row * n + d];
          if (amax == 0) {
            EXPECT_EQ(e, 0);
          }
          EXPECT_LE(std::fabs(e * scale - x[r * n + d]), 0.5f * scale * 1.0001f);
        }
      }
    }
    // Untouched: every byte that is not this position's element or scale.
    const auto* a = reinterpret_cast<const uint8_t*>(before.data());
    const auto* b = reinterpret_cast<const uint8_t*>(buf.data());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < plane; ++i) {
        const bool element = i < L * n && (keys ? i % L == row : i / n == row);
        const int64_t si = (i - L * n) / 4;
        const bool scale = i >= L * n && (keys ? si % L == row : si / groups == row);
        if (!element && !scale) {
          EXPECT_EQ(a[r * plane + i], b[r * plane + i]) << "byte " << i << " of plane " << r;
        }
      }
  }
  // Non-finite inputs: NaN's group reads back NaN, an infinity's non-finite; other groups exact.
  std::vector<float> bad(static_cast<size_t>(n), 1.0f);
  bad[3] = std::numeric_limits<float>::quiet_NaN();
  bad[40] = std::numeric_limits<float>::infinity();
  std::vector<float> buf(static_cast<size_t>(plane / 4));
  auto* p8 = reinterpret_cast<int8_t*>(buf.data());
  kv_store_slot(DType::Q8_0, bad.data(), 1, n, {p8, plane, L, 0, false});
  const auto* sc = reinterpret_cast<const float*>(p8 + L * n);
  EXPECT_TRUE(std::isnan(p8[0] * sc[0]));
  EXPECT_FALSE(std::isfinite(p8[40] * sc[1]));
  EXPECT_NEAR(p8[64] * sc[2], 1.0f, 1e-6f);
  EXPECT_THROW(kv_store_slot(DType::BF16, bad.data(), 1, n, {p8, plane, L, 0, false}), std::invalid_argument);
}

// Tokens of different sequences in one call: each reads its own block table and
// positions and gets what it gets alone.
TEST(Attention, TokensOfSeveralSequencesInOneCall) {
  const int64_t H = 8, G = 2, hd = 64, B = 4, n_blocks = 12;
  const int64_t stride = G * B * hd;
  const AttentionShape s{H, G, hd, B, stride, DType::F32};
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(static_cast<size_t>(n_blocks * stride)), v(k.size());
  for (auto& x : k) x = nd(rng);
  for (auto& x : v) x = nd(rng);
  const std::vector<int32_t> a = {5, 0, 9, 2}, b = {7, 1}, c = {11};
  const std::vector<AttentionQuery> tok = {{13, a.data()}, {6, b.data()}, {7, b.data()}, {0, c.data()}, {15, a.data()}};
  std::vector<float> q(tok.size() * H * hd);
  for (auto& x : q) x = nd(rng);
  std::vector<float> all(q.size()), alone(q.size()), ref(q.size());
  ThreadPool pool(2);
  attention(s, q.data(), static_cast<int64_t>(tok.size()), tok.data(), k.data(), v.data(), all.data(), &pool);
  attention_reference(s, q.data(), static_cast<int64_t>(tok.size()), tok.data(), k.data(), v.data(), ref.data());
  for (size_t t = 0; t < tok.size(); ++t)
    attention(s, q.data() + t * H * hd, 1, &tok[t], k.data(), v.data(), alone.data() + t * H * hd, nullptr);
  EXPECT_EQ(all, alone);
  std::printf("several sequences: relative error %.2e\n", rel_err(all, ref));
  EXPECT_LT(rel_err(all, ref), 1e-5);
  AttentionShape bad = s;
  bad.kv_type = DType::BF16;
  EXPECT_THROW(attention(bad, q.data(), 1, tok.data(), k.data(), v.data(), all.data(), nullptr), std::invalid_argument);
  bad = s;
  bad.block_stride = stride - 1;
  EXPECT_THROW(attention(bad, q.data(), 1, tok.data(), k.data(), v.data(), all.data(), nullptr), std::invalid_argument);
}

// Decode tokens of sequences that continue one parked prompt: their block tables start
// with the same blocks (a whole-block prefix, as Engine::add_sequence shares it) and go
// on in blocks of their own. Calls mixing them with a sequence that shares a shorter
// prefix, one that shares nothing, and two tokens of one sequence's prefill: every
// token's floats are those it gets alone in a call, on every SIMD target, whatever the
// threads, and the reference's within the f32 bound; for f32, f16 and q8_0 caches and
// groups of 1, 2, 4 and 8 query heads.
TEST(Attention, SequencesContinuingOnePromptGetWhatTheyGetAlone) {
  const int64_t hd = 64, L = 8, P = 40;  // a prompt of P blocks: more positions than a span
  // Blocks [0, P): the prompt; P, P + 1: a second prefix sharing its first two blocks;
  // each sequence's own blocks after them.
  std::vector<int32_t> prompt(static_cast<size_t>(P));
  std::iota(prompt.begin(), prompt.end(), 0);
  int32_t next = static_cast<int32_t>(P) + 2;
  const auto continuing = [&](std::vector<int32_t> head, int own) {
    for (int i = 0; i < own; ++i) head.push_back(next++);
    return head;
  };
  const std::vector<std::vector<int32_t>> tables = {
      continuing(prompt, 2), continuing(prompt, 1), continuing(prompt, 2),
      continuing({0, 1, static_cast<int32_t>(P), static_cast<int32_t>(P) + 1}, 1),
      continuing({}, 3),     continuing(prompt, 1), continuing(prompt, 2)};
  const int64_t n_blocks = next;
  struct Tok { int t; int64_t pos; };
  const Tok toks[] = {{0, P * L + 10}, {1, P * L + 4}, {4, 20}, {2, P * L + 15}, {3, 37}, {5, P * L},
                      {6, P * L + 10}, {6, P * L + 11}, {1, P * L + 5}, {2, P * L + 9}};
  std::mt19937 rng(23);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool(2), wide(16);
  for (int64_t group : {1, 2, 4, 8}) {
    const int64_t G = 2, H = G * group;
    for (DType type : {DType::F32, DType::F16, DType::Q8_0}) {
      AttentionShape sh{H, G, hd, L, 0, type};
      sh.block_stride = G * sh.k_plane();
      const size_t elem = kv_element_bytes(type);
      std::vector<float> kbuf(static_cast<size_t>(n_blocks * sh.block_stride) * elem / 4 + 1), vbuf(kbuf.size());
      for (int64_t b = 0; b < n_blocks; ++b)
        for (int64_t row = 0; row < L; ++row) {
          std::vector<float> kr(static_cast<size_t>(G * hd)), vr(kr.size());
          for (auto& x : kr) x = nd(rng);
          for (auto& x : vr) x = nd(rng);
          char* kb = reinterpret_cast<char*>(kbuf.data()) + static_cast<size_t>(b * sh.block_stride) * elem;
          char* vb = reinterpret_cast<char*>(vbuf.data()) + static_cast<size_t>(b * sh.block_stride) * elem;
          kv_store_slot(type, kr.data(), G, hd, {kb, sh.k_plane(), L, row, true});
          kv_store_slot(type, vr.data(), G, hd, {vb, sh.v_plane(), L, row, false});
        }
      std::vector<AttentionQuery> tok;
      for (const Tok& t : toks) tok.push_back({t.pos, tables[static_cast<size_t>(t.t)].data()});
      const int64_t n = static_cast<int64_t>(tok.size()), qs = H * hd;
      std::vector<float> q(static_cast<size_t>(n * qs));
      for (auto& x : q) x = 2.0f * nd(rng);
      std::vector<float> ref(q.size()), one(q.size()), two(q.size()), many(q.size()), alone(q.size());
      attention_reference(sh, q.data(), n, tok.data(), kbuf.data(), vbuf.data(), ref.data());
      for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
        hwy::SetSupportedTargetsForTest(target);
        attention(sh, q.data(), n, tok.data(), kbuf.data(), vbuf.data(), one.data(), nullptr);
        attention(sh, q.data(), n, tok.data(), kbuf.data(), vbuf.data(), two.data(), &pool);
        attention(sh, q.data(), n, tok.data(), kbuf.data(), vbuf.data(), many.data(), &wide);
        for (int64_t t = 0; t < n; ++t)
          attention(sh, q.data() + t * qs, 1, &tok[t], kbuf.data(), vbuf.data(), alone.data() + t * qs, nullptr);
        const char* what = hwy::TargetName(target);
        EXPECT_EQ(one, alone) << what << " group " << group << " " << dtype_name(type);
        EXPECT_EQ(two, alone) << what << " group " << group << " " << dtype_name(type) << ", two threads";
        EXPECT_EQ(many, alone) << what << " group " << group << " " << dtype_name(type) << ", 16 threads";
        EXPECT_LT(rel_err(one, ref), 1e-5) << what << " group " << group << " " << dtype_name(type);
      }
      hwy::SetSupportedTargetsForTest(0);
      std::printf("group %lld, %s cache, sequences sharing a prompt: relative error %.2e\n",
                  static_cast<long long>(group), dtype_name(type), rel_err(one, ref));
    }
  }
}

// gpt-oss's sliding window and attention sinks: the SIMD kernel against the
// reference, with windows that start inside a block, span several, or cover the whole
// context, in blocks of 1, 3 and 16 positions scrambled in the pool; a token alone in a
// call gets what it gets with others. And the reference itself against a direct
// definition on one head: softmax over [scores of the window, sink], the sink's share
// dropped.
TEST(Attention, SlidingWindowAndSinks) {
  struct W { int64_t n_head, n_head_kv, head_dim, block_len, n_tok, pos0, window; };
  const W cases[] = {{8, 2, 64, 3, 6, 20, 5}, {4, 4, 16, 1, 1, 40, 7}, {6, 2, 20, 16, 9, 30, 16},
                     {8, 2, 64, 16, 4, 3, 128}, {5, 1, 32, 3, 12, 0, 4}, {4, 4, 16, 3, 10, 0, 6}};
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool(3);
  for (const W& c : cases) {
    const int64_t n_ctx = c.pos0 + c.n_tok;
    const int64_t n_blocks = (n_ctx + c.block_len - 1) / c.block_len;
    const int64_t stride = c.n_head_kv * c.block_len * c.head_dim;
    std::vector<float> sinks(static_cast<size_t>(c.n_head));
    for (auto& x : sinks) x = 2.0f * nd(rng);
    AttentionShape s{c.n_head, c.n_head_kv, c.head_dim, c.block_len, stride};
    s.window = c.window;
    s.sinks = sinks.data();
    std::vector<int32_t> table(static_cast<size_t>(n_blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    std::vector<AttentionQuery> tok(static_cast<size_t>(c.n_tok));
    for (int64_t t = 0; t < c.n_tok; ++t) tok[t] = {c.pos0 + t, table.data()};
    std::vector<float> q(static_cast<size_t>(c.n_tok * c.n_head * c.head_dim));
    std::vector<float> k(static_cast<size_t>(n_blocks * stride)), v(k.size());
    for (auto& x : q) x = 2.0f * nd(rng);
    for (auto& x : k) x = nd(rng);
    for (auto& x : v) x = nd(rng);
    std::vector<float> ref(q.size()), one(q.size()), many(q.size()), singles(q.size());
    attention_reference(s, q.data(), c.n_tok, tok.data(), k.data(), v.data(), ref.data());
    attention(s, q.data(), c.n_tok, tok.data(), k.data(), v.data(), one.data(), nullptr);
    attention(s, q.data(), c.n_tok, tok.data(), k.data(), v.data(), many.data(), &pool);
    const int64_t qs = c.n_head * c.head_dim;
    for (int64_t t = 0; t < c.n_tok; ++t)
      attention(s, q.data() + t * qs, 1, &tok[t], k.data(), v.data(), singles.data() + t * qs, nullptr);
    std::printf("window %lld, blocks of %lld, %lld tokens after %lld, sinks: relative error %.2e\n",
                static_cast<long long>(c.window), static_cast<long long>(c.block_len),
                static_cast<long long>(c.n_tok), static_cast<long long>(c.pos0), rel_err(one, ref));
    EXPECT_LT(rel_err(one, ref), 1e-5);
    EXPECT_EQ(one, many);
    EXPECT_EQ(one, singles);
  }
  // The definition, written out for one head of 2 dims over 4 cached positions, the
  // last query at position 3 with a window of 2 (positions 2 and 3).
  // Keys transposed (element d of positions 0..3, then d = 1): positions' keys (1, 0),
  // (0, 1), (1, 1), (-1, 2); values as rows.
  const float kc[] = {1, 0, 1, -1, 0, 1, 1, 2}, vc[] = {1, 2, 3, 4, 5, 6, 7, 8}, qv[] = {0.5f, -1.5f};
  const float sink = 0.25f;
  const int32_t table0 = 0;
  AttentionShape s{1, 1, 2, 4, 8};
  s.window = 2;
  s.sinks = &sink;
  const AttentionQuery tq{3, &table0};
  float got[2];
  attention_reference(s, qv, 1, &tq, kc, vc, got);
  const double sc = 1.0 / std::sqrt(2.0);
  const double e2 = std::exp((qv[0] * kc[2] + qv[1] * kc[6]) * sc), e3 = std::exp((qv[0] * kc[3] + qv[1] * kc[7]) * sc);
  const double z = e2 + e3 + std::exp(static_cast<double>(sink));
  EXPECT_NEAR(got[0], (e2 * vc[4] + e3 * vc[6]) / z, 1e-6);
  EXPECT_NEAR(got[1], (e2 * vc[5] + e3 * vc[7]) / z, 1e-6);
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

  // Keys go in column by column (transposed planes): the same bits at a stride, rows
  // dst_stride apart, and nothing between them touched.
  const int64_t rows = 3, n = 37, elem_stride = 5, dst_stride = n * elem_stride + 2;
  std::vector<uint16_t> planes(static_cast<size_t>(rows * dst_stride), 0xabcd);
  kv_store_columns(DType::F16, x.data(), rows, n, planes.data(), dst_stride, elem_stride);
  std::vector<float> planes32(planes.size(), -7.0f);
  kv_store_columns(DType::F32, x.data(), rows, n, planes32.data(), dst_stride, elem_stride);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < dst_stride; ++i) {
      const size_t at = static_cast<size_t>(r * dst_stride + i);
      if (i % elem_stride == 0 && i / elem_stride < n) {
        const float v = x[static_cast<size_t>(r * n + i / elem_stride)];
        EXPECT_EQ(planes[at], fp32_to_fp16(v)) << "row " << r << " element " << i / elem_stride;
        EXPECT_EQ(planes32[at], v);
      } else {
        EXPECT_EQ(planes[at], 0xabcd) << "row " << r << " offset " << i;
        EXPECT_EQ(planes32[at], -7.0f);
      }
    }
}

}  // namespace
}  // namespace moeflow::cpu

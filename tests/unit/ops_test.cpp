#include "kernels/cpu/ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace moeflow::cpu {
namespace {

// SIMD rmsnorm against the one-double-at-a-time definition: widths with and without a
// vector tail, with and without a weight, in place, and rows whose squares would
// overflow f32 (the sum is in double) or are all zero (eps alone).
TEST(RmsNorm, MatchesReference) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  double worst = 0;
  for (int64_t n : {1, 3, 8, 64, 100, 768, 2053, 5120})
    for (int variant = 0; variant < 4; ++variant) {
      std::vector<float> x(n), w(n), ref(n), out(n);
      for (int64_t i = 0; i < n; ++i) {
        x[i] = normal(rng);
        w[i] = 1.0f + normal(rng) / 4.0f;
      }
      if (variant == 2) for (float& v : x) v *= 1e25f;  // squares past f32's range
      if (variant == 3) std::fill(x.begin(), x.end(), 0.0f);
      const float* wp = variant == 1 ? nullptr : w.data();
      rmsnorm_reference(x.data(), wp, ref.data(), n, 1e-6f);
      rmsnorm(x.data(), wp, out.data(), n, 1e-6f);
      std::vector<float> in_place = x;
      rmsnorm(in_place.data(), wp, in_place.data(), n, 1e-6f);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(std::isfinite(out[i])) << "n " << n << " variant " << variant;
        ASSERT_EQ(out[i], in_place[i]) << "in place differs, n " << n;
        const double err = std::abs(out[i] - ref[i]) / std::max(1e-30, static_cast<double>(std::abs(ref[i])));
        worst = std::max(worst, variant == 3 ? std::abs(static_cast<double>(out[i])) : err);
      }
    }
  std::printf("rmsnorm: worst relative error %.3g against the scalar definition\n", worst);
  EXPECT_LT(worst, 1e-6);
}

// SIMD swiglu against std::exp, over the whole useful range of gate values and a tail
// that is not a whole vector; extremes must stay finite (no inf/inf, no 0*inf).
TEST(Swiglu, MatchesReference) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uni(-30.0f, 30.0f);
  const int64_t n = 1000 + 7;
  std::vector<float> gate(n), up(n), ref(n), out(n);
  for (int64_t i = 0; i < n; ++i) {
    gate[i] = uni(rng);
    up[i] = uni(rng) / 10.0f;
  }
  gate[0] = -200.0f, gate[1] = 200.0f, gate[2] = 0.0f, gate[3] = -88.5f, gate[4] = -1e30f;
  swiglu_reference(gate.data(), up.data(), ref.data(), n);
  swiglu(gate.data(), up.data(), out.data(), n);
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_TRUE(std::isfinite(out[i])) << "gate " << gate[i];
    const double err = std::abs(out[i] - ref[i]) / std::max(1e-6, static_cast<double>(std::abs(ref[i])));
    if (std::abs(ref[i]) > 1e-20) worst = std::max(worst, err);
  }
  std::printf("swiglu: max relative error %.2e\n", worst);
  EXPECT_LT(worst, 1e-6);
  swiglu(gate.data(), up.data(), gate.data(), n);  // out may alias gate
  EXPECT_EQ(gate, out);
}

// rope_angles + rope_apply is the same rotation as rope, for both pair layouts and a
// partial rotary dimension.
TEST(Rope, SharedAnglesMatchPerHeadRope) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  for (const bool neox : {false, true}) {
    for (const int64_t rot : {int64_t{64}, int64_t{32}}) {
      std::vector<float> a(64), b;
      for (auto& x : a) x = nd(rng);
      b = a;
      rope(a.data(), 64, rot, 1234, 10000.0f, neox);
      std::vector<float> cs(static_cast<size_t>(rot));
      rope_angles(1234, rot, 10000.0f, cs.data());
      rope_apply(b.data(), rot, cs.data(), neox);
      EXPECT_EQ(a, b);
      // A hand-checked pair: theta_0 = pos, the first pair rotates by 1234 radians.
      std::vector<float> e(64, 0.0f);
      e[0] = 1.0f;
      rope_apply(e.data(), rot, cs.data(), neox);
      EXPECT_NEAR(e[0], std::cos(1234.0), 1e-6);
      EXPECT_NEAR(e[neox ? rot / 2 : 1], std::sin(1234.0), 1e-6);
    }
  }
}

}  // namespace
}  // namespace moeflow::cpu

// RMSNorm with the sum of squares in SIMD doubles (Highway foreach_target). The scalar
// definition (rmsnorm_reference, ops.cpp) adds one double at a time: a chain of
// dependent adds, ~1 us for a 768-wide row, and a decode step normalises 2 rows per
// layer on one thread while the other waits. Several vector accumulators change only
// the order of the double additions (differences ~1e-16, far below f32's rounding).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/rmsnorm.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <cmath>

#include "kernels/cpu/ops.h"

HWY_BEFORE_NAMESPACE();
namespace moeflow::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

double SumOfSquares(const float* x, int64_t n) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;  // as many floats as dd has doubles
  const int64_t N = static_cast<int64_t>(hn::Lanes(dd));
  auto a0 = hn::Zero(dd), a1 = hn::Zero(dd), a2 = hn::Zero(dd), a3 = hn::Zero(dd);
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    const auto v0 = hn::PromoteTo(dd, hn::LoadU(df, x + i));
    const auto v1 = hn::PromoteTo(dd, hn::LoadU(df, x + i + N));
    const auto v2 = hn::PromoteTo(dd, hn::LoadU(df, x + i + 2 * N));
    const auto v3 = hn::PromoteTo(dd, hn::LoadU(df, x + i + 3 * N));
    a0 = hn::MulAdd(v0, v0, a0);
    a1 = hn::MulAdd(v1, v1, a1);
    a2 = hn::MulAdd(v2, v2, a2);
    a3 = hn::MulAdd(v3, v3, a3);
  }
  for (; i + N <= n; i += N) {
    const auto v = hn::PromoteTo(dd, hn::LoadU(df, x + i));
    a0 = hn::MulAdd(v, v, a0);
  }
  double ss = hn::GetLane(hn::SumOfLanes(dd, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  return ss;
}

void ScaleRow(const float* x, const float* w, float scale, float* y, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto s = hn::Set(df, scale);
  int64_t i = 0;
  // (x * scale) * w, the reference's order, so the same scale gives the same floats.
  if (w) {
    for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(df, x + i), s), hn::LoadU(df, w + i)), df, y + i);
    for (; i < n; ++i) y[i] = x[i] * scale * w[i];
  } else {
    for (; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(df, x + i), s), df, y + i);
    for (; i < n; ++i) y[i] = x[i] * scale;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace moeflow::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moeflow::cpu {
HWY_EXPORT(SumOfSquares);
HWY_EXPORT(ScaleRow);
void rmsnorm(const float* x, const float* w, float* y, int64_t n, float eps) {
  const double ss = HWY_DYNAMIC_DISPATCH(SumOfSquares)(x, n);
  const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  HWY_DYNAMIC_DISPATCH(ScaleRow)(x, w, scale, y, n);
}
}  // namespace moeflow::cpu
#endif  // HWY_ONCE

// gpt-oss's clamped SwiGLU with a vectorised exp (Highway foreach_target), as
// swiglu.cpp does for the plain one: every hidden unit of every chosen expert.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/swiglu_oai.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/swiglu_oai.h"

HWY_BEFORE_NAMESPACE();
namespace moeflow::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void SwigluOai(const float* gate, const float* up, float* out, int64_t n) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto one = hn::Set(df, 1.0f);
  const auto hi = hn::Set(df, kSwigluOaiLimit), lo = hn::Set(df, -kSwigluOaiLimit);
  const auto minus_alpha = hn::Set(df, -kSwigluOaiAlpha);
  // Highway's Exp is defined up to +104: -alpha g is capped at 88 (exp ~1.7e38), where
  // the sigmoid is ~6e-39 against ~exp(-88): both zero to f32 working precision. g is
  // at most 7, so the argument is never below -12.
  const auto cap = hn::Set(df, 88.0f);
  int64_t i = 0;
  for (; i + N <= n; i += N) {
    const auto g = hn::Min(hn::LoadU(df, gate + i), hi);
    const auto u = hn::Min(hn::Max(hn::LoadU(df, up + i), lo), hi);
    const auto glu = hn::Div(g, hn::Add(one, hn::Exp(df, hn::Min(hn::Mul(minus_alpha, g), cap))));
    hn::StoreU(hn::Mul(glu, hn::Add(u, one)), df, out + i);
  }
  for (; i < n; ++i) {
    const float g = std::min(gate[i], kSwigluOaiLimit);
    const float u = std::clamp(up[i], -kSwigluOaiLimit, kSwigluOaiLimit);
    out[i] = g / (1.0f + std::exp(std::min(-kSwigluOaiAlpha * g, 88.0f))) * (u + 1.0f);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace moeflow::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moeflow::cpu {
HWY_EXPORT(SwigluOai);
void swiglu_oai(const float* gate, const float* up, float* out, int64_t n) {
  HWY_DYNAMIC_DISPATCH(SwigluOai)(gate, up, out, n);
}

void swiglu_oai_reference(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = std::min(static_cast<double>(gate[i]), static_cast<double>(kSwigluOaiLimit));
    const double u = std::clamp(static_cast<double>(up[i]), -static_cast<double>(kSwigluOaiLimit),
                                static_cast<double>(kSwigluOaiLimit));
    out[i] = static_cast<float>(g / (1.0 + std::exp(-static_cast<double>(kSwigluOaiAlpha) * g)) * (u + 1.0));
  }
}
}  // namespace moeflow::cpu
#endif  // HWY_ONCE

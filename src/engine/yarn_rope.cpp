#include "engine/yarn_rope.h"

#include <algorithm>
#include <cmath>

namespace moeflow {

namespace {

// The (fractional) pair index whose wavelength fits n_turns times in the original
// context: d * ln(n_ctx_orig / (n_turns * 2 pi)) / (2 ln base).
double correction_dim(double n_turns, double d, double base, double n_ctx_orig) {
  return d * std::log(n_ctx_orig / (n_turns * 2.0 * M_PI)) / (2.0 * std::log(base));
}

}  // namespace

void yarn_rope_angles(const ModelConfig& c, int64_t pos, float* cs) {
  const RopeYarn& y = c.mla.yarn;
  const double d = static_cast<double>(c.rot_dim), base = c.rope_base, orig = static_cast<double>(y.n_ctx_orig);
  const double low = std::max(0.0, std::floor(correction_dim(y.beta_fast, d, base, orig)));
  const double high = std::min(d - 1.0, std::ceil(correction_dim(y.beta_slow, d, base, orig)));
  for (int64_t i = 0; i < c.rot_dim / 2; ++i) {
    const double extrapolated = static_cast<double>(pos) * std::pow(base, -2.0 * static_cast<double>(i) / d);
    const double interpolated = extrapolated / y.factor;
    // 0 below the range (keep the trained frequency), 1 above it (interpolate).
    const double ramp = std::clamp((static_cast<double>(i) - low) / std::max(0.001, high - low), 0.0, 1.0);
    const double theta = extrapolated * (1.0 - ramp) + interpolated * ramp;
    cs[2 * i] = static_cast<float>(std::cos(theta));
    cs[2 * i + 1] = static_cast<float>(std::sin(theta));
  }
}

}  // namespace moeflow

#include "model/rope_yarn.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "format/gguf.h"

namespace moeflow {

namespace {

double float_key(const gguf::GgufFile& f, const std::string& key, double dflt, bool required) {
  const gguf::Value* v = f.find(key);
  if (!v) {
    if (required) throw InputError(f.path() + ": key " + key + " is missing (rope.scaling.type is yarn)");
    return dflt;
  }
  return v->as_float(key);
}

// The dimension (of rot_dim) whose wavelength fits `rotations` times into the
// original context (YaRN's correction dimension).
double correction_dim(double rotations, int64_t rot_dim, double base, double orig_ctx) {
  return static_cast<double>(rot_dim) * std::log(orig_ctx / (rotations * 2.0 * M_PI)) / (2.0 * std::log(base));
}

}  // namespace

void read_rope_yarn(const gguf::GgufFile& f, const std::string& p, ModelConfig& c) {
  const std::string type_key = p + "rope.scaling.type";
  const gguf::Value* type = f.find(type_key);
  if (!type) return;
  const std::string& t = type->as_string(type_key);
  if (t == "none") return;
  if (t != "yarn")
    throw InputError(f.path() + ": key " + type_key + " = '" + t + "' is not supported (yarn or none)");
  YarnScaling& y = c.yarn;
  const std::string factor_key = p + "rope.scaling.factor";
  y.factor = float_key(f, factor_key, 0, true);
  if (!std::isfinite(y.factor) || y.factor < 1 || y.factor > 1e6)
    throw InputError(f.path() + ": key " + factor_key + " = " + std::to_string(y.factor) + " must be in [1, 1e6]");
  const std::string ctx_key = p + "rope.scaling.original_context_length";
  const gguf::Value* ctx = f.find(ctx_key);
  if (!ctx) throw InputError(f.path() + ": key " + ctx_key + " is missing (rope.scaling.type is yarn)");
  y.orig_ctx = ctx->as_int(ctx_key);
  if (y.orig_ctx < 1 || y.orig_ctx > kMaxContext)
    throw InputError(f.path() + ": key " + ctx_key + " = " + std::to_string(y.orig_ctx) + " is outside [1, " +
                     std::to_string(kMaxContext) + "]");
  // llama.cpp's defaults when the converter wrote none (gpt-oss's are these).
  const std::string fast_key = p + "rope.scaling.yarn_beta_fast", slow_key = p + "rope.scaling.yarn_beta_slow";
  y.beta_fast = float_key(f, fast_key, 32.0, false);
  y.beta_slow = float_key(f, slow_key, 1.0, false);
  if (!std::isfinite(y.beta_fast) || y.beta_fast <= 0 || y.beta_fast > 1e6)
    throw InputError(f.path() + ": key " + fast_key + " = " + std::to_string(y.beta_fast) + " must be in (0, 1e6]");
  if (!std::isfinite(y.beta_slow) || y.beta_slow <= 0 || y.beta_slow > y.beta_fast)
    throw InputError(f.path() + ": key " + slow_key + " = " + std::to_string(y.beta_slow) +
                     " must be positive and at most yarn_beta_fast");
  y.attn_factor = 0.1 * std::log(y.factor) + 1.0;
}

std::vector<double> yarn_inv_freq(const YarnScaling& y, double base, int64_t rot_dim) {
  const int64_t half = rot_dim / 2;
  const double orig = static_cast<double>(y.orig_ctx);
  // More rotations (beta_fast) means a shorter wavelength, a lower dimension.
  double low = correction_dim(y.beta_fast, rot_dim, base, orig);
  double high = correction_dim(y.beta_slow, rot_dim, base, orig);
  if (y.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(0.0, low);
  high = std::min(static_cast<double>(rot_dim - 1), high);
  if (high == low) high += 0.001;  // as the reference does: no division by zero
  std::vector<double> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const double extrapolation = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(rot_dim));
    const double interpolation = extrapolation / y.factor;
    // 1 below the ramp (high frequencies keep their angle), 0 above it (interpolated).
    const double keep = 1.0 - std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    inv[static_cast<size_t>(i)] = interpolation * (1.0 - keep) + extrapolation * keep;
  }
  return inv;
}

void yarn_angles(const std::vector<double>& inv_freq, double attn_factor, int64_t pos, float* cs) {
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double theta = static_cast<double>(pos) * inv_freq[i];
    cs[2 * i] = static_cast<float>(attn_factor * std::cos(theta));
    cs[2 * i + 1] = static_cast<float>(attn_factor * std::sin(theta));
  }
}

}  // namespace moeflow

#include "plan/load_margin.h"

#include "base/quantile.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace moeflow::plan {

LoadFactors load_quantile_factors(const std::vector<Load>& batches, double q) {
  if (batches.empty()) throw std::invalid_argument("load_quantile_factors: no batches");
  if (!(q >= 0 && q <= 1)) throw std::invalid_argument("load_quantile_factors: q outside [0, 1]");
  const size_t n_layer = batches.front().size();
  LoadFactors f(n_layer);
  std::vector<double> v(batches.size());
  for (size_t l = 0; l < n_layer; ++l) {
    const size_t n_expert = batches.front()[l].size();
    f[l].assign(n_expert, 1.0);
    if (q == 0) continue;
    for (size_t e = 0; e < n_expert; ++e) {
      double sum = 0;
      for (size_t b = 0; b < batches.size(); ++b) {
        v[b] = static_cast<double>(batches[b].at(l).at(e));
        sum += v[b];
      }
      const double mean = sum / static_cast<double>(v.size());
      if (mean <= 0) continue;
      std::sort(v.begin(), v.end());
      const double quant = quantile_of_sorted(v, q);
      f[l][e] = std::max(1.0, quant / mean);
    }
  }
  return f;
}

Load apply_load_factors(const Load& mean, const LoadFactors& factors) {
  if (factors.empty()) return mean;
  Load out = mean;
  for (size_t l = 0; l < out.size(); ++l)
    for (size_t e = 0; e < out[l].size(); ++e)
      out[l][e] = static_cast<int64_t>(std::ceil(static_cast<double>(mean[l][e]) * factors.at(l).at(e) - 1e-9));
  return out;
}

}  // namespace moeflow::plan

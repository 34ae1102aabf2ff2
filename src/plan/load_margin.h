// Planning for the batches that come, not for their mean. The popularity table predicts
// each expert's mean load per batch (serverless-moe Sec. III-B); a deployment sized for
// the mean misses its SLO on every batch that routes more tokens than that to some
// expert's function, and the layer waits for its slowest function. Measured with the
// mean: 0% of the Mixtral trace's held-out batches met the SLO (docs/results/planner.md).
//
// A margin per (layer, expert) from the learning requests' own batches: the factor by
// which the q-quantile of the expert's per-batch load exceeds its mean load. The planned
// load is the predicted mean times that factor (an expert the profile never saw busy
// keeps its prediction). q = 0 plans for the mean, as the paper does.
#pragma once
#include <vector>

#include "plan/serving.h"

namespace moeflow::plan {

using LoadFactors = std::vector<std::vector<double>>;  // [layer][expert], >= 1

// Factors from `batches` (at least one; all of one shape). REQUIRES 0 <= q <= 1.
LoadFactors load_quantile_factors(const std::vector<Load>& batches, double q);

// ceil(mean[l][e] * factors[l][e]); `factors` empty: `mean` unchanged.
Load apply_load_factors(const Load& mean, const LoadFactors& factors);

}  // namespace moeflow::plan

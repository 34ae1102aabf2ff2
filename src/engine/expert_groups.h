// Group-limited routing (DeepSeek-V2's "group_limited_greedy"): the experts are split
// into n_expert_group equal groups of consecutive ids, each group scored by its best
// expert's probability, and only the n_expert_group_used best groups' experts may be
// chosen (ties to the lower group id).
#pragma once
#include "model/model_config.h"

namespace moeflow {

// Writes to out (n_expert floats) the probabilities p with every expert outside the
// chosen groups set to -1 (below any probability), and returns out.
const float* limit_to_groups(const ModelConfig& c, const float* p, float* out);

}  // namespace moeflow

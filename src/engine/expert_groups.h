// Group-limited routing: the experts are split into n_expert_group equal groups of
// consecutive ids, and only the n_expert_group_used best groups' experts may be chosen
// (ties to the lower group id). A group's score is its best expert's (DeepSeek-V2's
// "group_limited_greedy", softmax scores) or the sum of its two best (DeepSeek-V3's
// "noaux_tc", sigmoid scores plus the choice bias).
#pragma once
#include "model/model_config.h"

namespace moeflow {

// Writes to out (n_expert floats) the scores p with every expert outside the chosen
// groups set to -infinity, and returns out. (HF's DeepSeek-V3 code masks with 0: the
// two differ only when fewer than top-k of the chosen groups' biased scores are
// positive, and then -infinity keeps the choice inside the chosen groups, as the
// routing intends.)
const float* limit_to_groups(const ModelConfig& c, const float* p, float* out);

}  // namespace moeflow

// The FFN keys of the architectures built on DeepSeek's MoE block (deepseek2, glm4moe):
// leading dense layers, shared experts added ungated, the router's scoring and weights,
// group-limited routing, and the multi-token-prediction blocks that are not run.
#pragma once
#include "model/arch_keys.h"
#include "model/model_config.h"

namespace moeflow {

// Reads them into c (whose common keys are read). expert_gating_func: 1 softmax, 2
// sigmoid, absent or 0 (llama.cpp's "none") the architecture's default; any other value
// is an InputError naming the key, as is every out-of-range size.
void read_deepseek_moe_config(const ArchKeys& k, RouterScoring default_scoring, ModelConfig& c);

}  // namespace moeflow

#include "model/deepseek_moe_config.h"

#include <string>

namespace moeflow {

void read_deepseek_moe_config(const ArchKeys& k, RouterScoring default_scoring, ModelConfig& c) {
  // Converters since 2026 may keep the multi-token-prediction layers (DeepSeek-V3's,
  // GLM-4.5's) as the last nextn_predict_layers blocks, counted in block_count
  // (llama.cpp skips them unless asked to draft with them); the forward pass runs the
  // blocks before them, and their tensors are never read.
  const int64_t nextn = k.integer("nextn_predict_layers", 0, 0, c.n_layer - 1);
  c.n_layer -= nextn;
  c.n_dense_lead = k.integer("leading_dense_block_count", 0, 0, c.n_layer - 1);
  if (c.n_dense_lead > 0) c.n_ff_dense = k.required("feed_forward_length", 1, kMaxFeedForward);
  const int64_t n_shared = k.integer("expert_shared_count", 0, 0, 1024);
  c.n_ff_shexp = n_shared * c.n_ff_expert;
  if (c.n_ff_shexp > kMaxFeedForward)
    k.fail("expert_shared_count", "times expert_feed_forward_length exceeds " + std::to_string(kMaxFeedForward));
  c.shared_expert_gate = false;  // added ungated

  // llama.cpp's enum: 1 softmax (DeepSeek-V2), 2 sigmoid (DeepSeek-V3 / R1, Kimi K2, GLM-4.5).
  const int64_t gating = k.integer("expert_gating_func", 0, 0, 1 << 30);
  if (gating > 2)
    k.fail("expert_gating_func", "= " + std::to_string(gating) + " is not supported (1: softmax; 2: sigmoid)");
  c.router_scoring = gating == 0 ? default_scoring : gating == 2 ? RouterScoring::Sigmoid : RouterScoring::Softmax;
  c.expert_weights_scale = static_cast<float>(k.real("expert_weights_scale", 1.0, 1e-6, 1e6));
  c.norm_topk = k.boolean("expert_weights_norm", false);
  c.n_expert_group = k.integer("expert_group_count", 1, 1, c.n_expert);
  if (c.n_expert % c.n_expert_group)
    k.fail("expert_group_count",
           "= " + std::to_string(c.n_expert_group) + " does not divide expert_count = " + std::to_string(c.n_expert));
  c.n_expert_group_used = k.integer("expert_group_used_count", c.n_expert_group, 1, c.n_expert_group);
  if (c.n_expert_group_used * (c.n_expert / c.n_expert_group) < c.n_expert_used)
    k.fail("expert_group_used_count", "= " + std::to_string(c.n_expert_group_used) +
                                          " groups hold fewer experts than expert_used_count = " +
                                          std::to_string(c.n_expert_used));
}

}  // namespace moeflow

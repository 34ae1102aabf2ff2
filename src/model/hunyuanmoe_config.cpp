#include "model/hunyuanmoe_config.h"

#include "model/arch_keys.h"

namespace moeflow {

void read_hunyuanmoe_config(const gguf::GgufFile& f, ModelConfig& c) {
  const ArchKeys k{f, c.arch_name + "."};
  c.rope_neox = true;
  c.norm_topk = true;
  c.qk_norm = QkNorm::PerHead;
  c.qk_norm_after_rope = true;  // HF's query_layernorm / key_layernorm follow apply_rotary_pos_emb
  c.router_scoring = RouterScoring::Softmax;
  // Every layer has the shared MLP; llama.cpp falls back to feed_forward_length for its size.
  const int64_t dense = k.integer("feed_forward_length", 0, 0, kMaxFeedForward);
  c.n_ff_shexp = k.integer("expert_shared_feed_forward_length", dense, 0, kMaxFeedForward);
  if (c.n_ff_shexp == 0) k.fail("expert_shared_feed_forward_length", "is missing, and so is feed_forward_length");
  c.shared_expert_gate = false;
}

}  // namespace moeflow

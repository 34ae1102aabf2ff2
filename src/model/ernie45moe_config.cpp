#include "model/ernie45moe_config.h"

#include "model/arch_keys.h"

namespace moeflow {

void read_ernie45moe_config(const gguf::GgufFile& f, ModelConfig& c) {
  const ArchKeys k{f, c.arch_name + "."};
  c.rope_neox = false;  // llama.cpp's NORM rope for this architecture
  c.norm_topk = true;   // HF divides the chosen probabilities by their sum
  c.qk_norm = QkNorm::None;
  c.attn_qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;  // use_bias (false in the releases)
  c.router_scoring = RouterScoring::Softmax;
  // llama.cpp requires these: the first leading_dense_block_count layers are dense,
  // then every interleave_moe_layer_step-th layer is MoE. The releases have MoE in every
  // layer after the dense ones (moe_layer_interval 1), the only layout the expert
  // machinery numbers (MoE layer l is model layer l + n_dense_lead).
  c.n_dense_lead = k.required("leading_dense_block_count", 0, c.n_layer - 1);
  if (k.required("interleave_moe_layer_step", 1, c.n_layer) != 1)
    k.fail("interleave_moe_layer_step", "is not 1: MoE layers interleaved with dense ones are not supported");
  if (c.n_dense_lead > 0) c.n_ff_dense = k.required("feed_forward_length", 1, kMaxFeedForward);
  c.n_ff_shexp = k.integer("expert_shared_feed_forward_length", 0, 0, kMaxFeedForward);
  c.shared_expert_gate = false;
}

}  // namespace moeflow

#include "model/granitemoe_config.h"

#include "model/arch_keys.h"

namespace moeflow {

void read_granitemoe_config(const gguf::GgufFile& f, ModelConfig& c) {
  const ArchKeys k{f, c.arch_name + "."};
  // GraniteMoeForCausalLM is Llama's attention (the converter permutes q/k for
  // llama.cpp's adjacent-pair RoPE) and Mixtral's router (softmax over the top-k logits).
  c.rope_neox = false;
  c.norm_topk = true;
  c.qk_norm = QkNorm::None;
  // Each multiplier is a product or a divisor, so it must be finite and positive. As
  // llama.cpp reads these files, the logit scale is required and the others may be
  // absent (or 0), meaning none: 1, and 1/sqrt(head_dim) for the attention's.
  const auto scale = [&](const char* key, bool required, float none) {
    if (required && !f.find(k.p + key)) k.fail(key, "is missing (required by granitemoe)");
    const double v = k.real(key, 0, 0, 1e6);
    if (v == 0 && required) k.fail(key, "= 0 must be positive");
    return v == 0 ? none : static_cast<float>(v);
  };
  c.embedding_scale = scale("embedding_scale", false, 1.0f);
  c.residual_scale = scale("residual_scale", false, 1.0f);
  c.attention_scale = scale("attention.scale", false, 0.0f);
  c.logit_scale = scale("logit_scale", true, 1.0f);
  // An optional bias on the attention output (llama.cpp loads attn_output.bias when
  // the file has it).
  c.attn_out_bias = f.find_tensor("blk.0.attn_output.bias") != nullptr;
  // GraniteMoeShared: a dense SwiGLU expert every token takes, added unscaled.
  c.n_ff_shexp = k.integer("expert_shared_feed_forward_length", 0, 0, kMaxFeedForward);
  c.shared_expert_gate = false;
}

}  // namespace moeflow

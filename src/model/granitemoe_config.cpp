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
  // llama.cpp requires all four (a file without them has lost what the model was
  // trained with); each is a product or a divisor, so it must be finite, and all but
  // the attention scale (0: llama.cpp's 1/sqrt(head_dim)) positive.
  const auto scale = [&](const char* key, bool zero_ok) {
    if (!f.find(k.p + key)) k.fail(key, "is missing (required by granitemoe)");
    const double v = k.real(key, 0, 0, 1e6);
    if (v == 0 && !zero_ok) k.fail(key, "= 0 must be positive");
    return static_cast<float>(v);
  };
  c.embedding_scale = scale("embedding_scale", false);
  c.residual_scale = scale("residual_scale", false);
  c.attention_scale = scale("attention.scale", true);
  c.logit_scale = scale("logit_scale", false);
  // GraniteMoeShared: a dense SwiGLU expert every token takes, added unscaled.
  c.n_ff_shexp = k.integer("expert_shared_feed_forward_length", 0, 0, kMaxFeedForward);
  c.shared_expert_gate = false;
}

}  // namespace moeflow

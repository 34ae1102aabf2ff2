#include "model/glm4moe_config.h"

#include "model/arch_keys.h"
#include "model/deepseek_moe_config.h"

namespace moeflow {

void read_glm4moe_config(const gguf::GgufFile& f, ModelConfig& c) {
  const ArchKeys k{f, c.arch_name + "."};
  c.rope_neox = true;  // HF's rotate_half on the first rope.dimension_count dims; llama.cpp's NeoX rope
  // The file says which optional tensors the model has, as llama.cpp reads them (no key
  // does): q/k/v biases (attention_bias, set in every release), and per-head q/k norms
  // (use_qk_norm: GLM-4.5, not GLM-4.5-Air).
  c.attn_qkv_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.qk_norm = f.find_tensor("blk.0.attn_q_norm.weight") ? QkNorm::PerHead : QkNorm::None;
  c.ffn_norm_name = "post_attention_norm";  // HF's post_attention_layernorm, before the FFN
  read_deepseek_moe_config(k, RouterScoring::Sigmoid, c);
}

}  // namespace moeflow

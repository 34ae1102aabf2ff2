#include "model/deepseek2_config.h"

#include <cmath>
#include <string>

#include "base/error.h"
#include "format/gguf.h"
#include "model/arch_keys.h"
#include "model/deepseek_moe_config.h"

namespace moeflow {

void read_deepseek2_config(const gguf::GgufFile& f, ModelConfig& c) {
  const ArchKeys k{f, c.arch_name + "."};
  MlaConfig& m = c.mla;
  m.q_lora_rank = k.integer("attention.q_lora_rank", 0, 0, kMaxEmbd);
  m.kv_lora_rank = k.required("attention.kv_lora_rank", 1, kMaxEmbd);
  // Since 2025 llama.cpp's converter writes the form its absorbed attention runs: MQA
  // over the latent (key_length = kv_lora_rank + rope dims, value_length = kv_lora_rank,
  // head_count_kv = 1), the per-head sizes under *_mla, attn_kv_b split into attn_k_b
  // and attn_v_b. Read as the per-head form it came from (attn_kv_b rebuilt at load).
  m.split_kv_b = f.find(k.p + "attention.key_length_mla") != nullptr;
  if (m.split_kv_b) {
    if (c.head_dim != m.kv_lora_rank + c.rot_dim)
      k.fail("attention.key_length", "= " + std::to_string(c.head_dim) + " must be kv_lora_rank + rope.dimension_count = " +
                                         std::to_string(m.kv_lora_rank + c.rot_dim) + " beside key_length_mla");
    if (k.integer("attention.value_length", m.kv_lora_rank, 1, kMaxHeadDim) != m.kv_lora_rank)
      k.fail("attention.value_length", "must be kv_lora_rank = " + std::to_string(m.kv_lora_rank) + " beside key_length_mla");
    if (c.n_head_kv != 1) k.fail("attention.head_count_kv", "= " + std::to_string(c.n_head_kv) + " must be 1 beside key_length_mla");
    c.head_dim = k.required("attention.key_length_mla", 1, kMaxHeadDim);
    c.head_dim_v = k.required("attention.value_length_mla", 1, kMaxHeadDim);
    c.n_head_kv = c.n_head;
    if (c.n_head * c.head_dim > kMaxEmbd) k.fail("attention.key_length_mla", "times head_count exceeds " + std::to_string(kMaxEmbd));
  }
  // key_length = per-head dims without RoPE + the rope key's dims (shared by all heads).
  m.nope_dim = c.head_dim - c.rot_dim;
  if (m.nope_dim < 1)
    k.fail(m.split_kv_b ? "attention.key_length_mla" : "attention.key_length", "= " + std::to_string(c.head_dim) + " must exceed rope.dimension_count = " +
                                       std::to_string(c.rot_dim) + " (it is qk_nope_head_dim + qk_rope_head_dim)");
  if (!m.split_kv_b) c.head_dim_v = k.integer("attention.value_length", c.head_dim, 1, kMaxHeadDim);
  if (c.n_head * c.head_dim_v > kMaxEmbd) k.fail("attention.value_length", "times head_count exceeds " + std::to_string(kMaxEmbd));
  // The expanded form gives every head its own keys and values.
  if (c.n_head_kv != c.n_head)
    k.fail("attention.head_count_kv", "= " + std::to_string(c.n_head_kv) + " must equal attention.head_count = " +
                                          std::to_string(c.n_head) + " (attn_kv_b expands the latent per head)");
  c.rope_neox = false;  // GPT-J pairs (2i, 2i+1): llama.cpp's deepseek2 graph, HF's de-interleave + rotate_half
  c.qk_norm = QkNorm::None;

  // Softmax (V2) unless the file says sigmoid (V3, R1, Kimi K2).
  read_deepseek_moe_config(k, RouterScoring::Softmax, c);

  // YaRN as HF's DeepSeek-V2 and llama.cpp compute it: the ramp's ends rounded to whole
  // pairs, cos and sin unscaled (the softmax scale below carries mscale^2).
  YarnScaling& y = c.yarn;
  double factor = 1.0;
  const gguf::Value* type = f.find(k.p + "rope.scaling.type");
  const std::string scaling = type ? type->as_string(k.p + "rope.scaling.type") : "none";
  if (scaling == "yarn") {
    factor = k.real("rope.scaling.factor", 1.0, 1.0, 1e6);
    y.orig_ctx = k.integer("rope.scaling.original_context_length", c.n_ctx_train, 1, kMaxContext);
    m.yarn_log_mul = k.real("rope.scaling.yarn_log_multiplier", 0.0, 0.0, 100.0);
    y.beta_fast = k.real("rope.scaling.yarn_beta_fast", 32.0, 1e-6, 1e6);
    y.beta_slow = k.real("rope.scaling.yarn_beta_slow", 1.0, 1e-6, 1e6);
    y.truncate = true;
    y.attn_factor = 1.0;
    if (factor > 1.0) y.factor = factor;  // 1: the trained frequencies, no YaRN
  } else if (scaling != "none") {
    k.fail("rope.scaling.type", "= '" + scaling + "' is not supported for deepseek2 (yarn or none)");
  }
  // HF's softmax_scale: q_head_dim^-0.5 times mscale^2, mscale = 0.1 * mscale_all_dim *
  // ln(factor) + 1 (the converter writes 0.1 * mscale_all_dim as yarn_log_multiplier).
  const double mscale = factor > 1.0 ? 1.0 + m.yarn_log_mul * std::log(factor) : 1.0;
  m.kq_scale = static_cast<float>(mscale * mscale / std::sqrt(static_cast<double>(c.head_dim)));
}

}  // namespace moeflow

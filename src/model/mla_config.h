// The hyper-parameters of DeepSeek-V2's multi-head latent attention (deepseek2 in llama.cpp; docs/architectures.md), kept apart from
// ModelConfig's common fields.
#pragma once
#include <cstdint>

namespace moeflow {

struct MlaConfig {
  int64_t q_lora_rank = 0;     // 0: q projected directly (attn_q), else attn_q_a -> norm -> attn_q_b
  int64_t kv_lora_rank = 0;    // the compressed kv's width (attn_kv_a_mqa rows minus the rope key)
  int64_t nope_dim = 0;        // per-head key dims without RoPE (key_length - rope.dimension_count)
  // The file holds attn_kv_b split as llama.cpp's converter has written it since 2025
  // (attn_k_b transposed, attn_v_b; keys *_mla); loading rebuilds attn_kv_b from them.
  bool split_kv_b = false;
  // rope.scaling.yarn_log_multiplier (0.1 * HF's mscale_all_dim): YaRN's mscale, which
  // DeepSeek puts in the softmax scale rather than in cos and sin (ModelConfig::yarn
  // holds the rest of its YaRN, with attn_factor 1).
  double yarn_log_mul = 0.0;
  float kq_scale = 0.0f;       // softmax scale: mscale^2 / sqrt(key_length)
};

}  // namespace moeflow

#include "model/gpt_oss_config.h"

#include "base/error.h"
#include "format/gguf.h"
#include "model/rope_yarn.h"

namespace moeflow {

void read_gpt_oss_config(const gguf::GgufFile& f, const std::string& p, ModelConfig& c) {
  c.rope_neox = true;  // llama.cpp puts LLM_ARCH_OPENAI_MOE with the NeoX rope types
  // GptOssTopKRouter: softmax over the k largest logits, which equals the softmax over
  // all experts renormalised over the chosen k (the engine's norm_topk), up to
  // rounding; the full softmax stays available to the expert policies.
  c.norm_topk = true;
  c.qk_norm = QkNorm::None;
  c.attn_qkv_bias = true;
  c.attn_out_bias = true;
  c.attn_sinks = true;
  c.router_bias = true;
  c.expert_bias = true;
  // alpha 1.702 and limit 7.0 are constants in llama.cpp's graph (no GGUF key) and
  // swiglu_limit = 7.0 in both released configs.
  c.expert_glu = ExpertGlu::SwigluOai;
  c.ffn_norm_name = "post_attention_norm";
  const std::string key = p + "attention.sliding_window";
  const gguf::Value* w = f.find(key);
  if (!w) throw InputError(f.path() + ": key " + key + " is missing (gpt-oss alternates sliding-window layers)");
  c.sliding_window = w->as_int(key);
  if (c.sliding_window < 1 || c.sliding_window > kMaxContext)
    throw InputError(f.path() + ": key " + key + " = " + std::to_string(c.sliding_window) + " is outside [1, " +
                     std::to_string(kMaxContext) + "]");
  read_rope_yarn(f, p, c);
}

}  // namespace moeflow

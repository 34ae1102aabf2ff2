#include "model/model_config.h"

#include <cmath>
#include <string>

#include "base/error.h"
#include "format/gguf.h"
#include "model/deepseek2_config.h"
#include "model/ernie45moe_config.h"
#include "model/glm4moe_config.h"
#include "model/gpt_oss_config.h"
#include "model/granitemoe_config.h"
#include "model/hunyuanmoe_config.h"

namespace moeflow {

namespace {

int64_t get_int(const gguf::GgufFile& f, const std::string& key) {
  return f.get(key).as_int(key);
}
int64_t get_int_or(const gguf::GgufFile& f, const std::string& key, int64_t dflt) {
  const gguf::Value* v = f.find(key);
  return v ? v->as_int(key) : dflt;
}
double get_float_or(const gguf::GgufFile& f, const std::string& key, double dflt) {
  const gguf::Value* v = f.find(key);
  return v ? v->as_float(key) : dflt;
}

void require(bool ok, const gguf::GgufFile& f, const std::string& what) {
  if (!ok) throw InputError(f.path() + ": " + what);
}

}  // namespace

const char* arch_display_name(Arch a) {
  switch (a) {
    case Arch::Mixtral: return "mixtral";
    case Arch::Qwen3Moe: return "qwen3moe";
    case Arch::Olmoe: return "olmoe";
    case Arch::Qwen2Moe: return "qwen2moe";
    case Arch::DeepSeek2: return "deepseek2";
    case Arch::GptOss: return "gpt-oss";
    case Arch::Glm4Moe: return "glm4moe";
    case Arch::GraniteMoe: return "granitemoe";
    case Arch::Ernie45Moe: return "ernie4_5-moe";
    case Arch::HunyuanMoe: return "hunyuan-moe";
  }
  return "?";
}

ModelConfig read_model_config(const gguf::GgufFile& f) {
  ModelConfig c;
  const std::string arch = f.get("general.architecture").as_string("general.architecture");
  c.arch_name = arch;
  if (arch == "llama" || arch == "mixtral") {
    c.arch = Arch::Mixtral;
    c.rope_neox = false;
    c.norm_topk = true;
    c.qk_norm = QkNorm::None;
  } else if (arch == "qwen3moe") {
    c.arch = Arch::Qwen3Moe;
    c.rope_neox = true;
    c.norm_topk = true;  // Qwen3-MoE configs set norm_topk_prob = true
    c.qk_norm = QkNorm::PerHead;
  } else if (arch == "olmoe") {
    c.arch = Arch::Olmoe;
    c.rope_neox = true;
    c.norm_topk = false;  // OLMoE uses the raw softmax probabilities of the top-k
    c.qk_norm = QkNorm::Full;
  } else if (arch == "qwen2moe") {
    c.arch = Arch::Qwen2Moe;
    c.rope_neox = true;
    // Qwen1.5-MoE and Qwen2-57B-A14B set norm_topk_prob = false, and llama.cpp's
    // qwen2moe graph never renormalises (the key is not in the file).
    c.norm_topk = false;
    c.qk_norm = QkNorm::None;
    c.attn_qkv_bias = true;
    c.shared_expert_gate = true;
  } else if (arch == "deepseek2") {
    c.arch = Arch::DeepSeek2;  // the rest in read_deepseek2_config
  } else if (arch == "gpt-oss") {
    c.arch = Arch::GptOss;  // the rest after the common keys, read_gpt_oss_config
  } else if (arch == "glm4moe") {
    c.arch = Arch::Glm4Moe;  // the rest after the common keys, read_glm4moe_config
  } else if (arch == "granitemoe") {
    c.arch = Arch::GraniteMoe;  // the rest after the common keys, read_granitemoe_config
  } else if (arch == "ernie4_5-moe") {
    c.arch = Arch::Ernie45Moe;  // the rest after the common keys, read_ernie45moe_config
  } else if (arch == "hunyuan-moe") {
    c.arch = Arch::HunyuanMoe;  // the rest after the common keys, read_hunyuanmoe_config
  } else {
    throw InputError(f.path() + ": unsupported architecture '" + arch +
                     "' (key general.architecture); supported: llama (Mixtral), qwen3moe, olmoe, qwen2moe, deepseek2, "
                     "gpt-oss, glm4moe, granitemoe, ernie4_5-moe, hunyuan-moe");
  }
  const std::string p = arch + ".";
  // Every size is bounded before it is multiplied: a head count of 2^60 + 4 times a
  // head size of 64 wraps int64 to a small number that would pass the tensor-shape
  // checks and crash the forward pass. The bounds are far above any released model.
  const auto sized = [&](const std::string& key, int64_t v, int64_t hi) {
    require(v > 0 && v <= hi, f, "key " + key + " = " + std::to_string(v) + " is outside [1, " + std::to_string(hi) + "]");
    return v;
  };
  c.n_embd = sized(p + "embedding_length", get_int(f, p + "embedding_length"), kMaxEmbd);
  c.n_layer = sized(p + "block_count", get_int(f, p + "block_count"), kMaxLayers);
  c.n_head = sized(p + "attention.head_count", get_int(f, p + "attention.head_count"), kMaxHeads);
  c.n_head_kv = sized(p + "attention.head_count_kv", get_int_or(f, p + "attention.head_count_kv", c.n_head), kMaxHeads);
  c.n_ctx_train = sized(p + "context_length", get_int_or(f, p + "context_length", 4096), kMaxContext);
  c.n_expert = get_int_or(f, p + "expert_count", 0);
  c.n_expert_used = get_int_or(f, p + "expert_used_count", 0);
  require(c.n_expert >= 1, f, "key " + p + "expert_count is missing or 0: this is not a MoE model (moeflow runs MoE models)");
  sized(p + "expert_count", c.n_expert, kMaxExperts);
  require(c.n_expert_used >= 1 && c.n_expert_used <= c.n_expert, f,
          "key " + p + "expert_used_count = " + std::to_string(c.n_expert_used) +
              " must be between 1 and expert_count = " + std::to_string(c.n_expert));
  require(c.n_head % c.n_head_kv == 0, f,
          "keys " + p + "attention.head_count (" + std::to_string(c.n_head) + ") must be a positive multiple of " +
              p + "attention.head_count_kv (" + std::to_string(c.n_head_kv) + ")");
  c.head_dim = sized(p + "attention.key_length", get_int_or(f, p + "attention.key_length", c.n_embd / c.n_head), kMaxHeadDim);
  const int64_t v_len = get_int_or(f, p + "attention.value_length", c.head_dim);
  require(v_len == c.head_dim || c.arch == Arch::DeepSeek2, f, "key " + p + "attention.value_length differs from key_length (unsupported)");
  require(c.head_dim % 2 == 0, f, "key " + p + "attention.key_length must be positive and even");
  // Both factors are bounded above, so the product cannot overflow.
  require(c.n_head * c.head_dim <= kMaxEmbd, f,
          "keys " + p + "attention.head_count x attention.key_length = " + std::to_string(c.n_head * c.head_dim) +
              " exceeds " + std::to_string(kMaxEmbd));
  c.rot_dim = get_int_or(f, p + "rope.dimension_count", c.head_dim);
  require(c.rot_dim > 0 && c.rot_dim <= c.head_dim && c.rot_dim % 2 == 0, f,
          "key " + p + "rope.dimension_count must be even and at most the head size");
  c.n_ff_expert = get_int_or(f, p + "expert_feed_forward_length", 0);
  if (c.n_ff_expert == 0) c.n_ff_expert = get_int(f, p + "feed_forward_length");
  sized(p + "expert_feed_forward_length", c.n_ff_expert, kMaxFeedForward);
  if (c.shared_expert_gate) {
    // llama.cpp falls back to feed_forward_length when the shared size is absent.
    const std::string key = p + "expert_shared_feed_forward_length";
    c.n_ff_shexp = get_int_or(f, key, get_int_or(f, p + "feed_forward_length", 0));
    sized(key, c.n_ff_shexp, kMaxFeedForward);
  }
  // Scalars: NaN, infinite, zero or negative values all ran to "success" with token 0
  // repeated (NaN activations); the epsilon is added to a mean of squares, so it must
  // be positive, and RoPE's theta_i = base^(-2i/d) needs a positive finite base.
  const double eps = get_float_or(f, p + "attention.layer_norm_rms_epsilon", 1e-5);
  require(std::isfinite(eps) && eps > 0 && eps <= 1, f,
          "key " + p + "attention.layer_norm_rms_epsilon = " + std::to_string(eps) + " must be in (0, 1]");
  c.rms_eps = static_cast<float>(eps);
  const double base = get_float_or(f, p + "rope.freq_base", 10000.0);
  require(std::isfinite(base) && base > 0 && base <= 1e12, f,
          "key " + p + "rope.freq_base = " + std::to_string(base) + " must be positive and finite (at most 1e12)");
  c.rope_base = static_cast<float>(base);
  if (c.arch == Arch::DeepSeek2) read_deepseek2_config(f, c);
  if (c.arch == Arch::GptOss) read_gpt_oss_config(f, p, c);
  if (c.arch == Arch::Glm4Moe) read_glm4moe_config(f, c);
  if (c.arch == Arch::GraniteMoe) read_granitemoe_config(f, c);
  if (c.arch == Arch::Ernie45Moe) read_ernie45moe_config(f, c);
  if (c.arch == Arch::HunyuanMoe) read_hunyuanmoe_config(f, c);
  // The vocabulary size comes from the embedding tensor (checked in model_weights).
  c.n_vocab = 0;
  return c;
}

}  // namespace moeflow

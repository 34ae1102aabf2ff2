// Hyper-parameters of a MoE transformer, read from GGUF metadata under the keys
// llama.cpp writes ("{arch}.block_count", ...), so files converted by llama.cpp
// load unchanged.
#pragma once
#include <cstdint>
#include <string>

#include "model/mla_config.h"

namespace moeflow {
namespace gguf { class GgufFile; }

enum class Arch { Mixtral, Qwen3Moe, Olmoe, Qwen2Moe, DeepSeek2, GptOss, Glm4Moe, GraniteMoe, Ernie45Moe, HunyuanMoe };

// The gated activation of an expert's hidden units h = act(gate, up).
enum class ExpertGlu {
  Silu,       // silu(gate) * up (SwiGLU)
  SwigluOai,  // gpt-oss: gate clamped above, up clamped both ways, (up + 1) * gate * sigmoid(1.702 gate)
};

// YaRN RoPE scaling (Peng et al. 2023; model/rope_yarn.h says how).
struct YarnScaling {
  double factor = 0;        // context extension factor; 0: no YaRN
  int64_t orig_ctx = 0;     // the context length the model was pre-trained at
  double beta_fast = 32, beta_slow = 1;
  double attn_factor = 1;   // multiplies cos and sin: scores scale by its square
  // Round the ramp's ends to whole pairs (floor / ceil), as HF does by default and
  // llama.cpp always; gpt-oss's config says not to (truncate: false).
  bool truncate = false;
};

// How q and k are normalised before RoPE.
enum class QkNorm { None, PerHead /* Qwen3: RMSNorm over head_dim */, Full /* OLMoE: over all heads */ };

// How router logits become the scores that rank and weight the experts: a softmax over
// the experts, or each expert's own sigmoid (DeepSeek-V3's router, expert_gating_func 2:
// its scores do not compete, and a per-expert bias, exp_probs_b, shifts the choice but
// not the weights).
enum class RouterScoring { Softmax, Sigmoid };

struct ModelConfig {
  Arch arch = Arch::Mixtral;
  std::string arch_name;       // general.architecture as in the file ("llama", ...)
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  int64_t rot_dim = 0;         // dims rotated by RoPE (<= head_dim)
  int64_t n_ff_expert = 0;     // hidden size of one expert
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;   // top-k
  int64_t n_ctx_train = 0;
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  bool rope_neox = false;      // pairs (i, i+d/2) instead of (2i, 2i+1)
  bool norm_topk = true;       // renormalise the top-k router weights to sum to 1
  QkNorm qk_norm = QkNorm::None;
  bool qk_norm_after_rope = false;  // Hunyuan normalises the rotated q and k
  // Qwen2-MoE: biases on the q, k and v projections (attn_{q,k,v}.bias).
  bool attn_qkv_bias = false;
  // A dense shared expert next to the routed ones (ffn_{gate,up,down}_shexp), its output
  // scaled by sigmoid(ffn_gate_inp_shexp . x) when shared_expert_gate (Qwen2-MoE);
  // 0: none.
  int64_t n_ff_shexp = 0;
  bool shared_expert_gate = false;
  // DeepSeek-V2 (model/deepseek2_config.h). The first n_dense_lead layers have a dense
  // FFN of n_ff_dense (ffn_{gate,up,down}) and no experts; the expert machinery (store,
  // cache, policies, traces) numbers the MoE layers 0..n_moe_layer()-1, model layer
  // moe_layer + n_dense_lead.
  int64_t n_dense_lead = 0;
  int64_t n_ff_dense = 0;
  int64_t head_dim_v = 0;             // value head size; 0: head_dim
  float expert_weights_scale = 1.0f;  // the routed experts' weights are multiplied by it
  // Group-limited routing: experts in n_expert_group equal groups, only the
  // n_expert_group_used best groups compete (engine/expert_groups.h says how a group
  // is scored).
  int64_t n_expert_group = 1, n_expert_group_used = 1;
  RouterScoring router_scoring = RouterScoring::Softmax;
  MlaConfig mla;
  int64_t n_moe_layer() const { return n_layer - n_dense_lead; }
  int64_t v_head_dim() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
  // gpt-oss (model/gpt_oss_config.h): a bias on the output projection, a learned sink
  // logit per head, sliding-window attention on the layers layer_slides() names,
  // biases on the router and on every expert's three projections, the clamped SwiGLU,
  // YaRN, and the FFN norm under llama.cpp's name post_attention_norm.
  bool attn_out_bias = false;
  bool attn_sinks = false;
  int64_t sliding_window = 0;  // 0: every layer attends to its whole context
  bool router_bias = false;
  bool expert_bias = false;
  ExpertGlu expert_glu = ExpertGlu::Silu;
  YarnScaling yarn;
  const char* ffn_norm_name = "ffn_norm";
  // Granite-MoE's multipliers (model/granitemoe_config.h): the embedding layer's output
  // times embedding_scale, each block's attention and FFN output times residual_scale
  // before it joins the residual stream, attention scores times attention_scale (0:
  // 1/sqrt(head_dim)), the logits divided by logit_scale. The defaults change nothing.
  float embedding_scale = 1.0f;
  float residual_scale = 1.0f;
  float attention_scale = 0.0f;
  float logit_scale = 1.0f;
};

// Whether layer l attends through the sliding window: gpt-oss alternates, the even
// layers sliding (llama.cpp's swa pattern 2; layer_types in HF's GptOssConfig).
inline bool layer_slides(const ModelConfig& c, int64_t l) { return c.sliding_window > 0 && l % 2 == 0; }

// Bounds on every size read from a file: far above any released model, and low enough
// that products of two of them (heads x head size, experts x feed-forward) stay far
// from int64 overflow.
constexpr int64_t kMaxEmbd = 1 << 20;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxHeadDim = 4096;
constexpr int64_t kMaxExperts = 1 << 16;
constexpr int64_t kMaxFeedForward = 1 << 20;
constexpr int64_t kMaxContext = 1 << 24;

// Throws InputError naming the key when a required one is missing, has the wrong
// type or an impossible value (e.g. head_count not dividing, top-k > expert count).
ModelConfig read_model_config(const gguf::GgufFile& f);
const char* arch_display_name(Arch a);

}  // namespace moeflow

// Writes small random-weight MoE models with our GGUF writer, in the exact tensor
// names and metadata keys llama.cpp uses. They are the test fixtures (and the seed
// for benchmarks of a given size): deterministic for a given spec and seed.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "model/model_config.h"
#include "tensor/dtype.h"

namespace moeflow {

struct SyntheticModelSpec {
  Arch arch = Arch::Mixtral;
  DType dtype = DType::F32;   // of the big matrices; norms and the router stay f32
  std::optional<DType> expert_dtype;  // of the expert matrices; unset: dtype
  int64_t sliding_window = 8;  // gpt-oss: the even layers' window
  int64_t n_vocab = 300;       // >= 257: 256 byte tokens + <|endoftext|> + merges
  int64_t n_embd = 64;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_head_kv = 2;
  int64_t head_dim = 16;
  int64_t n_ff_expert = 64;
  int64_t n_ff_shexp = 0;     // qwen2moe's shared expert (0: twice n_ff_expert); granitemoe's (0: none)
  int64_t n_expert = 8;
  int64_t n_expert_used = 2;
  int64_t n_ctx = 512;
  // deepseek2 (head_dim is the key's length: its part without RoPE + ds_rope_dim; the
  // kv heads equal the heads): 0 picks the default named.
  int64_t ds_q_lora_rank = 0;        // 0: attn_q (V2-Lite), else attn_q_a / attn_q_b (V2)
  int64_t ds_kv_lora_rank = 32;
  int64_t ds_rope_dim = 0;           // 0: head_dim / 2
  int64_t ds_v_head_dim = 0;         // 0: head_dim / 2
  int64_t ds_dense_lead = 1;         // leading dense layers
  int64_t ds_ff_dense = 0;           // 0: twice n_ff_expert
  int64_t ds_shared = 2;             // shared experts (n_ff_expert each)
  int64_t ds_groups = 1, ds_groups_used = 0;  // 0: all groups
  double ds_yarn_factor = 4.0;       // 1: no rope scaling
  // DeepSeek-V3's router: sigmoid scores, a choice bias per expert (exp_probs_b), groups
  // scored by their two best, the weights renormalised and scaled by 2.5.
  bool ds_sigmoid_router = false;
  bool tied_output = false;
  uint64_t seed = 1;
};

// Throws InputError if the spec is inconsistent (e.g. dims not a multiple of 32 for
// a quantised dtype).
void write_synthetic_model(const SyntheticModelSpec& spec, const std::string& path);

}  // namespace moeflow

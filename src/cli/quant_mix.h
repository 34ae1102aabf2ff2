// llama.cpp's named k-quant mixes (what `llama-quantize ... Q4_K_M` writes): a base
// k-quant for the weight matrices and, by tensor role and layer, a few matrices one or
// two steps up. The rules follow llama.cpp's llama_tensor_get_type for these mixes
// (facts of its file format practice; docs/kquants.md lists them):
//   output.weight (or token_embd when the output is tied to it): Q6_K.
//   attn_v:  Q2_K: Q4_K if n_head / n_head_kv >= 4, else Q3_K; Q3_K_M: Q5_K in layers
//            0-1, else Q4_K; Q3_K_L: Q5_K; Q4_K_M, Q5_K_M: Q6_K in the layers
//            use_more_bits picks; Q4_K_S: Q5_K in layers 0-3. Models of 8 experts: Q8_0.
//   attn_k:  models of 8 experts: Q8_0.
//   attn_output: 8 experts: Q5_K for Q2_K, Q3_K_S, Q3_K_M, Q4_K_S, Q4_K_M; otherwise
//            Q2_K: Q3_K, Q3_K_M: Q4_K, Q3_K_L: Q5_K.
//   ffn_down (dense or experts): Q2_K: Q3_K; Q3_K_M: Q5_K in the first 1/16 of the
//            layers, Q4_K where use_more_bits, else Q3_K; Q3_K_L: Q5_K; Q4_K_M, Q5_K_M:
//            Q6_K where use_more_bits; Q4_K_S: Q5_K in the first 1/8.
//   attn_qkv (fused): Q3_K_M, Q3_K_L: Q4_K; Q4_K_M: Q5_K; Q5_K_M: Q6_K.
//   use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2.
// A matrix whose rows are not whole 256-column super-blocks falls back to a 32-block
// type, as llama.cpp's does: Q5_0 for Q4_K, Q5_1 for Q5_K, Q8_0 for Q6_K, IQ4_NL for
// Q2_K / Q3_K; F16 where the rows are not whole 32-column blocks either.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "cli/perplexity.h"
#include "tensor/dtype.h"

namespace moeflow::cli {

enum class QuantMix { Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M, Q6_K };

// "q4_k_m", "Q4_K_M", ...; llama.cpp's Q2_K and Q6_K mixes are "q2_k_mix", "q6_k_mix"
// ("q2_k", "q6_k" name the dtypes: every matrix of that type). False for anything else.
bool quant_mix_from_name(const std::string& name, QuantMix& out);
const char* quant_mix_name(QuantMix m);
// llama.cpp's general.file_type (enum llama_ftype) for the mix.
uint32_t quant_mix_ftype(QuantMix m);
// The model facts the rules read (from the GGUF's metadata).
struct MixModel {
  int64_t n_layer = 0, n_expert = 0, n_gqa = 1;
  bool tied_output = false;  // no output.weight: token_embd is the output
};
// The type for the 2-D+ matrix `name` (GGUF naming, "blk.N.attn_v.weight") of `cols`
// columns.
DType quant_mix_tensor_type(QuantMix mix, const MixModel& m, const std::string& name, int64_t cols);

// quantize_model for a mix: every weight matrix of 2+ dimensions (not routers) as the
// mix assigns; 1-D tensors and routers kept.
QuantizeStats quantize_model_mix(const std::string& in, const std::string& out, QuantMix mix,
                                 const std::function<void(const std::string&)>& log = {},
                                 const std::vector<std::pair<std::string, gguf::Value>>& overrides = {});

}  // namespace moeflow::cli

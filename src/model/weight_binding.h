// Binding one tensor of a GGUF file, its dims checked against the config (InputError
// naming the tensor and both shapes): shared by Model::load and the per-architecture
// layer binders.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "model/model_weights.h"

namespace moeflow {

// A matrix [rows][cols] (ggml dims {cols, rows}), left in the file's mapping.
MatrixRef bind_matrix(const gguf::GgufFile& f, const std::string& name, int64_t cols, int64_t rows);
// Throws InputError naming the tensor unless its dims are `want`.
void check_tensor_dims(const gguf::GgufFile& f, const gguf::TensorInfo& t, const std::vector<uint64_t>& want);
// A vector of n, copied out as f32.
std::vector<float> bind_vector(const gguf::GgufFile& f, const std::string& name, int64_t n);

// A layer's routed experts under prefix b: ffn_gate_exps, ffn_up_exps and
// ffn_down_exps, or, where the file fuses the first two (llama.cpp's converter with
// --fuse-gate-up-exps), ffn_gate_up_exps {n_embd, 2 ff, n_expert}, each expert's gate
// rows then its up rows, bound as two strided stacks.
void bind_expert_ffn(const gguf::GgufFile& f, const std::string& b, int64_t n_embd, int64_t ff, int64_t n_expert,
                     LayerWeights& L);
// gpt-oss's expert biases ({ff, n_expert} for gate and up, {n_embd, n_expert} for down),
// from ffn_gate_up_exps.bias ({2 ff, n_expert}) in a fused file.
void bind_expert_biases(const gguf::GgufFile& f, const std::string& b, int64_t n_embd, int64_t ff, int64_t n_expert,
                        LayerWeights& L);

// A SwiGLU FFN of hidden size ff under a layer prefix b ("blk.3."): ffn_gate<suffix>,
// ffn_up<suffix> and ffn_down<suffix> (suffix "" for a dense layer's FFN, "_shexp" for
// shared experts), each ".weight".
ExpertMatrices bind_swiglu_ffn(const gguf::GgufFile& f, const std::string& b, const std::string& suffix, int64_t n_embd,
                               int64_t ff);
// The router's choice bias of a layer (DeepSeek-V3's exp_probs_b.bias, n_expert floats:
// added to the scores that choose the experts, not to their weights); empty when the
// file has none, as llama.cpp reads it (optional).
std::vector<float> bind_choice_bias(const gguf::GgufFile& f, const std::string& b, int64_t n_expert);

// One deepseek2 layer (model/deepseek2_weights.cpp).
LayerWeights bind_deepseek2_layer(const gguf::GgufFile& f, const ModelConfig& c, int64_t layer);

}  // namespace moeflow

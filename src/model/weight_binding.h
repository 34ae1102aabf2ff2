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
// n_expert stacked [rows][cols] matrices (ggml dims {cols, rows, n_expert}).
StackedExperts bind_experts(const gguf::GgufFile& f, const std::string& name, int64_t cols, int64_t rows,
                            int64_t n_expert);

// One deepseek2 layer (model/deepseek2_weights.cpp).
LayerWeights bind_deepseek2_layer(const gguf::GgufFile& f, const ModelConfig& c, int64_t layer);

}  // namespace moeflow

// Reads the glm4moe-specific metadata (GLM-4.5, GLM-4.5-Air and their successors on the
// same layers, as llama.cpp's convert_hf_to_gguf.py writes them) into a ModelConfig whose
// common fields are read: attention as Qwen2-MoE's (q/k/v biases) with RoPE on part of
// each head and, on the larger models, per-head q/k norms; DeepSeek-V3's MoE block
// (model/deepseek_moe_config.h), whose router scores by sigmoid unless the file says
// otherwise.
#pragma once
#include "format/gguf.h"
#include "model/model_config.h"

namespace moeflow {

// Throws InputError naming the key for a missing or out-of-range value.
void read_glm4moe_config(const gguf::GgufFile& f, ModelConfig& c);

}  // namespace moeflow

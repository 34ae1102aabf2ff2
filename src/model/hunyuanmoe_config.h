// Reads the hunyuan-moe-specific metadata (Tencent's Hunyuan-A13B, as llama.cpp's
// converter writes it) into a ModelConfig whose common fields are read: NeoX RoPE whose
// base the converter already scaled by the model's NTK alpha, per-head q/k RMSNorm applied
// after RoPE, a softmax router with renormalised top-k weights, and a dense shared
// expert added ungated in every layer.
#pragma once
#include "format/gguf.h"
#include "model/model_config.h"

namespace moeflow {

// Throws InputError naming the key for a missing or out-of-range value.
void read_hunyuanmoe_config(const gguf::GgufFile& f, ModelConfig& c);

}  // namespace moeflow

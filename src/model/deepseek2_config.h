// Reads the deepseek2-specific metadata (DeepSeek-V2, V2-Lite, and V3 / R1 / Kimi K2
// with their sigmoid router, as llama.cpp's convert_hf_to_gguf.py writes them) into a
// ModelConfig whose common fields are read.
#pragma once
#include "model/model_config.h"

namespace moeflow {

// Throws InputError naming the key for a missing, out-of-range or unsupported value.
// Both file forms load: attn_kv_b, and the split
// attn_k_b / attn_v_b with the *_mla keys.
void read_deepseek2_config(const gguf::GgufFile& f, ModelConfig& c);

}  // namespace moeflow

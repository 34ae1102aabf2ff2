// The hyper-parameters particular to gpt-oss (general.architecture "gpt-oss",
// llama.cpp's LLM_ARCH_OPENAI_MOE): read after the keys every architecture shares.
#pragma once
#include <string>

#include "model/model_config.h"

namespace moeflow {

// Sets what the architecture fixes (biases, sinks, NeoX RoPE, the clamped SwiGLU,
// routing by softmax over the top-k logits) and reads {prefix}attention.sliding_window
// (required, as llama.cpp requires it) and the YaRN keys (model/rope_yarn.h). Throws
// InputError naming a missing or out-of-range key.
void read_gpt_oss_config(const gguf::GgufFile& f, const std::string& prefix, ModelConfig& c);

}  // namespace moeflow

// Reads the granitemoe-specific metadata (IBM Granite 3.x MoE: granite-3.0/3.1-1b-a400m
// and 3b-a800m, and GraniteMoeShared files, which llama.cpp's converter writes under
// the same architecture with a shared expert) into a ModelConfig whose common fields
// are read: Mixtral's blocks (RoPE on adjacent pairs, a softmax router whose top-k
// weights are renormalised) with four multipliers (model_config.h) and, when the file
// says so, an ungated shared expert beside the routed ones.
#pragma once
#include "format/gguf.h"
#include "model/model_config.h"

namespace moeflow {

// Throws InputError naming the key for a missing or out-of-range value.
void read_granitemoe_config(const gguf::GgufFile& f, ModelConfig& c);

}  // namespace moeflow

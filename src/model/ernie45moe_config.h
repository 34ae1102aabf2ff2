// Reads the ernie4_5-moe-specific metadata (Baidu's ERNIE-4.5-21B-A3B and
// ERNIE-4.5-300B-A47B, as llama.cpp's converter writes them) into a ModelConfig whose
// common fields are read: Llama's attention (RoPE on adjacent pairs, q/k/v biases when
// the file has them), leading dense layers, then routed experts chosen by softmax
// scores plus a per-expert choice bias (exp_probs_b, HF's moe_statics), renormalised,
// beside an ungated shared expert of expert_shared_feed_forward_length.
#pragma once
#include "format/gguf.h"
#include "model/model_config.h"

namespace moeflow {

// Throws InputError naming the key for a missing or out-of-range value, and for a MoE
// interval other than every layer (no released ERNIE 4.5 has one).
void read_ernie45moe_config(const gguf::GgufFile& f, ModelConfig& c);

}  // namespace moeflow

// YaRN RoPE scaling (Peng et al. 2023, "YaRN: Efficient Context Window Extension of
// Large Language Models", §3.2-3.4) as gpt-oss defines it: each rotary frequency
// blends the original (extrapolation) and the one divided by the factor
// (interpolation) along a linear ramp between the correction dimensions of beta_fast
// and beta_slow rotations over the original context, and cos and sin are scaled by the
// attention factor 0.1 ln(factor) + 1.
//
// One implementation for both YaRN models: deepseek2 reads its keys itself
// (model/deepseek2_config.cpp) with truncate = true and attn_factor 1, its mscale going
// into the softmax scale instead.
//
// For gpt-oss the ramp's ends are not rounded to integers: its config sets truncate =
// false (OpenAI's reference implementation never rounds; Hugging Face honours the
// flag, whose default is to round: YarnScaling::truncate). llama.cpp's ggml rounds them
// (floor / ceil) for every model, so its rotary angles for gpt-oss differ slightly from
// these at the pairs inside the ramp.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/model_config.h"

namespace moeflow {

// Reads {prefix}rope.scaling.type, .factor, .original_context_length,
// .yarn_beta_fast, .yarn_beta_slow into c.yarn. No type key, or "none": no scaling.
// Throws InputError naming the key for another type, a missing factor or original
// context, or a value out of range.
void read_rope_yarn(const gguf::GgufFile& f, const std::string& prefix, ModelConfig& c);

// The inverse frequencies theta_i of the rot_dim / 2 rotated pairs.
std::vector<double> yarn_inv_freq(const YarnScaling& y, double base, int64_t rot_dim);

// cs[2i] = attn_factor cos(pos theta_i), cs[2i + 1] = attn_factor sin(pos theta_i): the
// layout of Backend::rope_angles, so Backend::rope_heads rotates by them.
void yarn_angles(const std::vector<double>& inv_freq, double attn_factor, int64_t pos, float* cs);

}  // namespace moeflow

// RoPE angles under YaRN scaling (DeepSeek-V2's rope.scaling.type = yarn): pair i's
// frequency base^(-2i/d) is kept for pairs below the correction range [low, high] (high
// frequencies: more than beta_fast turns over the original context), divided by
// `factor` above it (fewer than beta_slow turns), blended linearly between. The cos/sin are
// not rescaled: llama.cpp's attn_factor cancels ggml's YaRN magnitude scale, and HF's
// mscale / mscale_all_dim is 1 when both are equal (the file keeps only the latter);
// the attention's softmax scale carries mscale^2 instead (MlaConfig::kq_scale).
#pragma once
#include <cstdint>

#include "model/model_config.h"

namespace moeflow {

// cs[2i], cs[2i+1] = cos, sin of pair i's angle at `pos` (c.rot_dim / 2 pairs), the
// layout Backend::rope_apply takes. Angles in double, as cpu::rope_angles.
void yarn_rope_angles(const ModelConfig& c, int64_t pos, float* cs);

}  // namespace moeflow

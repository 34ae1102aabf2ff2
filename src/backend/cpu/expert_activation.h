// An expert's hidden units from its gate and up products, and its output bias: what
// gpt-oss adds to the plain SwiGLU expert (biases on the three projections, the
// clamped SwiGLU), shared by the CPU backend's two expert paths (cpu_backend.cpp's
// row split, experts_per_thread.h) so both give the same floats.
#pragma once
#include <cstdint>

#include "model/model_weights.h"

namespace moeflow {

// For `rows` tokens of expert m (gate and up: [rows][F]): adds m's gate and up biases,
// then gate = act(gate, up) by m.glu.
void expert_hidden(const ExpertMatrices& m, float* gate, float* up, int64_t rows, int64_t F);

// out[r][i] += m.down_bias[i] for the rows (D floats each, `stride` apart) and
// i in [d0, d1); nothing without a bias.
void expert_down_bias(const ExpertMatrices& m, float* out, int64_t rows, int64_t stride, int64_t d0, int64_t d1);

}  // namespace moeflow

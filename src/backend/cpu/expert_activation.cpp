#include "backend/cpu/expert_activation.h"

#include "kernels/cpu/ops.h"
#include "kernels/cpu/swiglu_oai.h"

namespace moeflow {

void expert_hidden(const ExpertMatrices& m, float* gate, float* up, int64_t rows, int64_t F) {
  for (int64_t r = 0; r < rows; ++r) {
    if (m.gate_bias)
      for (int64_t i = 0; i < F; ++i) gate[r * F + i] += m.gate_bias[i];
    if (m.up_bias)
      for (int64_t i = 0; i < F; ++i) up[r * F + i] += m.up_bias[i];
  }
  if (m.glu == ExpertGlu::SwigluOai) cpu::swiglu_oai(gate, up, gate, rows * F);
  else cpu::swiglu(gate, up, gate, rows * F);
}

void expert_down_bias(const ExpertMatrices& m, float* out, int64_t rows, int64_t stride, int64_t d0, int64_t d1) {
  if (!m.down_bias) return;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = d0; i < d1; ++i) out[r * stride + i] += m.down_bias[i];
}

}  // namespace moeflow

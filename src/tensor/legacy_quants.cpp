#include "tensor/legacy_quants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/dtype.h"

namespace moeflow {

namespace {

// Stores the 5-bit quants q[32] as nibbles and high bits.
void pack5(const int* q, uint8_t* qs, uint8_t* qh) {
  std::memset(qh, 0, 4);
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
  for (int j = 0; j < 32; ++j) qh[j / 8] = static_cast<uint8_t>(qh[j / 8] | (((q[j] >> 4) & 1) << (j % 8)));
}

// The block's minimum and maximum, and d = (max - min) / steps with its inverse.
struct MinMax {
  float min, d, id;
};
MinMax min_max(const float* x, int steps) {
  float lo = x[0], hi = x[0];
  for (int j = 1; j < 32; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  const float d = (hi - lo) / static_cast<float>(steps);
  return {lo, d, d != 0.0f ? 1.0f / d : 0.0f};
}

int round_step(float v, int top) { return std::clamp(static_cast<int>(v + 0.5f), 0, top); }

}  // namespace

void dequantize_q4_1(const BlockQ4_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d), m = fp16_to_fp32(b[i].m);
    for (int j = 0; j < 32; ++j) y[32 * i + j] = d * static_cast<float>(legacy_nibble(b[i].qs, j)) + m;
  }
}

void dequantize_q5_0(const BlockQ5_0* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < 32; ++j) {
      const int q = legacy_nibble(b[i].qs, j) | (legacy_high_bit(b[i].qh, j) << 4);
      y[32 * i + j] = d * static_cast<float>(q - 16);
    }
  }
}

void dequantize_q5_1(const BlockQ5_1* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d), m = fp16_to_fp32(b[i].m);
    for (int j = 0; j < 32; ++j) {
      const int q = legacy_nibble(b[i].qs, j) | (legacy_high_bit(b[i].qh, j) << 4);
      y[32 * i + j] = d * static_cast<float>(q) + m;
    }
  }
}

void quantize_q4_1(const float* x, BlockQ4_1* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    const MinMax mm = min_max(x, 15);
    b[i].d = fp32_to_fp16(mm.d);
    b[i].m = fp32_to_fp16(mm.min);
    for (int j = 0; j < 16; ++j) {
      const int q0 = round_step((x[j] - mm.min) * mm.id, 15), q1 = round_step((x[j + 16] - mm.min) * mm.id, 15);
      b[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void quantize_q5_0(const float* x, BlockQ5_0* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    float amax = 0.0f, max = 0.0f;  // the value of largest magnitude, with its sign
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = fp32_to_fp16(d);
    int q[32];
    for (int j = 0; j < 32; ++j) q[j] = round_step(x[j] * id + 16.0f, 31);
    pack5(q, b[i].qs, b[i].qh);
  }
}

void quantize_q5_1(const float* x, BlockQ5_1* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    const MinMax mm = min_max(x, 31);
    b[i].d = fp32_to_fp16(mm.d);
    b[i].m = fp32_to_fp16(mm.min);
    int q[32];
    for (int j = 0; j < 32; ++j) q[j] = round_step((x[j] - mm.min) * mm.id, 31);
    pack5(q, b[i].qs, b[i].qh);
  }
}

}  // namespace moeflow

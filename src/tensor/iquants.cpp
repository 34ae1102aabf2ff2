#include "tensor/iquants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/dtype.h"

namespace moeflow {

void dequantize_iq4_nl(const BlockIQ4_NL* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(kIq4Levels[b[i].qs[j] & 0x0f]);
      y[j + 16] = d * static_cast<float>(kIq4Levels[b[i].qs[j] >> 4]);
    }
  }
}

void dequantize_iq4_xs(const BlockIQ4_XS* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    const int scales_h = b[i].scales_h;
    for (int ib = 0; ib < 8; ++ib, y += 32) {
      const int ls = ((b[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) | (((scales_h >> (2 * ib)) & 3) << 4);
      const float dl = d * static_cast<float>(ls - 32);
      const uint8_t* q = b[i].qs + 16 * ib;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * static_cast<float>(kIq4Levels[q[j] & 0x0f]);
        y[j + 16] = dl * static_cast<float>(kIq4Levels[q[j] >> 4]);
      }
    }
  }
}

namespace {

// The level index nearest to v (levels ascending).
int nearest_level(float v) {
  int best = 0;
  float err = std::fabs(v - kIq4Levels[0]);
  for (int k = 1; k < 16; ++k) {
    const float e = std::fabs(v - kIq4Levels[k]);
    if (e < err) {
      err = e;
      best = k;
    }
  }
  return best;
}

// x[0..32) ~= a * kIq4Levels[idx]: candidate scales map the value of largest magnitude
// near either end of the table (-127 or 113), stretched by a range of factors; each
// candidate's indices are refitted by least squares (a = sum(x l) / sum(l l)). Returns a
// and writes the indices of the best.
float fit_levels(const float* x, uint8_t idx[32]) {
  float vmax = 0.0f;
  for (int i = 0; i < 32; ++i)
    if (std::fabs(x[i]) > std::fabs(vmax)) vmax = x[i];
  std::memset(idx, 8, 32);  // level 1: closest to zero
  if (vmax == 0.0f) return 0.0f;
  float best_a = 0.0f;
  double best_gain = -1;  // sum(xl)^2 / sum(ll)
  uint8_t trial[32];
  for (int side = 0; side < 2; ++side)
    for (int k = -8; k <= 8; ++k) {
      const float end = side == 0 ? -127.0f : 113.0f;
      const float a = vmax / (end * (1.0f + 0.02f * static_cast<float>(k)));
      double sll = 0, sxl = 0;
      for (int i = 0; i < 32; ++i) {
        trial[i] = static_cast<uint8_t>(nearest_level(x[i] / a));
        const double l = kIq4Levels[trial[i]];
        sll += l * l;
        sxl += l * x[i];
      }
      if (sll <= 0) continue;
      const double gain = sxl * sxl / sll;
      if (gain > best_gain) {
        best_gain = gain;
        best_a = static_cast<float>(sxl / sll);
        std::memcpy(idx, trial, 32);
      }
    }
  return best_a;
}

void pack_nibbles(const uint8_t idx[32], uint8_t qs[16]) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(idx[j] | (idx[j + 16] << 4));
}

// Indices of x against the decoder's scale a.
void round_to(const float* x, float a, uint8_t idx[32]) {
  for (int i = 0; i < 32; ++i) idx[i] = a != 0.0f ? static_cast<uint8_t>(nearest_level(x[i] / a)) : 8;
}

}  // namespace

void quantize_iq4_nl(const float* x, BlockIQ4_NL* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    uint8_t idx[32];
    const uint16_t dh = fp32_to_fp16(fit_levels(x, idx));
    b[i].d = dh;
    round_to(x, fp16_to_fp32(dh), idx);
    pack_nibbles(idx, b[i].qs);
  }
}

void quantize_iq4_xs(const float* x, BlockIQ4_XS* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 256) {
    BlockIQ4_XS& o = b[i];
    std::memset(&o, 0, sizeof o);
    float a[8], amax = 0.0f;
    uint8_t idx[32];
    for (int ib = 0; ib < 8; ++ib) {
      a[ib] = fit_levels(x + 32 * ib, idx);
      if (std::fabs(a[ib]) > std::fabs(amax)) amax = a[ib];
    }
    // Sub-block scales as ls - 32 in [-32, 31] against d = amax / -32.
    const uint16_t dh = fp32_to_fp16(amax / -32.0f);
    o.d = dh;
    const float d = fp16_to_fp32(dh);
    uint16_t scales_h = 0;
    for (int ib = 0; ib < 8; ++ib) {
      const int l = d != 0.0f ? std::clamp(static_cast<int>(std::lrintf(a[ib] / d)), -32, 31) : 0;
      const int ls = l + 32;
      o.scales_l[ib / 2] |= static_cast<uint8_t>((ls & 0x0f) << (4 * (ib % 2)));
      scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * ib));
      round_to(x + 32 * ib, d * static_cast<float>(l), idx);
      pack_nibbles(idx, o.qs + 16 * ib);
    }
    o.scales_h = scales_h;
  }
}

float mxfp4_scale(uint8_t e) { return std::ldexp(1.0f, static_cast<int>(e) - 128); }

void dequantize_mxfp4(const BlockMXFP4* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += 32) {
    const float d = mxfp4_scale(b[i].e);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(kMxfp4Levels[b[i].qs[j] & 0x0f]);
      y[j + 16] = d * static_cast<float>(kMxfp4Levels[b[i].qs[j] >> 4]);
    }
  }
}

namespace {
int nearest_mxfp4(float v) {  // index of the level nearest v (0 for zero)
  int best = 0;
  float err = std::fabs(v);
  for (int k = 1; k < 16; ++k) {
    const float e = std::fabs(v - kMxfp4Levels[k]);
    if (e < err) {
      err = e;
      best = k;
    }
  }
  return best;
}
}  // namespace

void quantize_mxfp4(const float* x, BlockMXFP4* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    // Smallest e with amax <= 12 * 2^(e - 128).
    int e = 0;
    if (amax > 0.0f) e = std::clamp(static_cast<int>(std::ceil(std::log2(amax / 12.0f))) + 128, 0, 254);
    int best_e = e;
    double best_err = -1;
    for (int cand = std::max(e - 1, 0); cand <= e; ++cand) {
      const float d = mxfp4_scale(static_cast<uint8_t>(cand));
      double err = 0;
      for (int j = 0; j < 32; ++j) {
        const double r = d * kMxfp4Levels[nearest_mxfp4(x[j] / d)] - x[j];
        err += r * r;
      }
      if (best_err < 0 || err < best_err) {
        best_err = err;
        best_e = cand;
      }
    }
    b[i].e = static_cast<uint8_t>(best_e);
    const float d = mxfp4_scale(b[i].e);
    for (int j = 0; j < 16; ++j)
      b[i].qs[j] = static_cast<uint8_t>(nearest_mxfp4(x[j] / d) | (nearest_mxfp4(x[j + 16] / d) << 4));
  }
}

}  // namespace moeflow

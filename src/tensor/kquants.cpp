#include "tensor/kquants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/dtype.h"

namespace moeflow {

// ---------------------------------------------------------------------------------
// Dequantisation: the formulas of kquants.h, in the order of the byte arrays.

void dequantize_q2_k(const BlockQ2_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK_K) {
    const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 4; ++k)
        for (int half16 = 0; half16 < 2; ++half16) {
          const int s = 8 * h + 2 * k + half16;  // sub-block of 16
          const float dl = d * static_cast<float>(b[i].scales[s] & 0x0f);
          const float ml = dmin * static_cast<float>(b[i].scales[s] >> 4);
          for (int l = 16 * half16; l < 16 * half16 + 16; ++l)
            y[128 * h + 32 * k + l] = dl * static_cast<float>((b[i].qs[32 * h + l] >> (2 * k)) & 3) - ml;
        }
  }
}

void dequantize_q3_k(const BlockQ3_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK_K) {
    const float d = fp16_to_fp32(b[i].d);
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 4; ++k)
        for (int half16 = 0; half16 < 2; ++half16) {
          const int s = 8 * h + 2 * k + half16;
          const float dl = d * static_cast<float>(kq_scale_q3(b[i].scales, s) - 32);
          for (int l = 16 * half16; l < 16 * half16 + 16; ++l) {
            const int q = ((b[i].qs[32 * h + l] >> (2 * k)) & 3) | (((b[i].hmask[l] >> (4 * h + k)) & 1) << 2);
            y[128 * h + 32 * k + l] = dl * static_cast<float>(q - 4);
          }
        }
  }
}

void dequantize_q4_k(const BlockQ4_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK_K) {
    const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
    for (int c = 0; c < 4; ++c) {
      int sc0, m0, sc1, m1;
      kq_scale_min_k4(b[i].scales, 2 * c, sc0, m0);
      kq_scale_min_k4(b[i].scales, 2 * c + 1, sc1, m1);
      const float d0 = d * static_cast<float>(sc0), n0 = dmin * static_cast<float>(m0);
      const float d1 = d * static_cast<float>(sc1), n1 = dmin * static_cast<float>(m1);
      const uint8_t* q = b[i].qs + 32 * c;
      for (int l = 0; l < 32; ++l) y[64 * c + l] = d0 * static_cast<float>(q[l] & 0x0f) - n0;
      for (int l = 0; l < 32; ++l) y[64 * c + 32 + l] = d1 * static_cast<float>(q[l] >> 4) - n1;
    }
  }
}

void dequantize_q5_k(const BlockQ5_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK_K) {
    const float d = fp16_to_fp32(b[i].d), dmin = fp16_to_fp32(b[i].dmin);
    for (int c = 0; c < 4; ++c) {
      int sc0, m0, sc1, m1;
      kq_scale_min_k4(b[i].scales, 2 * c, sc0, m0);
      kq_scale_min_k4(b[i].scales, 2 * c + 1, sc1, m1);
      const float d0 = d * static_cast<float>(sc0), n0 = dmin * static_cast<float>(m0);
      const float d1 = d * static_cast<float>(sc1), n1 = dmin * static_cast<float>(m1);
      const uint8_t* q = b[i].qs + 32 * c;
      for (int l = 0; l < 32; ++l)
        y[64 * c + l] = d0 * static_cast<float>((q[l] & 0x0f) | (((b[i].qh[l] >> (2 * c)) & 1) << 4)) - n0;
      for (int l = 0; l < 32; ++l)
        y[64 * c + 32 + l] = d1 * static_cast<float>((q[l] >> 4) | (((b[i].qh[l] >> (2 * c + 1)) & 1) << 4)) - n1;
    }
  }
}

void dequantize_q6_k(const BlockQ6_K* b, float* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, y += kQK_K) {
    const float d = fp16_to_fp32(b[i].d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = b[i].ql + 64 * h;
      const uint8_t* qh = b[i].qh + 32 * h;
      for (int l = 0; l < 32; ++l) {
        const int q0 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        const int s = 8 * h + l / 16;
        y[128 * h + l] = d * static_cast<float>(b[i].scales[s]) * static_cast<float>(q0);
        y[128 * h + 32 + l] = d * static_cast<float>(b[i].scales[s + 2]) * static_cast<float>(q1);
        y[128 * h + 64 + l] = d * static_cast<float>(b[i].scales[s + 4]) * static_cast<float>(q2);
        y[128 * h + 96 + l] = d * static_cast<float>(b[i].scales[s + 6]) * static_cast<float>(q3);
      }
    }
  }
}

// ---------------------------------------------------------------------------------
// Quantisation.

namespace {

// Rounds to nearest; the clamp keeps absurd inputs (huge or infinite weights) inside int
// before the callers clamp to their quant range.
int nearest(float v) { return static_cast<int>(std::lrintf(std::clamp(v, -1e9f, 1e9f))); }

// x[0..n) ~= a * q - m with q in [0, nmax], a >= 0, m >= 0 (the offset only ever lowers
// the grid: zero stays representable as a quant times a, as the formats' unsigned mins
// require). Tries grids stretched over [min(0, min x), max x] by a range of factors,
// refits a and m to each grid's quants by least squares, keeps the best.
void fit_affine(const float* x, int n, int nmax, float& a, float& m) {
  float lo = 0.0f, hi = x[0];
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  a = 0.0f;
  m = -lo;
  if (!(hi > lo)) return;
  float best_a = (hi - lo) / static_cast<float>(nmax), best_m = -lo;
  double best_err = 0;
  for (int i = 0; i < n; ++i) {
    const int q = std::clamp(nearest((x[i] - lo) / best_a), 0, nmax);
    const double e = best_a * q - best_m - x[i];
    best_err += e * e;
  }
  for (int k = -6; k <= 10; ++k) {
    const float iscale = (static_cast<float>(nmax) + 0.1f * static_cast<float>(k)) / (hi - lo);
    double sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int i = 0; i < n; ++i) {
      const int q = std::clamp(nearest((x[i] - lo) * iscale), 0, nmax);
      sq += q;
      sqq += static_cast<double>(q) * q;
      sx += x[i];
      sqx += q * static_cast<double>(x[i]);
    }
    // Least squares x ~= ca * q + cb; cb must be <= 0 (cb = -m).
    const double det = n * sqq - sq * sq;
    if (det <= 0) continue;
    double ca = (n * sqx - sq * sx) / det, cb = (sqq * sx - sq * sqx) / det;
    if (cb > 0) {
      cb = 0;
      ca = sqx / sqq;
    }
    if (ca <= 0) continue;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const int q = std::clamp(nearest((x[i] - lo) * iscale), 0, nmax);
      const double e = ca * q + cb - x[i];
      err += e * e;
    }
    if (err < best_err) {
      best_err = err;
      best_a = static_cast<float>(ca);
      best_m = static_cast<float>(-cb);
    }
  }
  a = best_a;
  m = best_m;
}

// x[0..n) ~= a * q with q in [-nneg, npos] (a may be negative: the longer side of the
// grid then covers the value of largest magnitude). Candidate grids map that value to
// either end, stretched by a range of factors; each is refitted by least squares
// (a = sum qx / sum qq); the one of least squared error wins.
float fit_symmetric(const float* x, int n, int nneg, int npos) {
  float vmax = 0.0f;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > std::fabs(vmax)) vmax = x[i];
  if (vmax == 0.0f) return 0.0f;
  float best_a = 0.0f;
  double best_gain = -1;  // sum(qx)^2 / sum(qq): squared error = sum(xx) - gain
  for (int side = 0; side < 2; ++side)
    for (int k = -8; k <= 8; ++k) {
      const float end = side == 0 ? -static_cast<float>(nneg) : static_cast<float>(npos);
      const float iscale = (end + (side == 0 ? -0.1f : 0.1f) * static_cast<float>(k)) / vmax;
      double sqq = 0, sqx = 0;
      for (int i = 0; i < n; ++i) {
        const int q = std::clamp(nearest(x[i] * iscale), -nneg, npos);
        sqq += static_cast<double>(q) * q;
        sqx += q * static_cast<double>(x[i]);
      }
      if (sqq <= 0) continue;
      const double gain = sqx * sqx / sqq;
      if (gain > best_gain) {
        best_gain = gain;
        best_a = static_cast<float>(sqx / sqq);
      }
    }
  return best_a;
}

// The super-block scale for unsigned sub-block scales v[0..n) quantised to [0, levels]:
// stores it as f16 in *out and returns its f16 value.
float super_scale_unsigned(const float* v, int n, int levels, uint16_t* out) {
  float mx = 0.0f;
  for (int i = 0; i < n; ++i) mx = std::max(mx, v[i]);
  *out = fp32_to_fp16(mx / static_cast<float>(levels));
  return fp16_to_fp32(*out);
}
int quantize_level(float v, float d, int lo, int hi) { return d != 0.0f ? std::clamp(nearest(v / d), lo, hi) : 0; }

// Q4_K / Q5_K: the sub-block fits, their scales and mins as 6-bit levels (sc, mn) and
// the effective per-sub-block scale and min the decoder will use.
void fit_k4(const float* x, int nmax, uint16_t* d_out, uint16_t* dmin_out, int sc[8], int mn[8], float eff_a[8],
            float eff_m[8]) {
  float a[8], m[8];
  for (int j = 0; j < 8; ++j) fit_affine(x + 32 * j, 32, nmax, a[j], m[j]);
  const float d = super_scale_unsigned(a, 8, 63, d_out);
  const float dmin = super_scale_unsigned(m, 8, 63, dmin_out);
  for (int j = 0; j < 8; ++j) {
    sc[j] = quantize_level(a[j], d, 0, 63);
    mn[j] = quantize_level(m[j], dmin, 0, 63);
    eff_a[j] = d * static_cast<float>(sc[j]);
    eff_m[j] = dmin * static_cast<float>(mn[j]);
  }
}
void pack_scales_k4(const int sc[8], const int mn[8], uint8_t s[12]) {
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0f) | ((mn[j + 4] & 0x0f) << 4));
  }
}
int affine_quant(float x, float a, float m, int nmax) { return a > 0.0f ? std::clamp(nearest((x + m) / a), 0, nmax) : 0; }

// Sub-blocks of 16 with signed scales (Q3_K, Q6_K): the effective scales after the
// sub-block scales are quantised to [-levels, levels - 1] against d = max / -levels.
void fit_signed16(const float* x, int nneg, int npos, int levels, uint16_t* d_out, int sc[16], float eff[16]) {
  float a[16], amax = 0.0f;
  for (int j = 0; j < 16; ++j) {
    a[j] = fit_symmetric(x + 16 * j, 16, nneg, npos);
    if (std::fabs(a[j]) > std::fabs(amax)) amax = a[j];
  }
  *d_out = fp32_to_fp16(amax / -static_cast<float>(levels));
  const float d = fp16_to_fp32(*d_out);
  for (int j = 0; j < 16; ++j) {
    sc[j] = quantize_level(a[j], d, -levels, levels - 1);
    eff[j] = d * static_cast<float>(sc[j]);
  }
}
int signed_quant(float x, float a, int nneg, int npos) { return a != 0.0f ? std::clamp(nearest(x / a), -nneg, npos) : 0; }

}  // namespace

void quantize_q2_k(const float* x, BlockQ2_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    BlockQ2_K& o = b[i];
    std::memset(&o, 0, sizeof o);
    float a[16], m[16];
    for (int j = 0; j < 16; ++j) fit_affine(x + 16 * j, 16, 3, a[j], m[j]);
    uint16_t dh, dminh;
    const float d = super_scale_unsigned(a, 16, 15, &dh);
    const float dmin = super_scale_unsigned(m, 16, 15, &dminh);
    o.d = dh;
    o.dmin = dminh;
    float ea[16], em[16];
    for (int j = 0; j < 16; ++j) {
      const int sc = quantize_level(a[j], d, 0, 15), mn = quantize_level(m[j], dmin, 0, 15);
      o.scales[j] = static_cast<uint8_t>(sc | (mn << 4));
      ea[j] = d * static_cast<float>(sc);
      em[j] = dmin * static_cast<float>(mn);
    }
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, k = (e % 128) / 32, l = e % 32;
      const int q = affine_quant(x[e], ea[e / 16], em[e / 16], 3);
      o.qs[32 * h + l] |= static_cast<uint8_t>(q << (2 * k));
    }
  }
}

void quantize_q3_k(const float* x, BlockQ3_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    BlockQ3_K& o = b[i];
    std::memset(&o, 0, sizeof o);
    int sc[16];
    float eff[16];
    uint16_t dh;
    fit_signed16(x, 4, 3, 32, &dh, sc, eff);
    o.d = dh;
    for (int j = 0; j < 16; ++j) {
      const int v = sc[j] + 32;  // 0..63
      o.scales[j % 8] |= static_cast<uint8_t>((v & 0x0f) << (j < 8 ? 0 : 4));
      o.scales[8 + j % 4] |= static_cast<uint8_t>((v >> 4) << (2 * (j / 4)));
    }
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, k = (e % 128) / 32, l = e % 32;
      const int q = signed_quant(x[e], eff[e / 16], 4, 3) + 4;  // 0..7
      o.qs[32 * h + l] |= static_cast<uint8_t>((q & 3) << (2 * k));
      o.hmask[l] |= static_cast<uint8_t>((q >> 2) << (4 * h + k));
    }
  }
}

void quantize_q4_k(const float* x, BlockQ4_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    BlockQ4_K& o = b[i];
    std::memset(&o, 0, sizeof o);
    int sc[8], mn[8];
    float ea[8], em[8];
    uint16_t dh, dminh;
    fit_k4(x, 15, &dh, &dminh, sc, mn, ea, em);
    o.d = dh;
    o.dmin = dminh;
    pack_scales_k4(sc, mn, o.scales);
    for (int e = 0; e < kQK_K; ++e) {
      const int q = affine_quant(x[e], ea[e / 32], em[e / 32], 15);
      o.qs[32 * (e / 64) + e % 32] |= static_cast<uint8_t>(e % 64 < 32 ? q : q << 4);
    }
  }
}

void quantize_q5_k(const float* x, BlockQ5_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    BlockQ5_K& o = b[i];
    std::memset(&o, 0, sizeof o);
    int sc[8], mn[8];
    float ea[8], em[8];
    uint16_t dh, dminh;
    fit_k4(x, 31, &dh, &dminh, sc, mn, ea, em);
    o.d = dh;
    o.dmin = dminh;
    pack_scales_k4(sc, mn, o.scales);
    for (int e = 0; e < kQK_K; ++e) {
      const int q = affine_quant(x[e], ea[e / 32], em[e / 32], 31);
      o.qs[32 * (e / 64) + e % 32] |= static_cast<uint8_t>(e % 64 < 32 ? (q & 0x0f) : (q & 0x0f) << 4);
      o.qh[e % 32] |= static_cast<uint8_t>((q >> 4) << (e / 32));
    }
  }
}

void quantize_q6_k(const float* x, BlockQ6_K* b, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK_K) {
    BlockQ6_K& o = b[i];
    std::memset(&o, 0, sizeof o);
    int sc[16];
    float eff[16];
    uint16_t dh;
    fit_signed16(x, 32, 31, 128, &dh, sc, eff);
    o.d = dh;
    for (int j = 0; j < 16; ++j) o.scales[j] = static_cast<int8_t>(sc[j]);
    for (int e = 0; e < kQK_K; ++e) {
      const int h = e / 128, k = (e % 128) / 32, l = e % 32;
      const int q = signed_quant(x[e], eff[e / 16], 32, 31) + 32;  // 0..63
      o.ql[64 * h + 32 * (k % 2) + l] |= static_cast<uint8_t>(k < 2 ? (q & 0x0f) : (q & 0x0f) << 4);
      o.qh[32 * h + l] |= static_cast<uint8_t>((q >> 4) << (2 * k));
    }
  }
}

}  // namespace moeflow

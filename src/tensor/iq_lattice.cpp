#include "tensor/iq_lattice.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include "tensor/dtype.h"

namespace moeflow {

namespace iq_codes {
extern const uint16_t kIq2xxsCodes[256], kIq2xsCodes[512], kIq2sCodes[1024], kIq3xxsCodes[256], kIq3sCodes[512],
    kIq1sCodes[2048];
}  // namespace iq_codes

namespace {

// The grids expanded once from their codes: 8 bytes a point (IQ3's use the first 4).
struct Grids {
  uint8_t iq2xxs[256][8], iq2xs[512][8], iq2s[1024][8], iq3xxs[256][8], iq3s[512][8], iq1s[2048][8];
  Grids() {
    static const uint8_t k2[3] = {8, 25, 43}, k1[3] = {0xff, 0, 1};
    static const uint8_t k3xxs[8] = {4, 12, 20, 28, 36, 44, 52, 62}, k3s[8] = {1, 3, 5, 7, 9, 11, 13, 15};
    auto expand = [](const uint16_t* codes, int n, int width, int bits, const uint8_t* values, uint8_t (*out)[8]) {
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < width; ++j) out[i][j] = values[(codes[i] >> (bits * j)) & ((1 << bits) - 1)];
    };
    expand(iq_codes::kIq2xxsCodes, 256, 8, 2, k2, iq2xxs);
    expand(iq_codes::kIq2xsCodes, 512, 8, 2, k2, iq2xs);
    expand(iq_codes::kIq2sCodes, 1024, 8, 2, k2, iq2s);
    expand(iq_codes::kIq3xxsCodes, 256, 4, 3, k3xxs, iq3xxs);
    expand(iq_codes::kIq3sCodes, 512, 4, 3, k3s, iq3s);
    expand(iq_codes::kIq1sCodes, 2048, 8, 2, k1, iq1s);
  }
};
const Grids& grids() {
  static const Grids g;
  return g;
}

inline float sign_of(uint8_t signs, int j) { return signs >> j & 1 ? -1.0f : 1.0f; }

// IQ2_XS's and IQ2_S's two scales of a block of 32, one a half: d (0.5 + nibble) / 4.
struct HalfScales {
  float v[2];
  HalfScales(float d, uint8_t sc)
      : v{d * (0.5f + static_cast<float>(sc & 15)) * 0.25f, d * (0.5f + static_cast<float>(sc >> 4)) * 0.25f} {}
  float operator[](int h) const { return v[h]; }
};

}  // namespace

int iq_grid_points(IqGrid g) {
  switch (g) {
    case IqGrid::Iq2xxs: case IqGrid::Iq3xxs: return 256;
    case IqGrid::Iq2xs: case IqGrid::Iq3s: return 512;
    case IqGrid::Iq2s: return 1024;
    case IqGrid::Iq1s: return 2048;
  }
  return 0;
}
int iq_grid_width(IqGrid g) { return g == IqGrid::Iq3xxs || g == IqGrid::Iq3s ? 4 : 8; }
const uint8_t* iq_grid_point(IqGrid g, int i) {
  const Grids& t = grids();
  switch (g) {
    case IqGrid::Iq2xxs: return t.iq2xxs[i];
    case IqGrid::Iq2xs: return t.iq2xs[i];
    case IqGrid::Iq2s: return t.iq2s[i];
    case IqGrid::Iq3xxs: return t.iq3xxs[i];
    case IqGrid::Iq3s: return t.iq3s[i];
    case IqGrid::Iq1s: return t.iq1s[i];
  }
  throw std::invalid_argument("moeflow: unknown i-quant grid");
}

void random_lattice_blocks(int t_ggml_id, int nb, uint32_t seed, int scale_exp, uint8_t* out) {
  DType t;
  if (!dtype_from_ggml(static_cast<uint32_t>(t_ggml_id), t) || !dtype_is_lattice_iquant(t))
    throw std::invalid_argument("moeflow: random_lattice_blocks of a type that is no lattice i-quant");
  const size_t bs = static_cast<size_t>(dtype_info(t).type_size);
  uint32_t s = seed;
  for (size_t i = 0; i < bs * static_cast<size_t>(nb); ++i) {
    s = s * 1664525u + 1013904223u;
    out[i] = static_cast<uint8_t>(s >> 24);
  }
  const uint16_t h = fp32_to_fp16(std::ldexp(1.0f, scale_exp));
  for (int b = 0; b < nb; ++b) {
    uint8_t* p = out + bs * static_cast<size_t>(b);
    if (t != DType::IQ1_M) {
      std::memcpy(p, &h, 2);
      continue;
    }
    uint16_t sc[4];  // the f16's nibbles, lowest first, in the top nibbles of the four words
    std::memcpy(sc, p + 48, 8);
    for (int k = 0; k < 4; ++k) sc[k] = static_cast<uint16_t>((sc[k] & 0x0fff) | (h >> (4 * k) & 15) << 12);
    std::memcpy(p + 48, sc, 8);
  }
}

void dequantize_iq2_xxs(const BlockIQ2_XXS* b, float* y, int64_t nb) {
  const Grids& t = grids();
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int blk = 0; blk < 8; ++blk) {
      uint32_t a[2];
      std::memcpy(a, b[i].qs + 4 * blk, 8);
      const float db = d * (0.5f + static_cast<float>(a[1] >> 28)) * 0.25f;
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint8_t* g = t.iq2xxs[a[0] >> (8 * l) & 255];
        const uint8_t s = kIqSignBytes.v[a[1] >> (7 * l) & 127];
        for (int j = 0; j < 8; ++j) y[j] = db * g[j] * sign_of(s, j);
      }
    }
  }
}

void dequantize_iq2_xs(const BlockIQ2_XS* b, float* y, int64_t nb) {
  const Grids& t = grids();
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int blk = 0; blk < 8; ++blk) {
      const HalfScales db(d, b[i].scales[blk]);
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint16_t q = b[i].qs[4 * blk + l];
        const uint8_t* g = t.iq2xs[q & 511];
        const uint8_t s = kIqSignBytes.v[q >> 9];
        for (int j = 0; j < 8; ++j) y[j] = db[l / 2] * g[j] * sign_of(s, j);
      }
    }
  }
}

void dequantize_iq2_s(const BlockIQ2_S* b, float* y, int64_t nb) {
  const Grids& t = grids();
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int blk = 0; blk < 8; ++blk) {
      const HalfScales db(d, b[i].scales[blk]);
      for (int l = 0; l < 4; ++l, y += 8) {
        const int idx = b[i].qs[4 * blk + l] | (b[i].qh[blk] >> (2 * l) & 3) << 8;
        const uint8_t* g = t.iq2s[idx];
        const uint8_t s = b[i].qs[32 + 4 * blk + l];
        for (int j = 0; j < 8; ++j) y[j] = db[l / 2] * g[j] * sign_of(s, j);
      }
    }
  }
}

void dequantize_iq3_xxs(const BlockIQ3_XXS* b, float* y, int64_t nb) {
  const Grids& t = grids();
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int blk = 0; blk < 8; ++blk) {
      uint32_t a;
      std::memcpy(&a, b[i].qs + 64 + 4 * blk, 4);
      const float db = d * (0.5f + static_cast<float>(a >> 28)) * 0.5f;
      const uint8_t* qs = b[i].qs + 8 * blk;
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint8_t s = kIqSignBytes.v[a >> (7 * l) & 127];
        const uint8_t *g1 = t.iq3xxs[qs[2 * l]], *g2 = t.iq3xxs[qs[2 * l + 1]];
        for (int j = 0; j < 4; ++j) {
          y[j] = db * g1[j] * sign_of(s, j);
          y[j + 4] = db * g2[j] * sign_of(s, j + 4);
        }
      }
    }
  }
}

void dequantize_iq3_s(const BlockIQ3_S* b, float* y, int64_t nb) {
  const Grids& t = grids();
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int blk = 0; blk < 8; ++blk) {
      const int nib = b[i].scales[blk / 2] >> (4 * (blk % 2)) & 15;
      const float db = d * static_cast<float>(1 + 2 * nib);
      const uint8_t* qs = b[i].qs + 8 * blk;
      const uint8_t qh = b[i].qh[blk];
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint8_t s = b[i].signs[4 * blk + l];
        const uint8_t* g1 = t.iq3s[qs[2 * l] | (qh >> (2 * l) & 1) << 8];
        const uint8_t* g2 = t.iq3s[qs[2 * l + 1] | (qh >> (2 * l + 1) & 1) << 8];
        for (int j = 0; j < 4; ++j) {
          y[j] = db * g1[j] * sign_of(s, j);
          y[j + 4] = db * g2[j] * sign_of(s, j + 4);
        }
      }
    }
  }
}

// IQ1_S's and IQ1_M's shift of every grid value, 1/8 (IQ1S_DELTA / IQ1M_DELTA).
constexpr float kIq1Delta = 0.125f;

void dequantize_iq1_s(const BlockIQ1_S* b, float* y, int64_t nb) {
  const Grids& t = grids();
  for (int64_t i = 0; i < nb; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int blk = 0; blk < 8; ++blk) {
      const uint16_t qh = b[i].qh[blk];
      const float dl = d * static_cast<float>(2 * (qh >> 12 & 7) + 1);
      const float delta = qh & 0x8000 ? -kIq1Delta : kIq1Delta;
      for (int l = 0; l < 4; ++l, y += 8) {
        const auto* g = reinterpret_cast<const int8_t*>(t.iq1s[b[i].qs[4 * blk + l] | (qh >> (3 * l) & 7) << 8]);
        for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(g[j]) + delta);
      }
    }
  }
}

void dequantize_iq1_m(const BlockIQ1_M* b, float* y, int64_t nb) {
  const Grids& t = grids();
  for (int64_t i = 0; i < nb; ++i) {
    uint16_t sc[4];
    std::memcpy(sc, b[i].scales, 8);
    const uint16_t dh = static_cast<uint16_t>((sc[0] >> 12) | (sc[1] >> 8 & 0x00f0) | (sc[2] >> 4 & 0x0f00) | (sc[3] & 0xf000));
    const float d = fp16_to_fp32(dh);
    for (int blk = 0; blk < 8; ++blk) {
      const int shift = 6 * (blk % 2);
      const float dl[2] = {d * static_cast<float>(2 * (sc[blk / 2] >> shift & 7) + 1),
                           d * static_cast<float>(2 * (sc[blk / 2] >> (shift + 3) & 7) + 1)};
      const uint8_t* qs = b[i].qs + 4 * blk;
      const uint8_t* qh = b[i].qh + 2 * blk;
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint8_t h = qh[l / 2] >> (4 * (l % 2));  // the group's nibble: 3 index bits, the delta's sign
        const auto* g = reinterpret_cast<const int8_t*>(t.iq1s[qs[l] | (h & 7) << 8]);
        const float delta = h & 8 ? -kIq1Delta : kIq1Delta;
        for (int j = 0; j < 8; ++j) y[j] = dl[l / 2] * (static_cast<float>(g[j]) + delta);
      }
    }
  }
}

}  // namespace moeflow

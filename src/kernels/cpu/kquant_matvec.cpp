#include "kernels/cpu/kquant_matvec.h"

#include <stdexcept>
#include <string>

#include "kernels/cpu/kquant_vnni.h"
#include "kernels/cpu/q4_vnni.h"
#include "tensor/kquants.h"

namespace moeflow::cpu {

bool kquant_vnni_type(DType t) { return dtype_is_kquant(t) && q4_vnni_enabled(); }

void kquant_dequant(DType t, const uint8_t* blocks, int64_t nb, float* y) {
  if (q4_vnni_enabled() && kquant_avx512_dequant(t, blocks, nb, y)) return;
  dequantize_row(t, blocks, y, nb * 256);
}

void kquant_pack_x(const int16_t* qx, const float* dx, int64_t cols, uint8_t* out) {
  kquant_vnni_pack_x(qx, dx, cols, out);
}

namespace {
// One super-block of one row as f32, dotted with x in 8 partial sums (vectorisable).
float dot_block(const float* w, const float* x) {
  float s[8] = {};
  for (int i = 0; i < 256; i += 8)
    for (int k = 0; k < 8; ++k) s[k] += w[i + k] * x[i + k];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}
}  // namespace

void kquant_rows(DType t, const uint8_t* const* rows, int R, int64_t cols, const float* x, const uint8_t* packed,
                 float* out, const uint8_t* pf) {
  if (packed && kquant_vnni_type(t)) {
    kquant_vnni_rows(t, rows, R, cols / 256, packed, out, pf);
    return;
  }
  if (!dtype_is_kquant(t)) throw std::invalid_argument(std::string("moeflow: kquant_rows: ") + dtype_name(t));
  if (kquant_rows_simd(t, rows, R, cols, x, out)) return;
  const size_t bs = static_cast<size_t>(dtype_info(t).type_size);
  alignas(64) float w[256];
  for (int r = 0; r < R; ++r) {
    float acc = 0.0f;
    for (int64_t b = 0; b < cols / 256; ++b) {
      if (pf && r == 0) __builtin_prefetch(pf + static_cast<size_t>(b) * bs * static_cast<size_t>(R), 0, 0);
      kquant_dequant(t, rows[r] + static_cast<size_t>(b) * bs, 1, w);
      acc += dot_block(w, x + 256 * b);
    }
    out[r] = acc;
  }
}

}  // namespace moeflow::cpu

#include "kernels/cpu/kquant_matvec.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cpu/dequant_avx2.h"
#include "kernels/cpu/kquant_vnni.h"
#include "kernels/cpu/q4_vnni.h"
#include "tensor/kquants.h"

namespace moeflow::cpu {

bool kquant_vnni_type(DType t) { return dtype_is_kquant(t) && q4_vnni_enabled(); }

void kquant_dequant(DType t, const uint8_t* blocks, int64_t nb, float* y) {
  if (q4_vnni_enabled() && kquant_avx512_dequant(t, blocks, nb, y)) return;
  if (dequant_avx2(t, blocks, nb * 256, y)) return;
  dequantize_row(t, blocks, y, nb * 256);
}

void kquant_pack_x(const int16_t* qx, const float* dx, int64_t cols, uint8_t* out) {
  kquant_vnni_pack_x(qx, dx, cols, out);
}

void kquant_pack_x8(const float* x, int64_t cols, uint8_t* out) { kquant_vnni_pack_x8(x, cols, out); }

namespace {
// One super-block of one row as f32, dotted with x in 8 partial sums (vectorisable).
float dot_block(const float* w, const float* x, int64_t n) {  // n a multiple of 8
  float s[8] = {};
  for (int64_t i = 0; i < n; i += 8)
    for (int k = 0; k < 8; ++k) s[k] += w[i + k] * x[i + k];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}
}  // namespace

void kquant_rows(DType t, const uint8_t* const* rows, int R, int64_t cols, const float* x, const uint8_t* packed,
                 bool x8, float* out, const uint8_t* pf) {
  if (packed && kquant_vnni_type(t)) {
    kquant_vnni_rows(t, rows, R, cols / 256, packed, x8, out, pf);
    return;
  }
  if (kquant_rows_simd(t, rows, R, cols, x, out, pf)) return;
  // The generic path: 256 columns at a time (whole blocks of every type here).
  const DTypeInfo& info = dtype_info(t);
  const size_t chunk_bytes = static_cast<size_t>(256 / info.block_size * info.type_size);
  alignas(64) float w[256];
  for (int r = 0; r < R; ++r) {
    float acc = 0.0f;
    for (int64_t c0 = 0, k = 0; c0 < cols; c0 += 256, ++k) {
      const int64_t n = std::min<int64_t>(256, cols - c0);
      if (pf && r == 0) __builtin_prefetch(pf + static_cast<size_t>(k) * chunk_bytes * static_cast<size_t>(R), 0, 0);
      const uint8_t* src = rows[r] + static_cast<size_t>(k) * chunk_bytes;
      if (dtype_is_kquant(t)) {
        kquant_dequant(t, src, 1, w);
      } else {
        dequantize_row(t, src, w, n);
      }
      acc += dot_block(w, x + c0, n);
    }
    out[r] = acc;
  }
}

}  // namespace moeflow::cpu

// Mat-vec and mat-mat for every weight dtype, compiled once per SIMD target by
// Highway's foreach_target and picked at run time (AVX2, AVX-512, ...).
//
// Strategy: a weight row (or a tile of kRowTile rows) is dequantised into an f32
// buffer that stays in L1, then multiplied with the activations using explicit
// Highway vectors. The dequantisation loops are plain C++ compiled with each
// target's instruction set enabled, so the compiler vectorises them per target.
// Decode (matvec) is bound by reading the weights once; prefill (matmul) reuses each
// dequantised tile across kTokTile tokens held in registers.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/matmul.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/matmul.h"

HWY_BEFORE_NAMESPACE();
namespace moeflow::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr int64_t kRowTile = 4;
constexpr int64_t kTokTile = 4;

inline float fp16_bits_to_f32(uint16_t h) {
  // Same result as moeflow::fp16_to_fp32 for every finite input; the scales of
  // quantised blocks are finite, and f16 tensors go through the same path.
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
  if (e == 0 || e == 31) return fp16_to_fp32(h);
  const uint32_t x = sign | ((e + 112) << 23) | (m << 13);
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// Dequantise one row of `cols` elements into dst (vectorised per target).
void DequantRow(DType wt, const uint8_t* src, float* HWY_RESTRICT dst, int64_t cols) {
  switch (wt) {
    case DType::F32:
      std::memcpy(dst, src, static_cast<size_t>(cols) * 4);
      return;
    case DType::F16: {
      const auto* s = reinterpret_cast<const uint16_t*>(src);
      const hn::ScalableTag<float> df;
      const hn::Rebind<hwy::float16_t, decltype(df)> dh;
      const int64_t N = static_cast<int64_t>(hn::Lanes(df));
      int64_t i = 0;
      for (; i + N <= cols; i += N)
        hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(s + i))), df, dst + i);
      for (; i < cols; ++i) dst[i] = fp16_to_fp32(s[i]);
      return;
    }
    case DType::BF16: {
      const auto* s = reinterpret_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < cols; ++i) {
        const uint32_t u = static_cast<uint32_t>(s[i]) << 16;
        std::memcpy(dst + i, &u, 4);
      }
      return;
    }
    case DType::Q8_0: {
      const auto* b = reinterpret_cast<const BlockQ8_0*>(src);
      for (int64_t k = 0; k < cols / 32; ++k) {
        const float d = fp16_bits_to_f32(b[k].d);
        float* o = dst + k * 32;
        for (int j = 0; j < 32; ++j) o[j] = d * static_cast<float>(b[k].qs[j]);
      }
      return;
    }
    case DType::Q4_0: {
      const auto* b = reinterpret_cast<const BlockQ4_0*>(src);
      for (int64_t k = 0; k < cols / 32; ++k) {
        const float d = fp16_bits_to_f32(b[k].d);
        float* o = dst + k * 32;
        for (int j = 0; j < 16; ++j) {
          o[j] = d * static_cast<float>(static_cast<int>(b[k].qs[j] & 0x0F) - 8);
          o[j + 16] = d * static_cast<float>(static_cast<int>(b[k].qs[j] >> 4) - 8);
        }
      }
      return;
    }
  }
}

// Highway 1.0 (Debian 12) has SumOfLanes, not ReduceSum.
template <class D, class V>
HWY_INLINE float Sum(D d, V v) { return hn::GetLane(hn::SumOfLanes(d, v)); }

float Dot(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  auto s0 = hn::Zero(d), s1 = hn::Zero(d), s2 = hn::Zero(d), s3 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 4 * N <= n; i += 4 * N) {
    s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
    s1 = hn::MulAdd(hn::LoadU(d, a + i + N), hn::LoadU(d, b + i + N), s1);
    s2 = hn::MulAdd(hn::LoadU(d, a + i + 2 * N), hn::LoadU(d, b + i + 2 * N), s2);
    s3 = hn::MulAdd(hn::LoadU(d, a + i + 3 * N), hn::LoadU(d, b + i + 3 * N), s3);
  }
  for (; i + N <= n; i += N) s0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), s0);
  float sum = Sum(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3)));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void MatvecRows(DType wt, const uint8_t* W, int64_t r0, int64_t r1, int64_t cols, const float* x, float* y) {
  const size_t rb = row_bytes(wt, cols);
  if (wt == DType::F32) {
    for (int64_t r = r0; r < r1; ++r) y[r] = Dot(reinterpret_cast<const float*>(W + rb * r), x, cols);
    return;
  }
  std::vector<float> buf(static_cast<size_t>(cols));
  for (int64_t r = r0; r < r1; ++r) {
    DequantRow(wt, W + rb * static_cast<size_t>(r), buf.data(), cols);
    y[r] = Dot(buf.data(), x, cols);
  }
}

// Y[t][r] for rows [r0, r1) and all tokens: kRowTile rows x kTokTile tokens per inner
// kernel, 16 independent accumulators.
void MatmulRows(DType wt, const uint8_t* W, int64_t r0, int64_t r1, int64_t cols, const float* X,
                int64_t n_tok, float* Y, int64_t y_stride) {
  const hn::ScalableTag<float> d;
  const int64_t N = static_cast<int64_t>(hn::Lanes(d));
  const size_t rb = row_bytes(wt, cols);
  std::vector<float> tile(static_cast<size_t>(kRowTile * cols));
  for (int64_t r = r0; r < r1; r += kRowTile) {
    const int64_t nr = std::min(kRowTile, r1 - r);
    for (int64_t i = 0; i < nr; ++i) DequantRow(wt, W + rb * static_cast<size_t>(r + i), tile.data() + i * cols, cols);
    int64_t t = 0;
    if (nr == kRowTile && cols % N == 0) {
      const float* w0 = tile.data();
      const float* w1 = w0 + cols;
      const float* w2 = w1 + cols;
      const float* w3 = w2 + cols;
      for (; t + kTokTile <= n_tok; t += kTokTile) {
        const float* x0 = X + t * cols;
        const float* x1 = x0 + cols;
        const float* x2 = x1 + cols;
        const float* x3 = x2 + cols;
        auto a00 = hn::Zero(d), a01 = hn::Zero(d), a02 = hn::Zero(d), a03 = hn::Zero(d);
        auto a10 = hn::Zero(d), a11 = hn::Zero(d), a12 = hn::Zero(d), a13 = hn::Zero(d);
        auto a20 = hn::Zero(d), a21 = hn::Zero(d), a22 = hn::Zero(d), a23 = hn::Zero(d);
        auto a30 = hn::Zero(d), a31 = hn::Zero(d), a32 = hn::Zero(d), a33 = hn::Zero(d);
        for (int64_t c = 0; c < cols; c += N) {
          const auto v0 = hn::LoadU(d, x0 + c), v1 = hn::LoadU(d, x1 + c);
          const auto v2 = hn::LoadU(d, x2 + c), v3 = hn::LoadU(d, x3 + c);
          auto w = hn::LoadU(d, w0 + c);
          a00 = hn::MulAdd(w, v0, a00); a01 = hn::MulAdd(w, v1, a01); a02 = hn::MulAdd(w, v2, a02); a03 = hn::MulAdd(w, v3, a03);
          w = hn::LoadU(d, w1 + c);
          a10 = hn::MulAdd(w, v0, a10); a11 = hn::MulAdd(w, v1, a11); a12 = hn::MulAdd(w, v2, a12); a13 = hn::MulAdd(w, v3, a13);
          w = hn::LoadU(d, w2 + c);
          a20 = hn::MulAdd(w, v0, a20); a21 = hn::MulAdd(w, v1, a21); a22 = hn::MulAdd(w, v2, a22); a23 = hn::MulAdd(w, v3, a23);
          w = hn::LoadU(d, w3 + c);
          a30 = hn::MulAdd(w, v0, a30); a31 = hn::MulAdd(w, v1, a31); a32 = hn::MulAdd(w, v2, a32); a33 = hn::MulAdd(w, v3, a33);
        }
        float* y0 = Y + t * y_stride + r;
        float* y1 = y0 + y_stride;
        float* y2 = y1 + y_stride;
        float* y3 = y2 + y_stride;
        y0[0] = Sum(d, a00); y1[0] = Sum(d, a01); y2[0] = Sum(d, a02); y3[0] = Sum(d, a03);
        y0[1] = Sum(d, a10); y1[1] = Sum(d, a11); y2[1] = Sum(d, a12); y3[1] = Sum(d, a13);
        y0[2] = Sum(d, a20); y1[2] = Sum(d, a21); y2[2] = Sum(d, a22); y3[2] = Sum(d, a23);
        y0[3] = Sum(d, a30); y1[3] = Sum(d, a31); y2[3] = Sum(d, a32); y3[3] = Sum(d, a33);
      }
    }
    for (; t < n_tok; ++t)
      for (int64_t i = 0; i < nr; ++i) Y[t * y_stride + r + i] = Dot(tile.data() + i * cols, X + t * cols, cols);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace moeflow::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moeflow::cpu {

HWY_EXPORT(MatvecRows);
HWY_EXPORT(MatmulRows);

void matvec(DType wt, const void* W, int64_t rows, int64_t cols, const float* x, float* y, ThreadPool* pool) {
  const auto* w = static_cast<const uint8_t*>(W);
  auto job = [&](int64_t r0, int64_t r1, int) { HWY_DYNAMIC_DISPATCH(MatvecRows)(wt, w, r0, r1, cols, x, y); };
  // Below ~16K weights per thread the fork/join costs more than it saves.
  if (pool && rows * cols >= (1 << 14)) pool->parallel_for(rows, job, 4);
  else job(0, rows, 0);
}

void matmul(DType wt, const void* W, int64_t rows, int64_t cols, const float* X, int64_t n_tok, float* Y,
            ThreadPool* pool) {
  const auto* w = static_cast<const uint8_t*>(W);
  auto job = [&](int64_t r0, int64_t r1, int) {
    HWY_DYNAMIC_DISPATCH(MatmulRows)(wt, w, r0, r1, cols, X, n_tok, Y, rows);
  };
  if (pool && rows * cols * n_tok >= (1 << 14)) pool->parallel_for(rows, job, 4);
  else job(0, rows, 0);
}

void matvec_reference(DType wt, const void* W, int64_t rows, int64_t cols, const float* x, float* y) {
  const auto* w = static_cast<const uint8_t*>(W);
  const size_t rb = row_bytes(wt, cols);
  std::vector<float> buf(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    dequantize_row(wt, w + rb * static_cast<size_t>(r), buf.data(), cols);
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += static_cast<double>(buf[c]) * x[c];
    y[r] = static_cast<float>(s);
  }
}

}  // namespace moeflow::cpu
#endif

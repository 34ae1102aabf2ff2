// Mat-vec and mat-mat for every weight dtype, compiled once per SIMD target by
// Highway's foreach_target and picked at run time (AVX2, AVX-512, ...).
//
// matvec (decode; bound by reading the weights once): several rows at a time, each
// weight block converted to f32 in registers and FMA'd with the shared x vectors. For
// the quantised types the block is first dotted with x unscaled, then scaled once:
// acc += d * sum_j q_j x_j. q8_0 dots its int8 weights with x quantised to int16
// blocks in integer lanes (MvQ8Rows). matvec_batch runs several independent mat-vecs
// (a decode step's q/k/v, its experts' gate/up) under one fork/join.
//
// matmul (prefill): a tile of kRows rows x kKc columns is dequantised into a
// per-thread f32 scratch once, then multiplied with every token, kToks tokens at a
// time; the kRows x kToks accumulators live in registers, so each weight vector loaded
// from the scratch feeds kToks FMAs and each activation vector feeds kRows FMAs.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/matmul.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <thread>
#include <unordered_map>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/matmul.h"
#include "kernels/cpu/dequant_avx2.h"
#include "kernels/cpu/f16_table.h"
#include "kernels/cpu/int8_avx2.h"
#include "kernels/cpu/kquant_matvec.h"
#include "kernels/cpu/kquant_vnni.h"
#include "kernels/cpu/nl4_vnni.h"
#include "kernels/cpu/q4_vnni.h"
#include "kernels/cpu/row_token_tiles.h"
#include "kernels/cpu/work_ranges.h"
#include "kernels/cpu/rows_x4_vnni.h"
#include "tensor/rows_x4.h"

#ifndef MOEFLOW_MATMUL_ONCE
#define MOEFLOW_MATMUL_ONCE
namespace moeflow::cpu::detail {

inline float load_scalar(DType wt, const uint8_t* row, int64_t c) {
  switch (wt) {
    case DType::F32: {
      float f;
      std::memcpy(&f, row + 4 * c, 4);
      return f;
    }
    case DType::F16: {
      uint16_t h;
      std::memcpy(&h, row + 2 * c, 2);
      return half_to_float(h);
    }
    case DType::BF16: {
      uint16_t h;
      std::memcpy(&h, row + 2 * c, 2);
      return bf16_to_fp32(h);
    }
    default:
      return 0.0f;  // quantised rows are whole blocks, never a scalar tail
  }
}

}  // namespace moeflow::cpu::detail

namespace moeflow::cpu {
// A mat-vec's activation: f32, and for q8_0 weights (and q4_0 ones on the VNNI path)
// also quantised to int16 blocks (qx: 16-bit values, dx: one f32 scale per 32 values);
// for the VNNI kernels also packed as they read it (q4x for GGUF's q4_0 rows, rx4 for
// rows interleaved in fours; see q4_vnni.h, rows_x4_vnni.h). Null when not needed.
struct MvInput {
  const float* x;
  const int16_t* qx;
  const float* dx;
  const uint8_t* q4x;
  const uint8_t* rx4;
  const uint8_t* kq = nullptr;  // k-quant VNNI kernels' packing (kquant_matvec.h)
  bool rx4_int8 = false;        // rx4 holds int8 blocks (rows_x4_pack_x8)
  bool kq_int8 = false;         // kq holds int8 blocks (kquant_pack_x8)
  const uint8_t* nl4 = nullptr;  // IQ4_NL / IQ4_XS / MXFP4 kernel's int8 packing (nl4_vnni.h)
  const uint8_t* a8 = nullptr;   // the AVX2 int8 kernels' packing (int8_avx2.h)
};
}  // namespace moeflow::cpu
#endif

HWY_BEFORE_NAMESPACE();
namespace moeflow::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// 32 vector registers: 4x6 accumulators + 6 x + 1 w. (8x3 and 3x8 measured at half
// the speed on Zen 4: more concurrent row/token streams than L1 handles well.)
constexpr int kRows = 4;
constexpr int kToks = 6;
#else
// 16 vector registers: 4x3 accumulators + 3 x + 1 w (the w operand can come from
// memory). Measured on Zen 4 forced to AVX2: 4x3 66% of peak, 3x3 55%, 4x2 44%.
constexpr int kRows = 4;
constexpr int kToks = 3;
#endif
// Columns per dequantised tile (multiple of 32). 4 rows x 4096 f32 = 64 KiB lives in
// L2 and is reused by every token; results for later tiles are added into Y.
constexpr int64_t kKc = 4096;
static_assert(kRows == kRowsX4 && kKc % kRowsX4GroupCols == 0, "an interleaved tile is one quad and whole groups");
// Scratch row stride: padded so the tile's rows do not share L1 sets (4 KiB aliasing).
constexpr int64_t kWs = kKc + 16;
// matvec: rows decoded per pass. Each row is its own memory stream; measured on a
// 2-vCPU EPYC with weights far larger than the caches, q8_0 decoded 8 rows at a time
// ran at 8.7 GB/s and 4 at a time at 19 GB/s (the read bound is ~20 GB/s): too many
// interleaved short streams defeat the hardware prefetcher. Float rows use 4 rows x 2
// accumulators. (Storing the rows interleaved in fours, so that a group is one stream,
// was tried on the resident copy: in a synthetic DRAM test 12-20% faster, in the 330M
// model no faster for decode and 5-9% slower for prefill, so rows stay as GGUF has them.)
constexpr int kMvRowsQ = 4;
constexpr int kMvRowsF = 4;
// matvec: how many row groups ahead to prefetch.
constexpr int64_t kPrefetchGroups = 2;

HWY_INLINE float Sum(DF d, VF v) { return hn::GetLane(hn::SumOfLanes(d, v)); }

// Quantised mat-vecs prefetch the row group kPrefetchGroups ahead a little at every
// block step (the bytes the step consumes, 2-3 lines), rather than the whole group in
// one burst before it. Measured, 2 threads, q8_0, heap memory: 768x2048 matrices
// (rows of 2176 bytes: bursts of 136 prefetches) 43-46 -> 67-69 GB/s, 2048x768
// 61-65 -> 69-74 GB/s; presumably a long burst fills the core's outstanding-miss
// queue and the block loads wait behind it.
// Non-temporal: a decode step reads each weight once and more weight bytes than the
// caches hold, so kept lines would only push out what is reused (the KV cache, the
// activations, the other thread's data). 330M model decode, 9 A/B pairs: q8_0 median
// 399 -> 431 tok/s, q4_0 within noise (+1%).
HWY_INLINE void PrefetchStep(const uint8_t* p, size_t bytes) {
  for (size_t off = 0; off < bytes + 63; off += 64) __builtin_prefetch(p + off, 0, 0);
}

// ---------------------------------------------------------------------------------
// Block decoders: 32 elements of a quantised block as f32 vectors, without the scale.

// Lanes [j, j+N) of a q8_0 block.
HWY_INLINE VF Q8Lanes(DF df, const int8_t* qs) {
  const hn::Rebind<int8_t, DF> d8;
  const hn::RebindToSigned<DF> di;
  return hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, qs)));
}

// Nibbles of qs[j..j+N): lo -> elements j.., hi -> elements 16+j.., both minus 8.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
// 16 lanes: one permute maps a nibble straight to the float nibble - 8.
HWY_INLINE void Q4Lanes(DF df, const uint8_t* qs, VF& lo, VF& hi) {
  const hn::Rebind<uint8_t, DF> d8;
  const hn::RebindToSigned<DF> di;
  HWY_ALIGN static constexpr float kVals[16] = {-8, -7, -6, -5, -4, -3, -2, -1,
                                                0,  1,  2,  3,  4,  5,  6,  7};
  const VF table = hn::Load(df, kVals);
  const auto v = hn::PromoteTo(di, hn::LoadU(d8, qs));
  lo = hn::TableLookupLanes(table, hn::IndicesFromVec(df, hn::And(v, hn::Set(di, 0x0f))));
  hi = hn::TableLookupLanes(table, hn::IndicesFromVec(df, hn::ShiftRight<4>(v)));
}
#else
HWY_INLINE void Q4Lanes(DF df, const uint8_t* qs, VF& lo, VF& hi) {
  const hn::Rebind<uint8_t, DF> d8;
  const hn::RebindToSigned<DF> di;
  const auto v = hn::PromoteTo(di, hn::LoadU(d8, qs));
  const auto k8 = hn::Set(di, 8);
  lo = hn::ConvertTo(df, hn::Sub(hn::And(v, hn::Set(di, 0x0f)), k8));
  hi = hn::ConvertTo(df, hn::Sub(hn::ShiftRight<4>(v), k8));
}
#endif

// Dequantise columns [c0, c0+n) of one row into dst (c0, n multiples of 32 for the
// quantised types).
void DequantSpan(DType wt, const uint8_t* row, int64_t c0, int64_t n, float* HWY_RESTRICT dst) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const float* HWY_RESTRICT f16t = detail::f16_table();
  switch (wt) {
    case DType::F32:
      std::memcpy(dst, row + 4 * c0, static_cast<size_t>(n) * 4);
      return;
    case DType::F16: {
      const hn::Rebind<hwy::float16_t, DF> dh;
      const auto* s = reinterpret_cast<const hwy::float16_t*>(row) + c0;
      int64_t i = 0;
      for (; i + N <= n; i += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(dh, s + i)), df, dst + i);
      for (; i < n; ++i) dst[i] = detail::load_scalar(wt, row, c0 + i);
      return;
    }
    case DType::BF16: {
      const hn::Rebind<hwy::bfloat16_t, DF> db;
      const auto* s = reinterpret_cast<const hwy::bfloat16_t*>(row) + c0;
      int64_t i = 0;
      for (; i + N <= n; i += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(db, s + i)), df, dst + i);
      for (; i < n; ++i) dst[i] = detail::load_scalar(wt, row, c0 + i);
      return;
    }
    case DType::Q8_0: {
      const auto* b = reinterpret_cast<const BlockQ8_0*>(row) + c0 / 32;
      for (int64_t k = 0; k < n / 32; ++k) {
        const VF d = hn::Set(df, f16t[b[k].d]);
        for (int64_t j = 0; j < 32; j += N)
          hn::StoreU(hn::Mul(d, Q8Lanes(df, b[k].qs + j)), df, dst + 32 * k + j);
      }
      return;
    }
    case DType::Q4_0: {
      const auto* b = reinterpret_cast<const BlockQ4_0*>(row) + c0 / 32;
      for (int64_t k = 0; k < n / 32; ++k) {
        const VF d = hn::Set(df, f16t[b[k].d]);
        for (int64_t j = 0; j < 16; j += N) {
          VF lo, hi;
          Q4Lanes(df, b[k].qs + j, lo, hi);
          hn::StoreU(hn::Mul(d, lo), df, dst + 32 * k + j);
          hn::StoreU(hn::Mul(d, hi), df, dst + 32 * k + 16 + j);
        }
      }
      return;
    }
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:  // c0, n multiples of 256 (kKc is)
      kquant_dequant(wt, row + c0 / 256 * dtype_info(wt).type_size, n / 256, dst);
      return;
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::IQ4_NL:
    case DType::IQ4_XS:
    case DType::MXFP4:
    case DType::IQ2_XXS:
    case DType::IQ2_XS:
    case DType::IQ2_S:
    case DType::IQ3_XXS:
    case DType::IQ3_S:
    case DType::IQ1_S:
    case DType::IQ1_M: {  // c0, n multiples of the block (kKc is of 256)
      const uint8_t* blocks = row + c0 / dtype_info(wt).block_size * dtype_info(wt).type_size;
      if (!dequant_avx2(wt, blocks, n, dst)) dequantize_row(wt, blocks, dst, n);
      return;
    }
  }
}

// ---------------------------------------------------------------------------------
// matvec kernels: R rows, weights decoded in registers.

// Float weight types (f32/f16/bf16).
template <DType WT>
HWY_INLINE VF LoadFloatW(DF df, const uint8_t* row, int64_t c) {
  if constexpr (WT == DType::F32) {
    return hn::LoadU(df, reinterpret_cast<const float*>(row) + c);
  } else if constexpr (WT == DType::F16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(row) + c));
  } else {
    const hn::Rebind<hwy::bfloat16_t, DF> db;
    return hn::PromoteTo(df, hn::LoadU(db, reinterpret_cast<const hwy::bfloat16_t*>(row) + c));
  }
}

template <DType WT, int R>
HWY_INLINE void MvFloatRows(const uint8_t* const* rows, int64_t cols,
                            const float* HWY_RESTRICT x, float* out) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  VF acc0[R], acc1[R];
  for (int r = 0; r < R; ++r) acc0[r] = acc1[r] = hn::Zero(df);
  int64_t c = 0;
  for (; c + 2 * N <= cols; c += 2 * N) {
    const VF x0 = hn::LoadU(df, x + c), x1 = hn::LoadU(df, x + c + N);
    for (int r = 0; r < R; ++r) {
      acc0[r] = hn::MulAdd(LoadFloatW<WT>(df, rows[r], c), x0, acc0[r]);
      acc1[r] = hn::MulAdd(LoadFloatW<WT>(df, rows[r], c + N), x1, acc1[r]);
    }
  }
  for (; c + N <= cols; c += N) {
    const VF x0 = hn::LoadU(df, x + c);
    for (int r = 0; r < R; ++r) acc0[r] = hn::MulAdd(LoadFloatW<WT>(df, rows[r], c), x0, acc0[r]);
  }
  for (int r = 0; r < R; ++r) {
    float s = Sum(df, hn::Add(acc0[r], acc1[r]));
    for (int64_t k = c; k < cols; ++k) s += detail::load_scalar(WT, rows[r], k) * x[k];
    out[r] = s;
  }
}

// q8_0 weights against the activations quantised to 16 bits per 32-element block
// (QuantizeX16): per block one widening multiply-add of int8 by int16 into int32
// lanes, one conversion and two float ops, instead of converting every weight to
// f32. The activation's rounding error is 2^-16 of its block's largest magnitude,
// two orders of magnitude below q8_0's own weight rounding: products stay within
// ~2e-5 (relative) of the f32 product, the model's logits within 5e-5 of the
// reference (tests/unit/matmul_test.cpp, reference_test.cpp).
void QuantizeX16(const float* HWY_RESTRICT x, int64_t cols, int16_t* HWY_RESTRICT qx,
                 float* HWY_RESTRICT dx) {
  const DF df;
  const hn::Rebind<int16_t, DF> d16;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t b = 0; b < cols / 32; ++b) {
    const float* xb = x + 32 * b;
    VF amax = hn::Zero(df);
    for (int64_t j = 0; j < 32; j += N) amax = hn::Max(amax, hn::Abs(hn::LoadU(df, xb + j)));
    const float m = hn::GetLane(hn::MaxOfLanes(df, amax));
    const float d = m / 32767.0f;
    dx[b] = d;
    const VF inv = hn::Set(df, d > 0.0f ? 1.0f / d : 0.0f);
    for (int64_t j = 0; j < 32; j += N) {
      // Round to nearest; |x * inv| <= 32767 (+ rounding), so the narrowing saturates
      // at most by one step on the largest element.
      const auto q = hn::NearestInt(hn::Mul(hn::LoadU(df, xb + j), inv));
      hn::StoreU(hn::DemoteTo(d16, q), d16, qx + 32 * b + j);
    }
  }
}

#if HWY_TARGET == HWY_SCALAR
// One lane: no vector of twice the lanes to widen into; the same arithmetic in scalars.
template <int R>
HWY_INLINE void MvQ8Rows(const uint8_t* const* rows, int64_t cols, const MvInput& in, float* out,
                         const uint8_t* pf) {
  const float* HWY_RESTRICT f16t = detail::f16_table();
  for (int r = 0; r < R; ++r) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(rows[r]);
    float acc = 0.0f;
    for (int64_t k = 0; k < cols / 32; ++k) {
      int32_t s = 0;
      for (int j = 0; j < 32; ++j) s += int32_t{b[k].qs[j]} * int32_t{in.qx[32 * k + j]};
      acc += f16t[b[k].d] * (static_cast<float>(s) * in.dx[k]);
    }
    out[r] = acc;
  }
}
#else
// One q8_0 block against one token's int16 block, V vectors each (w: the weights
// widened to int16): the integer dot product in int32 lanes, to float, times the
// token's scale dx, accumulated by the weights' scale d. MvQ8Rows and MvQ8RowTokens
// both take it, so a token's floats are the same alone and in a batched step.
template <int64_t V, class VI16>
HWY_INLINE VF Q8Block(const VI16* w, const VI16* x, VF dx, VF d, VF acc) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  auto s1 = hn::Zero(di);
  auto s0 = hn::ReorderWidenMulAccumulate(di, w[0], x[0], hn::Zero(di), s1);
  for (int64_t j = 1; j < V; ++j) s0 = hn::ReorderWidenMulAccumulate(di, w[j], x[j], s0, s1);
  return hn::MulAdd(d, hn::Mul(hn::ConvertTo(df, hn::Add(s0, s1)), dx), acc);
}

template <int R>
HWY_INLINE void MvQ8Rows(const uint8_t* const* rows, int64_t cols, const MvInput& in, float* out,
                         const uint8_t* pf) {
  const DF df;
  const hn::Repartition<int16_t, DF> d16;  // twice the lanes of df
  const hn::Rebind<int8_t, decltype(d16)> d8;
  const float* HWY_RESTRICT f16t = detail::f16_table();
  constexpr int64_t N16 = static_cast<int64_t>(hn::MaxLanes(decltype(d16)()));
  static_assert(32 % N16 == 0 || N16 > 32, "block must be a whole number of vectors");
  constexpr int64_t V = N16 >= 32 ? 1 : 32 / N16;  // int16 vectors per block
  VF acc[R];
  for (int r = 0; r < R; ++r) acc[r] = hn::Zero(df);
  const BlockQ8_0* b[R];
  for (int r = 0; r < R; ++r) b[r] = reinterpret_cast<const BlockQ8_0*>(rows[r]);
  const int64_t nb = cols / 32;
  for (int64_t k = 0; k < nb; ++k) {
    if (pf) PrefetchStep(pf + k * R * static_cast<int64_t>(sizeof(BlockQ8_0)), R * sizeof(BlockQ8_0));
    hn::Vec<decltype(d16)> xv[V];
    for (int64_t j = 0; j < V; ++j) xv[j] = hn::LoadU(d16, in.qx + 32 * k + j * N16);
    const VF dxv = hn::Set(df, in.dx[k]);
    for (int r = 0; r < R; ++r) {
      const BlockQ8_0& blk = b[r][k];
      hn::Vec<decltype(d16)> w[V];
      for (int64_t j = 0; j < V; ++j) w[j] = hn::PromoteTo(d16, hn::LoadU(d8, blk.qs + j * N16));
      acc[r] = Q8Block<V>(w, xv, dxv, hn::Set(df, f16t[blk.d]), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = Sum(df, acc[r]);
}
#endif

// q8_0 rows in GGUF's layout against up to four tokens' int16 blocks: each block's
// weights widened to int16 once for all the tokens (a batched step's tokens on one
// matrix), then per token the block step of its own mat-vec (Q8Block).
template <int T>
HWY_INLINE void MvQ8RowTokens(const uint8_t* row, int64_t cols, const MvInput* const* in, float* out,
                              const uint8_t* pf) {
#if HWY_TARGET == HWY_SCALAR
  for (int t = 0; t < T; ++t) MvQ8Rows<1>(&row, cols, *in[t], out + t, t == 0 ? pf : nullptr);
#else
  const DF df;
  const hn::Repartition<int16_t, DF> d16;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  const float* HWY_RESTRICT f16t = detail::f16_table();
  constexpr int64_t N16 = static_cast<int64_t>(hn::MaxLanes(decltype(d16)()));
  constexpr int64_t V = N16 >= 32 ? 1 : 32 / N16;
  const auto* blk = reinterpret_cast<const BlockQ8_0*>(row);
  VF acc[T];
  for (int t = 0; t < T; ++t) acc[t] = hn::Zero(df);
  for (int64_t k = 0; k < cols / 32; ++k) {
    if (pf) PrefetchStep(pf + k * static_cast<int64_t>(sizeof(BlockQ8_0)), sizeof(BlockQ8_0));
    hn::Vec<decltype(d16)> w[V];
    for (int64_t j = 0; j < V; ++j) w[j] = hn::PromoteTo(d16, hn::LoadU(d8, blk[k].qs + j * N16));
    const VF d = hn::Set(df, f16t[blk[k].d]);
    for (int t = 0; t < T; ++t) {
      hn::Vec<decltype(d16)> x[V];
      for (int64_t j = 0; j < V; ++j) x[j] = hn::LoadU(d16, in[t]->qx + 32 * k + j * N16);
      acc[t] = Q8Block<V>(w, x, hn::Set(df, in[t]->dx[k]), d, acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) out[t] = Sum(df, acc[t]);
#endif
}

// Rows [r0, r1) of a q8_0 matrix (GGUF's layout) against n_tok tokens' int16 blocks:
// row r's product with token t into outs[t][r], in tiles of four rows by four tokens
// (for_row_tokens).
void Q8MatvecTokens(const uint8_t* W, size_t rb, int64_t r0, int64_t r1, int64_t cols, const MvInput* in, int n_tok,
                    float* const* outs, const uint8_t* pf_end) {
  for_row_tokens(W, rb, r0, r1, n_tok, outs, pf_end, [&](auto T, const uint8_t* row, int t0, float* y, const uint8_t* pf) {
    const MvInput* xs[kTileTokens];
    for (int k = 0; k < decltype(T)::value; ++k) xs[k] = in + t0 + k;
    MvQ8RowTokens<decltype(T)::value>(row, cols, xs, y, pf);
  });
}

template <int R>
HWY_INLINE void MvQ4Rows(const uint8_t* const* rows, int64_t cols, const MvInput& in, float* out,
                         const uint8_t* pf) {
  const DF df;
  const float* HWY_RESTRICT f16t = detail::f16_table();
  const float* HWY_RESTRICT x = in.x;
  constexpr int64_t N = static_cast<int64_t>(hn::MaxLanes(DF()));
  constexpr int64_t V = (16 + N - 1) / N;  // vectors per half block
  static_assert(16 % N == 0 || N == 32, "unsupported vector length");
  const int64_t nb = cols / 32;
  // The VNNI kernel takes the whole groups of four blocks; this loop the rest.
  int64_t k = 0;
  float head[R] = {};
  if (in.q4x) {
    const int64_t groups = cols / kQ4VnniGroupCols;
    q4_vnni_rows<R>(rows, groups, in.q4x, head, pf);
    k = groups * (kQ4VnniGroupCols / 32);
  }
  VF acc[R];
  for (int r = 0; r < R; ++r) acc[r] = hn::Zero(df);
  const BlockQ4_0* b[R];
  for (int r = 0; r < R; ++r) b[r] = reinterpret_cast<const BlockQ4_0*>(rows[r]);
  for (; k < nb; ++k) {
    if (pf) PrefetchStep(pf + k * R * static_cast<int64_t>(sizeof(BlockQ4_0)), R * sizeof(BlockQ4_0));
    VF xlo[V], xhi[V];
    for (int64_t j = 0; j < V; ++j) {
      xlo[j] = hn::LoadU(df, x + 32 * k + j * N);
      xhi[j] = hn::LoadU(df, x + 32 * k + 16 + j * N);
    }
    for (int r = 0; r < R; ++r) {
      const BlockQ4_0& blk = b[r][k];
      VF lo, hi;
      Q4Lanes(df, blk.qs, lo, hi);
      VF s = hn::MulAdd(hi, xhi[0], hn::Mul(lo, xlo[0]));
      for (int64_t j = 1; j < V; ++j) {
        Q4Lanes(df, blk.qs + j * N, lo, hi);
        s = hn::MulAdd(lo, xlo[j], s);
        s = hn::MulAdd(hi, xhi[j], s);
      }
      acc[r] = hn::MulAdd(hn::Set(df, f16t[blk.d]), s, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = head[r] + Sum(df, acc[r]);
}

template <int R>
HWY_INLINE void MvRows(DType wt, const uint8_t* const* rows, int64_t cols, const MvInput& in,
                       float* out, const uint8_t* pf) {
  if (in.a8) {  // the AVX2 int8 kernels (int8_avx2_type)
    int8_avx2_rows(wt, rows, R, cols, in.a8, out, pf);
    return;
  }
  switch (wt) {
    case DType::Q8_0: MvQ8Rows<R>(rows, cols, in, out, pf); return;
    case DType::Q4_0: MvQ4Rows<R>(rows, cols, in, out, pf); return;
    case DType::F32: MvFloatRows<DType::F32, R>(rows, cols, in.x, out); return;
    case DType::F16: MvFloatRows<DType::F16, R>(rows, cols, in.x, out); return;
    case DType::BF16: MvFloatRows<DType::BF16, R>(rows, cols, in.x, out); return;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::IQ4_NL:
    case DType::IQ4_XS:
    case DType::MXFP4:
    case DType::IQ2_XXS:
    case DType::IQ2_XS:
    case DType::IQ2_S:
    case DType::IQ3_XXS:
    case DType::IQ3_S:
    case DType::IQ1_S:
    case DType::IQ1_M:
      if (in.nl4) {
        nl4_vnni_rows(wt, rows, R, cols, in.nl4, out, pf);
        return;
      }
      kquant_rows(wt, rows, R, cols, in.x, in.kq, in.kq_int8, out, pf);
      return;
  }
  throw std::invalid_argument("moeflow: MvRows: unknown dtype");
}

// Rows [r0, r1) of a matrix interleaved in fours (r0, r1 multiples of 4): the VNNI
// kernel when the activation was packed for it; else (VNNI switched off after the
// weights were repacked) each quad's rows rebuilt in GGUF's layout for the Highway
// kernel of the file type.
void MatvecQuadsX4(DType wt, const uint8_t* W, int64_t r0, int64_t r1, int64_t pf_end, int64_t cols,
                   const MvInput& x, float* y) {
  const size_t qb = rows_x4_quad_bytes(wt, cols);
  if (x.rx4) {
    (x.rx4_int8 ? rows_x4_quads8 : rows_x4_quads)(wt, W + qb * static_cast<size_t>(r0 / kRowsX4), (r1 - r0) / kRowsX4,
                                                  cols, x.rx4, y + r0, W + qb * static_cast<size_t>(pf_end / kRowsX4));
    return;
  }
  const DType ft = wt;
  const size_t rb = row_bytes(ft, cols);
  thread_local std::vector<uint8_t> plain;
  plain.resize(kRowsX4 * rb);
  const uint8_t* rows[kRowsX4];
  for (int64_t r = r0; r < r1; r += kRowsX4) {
    for (int i = 0; i < kRowsX4; ++i) {
      rows[i] = plain.data() + i * rb;
      rows_x4_row_blocks(wt, W, cols, r + i, 0, cols / dtype_info(wt).block_size, plain.data() + i * rb);
    }
    MvRows<kRowsX4>(ft, rows, cols, x, y + r, nullptr);
  }
}

// Rows [r0, r1); the prefetch may read ahead up to row pf_end (>= r1).
template <int R>
void MatvecRowsR(DType wt, const uint8_t* W, size_t rb, int64_t r0, int64_t r1, int64_t pf_end, int64_t cols,
                 const MvInput& x, float* y) {
  int64_t r = r0;
  const uint8_t* rows[R];
  // The R rows of a group are read interleaved, block by block: R short streams
  // (a q8_0 row of 4096 weights is 68 lines) that end soon after the hardware
  // prefetcher has caught on. Prefetching the group kPrefetchGroups ahead as one
  // linear range keeps the next rows on their way.
  const uint8_t* const end = W + rb * static_cast<size_t>(pf_end);
  for (; r + R <= r1; r += R) {
    const uint8_t* ahead = W + rb * static_cast<size_t>(r + kPrefetchGroups * R);
    // Quantised kernels spread this prefetch over their block loop (PrefetchStep);
    // float rows take it in one burst here.
    const bool spread = dtype_is_quantized(wt);
    if (!spread)
      for (size_t off = 0; off < rb * R && ahead + off < end; off += 64) __builtin_prefetch(ahead + off, 0, 3);
    for (int i = 0; i < R; ++i) rows[i] = W + rb * static_cast<size_t>(r + i);
    MvRows<R>(wt, rows, cols, x, y + r, spread && ahead < end ? ahead : nullptr);
  }
  for (; r < r1; ++r) {
    rows[0] = W + rb * static_cast<size_t>(r);
    MvRows<1>(wt, rows, cols, x, y + r, nullptr);
  }
}

void MatvecRows(DType wt, RowLayout layout, const uint8_t* W, int64_t r0, int64_t r1, int64_t pf_end, int64_t cols,
                const MvInput& x, float* y) {
  const size_t rb = row_bytes(wt, cols);
  if (layout == RowLayout::rows_x4) {
    MatvecQuadsX4(wt, W, r0, r1, pf_end, cols, x, y);
  } else if (dtype_is_quantized(wt)) {
    MatvecRowsR<kMvRowsQ>(wt, W, rb, r0, r1, pf_end, cols, x, y);
  } else {
    MatvecRowsR<kMvRowsF>(wt, W, rb, r0, r1, pf_end, cols, x, y);
  }
}

// matmul micro-kernel: R rows (f32, row stride ws) x T tokens (row stride xs) over kc
// columns. Writes (or adds, when `add`) the R x T results to y[t * ys + r].
template <int R, int T>
HWY_NOINLINE void TileKernel(const float* HWY_RESTRICT w, int64_t ws,
                             const float* HWY_RESTRICT x, int64_t xs, int64_t kc,
                             float* HWY_RESTRICT y, int64_t ys, bool add) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  VF acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = hn::Zero(df);
  int64_t k = 0;
  for (; k + N <= kc; k += N) {
    VF xv[T];
    for (int t = 0; t < T; ++t) xv[t] = hn::LoadU(df, x + t * xs + k);
    for (int r = 0; r < R; ++r) {
      const VF wv = hn::LoadU(df, w + r * ws + k);
      for (int t = 0; t < T; ++t) acc[r][t] = hn::MulAdd(wv, xv[t], acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      float s = Sum(df, acc[r][t]);
      for (int64_t j = k; j < kc; ++j) s += w[r * ws + j] * x[t * xs + j];
      float& o = y[t * ys + r];
      o = add ? o + s : s;
    }
  }
}

// The last n_tok % kToks tokens: one kernel call with T = rest.
template <int R, int T>
HWY_INLINE void TileRest(int64_t rest, const float* w, int64_t ws, const float* x, int64_t xs,
                         int64_t kc, float* y, int64_t ys, bool add) {
  if constexpr (T >= 1) {
    if (rest == T) {
      TileKernel<R, T>(w, ws, x, xs, kc, y, ys, add);
    } else {
      TileRest<R, T - 1>(rest, w, ws, x, xs, kc, y, ys, add);
    }
  }
}

template <int R>
HWY_INLINE void TileTokens(const float* w, int64_t ws, const float* x, int64_t xs, int64_t kc,
                           int64_t n_tok, float* y, int64_t ys, bool add) {
  int64_t t = 0;
  for (; t + kToks <= n_tok; t += kToks)
    TileKernel<R, kToks>(w, ws, x + t * xs, xs, kc, y + t * ys, ys, add);
  if (t < n_tok) TileRest<R, kToks - 1>(n_tok - t, w, ws, x + t * xs, xs, kc, y + t * ys, ys, add);
}

void MatmulRows(DType wt, RowLayout layout, const uint8_t* W, int64_t r0, int64_t r1, int64_t cols,
                const float* X, int64_t n_tok, float* Y, int64_t ldy) {
  const size_t rb = row_bytes(wt, cols);
  // Every dtype (f32 too: a contiguous, padded tile beats striding through W) goes
  // through the per-thread scratch tile.
  thread_local std::vector<float> scratch;
  if (scratch.size() < static_cast<size_t>(kRows * kWs)) {
    scratch.resize(static_cast<size_t>(kRows * kWs));
  }
  float* tile = scratch.data();
  for (int64_t r = r0; r < r1; r += kRows) {
    const int64_t nr = std::min<int64_t>(kRows, r1 - r);
    for (int64_t c0 = 0; c0 < cols; c0 += kKc) {
      const int64_t kc = std::min<int64_t>(kKc, cols - c0);
      if (layout == RowLayout::rows_x4) {  // a tile is one quad (kRows == 4, r a multiple of 4)
        rows_x4_dequant_quad(wt, W + rb * static_cast<size_t>(r), cols, c0 / kRowsX4GroupCols, kc / kRowsX4GroupCols,
                             tile, kWs);
      } else {
        for (int64_t i = 0; i < nr; ++i) DequantSpan(wt, W + rb * static_cast<size_t>(r + i), c0, kc, tile + i * kWs);
      }
      const bool add = c0 > 0;
      if (nr == kRows) {
        TileTokens<kRows>(tile, kWs, X + c0, cols, kc, n_tok, Y + r, ldy, add);
      } else {
        for (int64_t i = 0; i < nr; ++i)
          TileTokens<1>(tile + i * kWs, kWs, X + c0, cols, kc, n_tok, Y + r + i, ldy, add);
      }
    }
  }
}

int64_t RowTile() { return kRows; }

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace moeflow::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moeflow::cpu {

HWY_EXPORT(MatvecRows);
HWY_EXPORT(Q8MatvecTokens);
HWY_EXPORT(QuantizeX16);
HWY_EXPORT(MatmulRows);
HWY_EXPORT(RowTile);
HWY_EXPORT(TargetName);

namespace {
// Below this many multiply-adds the fork/join costs more than it saves.
constexpr int64_t kMinParallelWork = int64_t{1} << 15;

void check_shape(DType wt, RowLayout layout, int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0) throw std::invalid_argument("moeflow: negative matrix shape");
  (void)row_bytes(wt, cols);  // throws if cols is not a whole number of blocks
  if (layout == RowLayout::rows_x4 && !rows_x4_supports(wt))
    throw std::invalid_argument(std::string("moeflow: ") + dtype_name(wt) + " rows cannot be interleaved");
  if (layout == RowLayout::rows_x4 && rows > 0 && !rows_x4_fits(rows, cols))
    throw std::invalid_argument(std::string("moeflow: an interleaved ") + dtype_name(wt) + " matrix of " + std::to_string(rows) +
                                " x " + std::to_string(cols) + " (needs rows % 4 == 0 and cols % 128 == 0)");
}

// Interleaved k-quant rows have int8 kernels only (rows_x4_int8_only).
void check_activation(const MatvecJob& j) {
  if (j.layout == RowLayout::rows_x4 && rows_x4_int8_only(j.dtype) && j.x && !j.x_int8 && q4_vnni_enabled())
    throw std::invalid_argument(std::string("moeflow: interleaved ") + dtype_name(j.dtype) +
                                " rows multiply int8 activations only (MatvecJob::x_int8)");
}

// What the mat-vec kernels read of a job's activation besides x: for interleaved rows
// and k-quants on an int8 activation (MatvecJob::x_int8) its int8 blocks, packed from
// the floats; else int16 blocks for q8_0 weights (q4_0 ones too when the VNNI kernel
// runs) and for every VNNI kernel, packed as that kernel reads it. Without the VNNI
// kernels, the quantised types int8_avx2_type names take the AVX2 int8 ones.
bool wants_int8_avx2(const MatvecJob& j) { return j.x && j.x_int8 && int8_avx2_type(j.dtype, j.layout); }
bool wants_int8(const MatvecJob& j) {
  return (j.x && j.x_int8 && q4_vnni_enabled() &&
          (j.layout == RowLayout::rows_x4 || kquant_vnni_type(j.dtype) || nl4_vnni_type(j.dtype))) ||
         wants_int8_avx2(j);
}
bool wants_int16(const MatvecJob& j) {
  const DType ft = j.dtype;
  return j.x && !wants_int8(j) && (ft == DType::Q8_0 || (q4_vnni_enabled() && ft == DType::Q4_0) || kquant_vnni_type(ft));
}
bool wants_packed(const MatvecJob& j) {
  return (j.x && q4_vnni_enabled() &&
          (j.dtype == DType::Q4_0 || j.layout == RowLayout::rows_x4 || kquant_vnni_type(j.dtype) || wants_int8(j))) ||
         wants_int8_avx2(j);
}
size_t packed_lines(const MatvecJob& j) {
  const size_t bytes = wants_int8_avx2(j)                                ? int8_avx2_x_bytes(j.dtype, j.cols)
                       : wants_int8(j) && j.layout == RowLayout::rows_x4 ? rows_x4_x8_bytes(j.cols)
                       : wants_int8(j) && nl4_vnni_type(j.dtype)           ? nl4_x8_bytes(j.cols)
                       : j.layout == RowLayout::rows_x4               ? rows_x4_x_bytes(j.cols)
                       : dtype_is_kquant(j.dtype)       ? kquant_x_bytes(j.cols)
                                                        : q4_vnni_x_bytes(j.cols);
  return (bytes + sizeof(CacheLine) - 1) / sizeof(CacheLine);
}
// The member of MvInput that j's int16-block packing goes to.
const uint8_t* MvInput::*packed_member(const MatvecJob& j) {
  return j.layout == RowLayout::rows_x4 ? &MvInput::rx4 : dtype_is_kquant(j.dtype) ? &MvInput::kq : &MvInput::q4x;
}
// Packs int16 blocks (qx, dx) into `packed` in the layout j's VNNI kernel reads.
void pack16(const MatvecJob& j, const int16_t* qx, const float* dx, uint8_t* packed) {
  if (dtype_is_kquant(j.dtype)) kquant_pack_x(qx, dx, j.cols, packed);
  else (j.layout == RowLayout::rows_x4 ? rows_x4_pack_x : q4_vnni_pack_x)(qx, dx, j.cols, packed);
}
// Quantises j.x to int8 blocks packed as j's kernel reads them (wants_int8(j)).
void pack8(const MatvecJob& j, uint8_t* packed) {
  if (wants_int8_avx2(j)) return int8_avx2_pack_x8(j.dtype, j.x, j.cols, packed);
  (j.layout == RowLayout::rows_x4 ? rows_x4_pack_x8 : nl4_vnni_type(j.dtype) ? nl4_pack_x8 : kquant_pack_x8)(
      j.x, j.cols, packed);
}
// Where an int8 packing goes in MvInput.
void set_int8(const MatvecJob& j, uint8_t* packed, MvInput& in) {
  if (wants_int8_avx2(j)) in.a8 = packed;
  else if (j.layout == RowLayout::rows_x4) (in.rx4 = packed, in.rx4_int8 = true);
  else if (nl4_vnni_type(j.dtype)) in.nl4 = packed;
  else (in.kq = packed, in.kq_int8 = true);
}
// Quantises j.x into qx / dx (j.cols and j.cols / 32 elements); packs it into packed
// when the kernel wants that; returns the kernels' view.
MvInput prepare_input(const MatvecJob& j, int16_t* qx, float* dx, uint8_t* packed) {
  MvInput in{j.x, nullptr, nullptr, nullptr, nullptr};
  if (wants_int8(j)) {
    pack8(j, packed);
    set_int8(j, packed, in);
    return in;
  }
  if (!wants_int16(j)) return in;
  HWY_DYNAMIC_DISPATCH(QuantizeX16)(j.x, j.cols, qx, dx);
  in.qx = qx;
  in.dx = dx;
  if (wants_packed(j)) {
    pack16(j, qx, dx, packed);
    in.*packed_member(j) = packed;
  }
  return in;
}

// The activation of every job of a batch as the mat-vec kernels read it
// (prepare_input), once per distinct x. plan() decides on the calling thread where
// each one goes and which jobs share it (pointers only); the quantising and packing
// are tasks that the threads of the batch's parallel section share before their rows
// (run_shared): on one thread they were ~5% of a 16-sequence decode step's time (32
// down-projection inputs of 2048 columns a layer), the other core waiting. Jobs with
// a null x are skipped. The object is the caller's thread_local, so workers must be
// handed the pointer.
class BatchInputs {
 public:
  const MvInput* plan(const MatvecJob* jobs, size_t n_jobs);
  void run_all() const {
    for (const Task& t : tasks_) run_task(t);
  }
  // Every thread of the section calls this: it takes tasks no thread has taken, then
  // waits until all are done. Only a thread that is running holds a task, so the wait
  // ends.
  void run_shared() {
    const size_t n = tasks_.size();
    for (size_t k; (k = next_.fetch_add(1, std::memory_order_relaxed)) < n;) {
      run_task(tasks_[k]);
      done_.fetch_add(1, std::memory_order_release);
    }
    for (uint32_t spins = 1; done_.load(std::memory_order_acquire) < n; ++spins) {
      spin_pause();
      if (spins % 4096 == 0) std::this_thread::yield();  // the holder may be off its core
    }
  }

 private:
  // An activation (its pointer and length) in one prepared form.
  enum class Form : uint8_t { int8_rows_x4, int8_kquant, int8_nl4, int8_avx2, int16, int16_rows_x4, int16_kquant, int16_q4 };
  struct Prepared {
    const float* x;
    int64_t cols;
    Form form;
    bool operator==(const Prepared& o) const { return x == o.x && cols == o.cols && form == o.form; }
  };
  struct PreparedHash {
    size_t operator()(const Prepared& p) const {
      return std::hash<const float*>()(p.x) ^ (static_cast<size_t>(p.cols) * 31 + static_cast<size_t>(p.form)) * 0x9e3779b97f4a7c15ULL;
    }
  };
  std::unordered_map<Prepared, size_t, PreparedHash> first_;
  struct Task {
    size_t job;
    int16_t* qx;      // int16 blocks to write (null with packed: quantise privately, an earlier task writes the shared ones)
    float* dx;
    uint8_t* packed;  // the packing to write (int8 blocks when wants_int8), or null
  };
  void run_task(const Task& t) const {
    const MatvecJob& j = jobs_[t.job];
    if (wants_int8(j)) {
      pack8(j, t.packed);
      return;
    }
    thread_local std::vector<int16_t> own_q;
    thread_local std::vector<float> own_d;
    int16_t* qx = t.qx;
    float* dx = t.dx;
    if (!qx) {
      own_q.resize(static_cast<size_t>(j.cols));
      own_d.resize(static_cast<size_t>(j.cols / 32));
      qx = own_q.data();
      dx = own_d.data();
    }
    HWY_DYNAMIC_DISPATCH(QuantizeX16)(j.x, j.cols, qx, dx);
    if (t.packed) pack16(j, qx, dx, t.packed);
  }
  const MatvecJob* jobs_ = nullptr;
  std::vector<int16_t> qbuf_;
  std::vector<float> dbuf_;
  std::vector<CacheLine> pbuf_;
  std::vector<MvInput> in_;  // no allocation per call once warm
  std::vector<Task> tasks_;
  std::atomic<size_t> next_{0}, done_{0};
};

const MvInput* BatchInputs::plan(const MatvecJob* jobs, size_t n_jobs) {
  jobs_ = jobs;
  tasks_.clear();
  next_.store(0, std::memory_order_relaxed);
  done_.store(0, std::memory_order_relaxed);
  in_.resize(n_jobs);
  MvInput* const in = in_.data();
  size_t qsize = 0, dsize = 0, psize = 0;
  for (size_t j = 0; j < n_jobs; ++j) {
    if (wants_int16(jobs[j])) {
      qsize += static_cast<size_t>(jobs[j].cols);
      dsize += static_cast<size_t>(jobs[j].cols / 32);
    }
    if (wants_packed(jobs[j])) psize += packed_lines(jobs[j]);
  }
  if (qbuf_.size() < qsize) qbuf_.resize(qsize);
  if (dbuf_.size() < dsize) dbuf_.resize(dsize);
  if (pbuf_.size() < psize) pbuf_.resize(psize);
  size_t qoff = 0, doff = 0, poff = 0;
  auto take_packed = [&](const MatvecJob& job) {
    uint8_t* p = reinterpret_cast<uint8_t*>(pbuf_.data() + poff);
    poff += packed_lines(job);
    return p;
  };
  // The first job to prepare each activation in each form, so later jobs on it share
  // that (a prefill chunk's thousands of per-token jobs: a scan of the earlier jobs
  // for each was quadratic).
  first_.clear();
  auto first = [&](size_t j, Form f) -> size_t* {
    const auto [it, added] = first_.try_emplace(Prepared{jobs[j].x, jobs[j].cols, f}, j);
    return added ? nullptr : &it->second;
  };
  for (size_t j = 0; j < n_jobs; ++j) {
    const MatvecJob& job = jobs[j];
    in[j] = {job.x, nullptr, nullptr, nullptr, nullptr};
    if (wants_int8(job)) {
      // Same activation packed as int8 the same way by an earlier job: share it.
      const Form f = wants_int8_avx2(job)                 ? Form::int8_avx2
                     : job.layout == RowLayout::rows_x4 ? Form::int8_rows_x4
                     : nl4_vnni_type(job.dtype)         ? Form::int8_nl4
                                                        : Form::int8_kquant;
      if (const size_t* i = first(j, f)) {
        in[j] = in[*i];
        continue;
      }
      uint8_t* p = take_packed(job);
      set_int8(job, p, in[j]);
      tasks_.push_back({j, nullptr, nullptr, p});
      continue;
    }
    if (!wants_int16(job)) continue;
    const uint8_t* MvInput::*const member = packed_member(job);
    // Same activation as an earlier job: share what it computes.
    if (const size_t* i = first(j, Form::int16)) in[j] = {job.x, in[*i].qx, in[*i].dx, nullptr, nullptr};
    uint8_t* packed = nullptr;
    if (wants_packed(job)) {
      const Form f = member == &MvInput::rx4 ? Form::int16_rows_x4 : member == &MvInput::kq ? Form::int16_kquant : Form::int16_q4;
      if (const size_t* i = first(j, f)) in[j].*member = in[*i].*member;
      else in[j].*member = packed = take_packed(job);
    }
    if (!in[j].qx) {
      in[j].qx = qbuf_.data() + qoff;
      in[j].dx = dbuf_.data() + doff;
      qoff += static_cast<size_t>(job.cols);
      doff += static_cast<size_t>(job.cols / 32);
      tasks_.push_back({j, const_cast<int16_t*>(in[j].qx), const_cast<float*>(in[j].dx), packed});
    } else if (packed) {
      tasks_.push_back({j, nullptr, nullptr, packed});  // from int16 blocks an earlier task writes
    }
  }
  return in;
}

// Runs fn(job, r0, r1) over every row of n_jobs jobs on the pool. Rows go in groups of
// `group`; the groups of all jobs are numbered end to end and thread p starts with
// those whose cost (row_cost[j] per row: bytes for a mat-vec, FLOPs for a mat-mul;
// an expert's down projection and its gate differ) lies in the p-th P-th of the total,
// walking them front to back in chunks of `own` groups (fewer near its end); a thread
// whose range is empty takes chunks of `steal` groups from the back of another's
// (WorkRanges). Each thread first takes its share of the batch's activation
// preparation (inputs, planned).
struct RowWork {
  int64_t rows;
  uint64_t row_cost;
};
void run_rows_parallel(size_t n_jobs, const std::function<RowWork(size_t)>& work_of, int64_t group, uint32_t own,
                       uint32_t steal, ThreadPool& pool, BatchInputs& inputs,
                       const std::function<void(size_t, int64_t, int64_t)>& fn) {
  const int parts = pool.size();
  thread_local std::vector<int64_t> rows_buf;
  thread_local std::vector<uint64_t> cost_buf;
  rows_buf.resize(n_jobs);
  cost_buf.resize(n_jobs);
  for (size_t j = 0; j < n_jobs; ++j) {
    const RowWork w = work_of(j);
    rows_buf[j] = w.rows;
    cost_buf[j] = w.row_cost;
  }
  const int64_t* const rows = rows_buf.data();  // the caller's, handed over by pointer
  const uint64_t* const row_cost = cost_buf.data();
  thread_local std::vector<uint32_t> first_group, bounds;
  thread_local WorkRanges ranges;
  first_group.assign(n_jobs + 1, 0);
  bounds.assign(static_cast<size_t>(parts) + 1, 0);
  uint64_t total = 0;
  for (size_t j = 0; j < n_jobs; ++j) total += row_cost[j] * static_cast<uint64_t>(rows[j]);
  uint64_t base = 0;  // cost before job j's first row
  int p = 1;
  for (size_t j = 0; j < n_jobs; ++j) {
    const uint64_t gc = row_cost[j] * static_cast<uint64_t>(group);
    const uint32_t groups = static_cast<uint32_t>((rows[j] + group - 1) / group);
    first_group[j + 1] = first_group[j] + groups;
    // Part boundaries inside this job: the first group starting at or after them.
    for (; p < parts; ++p) {
      const uint64_t cut = total * static_cast<uint64_t>(p) / static_cast<uint64_t>(parts);
      if (gc == 0 || cut >= base + gc * groups) break;
      bounds[static_cast<size_t>(p)] = first_group[j] + static_cast<uint32_t>(cut > base ? (cut - base + gc - 1) / gc : 0);
    }
    base += row_cost[j] * static_cast<uint64_t>(rows[j]);
  }
  for (; p <= parts; ++p) bounds[static_cast<size_t>(p)] = first_group[n_jobs];
  ranges.reset(bounds.data(), parts);
  const uint32_t* const fg = first_group.data();
  WorkRanges* const wr = &ranges;
  BatchInputs* const shared_inputs = &inputs;  // the caller's thread_local
  auto part = [&, fg, wr, shared_inputs](int64_t p0, int64_t, int) {
    shared_inputs->run_shared();
    uint32_t g0, g1;
    size_t j = 0;
    while (wr->next(static_cast<int>(p0), own, steal, g0, g1)) {
      if (g0 < fg[j]) j = 0;  // a steal went backwards
      while (fg[j + 1] <= g0) ++j;
      for (size_t k = j; k < n_jobs && fg[k] < g1; ++k) {
        const int64_t r0 = static_cast<int64_t>(std::max(g0, fg[k]) - fg[k]) * group;
        const int64_t r1 = std::min<int64_t>(rows[k], static_cast<int64_t>(g1 - fg[k]) * group);
        if (r0 < r1) fn(k, r0, r1);
      }
    }
  };
  pool.parallel_for(parts, part, 1);
}

// matvec_batch's rows go to the threads in groups of this many (whole quads of
// interleaved rows).
constexpr int64_t kBatchRowGroup = 8;

// A matrix that several tokens' mat-vecs read once for all (a batched decode step) is
// visited in pieces of ~16 KiB (whole row groups, so quads stay whole) that stay in
// cache while every token reads them; the first pass over a piece prefetches ahead as
// a lone mat-vec does (to the matrix's end: the next chunk is usually this thread's
// too). (A lone interleaved matrix goes to its kernel whole instead: the kernel takes
// every token per tile of quads.) The rows of a piece:
int64_t shared_piece_rows(const MatvecJob& a) {
  const int64_t rb = static_cast<int64_t>(row_bytes(a.dtype, a.cols));
  return std::max<int64_t>(kBatchRowGroup, (16384 / std::max<int64_t>(rb, 1)) / kBatchRowGroup * kBatchRowGroup);
}

// Rows [r0, r1) of n mat-vecs on one matrix (jobs[0, n), each on its own activation
// in[k]), piece by piece: matvec_batch's items on one matrix and MatvecPlan's tokens.
void shared_matrix_rows(const MatvecJob* jobs, const MvInput* in, size_t n, int64_t r0, int64_t r1) {
  const MatvecJob& a = jobs[0];
  const int64_t rb = static_cast<int64_t>(row_bytes(a.dtype, a.cols));
  const int64_t piece = shared_piece_rows(a);
  const auto* W = static_cast<const uint8_t*>(a.W);
  auto fn = HWY_DYNAMIC_DISPATCH(MatvecRows);
  // Interleaved rows whose activations are all packed for the VNNI kernel take it
  // once per piece for all the tokens (each quad's weights loaded once per four).
  const bool int8 = in[0].rx4_int8;
  const bool x4 = a.layout == RowLayout::rows_x4 && std::all_of(in, in + n, [int8](const MvInput& v) {
                    return v.rx4 != nullptr && v.rx4_int8 == int8;
                  });
  // Q4_K / Q5_K / Q6_K rows whose activations are all packed the same way take the
  // multi-token k-quant kernel (each row unpacked once per four tokens).
  const bool kq_int8 = in[0].kq_int8;
  const bool kq = !x4 && kquant_vnni_type(a.dtype) && kquant_vnni_tokens_type(a.dtype) &&
                  std::all_of(in, in + n, [kq_int8](const MvInput& v) {
                    return v.kq != nullptr && v.kq_int8 == kq_int8;
                  });
  // IQ4_NL / IQ4_XS / MXFP4 rows on int8 activations: the multi-token kernel too.
  const bool nl4 = !x4 && nl4_vnni_type(a.dtype) &&
                   std::all_of(in, in + n, [](const MvInput& v) { return v.nl4 != nullptr; });
  // The int8_avx2_type rows on int8 activations without the VNNI kernels: the AVX2
  // multi-token kernel.
  const bool a8 = std::all_of(in, in + n, [](const MvInput& v) { return v.a8 != nullptr; });
  thread_local std::vector<const uint8_t*> xs;
  thread_local std::vector<float*> outs;
  // q8_0 rows in GGUF's layout on int16 blocks: each block widened once for four tokens.
  if (n >= 2 && !x4 && !a8 && a.dtype == DType::Q8_0 && a.layout == RowLayout::gguf &&
      std::all_of(in, in + n, [](const MvInput& v) { return v.qx != nullptr; })) {
    outs.resize(n);
    for (size_t k = 0; k < n; ++k) outs[k] = jobs[k].y;
    HWY_DYNAMIC_DISPATCH(Q8MatvecTokens)(W, static_cast<size_t>(rb), r0, r1, a.cols, in, static_cast<int>(n),
                                         outs.data(), W + static_cast<size_t>(rb) * a.rows);
    return;
  }
  if (x4 || kq || nl4 || a8) {
    xs.resize(n);
    outs.resize(n);
    for (size_t k = 0; k < n; ++k) xs[k] = x4 ? in[k].rx4 : kq ? in[k].kq : nl4 ? in[k].nl4 : in[k].a8;
  }
  if (kq || nl4 || a8) {
    for (size_t k = 0; k < n; ++k) outs[k] = jobs[k].y;
    const uint8_t* end = W + static_cast<size_t>(rb) * a.rows;
    if (a8) {
      int8_avx2_rows_tokens(a.dtype, W, static_cast<size_t>(rb), r0, r1, a.cols, xs.data(), static_cast<int>(n),
                            outs.data(), end);
    } else if (kq) {
      kquant_vnni_rows_tokens(a.dtype, W, static_cast<size_t>(rb), r0, r1, a.cols / 256, xs.data(),
                              static_cast<int>(n), kq_int8, outs.data(), end);
    } else {
      nl4_vnni_rows_tokens(a.dtype, W, static_cast<size_t>(rb), r0, r1, a.cols, xs.data(), static_cast<int>(n),
                           outs.data(), end);
    }
    return;
  }
  if (x4) {
    // The whole range at once: the kernel reads each tile's quads for every token
    // before the next, so no piece need stay in cache, and its tiles of two quads take
    // them from the range's two halves, two memory streams (rows_x4_vnni.cpp).
    const size_t qb = rows_x4_quad_bytes(a.dtype, a.cols);
    for (size_t k = 0; k < n; ++k) outs[k] = jobs[k].y + r0;
    (int8 ? rows_x4_quads8_tokens : rows_x4_quads_tokens)(
        a.dtype, W + qb * static_cast<size_t>(r0 / kRowsX4), (r1 - r0) / kRowsX4, a.cols, xs.data(),
        static_cast<int>(n), outs.data(), W + qb * static_cast<size_t>(a.rows / kRowsX4));
    return;
  }
  for (int64_t s0 = r0; s0 < r1; s0 += piece) {
    const int64_t s1 = std::min(r1, s0 + piece);
    for (size_t k = 0; k < n; ++k) {
      const MatvecJob& m = jobs[k];
      fn(m.dtype, m.layout, W, s0, s1, k == 0 ? m.rows : s1, m.cols, in[k], m.y);
    }
  }
}

}  // namespace

void matvec_batch(const MatvecJob* jobs, size_t n_jobs, ThreadPool* pool) {
  // Rows in groups of kBatchRowGroup, the threads' shares balanced by bytes read
  // (run_rows_parallel).
  uint64_t total = 0;
  int64_t work = 0;
  for (size_t j = 0; j < n_jobs; ++j) {
    check_shape(jobs[j].dtype, jobs[j].layout, jobs[j].rows, jobs[j].cols);
    check_activation(jobs[j]);
    if (jobs[j].cols == 0) std::fill(jobs[j].y, jobs[j].y + jobs[j].rows, 0.0f);  // empty sums
    total += row_bytes(jobs[j].dtype, jobs[j].cols) * static_cast<uint64_t>(jobs[j].rows);
    work += jobs[j].rows * jobs[j].cols;
  }
  if (total == 0) return;
  thread_local BatchInputs inputs;
  const MvInput* const in = inputs.plan(jobs, n_jobs);
  auto fn = HWY_DYNAMIC_DISPATCH(MatvecRows);
  // Work items: a job, or kStreams consecutive interleaved jobs of one type and shape
  // whose activations are packed for the VNNI kernel (an expert's gate and up, k and v,
  // two experts' down projections), read together, a quad of each in turn
  // (rows_x4_quads_multi): each core then streams from two places at once. 330M model,
  // 2 threads, alternating A/B runs: q4_0 decode +13% (6 of 6 pairs, same binary with
  // pairing switched off) and +5% (8 of 10 pairs, against the previous binary); q8_0
  // +7-16% in one set of 5 pairs, no difference in another: it helps in some of this
  // VM's memory phases and costs nothing in the others. Four at a time (the whole
  // gate/up batch of a top-2 step) was no faster than two; a lone matrix read as its
  // two halves together gained nothing measurable.
  //
  // Consecutive jobs on the same matrix (several tokens' mat-vecs: a batched decode
  // step) are one item whose rows are visited a few KiB at a time, every token's
  // activation in turn, so the matrix is read from memory once for all of them and
  // each token still gets the single mat-vec's floats. Two such runs of interleaved
  // rows on the same tokens' packed activations (an expert's gate and up) are one item
  // too, read together (rows_x4_quads_tokens_pair): two memory streams per core, as
  // for the lone mat-vecs below.
  constexpr size_t kStreams = 2;
  struct Item {
    size_t a, n;       // jobs a .. a+n-1 (a pair: a .. a+2n-1)
    bool shared;       // the n jobs read one matrix
    bool pair = false; // and the next n read another on the same activations
  };
  auto packed_x4 = [in](size_t j, bool int8) { return in[j].rx4 != nullptr && in[j].rx4_int8 == int8; };
  thread_local std::vector<Item> item_buf;
  item_buf.clear();
  for (size_t j = 0; j < n_jobs;) {
    const MatvecJob& p = jobs[j];
    size_t n = 1;
    auto same_shape = [&](const MatvecJob& o) { return o.dtype == p.dtype && o.rows == p.rows && o.cols == p.cols; };
    while (j + n < n_jobs && jobs[j + n].W == p.W && same_shape(jobs[j + n])) ++n;
    if (n > 1) {
      const bool int8 = in[j].rx4_int8;
      bool pair = p.layout == RowLayout::rows_x4 && j + 2 * n <= n_jobs && jobs[j + n].W != p.W &&
                  rows_x4_pair_pays(p.dtype, int8, static_cast<int>(n));
      for (size_t k = 0; pair && k < n; ++k) {
        const MatvecJob& o = jobs[j + n + k];
        pair = o.W == jobs[j + n].W && o.layout == p.layout && same_shape(o) && o.x == jobs[j + k].x &&
               packed_x4(j + k, int8) && packed_x4(j + n + k, int8);
      }
      item_buf.push_back({j, n, true, pair});
      j += pair ? 2 * n : n;
      continue;
    }
    if (p.layout == RowLayout::rows_x4 && in[j].rx4)
      while (n < kStreams && j + n < n_jobs && same_shape(jobs[j + n]) && in[j + n].rx4 &&
             in[j + n].rx4_int8 == in[j].rx4_int8)
        ++n;
    item_buf.push_back({j, n, false});
    j += n;
  }
  const Item* const items = item_buf.data();  // the caller's, handed to the workers by pointer
  auto run_item = [&, items](size_t i, int64_t r0, int64_t r1) {
    const Item it = items[i];
    const MatvecJob& a = jobs[it.a];
    if (it.shared) {
      if (it.pair) {
        const int64_t piece = shared_piece_rows(a);
        const auto* W = static_cast<const uint8_t*>(a.W);
        thread_local std::vector<const uint8_t*> xs;
        thread_local std::vector<float*> outs[2];
        xs.resize(it.n);
        for (size_t k = 0; k < it.n; ++k) xs[k] = in[it.a + k].rx4;
        const uint8_t* Ws[2] = {W, static_cast<const uint8_t*>(jobs[it.a + it.n].W)};
        const size_t qb = rows_x4_quad_bytes(a.dtype, a.cols), end = qb * static_cast<size_t>(a.rows / kRowsX4);
        for (auto& o : outs) o.resize(it.n);
        for (int64_t s0 = r0; s0 < r1; s0 += piece) {
          const int64_t s1 = std::min(r1, s0 + piece);
          const size_t at = qb * static_cast<size_t>(s0 / kRowsX4);
          for (int h = 0; h < 2; ++h)
            for (size_t k = 0; k < it.n; ++k) outs[h][k] = jobs[it.a + h * it.n + k].y + s0;
          const RowsX4TokensPair m{{Ws[0] + at, Ws[1] + at}, {outs[0].data(), outs[1].data()}, {Ws[0] + end, Ws[1] + end}};
          rows_x4_quads_tokens_pair(a.dtype, in[it.a].rx4_int8, m, (s1 - s0) / kRowsX4, a.cols, xs.data(),
                                    static_cast<int>(it.n));
        }
        return;
      }
      shared_matrix_rows(jobs + it.a, in + it.a, it.n, r0, r1);
      return;
    }
    if (it.n == 1) {
      // Prefetch may run on past the chunk, to the end of the matrix: the next chunk
      // is usually this thread's too.
      fn(a.dtype, a.layout, static_cast<const uint8_t*>(a.W), r0, r1, a.rows, a.cols, in[it.a], a.y);
      return;
    }
    const size_t qb = rows_x4_quad_bytes(a.dtype, a.cols);
    RowsX4Stream s[kStreams];
    for (size_t k = 0; k < it.n; ++k) {
      const MatvecJob& m = jobs[it.a + k];
      const auto* W = static_cast<const uint8_t*>(m.W);
      s[k] = RowsX4Stream{W + qb * static_cast<size_t>(r0 / kRowsX4), in[it.a + k].rx4, m.y + r0,
                          W + qb * static_cast<size_t>(m.rows / kRowsX4)};
    }
    (in[it.a].rx4_int8 ? rows_x4_quads8_multi : rows_x4_quads_multi)(a.dtype, s, static_cast<int>(it.n),
                                                                      (r1 - r0) / kRowsX4, a.cols);
  };
  const int parts = pool && pool->size() > 1 && work >= kMinParallelWork ? pool->size() : 1;
  if (parts == 1) {
    inputs.run_all();
    for (size_t i = 0; i < item_buf.size(); ++i)
      if (jobs[items[i].a].rows > 0) run_item(i, 0, jobs[items[i].a].rows);
    return;
  }
  auto work_of = [jobs, items, in](size_t i) {
    const MatvecJob& a = jobs[items[i].a];
    // A shared matrix is read once from memory, plus a pass from cache per four tokens
    // (the multi-token kernel's width), each costing about as much as the read; half
    // as much on int8 activations.
    const size_t n = items[i].n;
    const size_t width = in[items[i].a].rx4_int8 ? 8 : 4;
    const size_t matrices = items[i].pair ? 2 : 1;
    return RowWork{a.rows, matrices * row_bytes(a.dtype, a.cols) * (items[i].shared ? 1 + (n + width - 1) / width : n)};
  };
  // Measured (2 threads, 330M q8_0, medians of 5-6 alternating runs): own chunks of
  // 8 groups ran ~10% slower than no stealing (the software prefetch and the stream
  // restart at every chunk), 32 groups with steals of 4 ~3-15% faster.
  run_rows_parallel(item_buf.size(), work_of, kBatchRowGroup, 32, 4, *pool, inputs, run_item);
}

MatvecPlan::MatvecPlan() = default;
MatvecPlan::~MatvecPlan() = default;

void MatvecPlan::prepare(const MatvecJob* jobs, size_t n) {
  if (n == 0) throw std::invalid_argument("moeflow: MatvecPlan::prepare without a job");
  for (size_t k = 0; k < n; ++k) {
    const MatvecJob& j = jobs[k];
    check_shape(j.dtype, j.layout, j.rows, j.cols);
    check_activation(j);
    if (j.W != jobs[0].W || j.dtype != jobs[0].dtype || j.layout != jobs[0].layout || j.rows != jobs[0].rows ||
        j.cols != jobs[0].cols || j.x_int8 != jobs[0].x_int8)
      throw std::invalid_argument("moeflow: MatvecPlan::prepare: jobs on different matrices");
  }
  jobs_.assign(jobs, jobs + n);
  if (buffers_.size() < n) buffers_.resize(n);
  inputs_.resize(n);
  for (size_t k = 0; k < n; ++k) {
    const MatvecJob& j = jobs[k];
    Buffers& b = buffers_[k];
    if (wants_int16(j)) {
      b.qx.resize(static_cast<size_t>(j.cols));
      b.dx.resize(static_cast<size_t>(j.cols / 32));
    }
    if (wants_packed(j)) b.packed.resize(packed_lines(j));
    inputs_[k] = prepare_input(j, b.qx.data(), b.dx.data(), reinterpret_cast<uint8_t*>(b.packed.data()));
  }
}

void MatvecPlan::rows(int64_t r0, int64_t r1) const {
  if (jobs_.empty()) throw std::logic_error("moeflow: MatvecPlan::rows before prepare");
  const MatvecJob& job = jobs_[0];
  if (r0 < 0 || r1 > job.rows || r0 > r1 || (job.layout == RowLayout::rows_x4 && (r0 % kRowsX4 || r1 % kRowsX4)))
    throw std::invalid_argument("moeflow: MatvecPlan::rows [" + std::to_string(r0) + ", " + std::to_string(r1) +
                                ") of a " + dtype_name(job.dtype) + " matrix of " + std::to_string(job.rows) +
                                " rows (interleaved rows go in fours)");
  if (r0 == r1) return;
  if (job.cols == 0) {
    for (const MatvecJob& j : jobs_) std::fill(j.y + r0, j.y + r1, 0.0f);  // empty sums
    return;
  }
  if (jobs_.size() > 1) {
    shared_matrix_rows(jobs_.data(), inputs_.data(), jobs_.size(), r0, r1);
    return;
  }
  HWY_DYNAMIC_DISPATCH(MatvecRows)(job.dtype, job.layout, static_cast<const uint8_t*>(job.W), r0, r1, job.rows, job.cols,
                                   inputs_[0], job.y);
}

void matvec(DType wt, const void* W, int64_t rows, int64_t cols, const float* x, float* y,
            ThreadPool* pool, RowLayout layout) {
  const MatvecJob job{wt, layout, W, rows, cols, x, y};
  matvec_batch(&job, 1, pool);
}

void matmul_batch(const MatmulJob* jobs, size_t n_jobs, ThreadPool* pool) {
  int64_t work = 0;
  for (size_t j = 0; j < n_jobs; ++j) {
    const MatmulJob& m = jobs[j];
    check_shape(m.dtype, m.layout, m.rows, m.cols);
    if (m.cols == 0 && m.n_tok > 0) std::fill(m.Y, m.Y + m.rows * m.n_tok, 0.0f);  // empty sums
    if (m.n_tok > 0) work += m.rows * m.cols * m.n_tok;
  }
  // One-token jobs (an expert that a single prompt token chose) take the mat-vec
  // kernel, as matmul does: the same numbers as decoding that token; so do per-token
  // jobs, token by token. A batch of nothing else (a decode step) is a mat-vec batch:
  // its memory-bound rows want matvec_batch's longer chunks. Per-token jobs beside
  // mat-muls run first, as a mat-vec batch of their own.
  auto as_matvecs = [](const MatmulJob& m) { return m.n_tok <= 1 || m.per_token; };
  if (std::any_of(jobs, jobs + n_jobs, [](const MatmulJob& m) { return m.per_token && m.n_tok > 1; }) ||
      std::all_of(jobs, jobs + n_jobs, as_matvecs)) {
    thread_local std::vector<MatvecJob> mv_jobs;
    thread_local std::vector<MatmulJob> mm_jobs;
    mv_jobs.clear();
    mm_jobs.clear();
    for (size_t j = 0; j < n_jobs; ++j) {
      const MatmulJob& m = jobs[j];
      if (!as_matvecs(m)) {
        mm_jobs.push_back(m);
        continue;
      }
      for (int64_t t = 0; t < m.n_tok; ++t)
        mv_jobs.push_back({m.dtype, m.layout, m.W, m.rows, m.cols, m.X + t * m.cols, m.Y + t * m.rows, m.x_int8});
    }
    const std::vector<MatmulJob> gemms = mm_jobs;  // the recursive call reuses the thread_local
    matvec_batch(mv_jobs.data(), mv_jobs.size(), pool);
    if (!gemms.empty()) matmul_batch(gemms.data(), gemms.size(), pool);
    return;
  }
  thread_local std::vector<MatvecJob> one_tok;
  one_tok.resize(n_jobs);
  for (size_t j = 0; j < n_jobs; ++j) {
    const MatmulJob& m = jobs[j];
    one_tok[j] = {m.dtype, m.layout, m.W, m.rows, m.cols, m.n_tok == 1 ? m.X : nullptr, m.Y, m.x_int8};
    check_activation(one_tok[j]);
  }
  thread_local BatchInputs inputs;
  const MvInput* const in = inputs.plan(one_tok.data(), n_jobs);
  auto fn = HWY_DYNAMIC_DISPATCH(MatmulRows);
  auto mv = HWY_DYNAMIC_DISPATCH(MatvecRows);
  auto run = [&](size_t k, int64_t r0, int64_t r1) {
    const MatmulJob& m = jobs[k];
    if (m.n_tok == 1 && m.cols > 0) {
      mv(m.dtype, m.layout, static_cast<const uint8_t*>(m.W), r0, r1, m.rows, m.cols, in[k], m.Y);
    } else if (m.n_tok > 1 && m.cols > 0) {
      fn(m.dtype, m.layout, static_cast<const uint8_t*>(m.W), r0, r1, m.cols, m.X, m.n_tok, m.Y, m.rows);
    }
  };
  if (!pool || pool->size() <= 1 || work < kMinParallelWork) {
    inputs.run_all();
    for (size_t j = 0; j < n_jobs; ++j) run(j, 0, jobs[j].rows);
    return;
  }
  auto work_of = [jobs](size_t j) {
    const MatmulJob& m = jobs[j];
    return RowWork{m.n_tok > 0 && m.cols > 0 ? m.rows : 0,
                   static_cast<uint64_t>(m.cols) * static_cast<uint64_t>(std::max<int64_t>(m.n_tok, 0))};
  };
  // Groups of the kernel's row tile; a thread's own range in chunks of 8 tiles, steals
  // of one: compute-bound tiles, so smaller pieces cost little.
  const int64_t tile = HWY_DYNAMIC_DISPATCH(RowTile)();
  run_rows_parallel(n_jobs, work_of, tile, 8, 1, *pool, inputs, run);
}

void matmul(DType wt, const void* W, int64_t rows, int64_t cols, const float* X, int64_t n_tok,
            float* Y, ThreadPool* pool, RowLayout layout) {
  const MatmulJob job{wt, layout, W, rows, cols, X, n_tok, Y};  // n_tok == 1: the mat-vec path
  matmul_batch(&job, 1, pool);
}

const char* simd_target_name() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

void matvec_reference(DType wt, const void* W, int64_t rows, int64_t cols, const float* x,
                      float* y, RowLayout layout) {
  const auto* w = static_cast<const uint8_t*>(W);
  const size_t rb = row_bytes(wt, cols);
  std::vector<float> buf(static_cast<size_t>(cols));
  const bool x4 = layout == RowLayout::rows_x4;
  std::vector<uint8_t> blocks(x4 ? rb : 0);
  for (int64_t r = 0; r < rows; ++r) {
    if (x4) {
      rows_x4_row_blocks(wt, W, cols, r, 0, cols / dtype_info(wt).block_size, blocks.data());
      dequantize_row(wt, blocks.data(), buf.data(), cols);
    } else {
      dequantize_row(wt, w + rb * static_cast<size_t>(r), buf.data(), cols);
    }
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) s += static_cast<double>(buf[c]) * static_cast<double>(x[c]);
    y[r] = static_cast<float>(s);
  }
}

}  // namespace moeflow::cpu
#endif

// Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS and MXFP4 mat-vec rows in f32 SIMD (Highway
// foreach_target), for CPUs without the VNNI kernels (AVX2, SSE4, other architectures)
// and for int16 activations: each sub-block's quants are widened to f32 lanes and
// dotted with x, then scaled once per sub-block:
//   Q4_K / Q5_K: acc += (d*sc) * sum(q*x) - (dmin*m) * sum(x)   (32 columns)
//   Q6_K:        acc += (d*sc) * sum((q-32)*x)                   (16 columns)
//   IQ4 / MXFP4: acc += scale * sum(level[q]*x)                  (32 columns)
// The unscaled sums are exact up to f32 rounding, so the result matches the reference
// (rows dequantised, then dotted) to f32 rounding. The activation's sums per 32 columns
// are computed once per block for the R rows. ~3x the generic path (dequantise a block,
// then dot) on the k-quants; the 4-bit level tables are looked up sixteen at a time with
// one byte shuffle.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/kquant_hwy.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <type_traits>

#include "kernels/cpu/kquant_matvec.h"
#include "tensor/iquants.h"
#include "tensor/kquants.h"

HWY_BEFORE_NAMESPACE();
namespace moeflow::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// At most 16 lanes, so a 16-column sub-block is whole vectors on every target.
using DF = hn::CappedTag<float, 16>;
using VF = hn::Vec<DF>;
using DI = hn::RebindToSigned<DF>;
using D8 = hn::Rebind<uint8_t, DF>;

HWY_INLINE VF Bytes(DF df, const uint8_t* p) { return hn::ConvertTo(df, hn::PromoteTo(DI(), hn::LoadU(D8(), p))); }
HWY_INLINE hn::Vec<DI> Ints(const uint8_t* p) { return hn::PromoteTo(DI(), hn::LoadU(D8(), p)); }
HWY_INLINE float Sum(DF df, VF v) { return hn::GetLane(hn::SumOfLanes(df, v)); }

template <int R, bool Q5>
void RowsQ45(const uint8_t* const* rows, int64_t blocks, const float* HWY_RESTRICT x, float* out) {
  using Block = std::conditional_t<Q5, BlockQ5_K, BlockQ4_K>;
  const DF df;
  const DI di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  float acc[R] = {};
  for (int64_t b = 0; b < blocks; ++b, x += 256) {
    float xsum[8];
    for (int j = 0; j < 8; ++j) {
      VF s = hn::Zero(df);
      for (int64_t l = 0; l < 32; l += N) s = hn::Add(s, hn::LoadU(df, x + 32 * j + l));
      xsum[j] = Sum(df, s);
    }
    for (int r = 0; r < R; ++r) {
      const Block& blk = reinterpret_cast<const Block*>(rows[r])[b];
      const float d = fp16_to_fp32(blk.d), dmin = fp16_to_fp32(blk.dmin);
      float row = 0.0f;
      for (int c = 0; c < 4; ++c) {
        VF lo = hn::Zero(df), hi = hn::Zero(df);
        for (int64_t l = 0; l < 32; l += N) {
          const auto q = Ints(blk.qs + 32 * c + l);
          auto ql = hn::And(q, hn::Set(di, 0x0f)), qh = hn::ShiftRight<4>(q);
          if constexpr (Q5) {
            const auto h = Ints(blk.qh + l);
            ql = hn::Or(ql, hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(h, 2 * c), hn::Set(di, 1))));
            qh = hn::Or(qh, hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(h, 2 * c + 1), hn::Set(di, 1))));
          }
          lo = hn::MulAdd(hn::ConvertTo(df, ql), hn::LoadU(df, x + 64 * c + l), lo);
          hi = hn::MulAdd(hn::ConvertTo(df, qh), hn::LoadU(df, x + 64 * c + 32 + l), hi);
        }
        int sc0, m0, sc1, m1;
        kq_scale_min_k4(blk.scales, 2 * c, sc0, m0);
        kq_scale_min_k4(blk.scales, 2 * c + 1, sc1, m1);
        row += d * static_cast<float>(sc0) * Sum(df, lo) - dmin * static_cast<float>(m0) * xsum[2 * c];
        row += d * static_cast<float>(sc1) * Sum(df, hi) - dmin * static_cast<float>(m1) * xsum[2 * c + 1];
      }
      acc[r] += row;
    }
  }
  for (int r = 0; r < R; ++r) out[r] = acc[r];
}

template <int R>
void RowsQ6(const uint8_t* const* rows, int64_t blocks, const float* HWY_RESTRICT x, float* out) {
  const DF df;
  const DI di;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  float acc[R] = {};
  for (int64_t b = 0; b < blocks; ++b, x += 256) {
    for (int r = 0; r < R; ++r) {
      const BlockQ6_K& blk = reinterpret_cast<const BlockQ6_K*>(rows[r])[b];
      float row = 0.0f;
      for (int h = 0; h < 2; ++h)
        for (int k = 0; k < 4; ++k)      // quarter: columns 128h + 32k ..
          for (int s = 0; s < 2; ++s) {  // its two sub-blocks of 16
            VF dot = hn::Zero(df);
            for (int64_t l = 16 * s; l < 16 * s + 16; l += N) {
              const auto lb = Ints(blk.ql + 64 * h + 32 * (k % 2) + l);
              const auto nib = k < 2 ? hn::And(lb, hn::Set(di, 0x0f)) : hn::ShiftRight<4>(lb);
              const auto hb = hn::And(hn::ShiftRightSame(Ints(blk.qh + 32 * h + l), 2 * k), hn::Set(di, 3));
              const auto q = hn::Sub(hn::Or(nib, hn::ShiftLeft<4>(hb)), hn::Set(di, 32));
              dot = hn::MulAdd(hn::ConvertTo(df, q), hn::LoadU(df, x + 128 * h + 32 * k + l), dot);
            }
            row += static_cast<float>(blk.scales[8 * h + 2 * k + s]) * Sum(df, dot);
          }
      acc[r] += fp16_to_fp32(blk.d) * row;
    }
  }
  for (int r = 0; r < R; ++r) out[r] = acc[r];
}

// Byte shuffles need 128-bit blocks: not on the scalar and emulated targets.
#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
// Sub-block b (32 weights) of a 4-bit level row: its 16 bytes of nibbles (IQ4_NL's
// order: weight j in the low nibble of qs[j], j + 16 in the high one) and its scale.
template <DType T>
HWY_INLINE const uint8_t* Nl4Sub(const uint8_t* row, int64_t b, float& scale) {
  if constexpr (T == DType::IQ4_NL) {
    const auto& blk = reinterpret_cast<const BlockIQ4_NL*>(row)[b];
    scale = fp16_to_fp32(blk.d);
    return blk.qs;
  } else if constexpr (T == DType::MXFP4) {
    const auto& blk = reinterpret_cast<const BlockMXFP4*>(row)[b];
    scale = mxfp4_scale(blk.e);
    return blk.qs;
  } else {
    const auto& blk = reinterpret_cast<const BlockIQ4_XS*>(row)[b / 8];
    const int ib = static_cast<int>(b % 8);
    const int ls = ((blk.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) | (((blk.scales_h >> (2 * ib)) & 3) << 4);
    scale = fp16_to_fp32(blk.d) * static_cast<float>(ls - 32);
    return blk.qs + 16 * ib;
  }
}

// pf (or null): the next rows' bytes, R rows of subs sub-blocks, touched a line ahead
// of each sub-block as the generic path does (short rows give the hardware's stream
// prefetchers too little to start on).
template <int R, DType T>
void RowsNl4(const uint8_t* const* rows, int64_t subs, const float* HWY_RESTRICT x, float* out, const uint8_t* pf) {
  constexpr int64_t kSubBytes = T == DType::IQ4_NL ? 18 : 17;  // IQ4_XS: 136 bytes per 8
  const DF df;
  const DI di;
  const hn::Full128<uint8_t> d16;
  const hn::Rebind<int8_t, DF> d8;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int8_t* levels = T == DType::MXFP4 ? kMxfp4Levels : kIq4Levels;
  const auto table = hn::LoadU(d16, reinterpret_cast<const uint8_t*>(levels));
  const auto low = hn::Set(d16, 0x0f);
  alignas(64) int8_t lv[32];
  // Scaled sub-block sums gather lane-wise; one horizontal sum a row at the end.
  VF acc[R];
  for (int r = 0; r < R; ++r) acc[r] = hn::Zero(df);
  for (int64_t b = 0; b < subs; ++b, x += 32) {
    if (pf) __builtin_prefetch(pf + b * kSubBytes * R, 0, 0);
    for (int r = 0; r < R; ++r) {
      float scale;
      const auto q = hn::LoadU(d16, Nl4Sub<T>(rows[r], b, scale));
      hn::StoreU(hn::TableLookupBytes(table, hn::And(q, low)), d16, reinterpret_cast<uint8_t*>(lv));
      hn::StoreU(hn::TableLookupBytes(table, hn::ShiftRight<4>(q)), d16, reinterpret_cast<uint8_t*>(lv + 16));
      VF dot = hn::Zero(df);
      for (int64_t l = 0; l < 32; l += N)
        dot = hn::MulAdd(hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, lv + l))), hn::LoadU(df, x + l), dot);
      acc[r] = hn::MulAdd(hn::Set(df, scale), dot, acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = Sum(df, acc[r]);
}

template <DType T>
void Nl4Group(int n, const uint8_t* const* rr, int64_t subs, const float* x, float* o, const uint8_t* pf) {
  n == 4 ? RowsNl4<4, T>(rr, subs, x, o, pf) : n == 3 ? RowsNl4<3, T>(rr, subs, x, o, pf)
  : n == 2 ? RowsNl4<2, T>(rr, subs, x, o, pf) : RowsNl4<1, T>(rr, subs, x, o, pf);
}
#endif

// Returns false for types this file has no kernel for (on this target).
bool KquantRowsHwy(DType t, const uint8_t* const* rows, int R, int64_t cols, const float* x, float* out,
                   const uint8_t* pf) {
  const int64_t blocks = cols / 256;
  for (int r = 0; r < R; r += 4) {  // groups of up to 4 rows share the activation's loads
    const int n = R - r < 4 ? R - r : 4;
    const uint8_t* const* rr = rows + r;
    float* o = out + r;
    // The group after this one within the call, or the caller's next rows after the last.
    [[maybe_unused]] const uint8_t* next = r + 4 < R ? rows[r + 4] : pf;
    switch (t) {
      case DType::Q4_K:
        n == 4 ? RowsQ45<4, false>(rr, blocks, x, o) : n == 3 ? RowsQ45<3, false>(rr, blocks, x, o)
        : n == 2 ? RowsQ45<2, false>(rr, blocks, x, o) : RowsQ45<1, false>(rr, blocks, x, o);
        break;
      case DType::Q5_K:
        n == 4 ? RowsQ45<4, true>(rr, blocks, x, o) : n == 3 ? RowsQ45<3, true>(rr, blocks, x, o)
        : n == 2 ? RowsQ45<2, true>(rr, blocks, x, o) : RowsQ45<1, true>(rr, blocks, x, o);
        break;
      case DType::Q6_K:
        n == 4 ? RowsQ6<4>(rr, blocks, x, o) : n == 3 ? RowsQ6<3>(rr, blocks, x, o)
        : n == 2 ? RowsQ6<2>(rr, blocks, x, o) : RowsQ6<1>(rr, blocks, x, o);
        break;
#if HWY_TARGET != HWY_SCALAR && HWY_TARGET != HWY_EMU128
      case DType::IQ4_NL: Nl4Group<DType::IQ4_NL>(n, rr, cols / 32, x, o, next); break;
      case DType::IQ4_XS: Nl4Group<DType::IQ4_XS>(n, rr, cols / 32, x, o, next); break;
      case DType::MXFP4: Nl4Group<DType::MXFP4>(n, rr, cols / 32, x, o, next); break;
#endif
      default:
        return false;
    }
  }
  return true;
}

}  // namespace HWY_NAMESPACE
}  // namespace moeflow::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moeflow::cpu {
HWY_EXPORT(KquantRowsHwy);

bool kquant_rows_simd(DType t, const uint8_t* const* rows, int R, int64_t cols, const float* x, float* out,
                      const uint8_t* pf) {
  return HWY_DYNAMIC_DISPATCH(KquantRowsHwy)(t, rows, R, cols, x, out, pf);
}
}  // namespace moeflow::cpu
#endif  // HWY_ONCE

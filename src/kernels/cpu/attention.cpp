// Attention over the KV cache, compiled per SIMD target (Highway foreach_target).
//
// Why SIMD here: a plain loop `dot += q[d] * k[d]` is a floating-point reduction the
// compiler may not reorder, so it runs one dependent FMA at a time (~4 cycles per
// element). At a few hundred cached positions that made attention ~11% of a decode
// step on the 330M benchmark model, against ~1% of its FLOPs. Here the keys are
// stored transposed, so the scores of consecutive positions fill a vector's lanes
// (no horizontal sums, and each half-precision key element widened once for all the
// heads that read it), the softmax is vectorised, and the weighted sum of V keeps its
// output slice in registers while it walks the keys; the query heads that share a kv
// head are computed together (see kHeads). The cache
// may hold f16 (engine/kv_block_pool.h): widened to f32 as it is loaded, so the arithmetic
// is the f32 path's and only the bytes streamed halve. A Q8_0 cache's int8 elements are
// widened and multiplied by their group's scale as they are loaded (one multiply per
// vector, shared by the heads that read it), and the rest is the f32 path again.
// attention_reference keeps the scalar (double-accumulating) definition for tests.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/attention.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <cmath>
#include <vector>

#include "kernels/cpu/attention.h"

#ifndef MOEFLOW_ATTENTION_ONCE
#define MOEFLOW_ATTENTION_ONCE
namespace moeflow::cpu {
// A query head shares its cached keys and values with the other heads of its group
// (grouped-query attention): up to kHeads of them are computed together, so each
// cached row is read from memory once per chunk of heads, not once per head, and the
// heads' sums are independent chains the core can overlap. Eight (Qwen3-MoE's and
// gpt-oss's groups) where that leaves every thread a job, else four (more jobs for
// one token's few kv heads); each head's floats are the same either way.
constexpr int kHeads = 8;
constexpr int kFewerHeads = 4;

// A sequence's cached rows of one kv head: block table[b] holds positions
// [b * len, (b + 1) * len), row i of a block at base + table[b] * stride + i * hd.
// An int8 (Q8_0) plane's scales start scale_off bytes after it, `groups` per row.
template <class T>
struct Paged {
  const T* base;
  const int32_t* table;
  int64_t stride, len;
  int64_t scale_off = 0, groups = 0;
  const T* block(int64_t b) const { return base + static_cast<int64_t>(table[b]) * stride; }
};

template <class T>
constexpr bool kQuantized = std::is_same_v<T, int8_t>;

// The scales of a block's plane (attention.h: keys' [group][len], values' [len][group]);
// null for f32 and f16.
template <class T>
inline const float* PlaneScales(const Paged<T>& kv, const T* blk) {
  if constexpr (kQuantized<T>) return reinterpret_cast<const float*>(blk + kv.scale_off);
  else return nullptr;
}

// Bytes of a Q8_0 plane's int8 elements, padded so its float scales are aligned.
inline int64_t q8_scale_offset(int64_t block_len, int64_t width) { return (block_len * width + 3) / 4 * 4; }
inline int64_t q8_groups(int64_t width) { return (width + kKvQ8Group - 1) / kKvQ8Group; }


}  // namespace moeflow::cpu
#endif

HWY_BEFORE_NAMESPACE();
namespace moeflow::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// In a decode step the rows of the cache were pushed out of the caches by the weights
// read since the last token, and a sequence's blocks lie anywhere in the pool (4 KiB
// of f16 per kv head and block: a page, where the hardware prefetcher stops). So the
// value row kAhead positions on is prefetched, and the key plane of the block
// kKeyBlocksAhead on (the first ones as a job starts): a block's arithmetic takes less
// than a memory latency, so one block ahead arrived late (docs/performance.md,
// "long contexts"). f32 and f16 rows are read ahead into L2 (prefetcht1), int8 ones
// into L1: a 4064-position decode token read f16 keys and values at 1.2-1.6x the rate
// into L2 (20-27 -> 26-34 GB/s on two threads), while int8's, whose widening makes a
// row's arithmetic longer, read as fast or faster into L1 (docs/performance.md, "a
// q8_0 KV cache").
constexpr int64_t kAhead = 32;
constexpr int64_t kKeyBlocksAhead = 2;
template <class T>  // T: the cache's elements
HWY_INLINE void PrefetchLine(const void* p) { __builtin_prefetch(p, 0, kQuantized<T> ? 3 : 2); }
// The lines of n elements of E from p (E: the cache's elements, or an int8 plane's
// float scales with T = int8_t).
template <class E, class T = E>
HWY_INLINE void PrefetchRow(const E* p, int64_t n) {
  constexpr int64_t kLine = 64 / sizeof(E);
  for (int64_t i = 0; i < n; i += kLine) PrefetchLine<T>(p + i);
}

// Cache elements: f32, or IEEE half bits (uint16_t) widened as they are loaded.
HWY_INLINE VF LoadKV(DF df, const float* HWY_RESTRICT p) { return hn::LoadU(df, p); }
HWY_INLINE VF LoadKV(DF df, const uint16_t* HWY_RESTRICT p) {
  const hn::Rebind<hwy::float16_t, DF> dh;
  return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
}
HWY_INLINE VF LoadKV(DF df, const int8_t* HWY_RESTRICT p) {
  const hn::Rebind<int8_t, DF> d8;
  const hn::RebindToSigned<DF> di;
  return hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, p)));
}
HWY_INLINE float ScalarKV(float x) { return x; }
HWY_INLINE float ScalarKV(uint16_t h) { return fp16_to_fp32(h); }
// Element i of a cached row whose group scales are `scales` (null unless int8).
template <class T>
HWY_INLINE float ScalarAt(const T* row, const float* scales, int64_t i) {
  if constexpr (kQuantized<T>) return static_cast<float>(row[i]) * scales[i / kKvQ8Group];
  else return ScalarKV(row[i]);
}
// The scales of the N elements of a row from element d (d a multiple of N): one
// group's where a vector lies within one group, as it does on every x86 target.
HWY_INLINE VF ScaleOf(DF df, const float* HWY_RESTRICT scales, int64_t d) {
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  if (N <= kKvQ8Group && kKvQ8Group % N == 0) return hn::Set(df, scales[d / kKvQ8Group]);
  HWY_ALIGN float lanes[hn::MaxLanes(DF())];
  for (int64_t l = 0; l < N; ++l) lanes[l] = scales[(d + l) / kKvQ8Group];
  return hn::Load(df, lanes);
}

// The first n lanes of v to p.
HWY_INLINE void StoreFirst(DF df, VF v, float* HWY_RESTRICT p, int64_t n) {
  HWY_ALIGN float part[hn::MaxLanes(DF())];
  hn::Store(v, df, part);
  std::copy_n(part, n, p);
}

// acc[h][j] += the products of head h's query with NV vectors of positions' keys,
// col pointing at element 0 of the first (a plane's column d is len elements on) and,
// for int8 keys, sc at the first one's scale of group 0 (group g's len * g floats on).
template <int HG, int NV, class T>
HWY_INLINE void ScoreRun(const float* HWY_RESTRICT q, const T* HWY_RESTRICT col, const float* HWY_RESTRICT sc,
                         int64_t len, int64_t hd, const T* prefetch, VF (&acc)[HG][NV]) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t g0 = 0; g0 < hd; g0 += kKvQ8Group) {
    VF s[NV];
    if constexpr (kQuantized<T>)
      for (int j = 0; j < NV; ++j) s[j] = hn::LoadU(df, sc + g0 / kKvQ8Group * len + j * N);
    const int64_t g1 = std::min(hd, g0 + kKvQ8Group);
    for (int64_t d = g0; d < g1; ++d) {
      if (prefetch) PrefetchLine<T>(prefetch + d * len);
      VF kv[NV];
      for (int j = 0; j < NV; ++j) {
        kv[j] = LoadKV(df, col + d * len + j * N);
        if constexpr (kQuantized<T>) kv[j] = hn::Mul(kv[j], s[j]);
      }
      for (int h = 0; h < HG; ++h) {
        const VF qd = hn::Set(df, q[h * hd + d]);
        for (int j = 0; j < NV; ++j) acc[h][j] = hn::MulAdd(qd, kv[j], acc[h][j]);
      }
    }
  }
}

// Two vectors of positions at a time need 2 x HG accumulators: more than four heads
// only where there are 32 vector registers (AVX-512; x86 before it has 16).
#if HWY_ARCH_X86 && HWY_TARGET > HWY_AVX3
constexpr bool kFewRegisters = true;
#else
constexpr bool kFewRegisters = false;
#endif
template <int HG>
constexpr bool kTwoVectors = !kFewRegisters || HG <= 4;

// The query rows (tokens x heads) a prefill job takes together at most: eight where
// their sums fit 32 registers, four with 16 (on AVX2 a 4064-token prefill ran 1.07-1.09x
// as fast with four as with eight, whose value sums spill; AVX-512 1.04-1.08x with eight).
int64_t RowsTogether() { return kFewRegisters ? kFewerHeads : kHeads; }

// scores[h * ss + p - first] = scale * <q_h, k_p> for the HG heads q_h = q + h * hd
// and p in [first, n_keys). The keys are stored transposed within a block (column d
// of a kv head's plane holds element d of the block's positions, attention.h), so a
// vector holds one element of consecutive positions: each is widened once and
// multiplied with every head's element d (a broadcast), and the sums come out one
// position per lane, with no horizontal sums. Two vectors of positions at a time
// where a block has them (2 x HG independent chains). A shorter run at the context's
// end still reads a whole vector of each column when the block holds one (the lanes
// past the end are computed and not stored): a decode token's context ends inside a
// block in nearly every job, and a zero-padded copy of its columns there cost more
// than the arithmetic. Only a run cut by the end of a block shorter than a vector
// takes the copy. The plane of the block kKeyBlocksAhead on is prefetched a line per
// element.
template <int HG, class T>
HWY_INLINE void ScoresHeads(const float* HWY_RESTRICT q, const Paged<T>& k, int64_t first, int64_t n_keys,
                            int64_t hd, float scale, float* HWY_RESTRICT scores, int64_t ss) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const VF vscale = hn::Set(df, scale);
  for (int64_t b = first / k.len, b0 = b * k.len; b0 < n_keys; b0 += k.len, ++b) {
    const T* blk = k.block(b);
    const float* sc = PlaneScales(k, blk);
    const T* next = b0 + kKeyBlocksAhead * k.len < n_keys ? k.block(b + kKeyBlocksAhead) : nullptr;
    if (b == first / k.len)  // the blocks before the first one `next` reaches
      for (int64_t e = 1; e < kKeyBlocksAhead && b0 + e * k.len < n_keys; ++e) {
        const T* plane = k.block(b + e);
        for (int64_t d = 0; d < hd; ++d) PrefetchLine<T>(plane + d * k.len);
        if constexpr (kQuantized<T>) PrefetchRow<float, T>(PlaneScales(k, plane), k.groups * k.len);
      }
    if constexpr (kQuantized<T>)
      if (next) PrefetchRow<float, T>(PlaneScales(k, next), k.groups * k.len);
    const int64_t end = std::min(k.len, n_keys - b0);
    int64_t i = std::max<int64_t>(0, first - b0);
    for (; kTwoVectors<HG> && i + 2 * N <= end; i += 2 * N) {
      VF acc[HG][2];
      for (int h = 0; h < HG; ++h) acc[h][0] = acc[h][1] = hn::Zero(df);
      ScoreRun<HG, 2>(q, blk + i, sc ? sc + i : nullptr, k.len, hd, i == 0 ? next : nullptr, acc);
      for (int h = 0; h < HG; ++h) {
        hn::StoreU(hn::Mul(acc[h][0], vscale), df, scores + h * ss + (b0 + i - first));
        hn::StoreU(hn::Mul(acc[h][1], vscale), df, scores + h * ss + (b0 + i - first) + N);
      }
    }
    for (; i < end; i += N) {
      const int64_t n = std::min(N, end - i);
      VF acc[HG][1];
      for (int h = 0; h < HG; ++h) acc[h][0] = hn::Zero(df);
      if (i + N <= k.len) {
        // A whole vector of the column, the lanes past the context's end included:
        // every lane is its own sum, and only the first n are stored.
        ScoreRun<HG, 1>(q, blk + i, sc ? sc + i : nullptr, k.len, hd, i == 0 ? next : nullptr, acc);
      } else if constexpr (kQuantized<T>) {
        // Positions [i, end) of every column widened and scaled, zero-padded to a vector.
        thread_local std::vector<float> part;
        part.assign(static_cast<size_t>(hd * N), 0.0f);
        for (int64_t d = 0; d < hd; ++d)
          for (int64_t x = 0; x < n; ++x)
            part[static_cast<size_t>(d * N + x)] =
                static_cast<float>(blk[d * k.len + i + x]) * sc[d / kKvQ8Group * k.len + i + x];
        ScoreRun<HG, 1, float>(q, part.data(), nullptr, N, hd, nullptr, acc);
      } else {
        // Positions [i, end) of every column, zero-padded to a vector (a run's tail).
        thread_local std::vector<T> part;
        part.assign(static_cast<size_t>(hd * N), T{});
        for (int64_t d = 0; d < hd; ++d) std::copy_n(blk + d * k.len + i, n, part.data() + d * N);
        ScoreRun<HG, 1, T>(q, part.data(), nullptr, N, hd, nullptr, acc);
      }
      for (int h = 0; h < HG; ++h) StoreFirst(df, hn::Mul(acc[h][0], vscale), scores + h * ss + (b0 + i - first), n);
    }
  }
}

// f(std::integral_constant<int, HG>{}) for a run-time count of rows hg (1 to kHeads):
// the kernels take HG at compile time, so their sums stay in registers.
template <class F>
HWY_INLINE void ForRows(int hg, const F& f) {
  static_assert(kHeads == 8, "one case per count of rows");
  switch (hg) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 5: return f(std::integral_constant<int, 5>{});
    case 6: return f(std::integral_constant<int, 6>{});
    case 7: return f(std::integral_constant<int, 7>{});
    default: return f(std::integral_constant<int, 8>{});
  }
}

template <class T>
void ScoresT(int hg, const float* HWY_RESTRICT q, const Paged<T>& k, int64_t first, int64_t n_keys, int64_t hd,
             float scale, float* HWY_RESTRICT scores, int64_t ss) {
  ForRows(hg, [&](auto rows) { ScoresHeads<decltype(rows)::value>(q, k, first, n_keys, hd, scale, scores, ss); });
}
void Scores(int hg, const float* HWY_RESTRICT q, const Paged<float>& k, int64_t first, int64_t n_keys, int64_t hd,
            float scale, float* HWY_RESTRICT scores, int64_t ss) {
  ScoresT(hg, q, k, first, n_keys, hd, scale, scores, ss);
}
void ScoresF16(int hg, const float* HWY_RESTRICT q, const Paged<uint16_t>& k, int64_t first, int64_t n_keys,
               int64_t hd, float scale, float* HWY_RESTRICT scores, int64_t ss) {
  ScoresT(hg, q, k, first, n_keys, hd, scale, scores, ss);
}
void ScoresQ8(int hg, const float* HWY_RESTRICT q, const Paged<int8_t>& k, int64_t first, int64_t n_keys,
              int64_t hd, float scale, float* HWY_RESTRICT scores, int64_t ss) {
  ScoresT(hg, q, k, first, n_keys, hd, scale, scores, ss);
}

// In-place softmax of x[0, n): max, exp, sum (f32 lanes, then double across lanes).
// sink: one more logit in the denominator whose probability is dropped (an attention
// sink); -inf: none, and then the arithmetic is exactly the plain softmax's.
void Softmax(float* HWY_RESTRICT x, int64_t n, float sink) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  float mx = x[0];
  int64_t i = 0;
  if (n >= N) {
    VF m = hn::LoadU(df, x);
    for (i = N; i + N <= n; i += N) m = hn::Max(m, hn::LoadU(df, x + i));
    mx = hn::GetLane(hn::MaxOfLanes(df, m));
  }
  for (; i < n; ++i) mx = std::max(mx, x[i]);
  mx = std::max(mx, sink);
  const VF vmx = hn::Set(df, mx);
  VF sum = hn::Zero(df);
  double tail = 0;
  for (i = 0; i + N <= n; i += N) {
    const VF e = hn::Exp(df, hn::Sub(hn::LoadU(df, x + i), vmx));
    hn::StoreU(e, df, x + i);
    sum = hn::Add(sum, e);
  }
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    tail += x[i];
  }
  const double total = static_cast<double>(hn::GetLane(hn::SumOfLanes(df, sum))) + tail +
                       (sink == -INFINITY ? 0.0 : std::exp(static_cast<double>(sink) - mx));
  const VF inv = hn::Set(df, static_cast<float>(1.0 / total));
  for (i = 0; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(df, x + i), inv), df, x + i);
  for (; i < n; ++i) x[i] *= hn::GetLane(inv);
}

// Calls f(blk, scales, next, i0, n, avail, p0) for each block holding positions of
// [first, n_keys), in order: its rows [i0, n) are positions first + p0 on, scales its
// plane's (null unless int8), next the block after it (null at the end) and avail the
// positions from its start to n_keys.
template <class T, class F>
HWY_INLINE void ForEachBlock(const Paged<T>& kv, int64_t first, int64_t n_keys, const F& f) {
  for (int64_t b = first / kv.len, b0 = b * kv.len; b0 < n_keys; b0 += kv.len, ++b) {
    const T* blk = kv.block(b);
    const int64_t i0 = std::max<int64_t>(0, first - b0);
    f(blk, PlaneScales(kv, blk), b0 + kv.len < n_keys ? kv.block(b + 1) : nullptr, i0,
      std::min(kv.len, n_keys - b0), n_keys - b0, b0 + i0 - first);
  }
}

// o[h * hd + d0 + j * N] (j < NV) += sum_i w[h * ws + p0 + i - i0] * v_i[d0 + j * N] for
// the HG heads and a block's rows i in [i0, n) (init: = instead of +=): a slice of NV
// vectors of each head, its HG x NV sums in registers across the block's rows; each V
// vector loaded feeds all HG heads. Every lane still sums its positions in order,
// block after block, so the result is that of one pass over all positions. NV is a
// compile-time count: with a run-time one the accumulators lived on the stack, a load
// and a store around every multiply-add.
template <int HG, int NV, class T>
HWY_INLINE void WeightedSlice(const float* HWY_RESTRICT w, int64_t ws, const T* HWY_RESTRICT blk, const float* sc,
                              int64_t groups, const T* next, int64_t i0, int64_t n, int64_t avail, int64_t p0,
                              int64_t len, int64_t hd, int64_t d0, bool init, float* HWY_RESTRICT o) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  VF acc[HG][NV];
  for (int h = 0; h < HG; ++h)
    for (int j = 0; j < NV; ++j) acc[h][j] = init ? hn::Zero(df) : hn::LoadU(df, o + h * hd + d0 + j * N);
  for (int64_t i = i0; i < n; ++i) {
    // The row kAhead positions on, within this block or the next (kAhead may exceed a
    // short block: then nothing).
    const int64_t a = i + kAhead;
    const T* ahead = a < n ? blk + a * hd : (next && a < avail && a - len < len ? next + (a - len) * hd : nullptr);
    if (ahead) PrefetchRow(ahead + d0, NV * N);
    const T* vp = blk + i * hd + d0;
    VF wp[HG];
    for (int h = 0; h < HG; ++h) wp[h] = hn::Set(df, w[h * ws + p0 + i - i0]);
    for (int j = 0; j < NV; ++j) {
      VF vj = LoadKV(df, vp + j * N);
      if constexpr (kQuantized<T>) vj = hn::Mul(vj, ScaleOf(df, sc + i * groups, d0 + j * N));
      for (int h = 0; h < HG; ++h) acc[h][j] = hn::MulAdd(wp[h], vj, acc[h][j]);
    }
  }
  for (int h = 0; h < HG; ++h)
    for (int j = 0; j < NV; ++j) hn::StoreU(acc[h][j], df, o + h * hd + d0 + j * N);
}

// All of each head, block by block: each block's rows through every slice of up to S
// vectors (HG x S at most 24 registers) while the block is in L1, the partial sums
// kept in o between blocks, so the values are read from memory once however many
// slices a head takes (eight heads of 128: three); the tail that is not whole vectors
// one element at a time. init: o = the sum over [first, n_keys); else o += it, the
// sums going on from o's as if the positions before `first` had been in this call.
template <int HG, class T>
HWY_INLINE void WeightedHeads(const float* HWY_RESTRICT w, int64_t ws, const Paged<T>& v, int64_t first,
                              int64_t n_keys, int64_t hd, bool init, float* HWY_RESTRICT o) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  constexpr int64_t S = HG == 1 ? 8 : 24 / HG;
  const int64_t hv = hd / N * N;
  const bool fresh = init;
  ForEachBlock(v, first, n_keys, [&](const T* blk, const float* sc, const T* next, int64_t i0, int64_t n,
                                     int64_t avail, int64_t p0) {
    for (int64_t d0 = 0; d0 < hv;) {
      const int64_t nv = std::min<int64_t>(S, (hv - d0) / N);
      // Widths 8, 6 (S for four heads), 4, 3 (S for seven and eight), 2 and 1 cover
      // every count up to S.
      auto slice = [&](auto width) {
        constexpr int W = decltype(width)::value;
        WeightedSlice<HG, W>(w, ws, blk, sc, v.groups, next, i0, n, avail, p0, v.len, hd, d0, init, o);
        d0 += W * N;
      };
      if (nv >= 8 && S >= 8) slice(std::integral_constant<int, (S >= 8 ? 8 : 1)>{});
      else if (nv >= 6 && S >= 6) slice(std::integral_constant<int, (S >= 6 ? 6 : 1)>{});
      else if (nv >= 4) slice(std::integral_constant<int, 4>{});
      else if (nv >= 3) slice(std::integral_constant<int, 3>{});
      else if (nv >= 2) slice(std::integral_constant<int, 2>{});
      else slice(std::integral_constant<int, 1>{});
    }
    init = false;
  });
  if (hv == hd) return;
  float s[kHeads][8];  // the tail of a head that is not whole vectors (< N <= 16 elements)
  for (int64_t d = hv; d < hd; d += 8) {
    const int64_t nd = std::min<int64_t>(8, hd - d);
    for (int h = 0; h < HG; ++h)
      for (int64_t e = 0; e < nd; ++e) s[h][e] = fresh ? 0.0f : o[h * hd + d + e];
    ForEachBlock(v, first, n_keys, [&](const T* blk, const float* sc, const T*, int64_t i0, int64_t n, int64_t,
                                       int64_t p0) {
      for (int64_t i = i0; i < n; ++i)
        for (int h = 0; h < HG; ++h)
          for (int64_t e = 0; e < nd; ++e)
            s[h][e] += w[h * ws + p0 + i - i0] * ScalarAt(blk + i * hd, sc ? sc + i * v.groups : nullptr, d + e);
    });
    for (int h = 0; h < HG; ++h)
      for (int64_t e = 0; e < nd; ++e) o[h * hd + d + e] = s[h][e];
  }
}

template <class T>
void WeightedT(int hg, const float* HWY_RESTRICT w, int64_t ws, const Paged<T>& v, int64_t first, int64_t n_keys,
               int64_t hd, bool init, float* HWY_RESTRICT o) {
  ForRows(hg, [&](auto rows) { WeightedHeads<decltype(rows)::value>(w, ws, v, first, n_keys, hd, init, o); });
}
void Weighted(int hg, const float* HWY_RESTRICT w, int64_t ws, const Paged<float>& v, int64_t first, int64_t n_keys,
              int64_t hd, bool init, float* HWY_RESTRICT o) {
  WeightedT(hg, w, ws, v, first, n_keys, hd, init, o);
}
void WeightedF16(int hg, const float* HWY_RESTRICT w, int64_t ws, const Paged<uint16_t>& v, int64_t first,
                 int64_t n_keys, int64_t hd, bool init, float* HWY_RESTRICT o) {
  WeightedT(hg, w, ws, v, first, n_keys, hd, init, o);
}
void WeightedQ8(int hg, const float* HWY_RESTRICT w, int64_t ws, const Paged<int8_t>& v, int64_t first,
                int64_t n_keys, int64_t hd, bool init, float* HWY_RESTRICT o) {
  WeightedT(hg, w, ws, v, first, n_keys, hd, init, o);
}

// dst[r * dst_stride + i] = src[r * n + i] (i < n, r < rows) as IEEE half bits,
// rounded to nearest even (fp32_to_fp16's rounding).
void ToF16(const float* HWY_RESTRICT src, int64_t rows, int64_t n, uint16_t* HWY_RESTRICT dst, int64_t dst_stride) {
  const DF df;
  const hn::Rebind<hwy::float16_t, DF> dh;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = src + r * n;
    uint16_t* d = dst + r * dst_stride;
    int64_t i = 0;
    for (; i + N <= n; i += N) hn::StoreU(hn::DemoteTo(dh, hn::LoadU(df, s + i)), dh, reinterpret_cast<hwy::float16_t*>(d + i));
    for (; i < n; ++i) d[i] = fp32_to_fp16(s[i]);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace moeflow::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moeflow::cpu {

HWY_EXPORT(Scores);
HWY_EXPORT(ScoresF16);
HWY_EXPORT(ScoresQ8);
HWY_EXPORT(Softmax);
HWY_EXPORT(Weighted);
HWY_EXPORT(WeightedF16);
HWY_EXPORT(WeightedQ8);
HWY_EXPORT(ToF16);
HWY_EXPORT(RowsTogether);

int64_t kv_plane_size(DType kv_type, int64_t block_len, int64_t width) {
  if (kv_type == DType::Q8_0) return q8_scale_offset(block_len, width) + q8_groups(width) * block_len * 4;
  return block_len * width;
}

size_t kv_element_bytes(DType kv_type) {
  if (!kv_type_supported(kv_type))
    throw std::invalid_argument(std::string("moeflow: a ") + dtype_name(kv_type) + " KV cache (f32, f16 or q8_0 only)");
  return kv_type == DType::F32 ? 4 : kv_type == DType::F16 ? 2 : 1;
}

bool kv_type_supported(DType kv_type) {
  return kv_type == DType::F32 || kv_type == DType::F16 || kv_type == DType::Q8_0;
}

void kv_store(DType kv_type, const float* src, void* dst, int64_t n) { kv_store_rows(kv_type, src, 1, n, dst, n); }

void kv_store_rows(DType kv_type, const float* src, int64_t rows, int64_t n, void* dst, int64_t dst_stride) {
  if (kv_type == DType::F32) {
    for (int64_t r = 0; r < rows; ++r) std::copy_n(src + r * n, n, static_cast<float*>(dst) + r * dst_stride);
  } else if (kv_type == DType::F16) {
    HWY_DYNAMIC_DISPATCH(ToF16)(src, rows, n, static_cast<uint16_t*>(dst), dst_stride);
  } else {
    throw std::invalid_argument(std::string("moeflow: a ") + dtype_name(kv_type) + " KV cache (f32 or f16 only)");
  }
}

void kv_store_columns(DType kv_type, const float* src, int64_t rows, int64_t n, void* dst, int64_t dst_stride,
                      int64_t elem_stride) {
  if (kv_type == DType::F32) {
    auto* d = static_cast<float*>(dst);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < n; ++i) d[r * dst_stride + i * elem_stride] = src[r * n + i];
  } else if (kv_type == DType::F16) {
    // Each row rounded by the vector conversion first (ToF16, the value rows' own),
    // then scattered: the scalar fp32_to_fp16 per element cost more than the stores.
    thread_local std::vector<uint16_t> half;
    half.resize(static_cast<size_t>(rows * n));
    HWY_DYNAMIC_DISPATCH(ToF16)(src, rows, n, half.data(), n);
    auto* d = static_cast<uint16_t*>(dst);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < n; ++i) d[r * dst_stride + i * elem_stride] = half[static_cast<size_t>(r * n + i)];
  } else {
    throw std::invalid_argument(std::string("moeflow: a ") + dtype_name(kv_type) + " KV cache (f32 or f16 only)");
  }
}

namespace {

// One row of n floats into a Q8_0 plane at row `row` of its block: each group's scale
// max |x| / 127 and q = round(x / scale), as llama.cpp's quantize_row_q8_0 rounds (half
// away from zero). A group holding a NaN gets a NaN scale (and zeros), an infinite one
// an infinite scale: what the group reads back is not finite, as an f16 cache's would be.
void store_q8_row(const float* x, int64_t n, int8_t* plane, int64_t block_len, int64_t row, bool keys) {
  auto* scales = reinterpret_cast<float*>(plane + q8_scale_offset(block_len, n));
  const int64_t groups = q8_groups(n);
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t d0 = g * kKvQ8Group, d1 = std::min(n, d0 + kKvQ8Group);
    float amax = 0;
    bool nan = false;
    for (int64_t d = d0; d < d1; ++d) {
      nan |= std::isnan(x[d]);
      amax = std::max(amax, std::fabs(x[d]));
    }
    const float scale = nan ? NAN : amax / 127.0f;
    const float inv = std::isfinite(scale) && scale > 0 ? 1.0f / scale : 0.0f;
    for (int64_t d = d0; d < d1; ++d) {
      const float r = std::round(x[d] * inv);  // |x * inv| <= 127 up to rounding; 0 for a NaN group
      const auto q = static_cast<int8_t>(std::isnan(r) ? 0.0f : std::clamp(r, -127.0f, 127.0f));
      plane[keys ? d * block_len + row : row * n + d] = q;
    }
    scales[keys ? g * block_len + row : row * groups + g] = scale;
  }
}

}  // namespace

void kv_store_slot(DType kv_type, const float* src, int64_t rows, int64_t n, const KvSlot& at) {
  if (kv_type == DType::Q8_0) {
    for (int64_t r = 0; r < rows; ++r)
      store_q8_row(src + r * n, n, static_cast<int8_t*>(at.plane0) + r * at.plane, at.block_len, at.row, at.keys);
    return;
  }
  void* dst = at.first(kv_element_bytes(kv_type), n);
  if (at.keys) kv_store_columns(kv_type, src, rows, n, dst, at.plane, at.element_stride());
  else kv_store_rows(kv_type, src, rows, n, dst, at.plane);
}

namespace {

template <class T>
auto kernels_for() {
  if constexpr (std::is_same_v<T, uint16_t>) {
    return std::make_pair(HWY_DYNAMIC_DISPATCH(ScoresF16), HWY_DYNAMIC_DISPATCH(WeightedF16));
  } else if constexpr (kQuantized<T>) {
    return std::make_pair(HWY_DYNAMIC_DISPATCH(ScoresQ8), HWY_DYNAMIC_DISPATCH(WeightedQ8));
  } else {
    return std::make_pair(HWY_DYNAMIC_DISPATCH(Scores), HWY_DYNAMIC_DISPATCH(Weighted));
  }
}

// The cache's elements as the kernels take them: float, uint16_t for half bits, int8_t
// for Q8_0.
template <class T>
void attention_typed(const AttentionShape& s, const float* q, int64_t n_tok, const AttentionQuery* tok,
                     const T* k_cache, const T* v_cache, float* out, ThreadPool* pool) {
  const int64_t group = s.n_head / s.n_head_kv;
  const int threads = pool ? pool->size() : 1;
  const int64_t per_job = n_tok * s.n_head_kv * ((group + kHeads - 1) / kHeads) >= threads ? kHeads : kFewerHeads;
  const int64_t chunks = (group + per_job - 1) / per_job;  // chunks of heads per group
  const int64_t hd = s.head_dim, vd = s.v_dim();
  const int64_t q_stride = s.n_head * hd, o_stride = s.n_head * vd;
  const float scale = s.scale > 0 ? s.scale : 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t k_plane = s.k_plane(), v_plane = s.v_plane();
  const int64_t k_scales = kQuantized<T> ? q8_scale_offset(s.block_len, hd) : 0;
  const int64_t v_scales = kQuantized<T> ? q8_scale_offset(s.block_len, vd) : 0;
  int64_t n_ctx = 0;
  for (int64_t t = 0; t < n_tok; ++t) n_ctx = std::max(n_ctx, tok[t].pos + 1);
  const auto kernels = kernels_for<T>();  // not a structured binding: clang 14 cannot capture one
  const auto scores_fn = kernels.first;
  const auto weighted_fn = kernels.second;
  auto softmax_fn = HWY_DYNAMIC_DISPATCH(Softmax);
  // Tokens that read the same cached rows share a job, their query heads the rows one
  // kernel call computes together (at most RowsTogether): each key and value vector
  // loaded feeds that many more multiply-adds, and the rows they share are read once
  // per job, not once per token. That is a prefill's consecutive tokens of one
  // sequence (a 4064-token prefill 1.46-1.52x as fast with groups of one query head,
  // OLMoE's and Qwen2-MoE's, 1.13-1.21x with groups of two), and the decode tokens of
  // sequences that continue one parked prompt (a system prompt many requests share),
  // whose block tables start with the same blocks (8 sequences after 4032 shared
  // positions: attention 1.2-1.6x as fast with groups of two, 2.2-2.7x with groups of
  // one). Not fewer jobs than threads, and only where every token attends from position
  // 0 (not past a sliding window's start). A group of eight fills a call alone, and
  // there the arithmetic binds, not the reads (8 such sequences at 4064 positions ran at
  // ~73% of the FMA peak; more rows per job, through L2-sized spans, ran 4% slower).
  const int64_t hg_max = std::min(group, per_job);
  const int64_t max_run = std::clamp<int64_t>(n_tok * s.n_head_kv * chunks / threads, 1,
                                              HWY_DYNAMIC_DISPATCH(RowsTogether)() / hg_max);
  // Positions [0, shared) that tokens a and b read from the same blocks: whole blocks
  // both tables hold, up to the shorter context.
  const auto shared_by = [&](int64_t a, int64_t b) {
    const int64_t n = std::min(tok[a].pos, tok[b].pos) + 1;
    if (tok[a].blocks == tok[b].blocks) return n;
    int64_t blocks = 0;
    while (blocks * s.block_len < n && tok[a].blocks[blocks] == tok[b].blocks[blocks]) ++blocks;
    return std::min(n, blocks * s.block_len);
  };
  // order[run_at[u], run_at[u + 1]): run u's tokens, the first taking the others that
  // share at least a block with it, and no fewer positions than the run's first
  // joiner: run_shared[u] positions from 0 are every token's.
  std::vector<int64_t> order, run_at, run_shared;
  order.reserve(static_cast<size_t>(n_tok));
  std::vector<char> taken(static_cast<size_t>(n_tok), 0);
  const auto from_zero = [&](int64_t t) { return s.window == 0 || tok[t].pos < s.window; };
  for (int64_t t = 0; t < n_tok; ++t) {
    if (taken[t]) continue;
    run_at.push_back(static_cast<int64_t>(order.size()));
    order.push_back(t);
    int64_t shared = tok[t].pos + 1;
    for (int64_t u = t + 1; from_zero(t) && u < n_tok && static_cast<int64_t>(order.size()) - run_at.back() < max_run;
         ++u) {
      if (taken[u] || !from_zero(u)) continue;
      const int64_t c = shared_by(t, u);
      const bool alone = static_cast<int64_t>(order.size()) - run_at.back() == 1;
      if (c < std::min(shared, s.block_len) || (!alone && c < shared)) continue;
      shared = alone ? c : shared;
      taken[u] = 1;
      order.push_back(u);
    }
    run_shared.push_back(shared);
  }
  run_at.push_back(n_tok);
  const int64_t runs = static_cast<int64_t>(run_shared.size());
  // A job: one run's chunk of up to per_job query heads of one kv head.
  const int64_t jobs = runs * s.n_head_kv * chunks;
  auto work = [&](int64_t begin, int64_t end, int) {
    thread_local std::vector<float> scores, q_rows, o_rows;
    const auto at_least = [](std::vector<float>& v, int64_t n) {
      if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
    };
    at_least(scores, kHeads * n_ctx);
    at_least(q_rows, kHeads * hd);
    at_least(o_rows, kHeads * vd);
    for (int64_t i = begin; i < end; ++i) {
      // Jobs dealt in zig-zag order (0, last, 1, last - 1, ...): in prefill token t
      // attends to its pos + 1 positions, so plain contiguous shares would give the
      // last thread the longest rows (3:1 on two threads from an empty cache); pairs of
      // a short and a long row make every share about even.
      const int64_t job = i % 2 == 0 ? i / 2 : jobs - 1 - i / 2;
      const int64_t u = job / (s.n_head_kv * chunks), rest = job % (s.n_head_kv * chunks);
      const int64_t* run = order.data() + run_at[u];
      const int64_t nt = run_at[u + 1] - run_at[u];
      const int64_t g = rest / chunks, h0 = g * group + (rest % chunks) * per_job;
      const int hg = static_cast<int>(std::min<int64_t>(per_job, (g + 1) * group - h0));
      const auto keys = [&](int64_t t) {
        return Paged<T>{k_cache + g * k_plane, tok[t].blocks, s.block_stride, s.block_len, k_scales, q8_groups(hd)};
      };
      const auto values = [&](int64_t t) {
        return Paged<T>{v_cache + g * v_plane, tok[t].blocks, s.v_stride(), s.block_len, v_scales, q8_groups(vd)};
      };
      const float* sinks = s.sinks ? s.sinks + h0 : nullptr;
      // Row j * hg + h: token run[j]'s head h0 + h. The scores and the weighted sums run
      // over [first, shared), the positions every token of the run reads, for all rows
      // together, then over each token's own (its blocks) alone, its sums going on in
      // position order: the floats of each token alone in a call. first is 0 for a run
      // of several tokens (from_zero), a sliding window's start for one token alone.
      const int rows = static_cast<int>(nt) * hg;
      const int64_t shared = run_shared[u];
      const int64_t first = nt == 1 && s.window > 0 ? std::max<int64_t>(0, shared - s.window) : 0;
      for (int64_t j = 0; j < nt; ++j)
        std::copy_n(q + run[j] * q_stride + h0 * hd, hg * hd, q_rows.data() + j * hg * hd);
      scores_fn(rows, q_rows.data(), keys(run[0]), first, shared, hd, scale, scores.data(), n_ctx);
      for (int64_t j = 0; j < nt; ++j)
        if (tok[run[j]].pos + 1 > shared)
          scores_fn(hg, q_rows.data() + j * hg * hd, keys(run[j]), shared, tok[run[j]].pos + 1, hd, scale,
                    scores.data() + j * hg * n_ctx + shared - first, n_ctx);
      for (int r = 0; r < rows; ++r)
        softmax_fn(scores.data() + r * n_ctx, tok[run[r / hg]].pos + 1 - first, sinks ? sinks[r % hg] : -INFINITY);
      weighted_fn(rows, scores.data(), n_ctx, values(run[0]), first, shared, vd, true, o_rows.data());
      for (int64_t j = 0; j < nt; ++j) {
        if (tok[run[j]].pos + 1 > shared)
          weighted_fn(hg, scores.data() + j * hg * n_ctx + shared - first, n_ctx, values(run[j]), shared,
                      tok[run[j]].pos + 1, vd, false, o_rows.data() + j * hg * vd);
        std::copy_n(o_rows.data() + j * hg * vd, hg * vd, out + run[j] * o_stride + h0 * vd);
      }
    }
  };
  if (pool) pool->parallel_for(jobs, work);
  else work(0, jobs, 0);
}

void check_shape(const AttentionShape& s, const void* k_cache, const void* v_cache, const char* who) {
  if (!kv_type_supported(s.kv_type))
    throw std::invalid_argument(std::string("moeflow: ") + who + " over a " + dtype_name(s.kv_type) +
                                " KV cache (f32, f16 or q8_0 only)");
  if (s.n_head <= 0 || s.n_head_kv <= 0 || s.n_head % s.n_head_kv || s.head_dim <= 0 || s.block_len <= 0 ||
      s.block_stride < s.n_head_kv * s.k_plane() || s.window < 0 || s.v_head_dim < 0 ||
      s.v_stride() < s.n_head_kv * s.v_plane() || !(s.scale >= 0))
    throw std::invalid_argument(std::string("moeflow: ") + who + ": inconsistent attention shape");
  // Q8_0 planes hold floats: every plane must start 4-byte aligned.
  if (s.kv_type == DType::Q8_0 && (s.block_stride % 4 || s.v_stride() % 4 || reinterpret_cast<uintptr_t>(k_cache) % 4 ||
                                   reinterpret_cast<uintptr_t>(v_cache) % 4))
    throw std::invalid_argument(std::string("moeflow: ") + who + ": a q8_0 cache's blocks must be 4-byte aligned");
}

}  // namespace

void attention(const AttentionShape& s, const float* q, int64_t n_tok, const AttentionQuery* tok, const void* k_cache,
               const void* v_cache, float* out, ThreadPool* pool) {
  check_shape(s, k_cache, v_cache, "attention");
  if (s.kv_type == DType::F32) {
    attention_typed(s, q, n_tok, tok, static_cast<const float*>(k_cache), static_cast<const float*>(v_cache), out,
                    pool);
  } else if (s.kv_type == DType::Q8_0) {
    attention_typed(s, q, n_tok, tok, static_cast<const int8_t*>(k_cache), static_cast<const int8_t*>(v_cache), out,
                    pool);
  } else {
    attention_typed(s, q, n_tok, tok, static_cast<const uint16_t*>(k_cache), static_cast<const uint16_t*>(v_cache),
                    out, pool);
  }
}

void attention_reference(const AttentionShape& s, const float* q, int64_t n_tok, const AttentionQuery* tok,
                         const void* k_cache_raw, const void* v_cache_raw, float* out) {
  check_shape(s, k_cache_raw, v_cache_raw, "attention_reference");
  const int64_t group = s.n_head / s.n_head_kv;
  const int64_t q_stride = s.n_head * s.head_dim, vd = s.v_dim(), o_stride = s.n_head * vd;
  const double scale = s.scale > 0 ? s.scale : 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  const int64_t L = s.block_len;
  // Element d of kv head g's key (keys) or value at position p of the sequence whose
  // block table is `blocks`, read straight from the layout attention.h describes.
  auto element = [&](const void* cache, bool keys, const int32_t* blocks, int64_t g, int64_t p, int64_t d) {
    const int64_t width = keys ? s.head_dim : vd, r = p % L;
    const int64_t plane = blocks[p / L] * (keys ? s.block_stride : s.v_stride()) + g * (keys ? s.k_plane() : s.v_plane());
    const int64_t i = plane + (keys ? d * L + r : r * width + d);
    if (s.kv_type == DType::F32) return static_cast<double>(static_cast<const float*>(cache)[i]);
    if (s.kv_type == DType::F16) return static_cast<double>(fp16_to_fp32(static_cast<const uint16_t*>(cache)[i]));
    const auto* q8 = static_cast<const int8_t*>(cache);
    const auto* scales = reinterpret_cast<const float*>(q8 + plane + q8_scale_offset(L, width));
    const int64_t g8 = d / kKvQ8Group;
    return static_cast<double>(q8[i]) * scales[keys ? g8 * L + r : r * q8_groups(width) + g8];
  };
  for (int64_t t = 0; t < n_tok; ++t) {
    const int64_t n_keys = tok[t].pos + 1;
    const int64_t first = s.window > 0 ? std::max<int64_t>(0, n_keys - s.window) : 0;
    std::vector<double> scores(static_cast<size_t>(n_keys));
    for (int64_t h = 0; h < s.n_head; ++h) {
      const int64_t g = h / group;
      const float* qh = q + t * q_stride + h * s.head_dim;
      const double sink = s.sinks ? static_cast<double>(s.sinks[h]) : -INFINITY;
      double mx = sink;
      for (int64_t p = first; p < n_keys; ++p) {
        double dot = 0;
        for (int64_t d = 0; d < s.head_dim; ++d)
          dot += static_cast<double>(qh[d]) * element(k_cache_raw, true, tok[t].blocks, g, p, d);
        scores[p] = dot * scale;
        mx = std::max(mx, scores[p]);
      }
      double sum = std::exp(sink - mx);
      for (int64_t p = first; p < n_keys; ++p) sum += scores[p] = std::exp(scores[p] - mx);
      for (int64_t d = 0; d < vd; ++d) {
        double o = 0;
        for (int64_t p = first; p < n_keys; ++p)
          o += scores[p] / sum * element(v_cache_raw, false, tok[t].blocks, g, p, d);
        out[t * o_stride + h * vd + d] = static_cast<float>(o);
      }
    }
  }
}

}  // namespace moeflow::cpu
#endif  // HWY_ONCE

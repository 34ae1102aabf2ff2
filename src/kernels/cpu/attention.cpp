// Attention over the KV cache, compiled per SIMD target (Highway foreach_target).
//
// Why SIMD here: a plain loop `dot += q[d] * k[d]` is a floating-point reduction the
// compiler may not reorder, so it runs one dependent FMA at a time (~4 cycles per
// element). At a few hundred cached positions that made attention ~11% of a decode
// step on the 330M benchmark model, against ~1% of its FLOPs. Here each score is a
// few independent vector FMAs and one horizontal sum, the softmax is vectorised, and
// the weighted sum of V keeps its output slice in registers while it walks the keys.
// attention_reference keeps the scalar (double-accumulating) definition for tests.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/attention.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/attention.h"

HWY_BEFORE_NAMESPACE();
namespace moeflow::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// scores[p] = scale * <q, k_p> for p in [0, n_keys); k_p = k + p * stride.
void Scores(const float* HWY_RESTRICT q, const float* HWY_RESTRICT k, int64_t stride, int64_t n_keys,
            int64_t hd, float scale, float* HWY_RESTRICT scores) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t hv = hd / N * N;  // vector part of the head
  for (int64_t p = 0; p < n_keys; ++p) {
    const float* kp = k + p * stride;
    VF a0 = hn::Zero(df), a1 = hn::Zero(df);
    int64_t d = 0;
    for (; d + 2 * N <= hv; d += 2 * N) {
      a0 = hn::MulAdd(hn::LoadU(df, q + d), hn::LoadU(df, kp + d), a0);
      a1 = hn::MulAdd(hn::LoadU(df, q + d + N), hn::LoadU(df, kp + d + N), a1);
    }
    for (; d < hv; d += N) a0 = hn::MulAdd(hn::LoadU(df, q + d), hn::LoadU(df, kp + d), a0);
    float s = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0, a1)));
    for (; d < hd; ++d) s += q[d] * kp[d];
    scores[p] = s * scale;
  }
}

// In-place softmax of x[0, n): max, exp, sum (f32 lanes, then double across lanes).
void Softmax(float* HWY_RESTRICT x, int64_t n) {
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
  const double total = static_cast<double>(hn::GetLane(hn::SumOfLanes(df, sum))) + tail;
  const VF inv = hn::Set(df, static_cast<float>(1.0 / total));
  for (i = 0; i + N <= n; i += N) hn::StoreU(hn::Mul(hn::LoadU(df, x + i), inv), df, x + i);
  for (; i < n; ++i) x[i] *= hn::GetLane(inv);
}

// o[0, hd) = sum_p w[p] * v_p, v_p = v + p * stride. Output slices of up to kSlice
// vectors stay in registers while every key is visited.
void Weighted(const float* HWY_RESTRICT w, const float* HWY_RESTRICT v, int64_t stride, int64_t n_keys,
              int64_t hd, float* HWY_RESTRICT o) {
  const DF df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  constexpr int64_t kSlice = 8;
  const int64_t hv = hd / N * N;
  int64_t d0 = 0;
  for (; d0 < hv; d0 += kSlice * N) {
    const int64_t nv = std::min<int64_t>(kSlice, (hv - d0) / N);
    VF acc[kSlice];
    for (int64_t j = 0; j < kSlice; ++j) acc[j] = hn::Zero(df);
    for (int64_t p = 0; p < n_keys; ++p) {
      const VF wp = hn::Set(df, w[p]);
      const float* vp = v + p * stride + d0;
      for (int64_t j = 0; j < nv; ++j) acc[j] = hn::MulAdd(wp, hn::LoadU(df, vp + j * N), acc[j]);
    }
    for (int64_t j = 0; j < nv; ++j) hn::StoreU(acc[j], df, o + d0 + j * N);
  }
  for (int64_t d = hv; d < hd; ++d) {
    float s = 0;
    for (int64_t p = 0; p < n_keys; ++p) s += w[p] * v[p * stride + d];
    o[d] = s;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace moeflow::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moeflow::cpu {

HWY_EXPORT(Scores);
HWY_EXPORT(Softmax);
HWY_EXPORT(Weighted);

void attention(const AttentionShape& s, const float* q, int64_t n_tok, int64_t pos0,
               const float* k_cache, const float* v_cache, float* out, ThreadPool* pool) {
  const int64_t group = s.n_head / s.n_head_kv;
  const int64_t q_stride = s.n_head * s.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const int64_t n_ctx = pos0 + n_tok;
  auto scores_fn = HWY_DYNAMIC_DISPATCH(Scores);
  auto softmax_fn = HWY_DYNAMIC_DISPATCH(Softmax);
  auto weighted_fn = HWY_DYNAMIC_DISPATCH(Weighted);
  auto work = [&](int64_t begin, int64_t end, int) {
    thread_local std::vector<float> scores;
    if (scores.size() < static_cast<size_t>(n_ctx)) scores.resize(static_cast<size_t>(n_ctx));
    for (int64_t job = begin; job < end; ++job) {
      const int64_t t = job / s.n_head, h = job % s.n_head;
      const int64_t kv_off = (h / group) * s.head_dim;
      const int64_t n_keys = pos0 + t + 1;
      scores_fn(q + t * q_stride + h * s.head_dim, k_cache + kv_off, s.kv_stride, n_keys, s.head_dim, scale,
                scores.data());
      softmax_fn(scores.data(), n_keys);
      weighted_fn(scores.data(), v_cache + kv_off, s.kv_stride, n_keys, s.head_dim,
                  out + t * q_stride + h * s.head_dim);
    }
  };
  const int64_t jobs = n_tok * s.n_head;
  if (pool) pool->parallel_for(jobs, work);
  else work(0, jobs, 0);
}

void attention_reference(const AttentionShape& s, const float* q, int64_t n_tok, int64_t pos0,
                         const float* k_cache, const float* v_cache, float* out) {
  const int64_t group = s.n_head / s.n_head_kv;
  const int64_t q_stride = s.n_head * s.head_dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.head_dim));
  std::vector<double> scores(static_cast<size_t>(pos0 + n_tok));
  for (int64_t t = 0; t < n_tok; ++t) {
    for (int64_t h = 0; h < s.n_head; ++h) {
      const int64_t kv_off = (h / group) * s.head_dim;
      const float* qh = q + t * q_stride + h * s.head_dim;
      const int64_t n_keys = pos0 + t + 1;
      double mx = -INFINITY;
      for (int64_t p = 0; p < n_keys; ++p) {
        const float* k = k_cache + p * s.kv_stride + kv_off;
        double dot = 0;
        for (int64_t d = 0; d < s.head_dim; ++d) dot += static_cast<double>(qh[d]) * k[d];
        scores[p] = dot * scale;
        mx = std::max(mx, scores[p]);
      }
      double sum = 0;
      for (int64_t p = 0; p < n_keys; ++p) sum += scores[p] = std::exp(scores[p] - mx);
      for (int64_t d = 0; d < s.head_dim; ++d) {
        double o = 0;
        for (int64_t p = 0; p < n_keys; ++p) o += scores[p] / sum * v_cache[p * s.kv_stride + kv_off + d];
        out[t * q_stride + h * s.head_dim + d] = static_cast<float>(o);
      }
    }
  }
}

}  // namespace moeflow::cpu
#endif  // HWY_ONCE

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/roofline.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <vector>

#include "kernels/cpu/roofline.h"

HWY_BEFORE_NAMESPACE();
namespace moeflow::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Returns the FLOPs performed; 8 independent accumulators hide the FMA latency.
double FmaLoop(int64_t iters, float seed, float* sink) {
  const hn::ScalableTag<float> d;
  auto a0 = hn::Set(d, seed), a1 = hn::Set(d, seed + 1), a2 = hn::Set(d, seed + 2), a3 = hn::Set(d, seed + 3);
  auto a4 = hn::Set(d, seed + 4), a5 = hn::Set(d, seed + 5), a6 = hn::Set(d, seed + 6), a7 = hn::Set(d, seed + 7);
  const auto m = hn::Set(d, 0.999999f), c = hn::Set(d, 1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    a0 = hn::MulAdd(a0, m, c); a1 = hn::MulAdd(a1, m, c); a2 = hn::MulAdd(a2, m, c); a3 = hn::MulAdd(a3, m, c);
    a4 = hn::MulAdd(a4, m, c); a5 = hn::MulAdd(a5, m, c); a6 = hn::MulAdd(a6, m, c); a7 = hn::MulAdd(a7, m, c);
  }
  const auto s = hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), hn::Add(hn::Add(a4, a5), hn::Add(a6, a7)));
  *sink = hn::GetLane(s);
  return 2.0 * 8.0 * static_cast<double>(hn::Lanes(d)) * static_cast<double>(iters);
}

}  // namespace HWY_NAMESPACE
}  // namespace moeflow::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moeflow::cpu {

HWY_EXPORT(FmaLoop);

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

double measure_triad_bandwidth_gbs(ThreadPool* pool, size_t bytes_per_array) {
  const size_t n = bytes_per_array / sizeof(float);
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  const float s = 3.0f;
  auto triad = [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) a[i] = b[i] + s * c[i];
  };
  // First touch from the pool, so pages land where the threads run.
  if (pool) pool->parallel_for(static_cast<int64_t>(n), triad, 1024);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = now();
    if (pool) pool->parallel_for(static_cast<int64_t>(n), triad, 1024);
    else triad(0, static_cast<int64_t>(n), 0);
    best = std::min(best, now() - t0);
  }
  return 3.0 * static_cast<double>(n * sizeof(float)) / best / 1e9;
}

double measure_peak_fma_gflops(ThreadPool* pool) {
  const int threads = pool ? pool->size() : 1;
  const int64_t iters = 20'000'000;
  std::vector<float> sink(static_cast<size_t>(threads) * 16);
  std::vector<double> flops(static_cast<size_t>(threads));
  double best = 1e30, total = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const double t0 = now();
    auto run = [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t)
        flops[t] = HWY_DYNAMIC_DISPATCH(FmaLoop)(iters, 1.0f + static_cast<float>(t), &sink[static_cast<size_t>(t) * 16]);
    };
    if (pool) pool->parallel_for(threads, run, 1);
    else run(0, 1, 0);
    const double dt = now() - t0;
    if (dt < best) {
      best = dt;
      total = 0;
      for (double f : flops) total += f;
    }
  }
  return total / best / 1e9;
}

}  // namespace moeflow::cpu
#endif

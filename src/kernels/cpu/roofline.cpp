#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/roofline.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kernels/cpu/roofline.h"
#include "tensor/anon_memory.h"

HWY_BEFORE_NAMESPACE();
namespace moeflow::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void Triad(float* HWY_RESTRICT a, const float* HWY_RESTRICT b, const float* HWY_RESTRICT c,
           float s, int64_t begin, int64_t end) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const auto vs = hn::Set(df, s);
  int64_t i = begin;
  for (; i + N <= end; i += N)
    hn::StoreU(hn::MulAdd(vs, hn::LoadU(df, c + i), hn::LoadU(df, b + i)), df, a + i);
  for (; i < end; ++i) a[i] = b[i] + s * c[i];
}

// Sums [begin, end) of x read as `streams` equal parts, one vector of each part in
// turn (how rows_x4_quads_multi walks paired matrices); returns the sum.
float ReadStreams(const float* HWY_RESTRICT x, int64_t begin, int64_t end, int streams) {
  const hn::ScalableTag<float> df;
  const int64_t N = static_cast<int64_t>(hn::Lanes(df));
  const int64_t part = (end - begin) / streams / N * N;
  auto acc0 = hn::Zero(df), acc1 = hn::Zero(df);
  for (int64_t i = 0; i < part; i += 2 * N)
    for (int s = 0; s < streams; ++s) {
      const float* p = x + begin + s * part + i;
      acc0 = hn::Add(acc0, hn::LoadU(df, p));
      if (i + N < part) acc1 = hn::Add(acc1, hn::LoadU(df, p + N));
    }
  return hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0, acc1)));
}

// Runs `iters` rounds of 12 independent vector FMAs; returns the lanes per vector.
int64_t FmaLoop(int64_t iters, float* sink) {
  const hn::ScalableTag<float> df;
  constexpr int kAcc = 12;
  hn::Vec<decltype(df)> acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = hn::Set(df, 1.0f + 1e-3f * static_cast<float>(i));
  const auto m = hn::Set(df, 0.999999f);
  const auto a = hn::Set(df, 1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < kAcc; ++i) acc[i] = hn::MulAdd(acc[i], m, a);
  }
  auto s = acc[0];
  for (int i = 1; i < kAcc; ++i) s = hn::Add(s, acc[i]);
  *sink = hn::GetLane(s);
  return static_cast<int64_t>(hn::Lanes(df)) * kAcc;
}

}  // namespace HWY_NAMESPACE
}  // namespace moeflow::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace moeflow::cpu {

HWY_EXPORT(Triad);
HWY_EXPORT(ReadStreams);
HWY_EXPORT(FmaLoop);

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
void run_parallel(ThreadPool* pool, int64_t n, int64_t grain,
                  const std::function<void(int64_t, int64_t, int)>& fn) {
  if (pool) pool->parallel_for(n, fn, grain);
  else fn(0, n, 0);
}

// n floats of the memory the weights live in (tensor/anon_memory.h: huge pages where
// granted), untouched, so the first write is the streaming threads' own; a vector's
// value-initialisation touched every 4 KiB page on the calling thread first, and its
// page faults took longer than the measurement (`bench` ran 3x longer).
class Floats {
 public:
  explicit Floats(int64_t n) : m_(AnonMemory::allocate(static_cast<size_t>(n) * sizeof(float))) {
    if (!m_) fallback_.resize(static_cast<size_t>(n));
  }
  float* data() { return m_ ? reinterpret_cast<float*>(m_->data()) : fallback_.data(); }

 private:
  std::unique_ptr<AnonMemory> m_;
  std::vector<float> fallback_;
};

// The peak probes' harness: work(thread) once on each of `threads` threads of the pool
// at a time (null pool: one thread), three passes; returns the fastest pass's seconds.
double fastest_pass_on_every_thread(ThreadPool* pool, int threads, const std::function<void(int)>& work) {
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    run_parallel(pool, threads, 1, [&](int64_t i0, int64_t i1, int) {
      for (int64_t i = i0; i < i1; ++i) work(static_cast<int>(i));
    });
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

}  // namespace

double measure_triad_bandwidth_gbs(ThreadPool* pool, size_t bytes_per_array) {
  const int64_t n = std::max<int64_t>(1024, static_cast<int64_t>(bytes_per_array / sizeof(float)));
  Floats fa(n), fb(n), fc(n);
  float *a = fa.data(), *b = fb.data(), *c = fc.data();
  const auto triad = HWY_DYNAMIC_DISPATCH(Triad);
  // First touch from the threads that will stream the arrays.
  run_parallel(pool, n, 4096, [&](int64_t i0, int64_t i1, int) {
    std::fill(a + i0, a + i1, 0.0f);
    std::fill(b + i0, b + i1, 1.0f);
    std::fill(c + i0, c + i1, 2.0f);
  });
  double best = 1e30;
  const double bytes = 3.0 * static_cast<double>(n) * sizeof(float);
  // Enough repetitions for ~0.3 s of work but at least 5.
  int reps = 5;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = Clock::now();
    run_parallel(pool, n, 4096, [&](int64_t i0, int64_t i1, int) {
      triad(a, b, c, 0.5f, i0, i1);
    });
    const double dt = seconds_since(t0);
    best = std::min(best, dt);
    if (rep == 0 && reps < 50) reps = std::clamp(static_cast<int>(0.3 / std::max(dt, 1e-6)), 5, 50);
  }
  volatile float keep = a[static_cast<size_t>(n / 2)];
  (void)keep;
  return bytes / best / 1e9;
}

double measure_read_bandwidth_gbs(ThreadPool* pool, size_t bytes, int streams) {
  const int64_t n = std::max<int64_t>(1024, static_cast<int64_t>(bytes / sizeof(float)));
  Floats fa(n);
  float* a = fa.data();
  const auto read = HWY_DYNAMIC_DISPATCH(ReadStreams);
  run_parallel(pool, n, 4096, [&](int64_t i0, int64_t i1, int) { std::fill(a + i0, a + i1, 1.0f); });
  const int parts = pool ? pool->size() : 1;
  std::vector<float> sink(static_cast<size_t>(parts));
  double best = 1e30;
  int reps = 5;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = Clock::now();
    run_parallel(pool, n, 4096, [&](int64_t i0, int64_t i1, int t) {
      sink[static_cast<size_t>(t)] += read(a, i0, i1, std::max(1, streams));
    });
    const double dt = seconds_since(t0);
    best = std::min(best, dt);
    if (rep == 0 && reps < 50) reps = std::clamp(static_cast<int>(0.3 / std::max(dt, 1e-6)), 5, 50);
  }
  volatile float keep = sink[0];
  (void)keep;
  return static_cast<double>(n) * sizeof(float) / best / 1e9;
}

double integer_loop_gops(ThreadPool* pool, int64_t iters, double ops_per_iter, int32_t (*loop)(int64_t)) {
  const int threads = pool ? pool->size() : 1;
  std::vector<int32_t> sink(static_cast<size_t>(threads) * 16);
  loop(iters >> 7);
  const double best = fastest_pass_on_every_thread(
      pool, threads, [&](int i) { sink[static_cast<size_t>(i) * 16] += loop(iters); });
  return ops_per_iter * static_cast<double>(iters) * threads / best / 1e9;
}

double measure_peak_fma_gflops(ThreadPool* pool) {
  const auto loop = HWY_DYNAMIC_DISPATCH(FmaLoop);
  const int threads = pool ? pool->size() : 1;
  std::vector<float> sink(static_cast<size_t>(threads) * 16);
  float warm = 0.0f;
  loop(1 << 16, &warm);
  const int64_t iters = int64_t{1} << 22;
  int64_t lanes_per_iter = 0;
  const double best = fastest_pass_on_every_thread(pool, threads, [&](int i) {
    const int64_t l = loop(iters, &sink[static_cast<size_t>(i) * 16]);
    if (i == 0) lanes_per_iter = l;
  });
  const double flops = 2.0 * static_cast<double>(lanes_per_iter) * static_cast<double>(iters) * threads;
  return flops / best / 1e9;
}

}  // namespace moeflow::cpu
#endif

// Measures the two bounds every speed figure is printed beside: the memory bandwidth
// this machine delivers (STREAM triad) and its peak f32 FMA rate.
#pragma once
#include <cstddef>

#include "kernels/cpu/thread_pool.h"

namespace moeflow::cpu {

// STREAM triad a[i] = b[i] + s * c[i] over three arrays of `bytes_per_array`, split
// over the pool; best of several runs; counts 3 * bytes_per_array moved per run.
double measure_triad_bandwidth_gbs(ThreadPool* pool, size_t bytes_per_array);

// A tight loop of independent vector FMAs on every thread; 2 FLOPs per lane per FMA.
double measure_peak_fma_gflops(ThreadPool* pool);

}  // namespace moeflow::cpu

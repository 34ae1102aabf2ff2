// Tiny machine benchmarks for roofline reporting (CLI `bench` and tests).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/thread_pool.h"

namespace moeflow::cpu {

// STREAM triad a[i] = b[i] + s * c[i] over three float arrays of `bytes_per_array`
// bytes each, split over the pool (null: one thread). Best of several repetitions.
// Counts 3 * bytes_per_array per pass (read b, read c, write a); returns GB/s (1e9).
double measure_triad_bandwidth_gbs(ThreadPool* pool, size_t bytes_per_array);

// Plain reads of `bytes` of floats split over the pool (null: one thread), each
// thread's share read as `streams` equal parts, one vector of each in turn: the
// ceiling a streaming mat-vec could reach with that many streams per core. Best of
// several repetitions; returns GB/s (1e9).
double measure_read_bandwidth_gbs(ThreadPool* pool, size_t bytes, int streams);

// Peak f32 FMA throughput: a tight loop of independent Highway-vector FMAs on every
// thread of the pool (null: one thread). Returns GFLOP/s, 2 flops per FMA lane.
double measure_peak_fma_gflops(ThreadPool* pool);

// Peak 8-bit integer multiply-adds: independent AVX-512 VNNI `vpdpbusd` on registers on
// every thread of the pool (null: one thread), 64 byte products each. G multiply-adds/s
// (1e9); 0 where the CPU has no VNNI. The interleaved q4_0 / q8_0 kernels take one
// such product per weight and token with int8 activations, two with int16 ones.
double measure_peak_int8_gmacs(ThreadPool* pool);

// Peak 8-bit integer multiply-adds without VNNI: independent AVX2 `vpmaddubsw` (32
// byte products into int16 pairs), each widened by `vpmaddwd` and added in int32, the
// sequence the AVX2 int8 kernels (int8_avx2.h) take, on every thread of the pool (null:
// one thread). G multiply-adds/s (1e9); 0 where the CPU has no AVX2.
double measure_peak_int8_avx2_gmacs(ThreadPool* pool);

// An integer probe's rate: loop(iters) (which returns a value depending on all its
// work, so none is optimised away) warmed once, then on every thread of the pool
// (null: one thread); G operations/s for ops_per_iter operations per iteration.
double integer_loop_gops(ThreadPool* pool, int64_t iters, double ops_per_iter, int32_t (*loop)(int64_t));

}  // namespace moeflow::cpu

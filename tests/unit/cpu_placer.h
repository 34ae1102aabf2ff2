// The CPU backend as the weight placer `moeflow run` uses: rows interleaved in fours
// for q4_0 / q8_0 on AVX-512 VNNI CPUs, GGUF's layout otherwise.
#pragma once
#include "backend/cpu/cpu_backend.h"

namespace moeflow::testing {

inline WeightPlacer* cpu_placer() {
  static CpuBackend backend(static_cast<ThreadPool*>(nullptr));
  return &backend;
}

}  // namespace moeflow::testing

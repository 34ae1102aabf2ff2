// `moeflow bench --parallel N[,N...]`: N sequences decoding together, one token each
// per step, against the bytes such a step reads (bench.cpp's single-stream test
// stays the reference for N = 1 at its own bound).
#pragma once
#include "cli/args.h"

namespace moeflow::cli {

int bench_parallel(const Args& a);

}  // namespace moeflow::cli

// `moeflow bench --parallel N[,N...]`: N sequences decoding together, one token each
// per step, against the bytes such a step reads (bench.cpp's single-stream test
// stays the reference for N = 1 at its own bound).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "cli/args.h"
#include "moeflow/engine.h"

namespace moeflow::cli {

int bench_parallel(const Args& a);

// The policies --policy names, "all" (everything resident) first, once; UsageError for
// an --expert-budget with no policy to use it.
std::vector<std::string> bench_policies(const Args& a);
// An engine for one bench run of `policy` (all: every weight resident, no budget),
// with room for n_parallel sequences of ctx positions.
std::unique_ptr<Engine> open_bench_engine(const Args& a, const std::string& policy, int64_t ctx, int n_parallel);
// The storage's read bandwidth (bytes/s) for expert-sized reads of the model file with
// --io-threads readers: the bound of an offloaded run's missed bytes.
double bench_disk_bandwidth(const Args& a, const Model& m);

}  // namespace moeflow::cli

#!/usr/bin/env bash
# Builds the libFuzzer harnesses (clang, ASan + UBSan) and runs one.
#   scripts/fuzz.sh TARGET SECONDS   fuzz TARGET (gguf, tokenizer, trace, policy_state,
#                                    completion_request, chat_template)
#                                    for SECONDS, growing build-fuzz/corpus/TARGET from
#                                    the seeds in tests/fuzz/TARGET
#   scripts/fuzz.sh TARGET seeds     run TARGET once over its seeds only (what CI does)
#   scripts/fuzz.sh all seeds        every harness over its seeds
# Limits: -rss_limit_mb=2048, and no single allocation above 64 MiB (-malloc_limit_mb):
# no small input may make the program allocate more than that beyond a model's tensors.
# Crashes are written to build-fuzz/crashes/TARGET-*; add each as a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -ne 2 ]; then
  sed -n '2,11p' "$0" >&2
  exit 2
fi
target=$1 seconds=$2
targets=(gguf tokenizer trace policy_state completion_request chat_template)
configure_fuzz_build() {
  if ! command -v clang++ >/dev/null; then
    echo "fuzz.sh: clang++ is not installed (scripts/install-deps.sh installs clang and libclang-rt-14-dev)" >&2
    exit 1
  fi
  # The configure step fails with a clear message when libFuzzer's runtime is missing.
  if [ ! -f build-fuzz/build.ninja ]; then
    cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DMOEFLOW_FUZZ=ON >/dev/null
  fi
}
if [ "$target" = all ]; then
  [ "$seconds" = seeds ] || { echo "fuzz.sh: 'all' runs the seeds only" >&2; exit 2; }
  configure_fuzz_build
  # Every fuzz target, the seed writer too, so none of them can stop compiling unseen.
  cmake --build build-fuzz -j"$(nproc)" --target fuzzers >/dev/null
  for t in "${targets[@]}"; do "$0" "$t" seeds; done
  exit 0
fi
case " ${targets[*]} " in *" $target "*) ;; *) echo "fuzz.sh: unknown target '$target' (${targets[*]})" >&2; exit 2 ;; esac
configure_fuzz_build
cmake --build build-fuzz -j"$(nproc)" --target "fuzz_$target" >/dev/null
bin=build-fuzz/fuzz_$target
seeds=tests/fuzz/$target
# A unit slower than FUZZ_TIMEOUT seconds (wall) is reported as a hang; raise it on a
# machine busy with other work, where a starved process sees false hangs.
limits=(-rss_limit_mb=2048 -malloc_limit_mb=64 -timeout="${FUZZ_TIMEOUT:-10}")
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
if [ "$seconds" = seeds ]; then
  # Each seed once; any crash, leak, timeout or limit exceeded fails the run.
  exec "$bin" "${limits[@]}" -runs=0 "$seeds"
fi
mkdir -p "build-fuzz/corpus/$target" build-fuzz/crashes
exec "$bin" "${limits[@]}" -max_total_time="$seconds" -print_final_stats=1 \
  -artifact_prefix="build-fuzz/crashes/$target-" "build-fuzz/corpus/$target" "$seeds"

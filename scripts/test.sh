#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test (release build, then the
# ASan+UBSan build of the same tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"
if [ "${MOEFLOW_SKIP_SANITIZE:-0}" != "1" ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMOEFLOW_SANITIZE=ON >/dev/null
  cmake --build build-asan -j"$jobs" --target moeflow_tests moeflow
  # The release run's test times, so that ctest starts the slowest sanitizer tests
  # first (without them it starts tests in file order, and a slow one found last runs
  # alone on one core).
  mkdir -p build-asan/Testing/Temporary
  cp -f build/Testing/Temporary/CTestCostData.txt build-asan/Testing/Temporary/ 2>/dev/null || true
  ctest --test-dir build-asan --output-on-failure -j"$jobs"
fi
if [ "${MOEFLOW_SKIP_FUZZ:-0}" != "1" ]; then
  # Each libFuzzer harness over its seed corpus only (seconds); scripts/fuzz.sh fails
  # with a message if clang or libFuzzer's runtime is missing.
  bash scripts/fuzz.sh all seeds
fi

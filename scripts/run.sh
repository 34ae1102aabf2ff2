#!/usr/bin/env bash
# Installs dependencies, builds, and runs the main job: generation with the
# built-in default model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target moeflow
./build/moeflow run "$@"

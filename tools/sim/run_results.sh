#!/usr/bin/env bash
# Regenerates docs/results/: every policy swept over cache sizes on the real routing
# traces in ../shared/traces (and our own model's traces), plus TPOT per policy for a
# Mixtral-8x7B profile on PCIe 4.0 at 25% cache. Numbers in README.md come from here.
#   usage: bash tools/sim/run_results.sh   (after building: cmake --build build)
set -euo pipefail
cd "$(dirname "$0")/../.."
moeflow=${MOEFLOW:-build/moeflow}
traces=${TRACES:-../shared/traces}
out=docs/results
mkdir -p "$out"
mixtral=$traces/mixtral-8x7b-instruct-v0.1-fp8_humaneval.jsonl
flame=$traces/flame-moe-290m_pretrain-shard0.jsonl

# Mixtral: learn on HumanEval/0 and measure on HumanEval/1, and the reverse.
"$moeflow" simulate --trace "$mixtral" --learn 0 --measure 1 --sweep --out-dir "$out/mixtral-learn0-measure1" \
  > "$out/mixtral-learn0-measure1/run.txt"
"$moeflow" simulate --trace "$mixtral" --learn 1 --measure 0 --sweep --out-dir "$out/mixtral-learn1-measure0" \
  > "$out/mixtral-learn1-measure0/run.txt"
# FLAME-MoE: learn on the first 70% of the windows, measure on the rest.
"$moeflow" simulate --trace "$flame" --learn-fraction 0.7 --sweep --out-dir "$out/flame-70-30" > "$out/flame-70-30/run.txt"

# TPOT for Mixtral-8x7B on PCIe 4.0 at 25% cache, every policy (reroute for eMoE).
policies=$("$moeflow" simulate --help 2>&1 | sed -n 's/.*belady-prefetch, \(.*\) (default.*/\1/p' | tr -d ' ')
"$moeflow" simulate --trace "$mixtral" --learn 0 --measure 1 --cache 25% --hw pcie4 \
  --policy "belady,${policies}" > "$out/mixtral-tpot-pcie4-25.txt"

# Our own model's traces (tools/train/README.md), when present: learn on the first
# 70% of the requests of every domain, measure on the rest.
own=models/traces/default-heldout.jsonl
if [ -f "$own" ]; then
  mkdir -p "$out/default-70-30"
  "$moeflow" simulate --trace "$own" --model-profile moeflow-default --learn-fraction 0.7 --sweep \
    --out-dir "$out/default-70-30" > "$out/default-70-30/run.txt"
fi
echo "wrote $out"

#!/usr/bin/env bash
# Regenerates docs/results/: every policy swept over cache sizes on the real routing
# traces in ../shared/traces (and our own model's traces), plus TPOT per policy for a
# Mixtral-8x7B profile on PCIe 4.0 at 25% cache. Numbers in README.md come from here.
#   usage: bash tools/sim/run_results.sh   (after building: cmake --build build)
#   ONLY="default-nvme tpot" bash tools/sim/run_results.sh   regenerates just those outputs
#   (mixtral-learn0-measure1, mixtral-learn1-measure0, flame-70-30, tpot, default-nvme).
set -euo pipefail
cd "$(dirname "$0")/../.."
moeflow=${MOEFLOW:-build/moeflow}
traces=${TRACES:-../shared/traces}
out=docs/results
mkdir -p "$out"
mixtral=$traces/mixtral-8x7b-instruct-v0.1-fp8_humaneval.jsonl
flame=$traces/flame-moe-290m_pretrain-shard0.jsonl

# DuoServe's predictor is trained once per learning split (train-predictor prints its
# Table 3 accuracy on the measured split) and loaded by the sweeps, instead of being
# retrained inside every simulated run.
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
only=${ONLY:-}
wanted() { [ -z "$only" ] || [[ " $only " == *" $1 "* ]]; }
# Every policy, eMoE also as the paper runs it (misses rerouted: lossy, labelled
# emoe+reroute), and the bound.
policies=$("$moeflow" simulate --help 2>&1 | sed -n 's/.*belady-prefetch, \(.*\) (default.*/\1/p' | tr -d ' ')
all="${policies},emoe+reroute,belady"
sweep() {  # name trace learn measure [simulate flags...]
  local name=$1 trace=$2 learn=$3 measure=$4
  shift 4
  wanted "$name" || return 0
  mkdir -p "$out/$name"
  "$moeflow" train-predictor --trace "$trace" --requests "$learn" --eval-requests "$measure" --out "$state/$name.duo" \
    > "$out/$name/duoserve-predictor.txt"
  "$moeflow" trace accuracy "$trace" --learn "$learn" --measure "$measure" > "$out/$name/emoe-predictor.txt"
  "$moeflow" simulate --trace "$trace" --learn "$learn" --measure "$measure" --sweep --out-dir "$out/$name" \
    --policy "$all" --policy-state "duoserve=$state/$name.duo" "$@" > "$out/$name/run.txt"
}
# Mixtral: learn on HumanEval/0 and measure on HumanEval/1, and the reverse.
sweep mixtral-learn0-measure1 "$mixtral" 0 1
sweep mixtral-learn1-measure0 "$mixtral" 1 0
# FLAME-MoE: learn on the first 70% of the 32 windows, measure on the rest.
sweep flame-70-30 "$flame" 0:22 22:32

# TPOT for Mixtral-8x7B on PCIe 4.0 at 25% cache, every policy (and eMoE rerouting).
if wanted tpot; then
  [ -f "$state/mixtral-learn0-measure1.duo" ] ||
    "$moeflow" train-predictor --trace "$mixtral" --requests 0 --out "$state/mixtral-learn0-measure1.duo" > /dev/null
  "$moeflow" simulate --trace "$mixtral" --learn 0 --measure 1 --cache 25% --hw pcie4 \
    --policy "belady,${policies},emoe+reroute" --policy-state "duoserve=$state/mixtral-learn0-measure1.duo" \
    > "$out/mixtral-tpot-pcie4-25.txt"
fi

# Our own model's traces (tools/train/record_traces.sh): requests 0-55 are 7 windows of
# every domain (learn), 56-79 three more of every domain (measure); experts stream
# from an NVMe drive into RAM, the built-in model's own use case.
own=models/traces/default-heldout.jsonl
if [ -f "$own" ] && wanted default-nvme; then
  sweep default-nvme "$own" 0:56 56:80 --hw nvme
  "$moeflow" trace stats "$own" --by-task > "$out/default-nvme/trace-stats.txt"
  # eMoE's per-(task, layer) sensitivity from the learning requests (profiles/tasks.json holds it).
  "$moeflow" trace sensitivity "$own" --requests 0:56 > "$out/default-nvme/emoe-sensitivity.txt"
fi
echo "wrote $out"

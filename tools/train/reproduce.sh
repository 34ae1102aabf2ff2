#!/usr/bin/env bash
# Rebuilds the built-in model, and everything derived from it, from Debian packages alone:
#   corpus -> tokenizer -> MoE and dense baseline training (same seed, same batches; one
#   thread each, both at once) -> F32 GGUF -> Q8_0 models/default.gguf -> checks against
#   the PyTorch reference and the Python tokenizer -> held-out perplexity and samples
#   (build-train/evaluate.md) -> routing traces (models/traces/default-heldout.jsonl) ->
#   eMoE sensitivity (profiles/tasks.json) -> simulator results (docs/results/default-nvme).
# Training is deterministic for a given machine and torch build (fixed seed, one thread,
# step-based schedule): on a 2-core Zen 5 VM both models finished in ~70 minutes (the
# two trainings; the rest takes a few minutes).
#
#   usage: bash tools/train/reproduce.sh [--steps N] [--from STAGE]
#   stages, in order: corpus train export check evaluate traces results
#   (--from export skips the corpus and training and starts from build-train/*/ckpt.pt)
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=734
from=corpus
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --from) from=$2; shift 2 ;;
    *) echo "reproduce.sh: unknown argument '$1' (see the usage line at the top of the script)" >&2; exit 2 ;;
  esac
done
stages="corpus train export check evaluate traces results"
[[ " $stages " == *" $from "* ]] || { echo "reproduce.sh: unknown stage '$from' (one of: $stages)" >&2; exit 2; }
started=0
run_stage() { [ "$1" = "$from" ] && started=1; [ $started = 1 ]; }
py=/usr/bin/python3
moeflow=build/moeflow
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

[ -x "$moeflow" ] || { bash scripts/install-deps.sh && cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build; }

if run_stage corpus; then
  apt-get install -y python3-torch python3-numpy libopenblas0-pthread > /dev/null
  bash tools/corpus/build_corpus.sh
  $py tools/train/train_tokenizer.py build-corpus
fi

if run_stage train; then
  mkdir -p build-train
  t0=$(date +%s)
  nice -n 19 $py tools/train/train.py --out build-train/moe --steps "$steps" > build-train/moe.log 2>&1 &
  moe=$!
  nice -n 19 $py tools/train/train.py --out build-train/dense --dense --steps "$steps" > build-train/dense.log 2>&1 &
  dense=$!
  wait $moe && wait $dense
  echo "trained both models, $steps steps each, in $(( ($(date +%s) - t0) / 60 )) minutes"
fi

if run_stage export; then
  mkdir -p build-train/gguf
  $py tools/train/export_gguf.py build-train/moe/ckpt.pt build-corpus/tokenizer.json build-train/gguf/moe-f32.gguf
  $py tools/train/export_gguf.py build-train/dense/ckpt.pt build-corpus/tokenizer.json build-train/gguf/dense-f32.gguf \
    --name moeflow-dense-baseline
  $moeflow quantize -i build-train/gguf/moe-f32.gguf -o models/default.gguf --type q8_0
  $moeflow quantize -i build-train/gguf/dense-f32.gguf -o build-train/gguf/dense-q8_0.gguf --type q8_0
fi

if run_stage check; then
  $py tools/train/check_tokenizer.py models/default.gguf build-corpus/tokenizer.json build-corpus/*/heldout.txt --max-chunks 1000
  $py tools/train/compare_reference.py build-train/gguf/moe-f32.gguf build-corpus/tokenizer.json
fi

if run_stage evaluate; then
  bash tools/train/evaluate.sh --samples models/default.gguf build-train/gguf/dense-q8_0.gguf | tee build-train/evaluate.md
fi

if run_stage traces; then
  bash tools/train/record_traces.sh
  $moeflow trace sensitivity models/traces/default-heldout.jsonl --requests 0:56 --out profiles/tasks.json
fi

if run_stage results; then
  ONLY=default-nvme bash tools/sim/run_results.sh
fi

#!/usr/bin/env bash
# Held-out perplexity of one or more models on every domain, and one greedy sample
# per domain from the first model (temperature 0.7, top-k 40, seed 1).
# usage: bash tools/train/evaluate.sh [--samples] MODEL.gguf [MODEL2.gguf ...]   (corpus in build-corpus/)
# Prints a Markdown table (rows: domains; columns: models) and, with --samples, the samples.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=./build/moeflow
CORPUS=${CORPUS:-build-corpus}
samples=0
if [ "${1:-}" = "--samples" ]; then samples=1; shift; fi
models=("$@")
domains=$(cd "$CORPUS" && ls -d */ | tr -d / | sort)
hdr="| domain | held-out tokens |"; sep="|---|---:|"
for m in "${models[@]}"; do hdr+=" $(basename "$m" .gguf) |"; sep+="---:|"; done
echo "$hdr"; echo "$sep"
for d in $domains; do
  row="| $d |"
  first=1
  for m in "${models[@]}"; do
    j=$("$BIN" perplexity -m "$m" -f "$CORPUS/$d/heldout.txt" -t 1 --json -q)
    if [ $first = 1 ]; then
      row+=" $(echo "$j" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens_scored"])') |"
      first=0
    fi
    row+=" $(echo "$j" | /usr/bin/python3 -c 'import json,sys; print("%.2f" % json.load(sys.stdin)["perplexity"])') |"
  done
  echo "$row"
done
[ $samples = 1 ] || exit 0
declare -A P=(
  [prose]="And God said unto Moses,"
  [dict]=$'Mountain \\Moun"tain\\, n.'
  [c]=$'#include <stdio.h>\n\nstatic int'
  [python]=$'import os\n\n\ndef '
  [de]="Wer zuletzt lacht,"
  [es]="El amor es"
  [it]="La vita è"
  [ru]="Любовь - это"
)
for d in $domains; do
  echo
  echo "### $d"
  echo '```'
  "$BIN" run -m "${models[0]}" -p "${P[$d]}" -n 48 --temp 0.7 --top-k 40 --seed 1 -t 1 2>/dev/null
  echo '```'
done

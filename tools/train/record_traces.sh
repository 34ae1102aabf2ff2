#!/usr/bin/env bash
# Records the built-in model's routing on the held-out text of every domain
# (teacher-forced windows of 16 prompt + 48 decode tokens, labelled with the domain as
# "task") into models/traces/default-heldout.jsonl: first 7 windows of every domain
# (requests 0-55, for learning), then 3 more of every domain (requests 56-79, measured).
# Each line carries the lookahead routing of the next 2 layers (--lookahead 2,
# docs/policies.md). Without the corpus, the same requests can be rerun from the
# token ids a previous trace recorded:
#   build/moeflow trace record --from-trace OLD.jsonl -o models/traces/default-heldout.jsonl --lookahead 2
# (the shipped file was rerecorded so, from the file recorded by this script before
# the lookahead existed: identical routing).
#   usage: bash tools/train/record_traces.sh   (after build_corpus.sh and a build)
set -euo pipefail
cd "$(dirname "$0")/../.."
moeflow=${MOEFLOW:-build/moeflow}
out=models/traces/default-heldout.jsonl
domains="prose dict c python de es it ru"
mkdir -p models/traces
rm -f "$out"
i=0
for d in $domains; do
  "$moeflow" trace record -f "build-corpus/$d/heldout.txt" -o "$out" --append --task "$d" --windows 7 \
    --first-request $((i * 7)) --threads 2 --lookahead 2
  i=$((i + 1))
done
i=0
for d in $domains; do
  "$moeflow" trace record -f "build-corpus/$d/heldout.txt" -o "$out" --append --task "$d" --windows 3 \
    --first-window 7 --first-request $((56 + i * 3)) --threads 2 --lookahead 2
  i=$((i + 1))
done

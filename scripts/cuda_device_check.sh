#!/usr/bin/env bash
# The CUDA backend's checks on a machine with a GPU (CI has none; the tests skip there):
# its tests, then the offloading benchmark on a Mixtral-shaped model that a 25% expert
# budget cannot hold (TPOT against all-resident, the link's busy share, the stall-free
# bound), and each policy's hit rate beside the simulator's for the routing the engine
# recorded, over the link the transport measured.
#
# usage: scripts/cuda_device_check.sh BIN_DIR OUT_DIR
#   BIN_DIR holds moeflow and moeflow_tests built with CUDA. BACKEND=cpu and LAYERS,
#   EMBD, FF let the same steps run small on a CPU (to check the script itself);
#   QUICK=1 runs the tests, the kernel benchmark and the offloading benchmark of two
#   policies only. PEER_LLAMA_BENCH=path runs that llama-bench (a llama.cpp build with
#   CUDA, made outside this repository) on the same model file: all layers on the GPU,
#   and with every layer's experts kept on the CPU (--n-cpu-moe), its offloading mode.
set -uo pipefail
BIN=$1
OUT=$2
BACKEND=${BACKEND:-cuda}
LAYERS=${LAYERS:-2}
EMBD=${EMBD:-4096}
FF=${FF:-14336}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUT"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv

# Mixtral 8x7B's layer shape (4096 wide, 14336 per expert, 8 experts top-2, 32 query
# heads over 8 KV heads of 128), LAYERS of its 32 layers, q4_0: per-layer times and
# expert sizes (99 MiB) are Mixtral's. Written while the tests run.
M=/tmp/mixtral-shaped-${LAYERS}l-${EMBD}-q4_0.gguf
"$BIN/moeflow" make-model -o "$M" --dtype q4_0 --vocab 32000 --embd "$EMBD" --ff "$FF" --layers "$LAYERS" \
  --heads 32 --kv-heads 8 --head-dim $((EMBD / 32)) --experts 8 --top-k 2 > "$OUT/make-model.txt" 2>&1 &
MAKE=$!
if [ "$BACKEND" = cuda ]; then
  timeout 300 "$BIN/moeflow_tests" --gtest_filter='Cuda*' > "$OUT/tests.txt" 2>&1
  echo "tests: rc $?"
  grep -E "^\[  (FAILED|PASSED|SKIPPED) |Failure|error|relative|max error|hit rate|budget|host-compute" "$OUT/tests.txt" | head -80
fi
# The mat-vec kernel alone at Mixtral's expert shapes, one token and eight, every type
# and rows-per-warp setting, against the device's copy bandwidth.
if [ "$BACKEND" = cuda ]; then
  for shape in "$FF $EMBD" "$EMBD $FF"; do
    set -- $shape
    for tok in 1 8; do
      timeout 120 "$BIN/moeflow" bench-kernels --backend cuda --rows "$1" --cols "$2" --tokens "$tok" --stream-mib 1024 \
        --min-seconds 0.05 > "$OUT/kernels-$1x$2-t$tok.md" 2>&1
      echo "bench-kernels ${1}x$2, $tok token(s): rc $?"
      cat "$OUT/kernels-$1x$2-t$tok.md"
    done
  done
fi
wait $MAKE || { echo "make-model failed"; cat "$OUT/make-model.txt"; exit 1; }

POLICIES=lru,lfu,on-demand,next-layer,moe-infinity,fmoe,adaptive
[ -n "${QUICK:-}" ] && POLICIES=lru,moe-infinity
timeout 300 "$BIN/moeflow" bench --backend "$BACKEND" -m "$M" -t 8 -p 32 -n 32 -r 2 --policy "$POLICIES" \
  --expert-budget 25% --json > "$OUT/bench.json" 2> "$OUT/bench.err"
echo "bench: rc $?"
if [ -n "${PEER_LLAMA_BENCH:-}" ]; then
  timeout 240 "$PEER_LLAMA_BENCH" -m "$M" -ngl 99 -p 32 -n 32 -r 2 -t 8 > "$OUT/llama-bench.md" 2>&1
  echo "llama-bench, all on the GPU: rc $?"
  timeout 240 "$PEER_LLAMA_BENCH" -m "$M" -ngl 99 -ncmoe "$LAYERS" -p 32 -n 32 -r 2 -t 8 >> "$OUT/llama-bench.md" 2>&1
  echo "llama-bench, experts on the CPU: rc $?"
  grep -E "^\|" "$OUT/llama-bench.md"
fi
if [ -n "${QUICK:-}" ]; then
  python3 "$HERE/cuda_device_summary.py" "$OUT" report | tee "$OUT/summary.md"
  exit 0
fi
timeout 120 "$BIN/moeflow" bench --backend "$BACKEND" -m "$M" -t 8 -p 32 -n 32 -r 1 --policy lru --on-miss host-compute \
  --expert-budget 25% --json > "$OUT/bench-host-compute.json" 2> "$OUT/bench-host-compute.err"
echo "bench host-compute: rc $?"

# The same model all-resident on the machine's CPU cores, for scale.
[ "$BACKEND" = cuda ] && timeout 120 "$BIN/moeflow" bench --backend cpu -m "$M" -t "$(nproc)" -p 16 -n 16 -r 1 --json \
  > "$OUT/bench-cpu.json" 2> "$OUT/bench-cpu.err"

# One prompt through every lossless policy: the same routing each time, recorded once.
PROMPT="The history of the printing press begins in East Asia, where block printing on paper spread"
for pol in ${POLICIES//,/ }; do
  trace=()
  [ "$pol" = lru ] && trace=(--trace "$OUT/trace.jsonl")
  timeout 120 "$BIN/moeflow" run --backend "$BACKEND" -m "$M" -t 8 --policy "$pol" --expert-budget 25% -p "$PROMPT" \
    -n 48 --temp 0 --ignore-eos --json "${trace[@]}" > "$OUT/run-$pol.json" 2> "$OUT/run-$pol.err" || echo "run $pol failed"
done
python3 "$HERE/cuda_device_summary.py" "$OUT" hw > "$OUT/hw.json"
python3 "$HERE/cuda_device_summary.py" "$OUT" model "$LAYERS" > "$OUT/model-profile.json"
timeout 120 "$BIN/moeflow" simulate --trace "$OUT/trace.jsonl" --policy "belady,$POLICIES" --cache 25% \
  --hw "$OUT/hw.json" --model-profile "$OUT/model-profile.json" --score-prefill --json > "$OUT/simulate.json" 2> "$OUT/simulate.err"
echo "simulate: rc $?"
python3 "$HERE/cuda_device_summary.py" "$OUT" report | tee "$OUT/summary.md"

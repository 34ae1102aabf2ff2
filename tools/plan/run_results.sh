#!/usr/bin/env bash
# Regenerates docs/results/planner.md: `moeflow plan` with ODS (Alg. 1) and BO (Alg. 2)
# against the exact CBC optimum and the max-memory baseline, on every routing trace in
# ../shared/traces and models/traces. Time limits as the paper's Sec. V-D: 60 s per ODS
# sub-problem, 180 s for the exact (single-problem) solve.
#   usage: bash tools/plan/run_results.sh   (after building: cmake --build build; needs python3)
set -euo pipefail
cd "$(dirname "$0")/../.."
moeflow=${MOEFLOW:-build/moeflow}
traces=${TRACES:-../shared/traces}
batch=${BATCH_TOKENS:-64}
bo_iter=${BO_ITERATIONS:-6}
out=docs/results/planner.md
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
i=0
for t in "$traces"/*.jsonl models/traces/*.jsonl; do
  i=$((i + 1))
  "$moeflow" plan --trace "$t" --batch-tokens "$batch" --method ods --time-limit 60 --exact-time-limit 180 --baseline-memory-mb 3008 --json \
    > "$tmp/$i.ods.json" || true
  "$moeflow" plan --trace "$t" --batch-tokens "$batch" --method bo --bo-iterations "$bo_iter" --bo-time-limit 5 \
    --exact-time-limit 0 --baseline-memory-mb 3008 --json > "$tmp/$i.bo.json" || true
done
python3 - "$tmp" "$batch" "$bo_iter" > "$out" <<'PY'
import json, os, sys
tmp, batch, bo_iter = sys.argv[1], sys.argv[2], sys.argv[3]
runs = sorted({f.split('.')[0] for f in os.listdir(tmp)}, key=int)
print("# Serverless deployment planner: measured\n")
print(f"`bash tools/plan/run_results.sh` (batches of {batch} held-out tokens; first half of each trace's requests "
      "profiles the popularity table, the rest is served; bundled AWS-Lambda-like platform; default SLO = 1.2 x the "
      f"max-memory deployment's planned latency; ODS sub-problems 60 s, exact 180 s, BO {bo_iter} iterations with 5 s "
      "sub-problems). Costs are US$ for one planned batch (`cost`) and for serving every held-out batch (`served`).\n")
print("| trace | method | planned cost | optimal (exact) | gap to optimum | max-memory baseline | vs baseline | "
      "vs 3008 MB baseline | solver s | exact s (status) | served cost | served vs baseline | SLO attainment (baseline) |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
acc = []
for r in runs:
    ods = json.load(open(f"{tmp}/{r}.ods.json"))
    try:
        bo = json.load(open(f"{tmp}/{r}.bo.json"))
    except Exception:
        bo = None
    name = os.path.basename(ods["trace"])
    opt = ods.get("optimal_cost")
    for label, j in (("ODS", ods), ("BO", bo)):
        if j is None or not j.get("feasible"):
            print(f"| {name} | {label} | infeasible | | | | | | | | | | |")
            continue
        gap = f"{100 * (j['cost'] / opt - 1):+.2f}%" if opt else "n/a"
        s, b = j["served"], j["baseline_served"]
        print(f"| {name} | {label} | {j['cost']:.6g} | {opt:.6g} | {gap} | {j['baseline_cost']:.6g} | "
              f"{100 * (j['cost'] / j['baseline_cost'] - 1):+.1f}% | "
              f"{100 * (j['cost'] / j['baseline_at_memory']['cost'] - 1):+.1f}% | {j['solver_seconds']:.1f} | "
              f"{ods['exact_seconds']:.1f} ({ods['optimal_status']}) | {s['cost']:.6g} | "
              f"{100 * (s['cost'] / b['cost'] - 1):+.1f}% | {100 * s['slo_attainment']:.0f}% ({100 * b['slo_attainment']:.0f}%) |")
    p = dict(ods["prediction"])
    if bo and "bo" in bo["prediction"]:
        p["bo"] = bo["prediction"]["bo"]
    acc.append((name, ods["token_ids_recorded"], p))
print("\nPopularity prediction on the held-out requests (the paper's Sec. V-B metric: mean |real - predicted| "
      "tokens per (layer, expert); in brackets divided by the mean real count):\n")
print("| trace | token ids recorded | paper (token+position) | BO-adjusted | Lina (token id) | profiled frequency |")
print("|---|---|---|---|---|---|")
for name, ids, p in acc:
    f = lambda k: f"{p[k]['mean_abs_error_tokens']:.1f} ({p[k]['relative_error']:.2f})" if k in p else "n/a"
    print(f"| {name} | {'yes' if ids else 'no'} | {f('paper')} | {f('bo')} | {f('lina')} | {f('frequency')} |")
PY
echo "wrote $out"

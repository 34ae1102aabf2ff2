#!/usr/bin/env python3
"""Runs `moeflow simulate` over traces x cache sizes x batch sizes and writes one
Markdown table per (trace, batch): hit rate and simulated TPOT of every policy.

Every trace is split into learning requests and held-out measured requests (the
splits below); learned policies learn on the first, everything is scored on the
second. DuoServe's predictor is trained once per trace on the learning requests
(`moeflow train-predictor`) and loaded with --policy-state, so each run does not
retrain it.

usage: scripts/policy_sweep.py [--moeflow build/moeflow] [--out FILE] [--json FILE]
                               [--traces mixtral,flame,default] [--batches 1,16]
                               [--caches 12.5%,25%,50%] [--policies lru,lfu,...]
                               [--duo-dir DIR] [--in-sample DIR]

--in-sample DIR asks what the learned policies could reach if the measured requests
held nothing new: it writes each trace to DIR with the measured requests appended once
more under new ids, learns on every original request (the measured ones included) and
scores the copies. A policy that still misses a target there misses it for want of
signal in the trace, not for want of learning requests.
"""
import argparse
import json
import os
import subprocess
import sys

TRACES = {
    # name: (trace file, learn range, measure range, hardware profile)
    "mixtral": ("../shared/traces/mixtral-8x7b-instruct-v0.1-fp8_humaneval.jsonl", "0:1", "1:2", "pcie4"),
    "flame": ("../shared/traces/flame-moe-290m_pretrain-shard0.jsonl", "0:22", "22:32", "pcie4"),
    "default": ("models/traces/default-heldout.jsonl", "0:56", "56:80", "nvme"),
}
DEFAULT_POLICIES = "lru,lfu,on-demand,next-layer,moe-infinity,fmoe,duoserve,emoe,adaptive,belady-min,belady-prefetch,belady-eager,belady"


def resolve(path):
    # ../shared is relative to the worktree root; fall back to /work/shared.
    if os.path.exists(path):
        return path
    alt = path.replace("../shared/", "/work/shared/")
    if os.path.exists(alt):
        return alt
    sys.exit(f"trace not found: {path}")


def in_sample_trace(trace, learn, measure, out_dir, name):
    """Writes out_dir/name.jsonl: the trace, then its measured requests again under the
    ids after the last; returns (path, learn range, measure range) scoring the copies."""
    m0, m1 = (int(v) for v in measure.split(":"))
    with open(trace) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    n = 1 + max(d["request"] for d in lines)
    path = os.path.join(out_dir, name + ".jsonl")
    with open(path, "w") as out:
        for d in lines:
            out.write(json.dumps(d) + "\n")
        for d in lines:
            if m0 <= d["request"] < m1:
                out.write(json.dumps(dict(d, request=n + d["request"] - m0)) + "\n")
    return path, f"0:{n}", f"{n}:{n + m1 - m0}"


def targets_table(rows, args):
    """The issue's targets per (trace, batch, cache): adaptive's hit rate at least 5
    points above the better of LRU/LFU, its TPOT at most 0.9x the better one's, and at
    least a third of the gap from the better of LRU/LFU to Belady closed."""
    out = ["\n**Targets** (adaptive against the better of LRU/LFU by hit rate; TPOT against the faster of the two)\n",
           "| trace | batch | cache | best of lru/lfu | adaptive | +points (>= 5) | gap to belady closed (>= 1/3) | TPOT ratio (<= 0.9) | met |",
           "|---|---|---|---|---|---|---|---|---|"]
    for name in args.traces.split(","):
        for batch in args.batches.split(","):
            for c in args.caches.split(","):
                sel = {r["policy"]: r for r in rows if r["trace"] == name and r["batch"] == int(batch) and r["cache"] == c}
                base = max((sel["lru"], sel["lfu"]), key=lambda r: r["hit_rate"])
                fast = min(sel["lru"]["tpot_ms"], sel["lfu"]["tpot_ms"])
                a, b = sel["adaptive"], sel["belady"]
                dp = 100 * (a["hit_rate"] - base["hit_rate"])
                gap = b["hit_rate"] - base["hit_rate"]
                closed = (a["hit_rate"] - base["hit_rate"]) / gap if gap > 1e-9 else float("nan")
                ratio = a["tpot_ms"] / fast if fast > 0 else float("nan")
                met = dp >= 5 and closed >= 1 / 3 and (ratio <= 0.9 or c != "25%")
                out.append(f"| {name} | {batch} | {c} | {base['policy']} {100 * base['hit_rate']:.1f} | "
                           f"{100 * a['hit_rate']:.1f} | {dp:+.1f} | "
                           + ("belady = best (no gap)" if gap <= 1e-9 else f"{closed:.2f}")
                           + f" | {ratio:.2f} | {'yes' if met else 'no'} |")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moeflow", default="build/moeflow")
    ap.add_argument("--out", default="-")
    ap.add_argument("--json", default="")
    ap.add_argument("--traces", default="mixtral,flame,default")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--caches", default="12.5%,25%,50%")
    ap.add_argument("--policies", default=DEFAULT_POLICIES)
    ap.add_argument("--duo-dir", default="", help="folder with NAME.duo DuoServe states (trained if missing)")
    ap.add_argument("--from-json", default="", help="render the tables of an earlier --json instead of running")
    ap.add_argument("--in-sample", default="", help="folder for traces whose measured requests are also learned")
    args = ap.parse_args()

    rows = []
    if args.from_json:
        with open(args.from_json) as f:
            rows = json.load(f)
    for name in ([] if args.from_json else args.traces.split(",")):
        trace, learn, measure, hw = TRACES[name]
        trace = resolve(trace)
        if args.in_sample:
            os.makedirs(args.in_sample, exist_ok=True)
            trace, learn, measure = in_sample_trace(trace, learn, measure, args.in_sample, name)
        policies = args.policies
        extra = []
        if "duoserve" in policies.split(",") and args.duo_dir:
            state = os.path.join(args.duo_dir, name + ".duo")
            if not os.path.exists(state):
                os.makedirs(args.duo_dir, exist_ok=True)
                subprocess.run([args.moeflow, "train-predictor", "--trace", trace, "--requests", learn, "--out", state],
                               check=True, stdout=subprocess.DEVNULL)
            extra = ["--policy-state", "duoserve=" + state]
        for batch in args.batches.split(","):
            for cache in args.caches.split(","):
                cmd = [args.moeflow, "simulate", "--trace", trace, "--learn", learn, "--measure", measure, "--hw", hw,
                       "--batch", batch, "--cache", cache, "--policy", policies, "--json"] + extra
                print(" ".join(cmd), file=sys.stderr, flush=True)
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                j = json.loads(out)
                for r in j.get("results", [j]):
                    rows.append({"trace": name, "batch": int(batch), "cache": cache, "policy": r["policy"],
                                 "hit_rate": r["hit_rate"], "coverage": r["coverage"], "tpot_ms": 1e3 * r["tpot_seconds"],
                                 "ttft_ms": 1e3 * r["ttft_seconds"], "notes": r.get("notes", [])})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    lines = []
    for name in args.traces.split(","):
        trace, learn, measure, hw = TRACES[name]
        if args.in_sample:
            learn, measure = "all (in-sample)", "copies of " + measure
        for batch in args.batches.split(","):
            sel = [r for r in rows if r["trace"] == name and r["batch"] == int(batch)]
            caches = args.caches.split(",")
            lines.append(f"\n**{name}** (`{trace}`, learn {learn}, measure {measure}, {hw}, batch {batch}): "
                         "decode hit rate % / simulated TPOT ms\n")
            lines.append("| policy | " + " | ".join(caches) + " |")
            lines.append("|---|" + "---|" * len(caches))
            for p in args.policies.split(","):
                cells = []
                for c in caches:
                    m = [r for r in sel if r["policy"] == p and r["cache"] == c]
                    cells.append(f"{100 * m[0]['hit_rate']:.1f} / {m[0]['tpot_ms']:.2f}" if m else "-")
                lines.append(f"| {p} | " + " | ".join(cells) + " |")
    pols = args.policies.split(",")
    if all(p in pols for p in ("lru", "lfu", "adaptive", "belady")):
        lines += targets_table(rows, args)
    text = "\n".join(lines) + "\n"
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()

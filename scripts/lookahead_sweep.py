#!/usr/bin/env python3
"""The lookahead-routing tables of docs/results/policies.md: `moeflow simulate` on the
built-in model's held-out trace (learn 0:56, measure 56:80), per hardware profile and
batch size, hit rate (coverage: hits plus late prefetches) and simulated TPOT of
lru, lfu, adaptive, its lookahead ablations and belady at 12.5/25/50% cache.

usage: scripts/lookahead_sweep.py [--moeflow build/moeflow] [--hw nvme,pcie4] [--batches 1,16]
"""
import argparse
import json
import subprocess

POLICIES = "lru,lfu,adaptive,adaptive-nolookahead,adaptive-noprefetch,adaptive-noprefetch-nolookahead,belady"
CACHES = ("12.5%", "25%", "50%")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--moeflow", default="build/moeflow")
    ap.add_argument("--trace", default="models/traces/default-heldout.jsonl")
    ap.add_argument("--hw", default="nvme,pcie4")
    ap.add_argument("--batches", default="1,16")
    args = ap.parse_args()
    for hw in args.hw.split(","):
        for batch in args.batches.split(","):
            rows = {}
            for c in CACHES:
                out = subprocess.run([args.moeflow, "simulate", "--trace", args.trace, "--learn", "0:56", "--measure", "56:80",
                                      "--hw", hw, "--batch", batch, "--cache", c, "--policy", POLICIES, "--json"],
                                     check=True, capture_output=True, text=True).stdout
                for r in json.loads(out)["results"]:
                    rows.setdefault(r["policy"], {})[c] = r
            print(f"\n**{hw}, batch {batch}**: decode hit rate % (coverage %) / simulated TPOT ms\n")
            print("| policy | " + " | ".join(CACHES) + " |\n|---|" + "---|" * len(CACHES))
            for p in POLICIES.split(","):
                cells = [f"{100 * r['hit_rate']:.1f} ({100 * r['coverage']:.1f}) / {1e3 * r['tpot_seconds']:.2f}"
                         for r in (rows[p][c] for c in CACHES)]
                print(f"| {p} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

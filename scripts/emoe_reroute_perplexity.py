#!/usr/bin/env python3
"""eMoE's output quality under rerouting (emoe.txt Table 2 / §3.4): held-out perplexity
of the built-in model, every expert resident (lossless) against `--policy emoe
--on-miss reroute` (the paper's lossy mode) and LRU with rerouting, at 25% and 50% of
the expert bytes, per domain of the held-out corpus (tools/corpus/build_corpus.sh).

usage: scripts/emoe_reroute_perplexity.py CORPUS_DIR [--chunks 10] [--moeflow build/moeflow]
"""
import argparse
import json
import math
import os
import subprocess

DOMAINS = ["prose", "dict", "c", "python", "de", "es", "it", "ru"]
RUNS = [("lossless", []),
        ("emoe+reroute 25%", ["--policy", "emoe", "--on-miss", "reroute", "--expert-budget", "25%"]),
        ("emoe+reroute 50%", ["--policy", "emoe", "--on-miss", "reroute", "--expert-budget", "50%"]),
        ("lru+reroute 25%", ["--policy", "lru", "--on-miss", "reroute", "--expert-budget", "25%"]),
        ("lru+reroute 50%", ["--policy", "lru", "--on-miss", "reroute", "--expert-budget", "50%"])]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("--chunks", default="10")
    ap.add_argument("--moeflow", default="build/moeflow")
    args = ap.parse_args()
    rows = {}
    for name, flags in RUNS:
        nll, tok, rer, slots = 0.0, 0, 0, 0
        per = []
        for d in DOMAINS:
            f = os.path.join(args.corpus, d, "heldout.txt")
            out = subprocess.run([args.moeflow, "perplexity", "-f", f, "--chunks", args.chunks, "-q", "--json"] + flags,
                                 check=True, capture_output=True, text=True).stdout
            j = json.loads(out.strip().splitlines()[-1])
            nll += j["mean_nll"] * j["tokens_scored"]
            tok += j["tokens_scored"]
            per.append(j["perplexity"])
            if j.get("cache"):
                rer += j["cache"]["rerouted_slots"]
                slots += j["cache"]["hits"] + j["cache"]["misses"]
        rows[name] = (math.exp(nll / tok), per, rer)
    print("| run | " + " | ".join(DOMAINS) + " | all (token-weighted) | rerouted (token, slot) pairs |")
    print("|---|" + "---|" * (len(DOMAINS) + 2))
    for name, (ppl, per, rer) in rows.items():
        print(f"| {name} | " + " | ".join(f"{p:.1f}" for p in per) + f" | {ppl:.2f} | {rer if name != 'lossless' else '-'} |")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Reads what scripts/cuda_device_check.sh wrote into OUT_DIR.

  cuda_device_summary.py OUT_DIR hw      the simulator's link profile, from the
                                         bandwidth the transport measured
  cuda_device_summary.py OUT_DIR model   the simulator's model profile: Mixtral's, with
                                         this model's layers, expert bytes and the
                                         all-resident run's time per layer
  cuda_device_summary.py OUT_DIR report  the Markdown tables of docs/results/cuda.md
"""
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main():
    out, what = sys.argv[1], sys.argv[2]
    bench = load(os.path.join(out, "bench.json")) or {}
    link_gbs = bench.get("link_gbs") or 0.0
    if what == "hw":
        print(json.dumps({"name": "measured-link", "description": "host-to-device link as the transport measured it",
                          "bandwidth_gbs": round(link_gbs, 2) if link_gbs > 0 else 25.0, "latency_us": 10.0,
                          "copy_engines": 1, "chunk_kib": 8192}))
        return
    if what == "model":
        here = os.path.dirname(os.path.abspath(__file__))
        prof = load(os.path.join(here, "..", "profiles", "models", "mixtral-8x7b.json"))
        n_layer = int(sys.argv[3])
        all_run = next(r for r in bench["policies"] if r["policy"] == "all")
        per_layer = 1.0 / all_run["tg_tokens_per_second"] / n_layer
        prof.update({"name": "measured-model", "n_layer": n_layer,
                     "expert_bytes": int(bench["expert_bytes_total"] / (n_layer * prof["n_expert"])),
                     "description": "Mixtral-shaped model of the GPU run: its layers, expert bytes, and the "
                                    "all-resident decode time per layer split evenly between dense and experts",
                     "dense_seconds_per_layer": per_layer / 2, "dense_seconds_per_layer_token": 0.0,
                     "expert_seconds": per_layer / 4, "expert_seconds_per_token": 0.0})
        print(json.dumps(prof))
        return
    print(f"backend {bench.get('backend')}, model {bench.get('model')}, link {link_gbs:.1f} GB/s, "
          f"weights per token {bench.get('weight_bytes_per_token', 0) / 2**20:.0f} MiB\n")
    all_run = next((r for r in bench.get("policies", []) if r["policy"] == "all"), None)
    if all_run:
        gbs = bench["weight_bytes_per_token"] * all_run["tg_tokens_per_second"] / 1e9
        print(f"all-resident decode streams {gbs:.0f} GB/s of weights against {bench['triad_bandwidth_gbs']:.0f} GB/s "
              f"(device-to-device copy); prefill {bench['pp_tokens_per_second']:.0f} tok/s")
        ops = bench.get("tg_backend_ops") or []
        if ops:
            print("decode, where a token's time went: " + ", ".join(
                f"{o['op']} {o['ms_per_token']:.3f} ms ({o['calls_per_token']:.0f} calls)" for o in ops))
    cpu = load(os.path.join(out, "bench-cpu.json"))
    if cpu:
        print(f"the same model on {cpu['threads']} CPU threads: decode {cpu['tg_tokens_per_second']:.1f} tok/s, "
              f"prefill {cpu['pp_tokens_per_second']:.1f} tok/s")
    print()
    print("| policy | tok/s | TPOT ms | vs all-resident | hit rate | MiB moved / token | link busy | "
          "stall-free TPOT bound ms | TPOT / bound |")
    print("|---|---|---|---|---|---|---|---|---|")
    runs = list(bench.get("policies", []))
    hc = load(os.path.join(out, "bench-host-compute.json")) or {}
    for r in hc.get("policies", []):
        if r["policy"] != "all":
            r = dict(r, policy=r["policy"] + " host-compute")
            runs.append(r)
    tpot_all = None
    for r in runs:
        tps = r["tg_tokens_per_second"]
        tpot = 1000.0 / tps
        if r["policy"] == "all":
            tpot_all = tpot
            print(f"| all (resident) | {tps:.1f} | {tpot:.2f} | 1.00 | 100% | 0 | - | - | - |")
            continue
        bpt = r.get("bytes_read_per_token", 0.0)
        copy_ms = 1000.0 * bpt / (link_gbs * 1e9) if link_gbs > 0 else 0.0
        bound = max(tpot_all or 0.0, copy_ms)
        print(f"| {r['policy']} | {tps:.1f} | {tpot:.2f} | {tpot / tpot_all:.2f}x | {100 * r.get('hit_rate', 0):.1f}% | "
              f"{bpt / 2**20:.0f} | {100 * r.get('link_busy_fraction', 0):.0f}% | {bound:.2f} | {tpot / bound:.2f} |")
    sim = load(os.path.join(out, "simulate.json"))
    if sim is None:
        return
    results = sim.get("results") or ([sim] if "policy" in sim else [])
    by_policy = {r.get("policy"): r for r in results}
    print("\n| policy | engine hit rate (same prompt, prefill + decode) | simulator, same trace and link |")
    print("|---|---|---|")
    for pol in ["belady"] + [r["policy"] for r in bench.get("policies", []) if r["policy"] != "all"]:
        run = load(os.path.join(out, f"run-{pol}.json")) or {}
        c = run.get("cache") or {}
        eng = f"{100 * c['hit_rate']:.1f}%" if "hit_rate" in c else "-"
        s = by_policy.get(pol)
        print(f"| {pol} | {eng} | {100 * s['hit_rate']:.1f}% |" if s else f"| {pol} | {eng} | - |")


if __name__ == "__main__":
    main()

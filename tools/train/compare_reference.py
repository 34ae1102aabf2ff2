#!/usr/bin/env python3
"""Compares moeflow's logits with the PyTorch reference (tools/reference) on a model.

usage: /usr/bin/python3 tools/train/compare_reference.py MODEL.gguf TOKENIZER.json [--text T] [--decode 8]
Encodes TEXT (with BOS), runs `moeflow run --prompt-tokens ... --temp 0 --logits-out` and
tools/reference/run_reference.py on the same tokens, and prints the largest relative L2
error of any position's logits and whether the greedy tokens agree.
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
import bpe  # noqa: E402


def read_logits(path):
    with open(path, "rb") as f:
        magic, ver, n, v = struct.unpack("<4sIII", f.read(16))
        assert magic == b"MFLG", path
        toks = np.frombuffer(f.read(4 * n), dtype="<i4")
        logits = np.frombuffer(f.read(4 * n * v), dtype="<f4").reshape(n, v)
    return toks, logits


ap = argparse.ArgumentParser()
ap.add_argument("model")
ap.add_argument("tokenizer")
ap.add_argument("--text", default="In the beginning God created the heaven and the earth.")
ap.add_argument("--decode", type=int, default=8)
ap.add_argument("--moeflow", default="./build/moeflow")
args = ap.parse_args()
tok = bpe.Tokenizer.load(args.tokenizer)
ids = [tok.eot] + tok.encode(args.text)
ts = ",".join(map(str, ids))
with tempfile.TemporaryDirectory() as d:
    ours, ref = os.path.join(d, "ours.logits"), os.path.join(d, "ref.logits")
    subprocess.run([args.moeflow, "run", "-m", args.model, "--prompt-tokens", ts, "-n", str(args.decode), "--temp", "0",
                    "--ignore-eos", "-t", "1", "--logits-out", ours], check=True, capture_output=True)
    subprocess.run([sys.executable, os.path.join(here, "..", "reference", "run_reference.py"), "--model", args.model,
                    "--tokens", ts, "--decode", str(args.decode), "--out", ref], check=True, capture_output=True)
    ta, la = read_logits(ours)
    tb, lb = read_logits(ref)
n = min(len(la), len(lb))
err = max(np.linalg.norm(la[i].astype(np.float64) - lb[i]) / np.linalg.norm(lb[i].astype(np.float64)) for i in range(n))
print(f"{len(ids)} prompt tokens + {args.decode} greedy: max relative L2 error of the logits {err:.3e}; "
      f"tokens {'agree' if list(ta) == list(tb) else 'DIFFER'}")
print("ours:", repr(tok.decode([int(t) for t in ta[len(ids):]])))

#!/usr/bin/env python3
"""Checks that moeflow's C++ tokenizer encodes exactly as tools/train/bpe.py does.

usage: /usr/bin/python3 tools/train/check_tokenizer.py MODEL.gguf TOKENIZER.json FILE... [--chunk 6000] [--max-chunks 20]
Cuts each file into chunks of about --chunk bytes (at document boundaries where it can),
runs `moeflow run -m MODEL --json -n 0 -p CHUNK` and compares its prompt_tokens with
[BOS] + the Python encoding. Exits 1 on the first mismatch, printing where it is.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("model")
ap.add_argument("tokenizer")
ap.add_argument("files", nargs="+")
ap.add_argument("--chunk", type=int, default=6000)
ap.add_argument("--max-chunks", type=int, default=20)
ap.add_argument("--moeflow", default="./build/moeflow")
args = ap.parse_args()
tok = bpe.Tokenizer.load(args.tokenizer)
total = 0
for path in args.files:
    text = open(path, encoding="utf-8").read()
    chunks, cur = [], ""
    for k, doc in enumerate(text.split(bpe.EOT)):
        piece = (bpe.EOT if k else "") + doc
        if cur and len(cur) + len(piece) > args.chunk:
            chunks.append(cur)
            cur = ""
        cur += piece
        while len(cur) > args.chunk:
            chunks.append(cur[:args.chunk])
            cur = cur[args.chunk:]
    if cur:
        chunks.append(cur)
    for chunk in chunks[:args.max_chunks]:
        r = subprocess.run([args.moeflow, "run", "-m", args.model, "--json", "-n", "0", "-t", "1", "-p", chunk],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"moeflow failed: {r.stderr}")
        got = json.loads(r.stdout)["prompt_tokens"]
        want = [tok.eot] + tok.encode(chunk)
        if got != want:
            i = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
            sys.exit(f"MISMATCH in {path} at token {i}: C++ {got[i:i + 8]} vs Python {want[i:i + 8]}\n"
                     f"text near: {tok.decode(want[max(0, i - 8):i + 8])!r}")
        total += len(want)
    print(f"{path}: {min(len(chunks), args.max_chunks)} chunks identical")
print(f"OK: {total} tokens identical")

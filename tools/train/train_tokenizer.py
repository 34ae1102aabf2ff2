#!/usr/bin/env python3
"""Trains the byte-level BPE on the corpus' training split and encodes every split.

usage: /usr/bin/python3 tools/train/train_tokenizer.py [CORPUS_DIR] [--vocab 4096] [--sample 600000]
Writes CORPUS_DIR/tokenizer.json and CORPUS_DIR/<domain>/{train,heldout}.bin (uint16 ids,
documents separated by the end-of-text id). The BPE is trained on the first --sample bytes
of each domain's train.txt so that every domain weighs the same.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("corpus", nargs="?", default="build-corpus")
ap.add_argument("--vocab", type=int, default=4096)
ap.add_argument("--sample", type=int, default=600_000)
args = ap.parse_args()

domains = sorted(d for d in os.listdir(args.corpus) if os.path.isfile(os.path.join(args.corpus, d, "train.txt")))
t0 = time.time()
texts = []
for d in domains:
    with open(os.path.join(args.corpus, d, "train.txt"), encoding="utf-8") as f:
        t = f.read(args.sample)
    texts.extend(t.split(bpe.EOT))
merges = bpe.train(texts, args.vocab)
tok = bpe.Tokenizer(merges)
tok.save(os.path.join(args.corpus, "tokenizer.json"))
print(f"trained {len(tok.tokens)} tokens ({len(merges)} merges) in {time.time() - t0:.0f}s", flush=True)
for d in domains:
    for split in ("train", "heldout"):
        with open(os.path.join(args.corpus, d, split + ".txt"), encoding="utf-8") as f:
            text = f.read()
        ids = np.array(tok.encode(text), dtype=np.uint16)
        ids.tofile(os.path.join(args.corpus, d, split + ".bin"))
        print(f"{d:8s} {split:8s} {len(text.encode()):9d} bytes -> {len(ids):8d} tokens "
              f"({len(text.encode()) / max(len(ids), 1):.2f} bytes/token)", flush=True)
print(f"done in {time.time() - t0:.0f}s")

"""Runs the reference on a prompt plus greedy decode steps and writes every
position's logits in moeflow's logits format (see README.md)."""
import argparse
import struct
import sys
import os

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import arch_reference  # noqa: E402
from gguf_reader import GGUF  # noqa: E402


def load_reference(path):
    """The NumPy reference for the architectures it covers, else the PyTorch one."""
    if GGUF(path).metadata["general.architecture"] in arch_reference.ARCHS:
        return arch_reference.reference_for(path)
    from moe_reference import Reference  # needs PyTorch
    return Reference(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True, help="comma-separated prompt token ids")
    ap.add_argument("--decode", type=int, default=8, help="greedy decode steps")
    ap.add_argument("--out", required=True)
    ap.add_argument("--print", action="store_true")
    a = ap.parse_args()
    ref = load_reference(a.model)
    tokens = [int(t) for t in a.tokens.replace(" ", "").replace("\n", "").split(",") if t]
    n_prompt = len(tokens)
    n_vocab = ref.embd.shape[0]
    if not tokens or not all(0 <= t < n_vocab for t in tokens):
        sys.exit(f"tokens must be non-empty and in [0, {n_vocab})")
    # Each decoded token is fed back too, so there are len(prompt) + decode rows.
    for _ in range(a.decode):
        nxt = int(ref.logits(tokens)[-1].argmax())
        tokens.append(nxt)
    logits = np.asarray(ref.logits(tokens), dtype=np.float64).astype(np.float32)
    with open(a.out, "wb") as f:
        f.write(b"MFLG")
        f.write(struct.pack("<III", 1, len(tokens), logits.shape[1]))
        f.write(np.asarray(tokens, dtype="<i4").tobytes())
        f.write(np.ascontiguousarray(logits, dtype="<f4").tobytes())
    if a.print:  # the whole sequence (prompt + greedy tokens), then the greedy tokens alone
        print(",".join(map(str, tokens)))
        print("greedy:", ",".join(map(str, tokens[n_prompt:])))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Writes a training checkpoint as an F32 GGUF in llama.cpp's Mixtral layout.

usage: /usr/bin/python3 tools/train/export_gguf.py CKPT.pt TOKENIZER.json OUT.gguf [--name NAME]

general.architecture = "llama" with llama.* hyper-parameters, blk.N.attn_{norm,q,k,v,output},
blk.N.ffn_norm, blk.N.ffn_gate_inp (router {D, E}), stacked experts
blk.N.ffn_{gate,up}_exps {D, F, E} and ffn_down_exps {F, D, E}, token_embd, output_norm,
output; tokenizer.ggml.* as a "gpt2" byte-level BPE whose end-of-text token (control)
is BOS and EOS, with add_bos_token = true. A dense checkpoint (one expert) is written
as a Mixtral with expert_count = expert_used_count = 1, which moeflow runs as is.
GGUF v3, alignment 32, written from the specification (moeflow's C++ reader and
tools/reference/gguf_reader.py both read it back).
"""
import argparse
import os
import pathlib
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402

U32, I32, F32, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9
ALIGN = 32
# What `moeflow serve` renders chat requests with (tokenizer.chat_template).
CHAT_TEMPLATE = pathlib.Path(__file__).resolve().parent / "chat_template.jinja"


def s_bytes(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def value_bytes(t, v):
    if t == U32:
        return struct.pack("<I", v)
    if t == I32:
        return struct.pack("<i", v)
    if t == F32:
        return struct.pack("<f", v)
    if t == BOOL:
        return struct.pack("<?", v)
    if t == STRING:
        return s_bytes(v)
    raise ValueError(t)


def write_gguf(path, kv, tensors):
    """kv: [(key, type, value)] (value of an ARRAY: (elem_type, list)); tensors: [(name, np.float32 array)]
    in C order, GGUF dims reversed from the numpy shape."""
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)))
    for k, t, v in kv:
        out += s_bytes(k) + struct.pack("<I", t)
        if t == ARRAY:
            et, items = v
            out += struct.pack("<IQ", et, len(items))
            for it in items:
                out += value_bytes(et, it)
        else:
            out += value_bytes(t, v)
    off = 0
    blobs = []
    for name, a in tensors:
        a = np.ascontiguousarray(a, dtype="<f4")
        dims = list(reversed(a.shape))
        out += s_bytes(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", 0, off)  # GGML_TYPE_F32
        blobs.append((off, a.tobytes()))
        off += (a.nbytes + ALIGN - 1) // ALIGN * ALIGN
    out += b"\0" * ((-len(out)) % ALIGN)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(out)
        for o, b in blobs:
            f.write(b)
            f.write(b"\0" * ((-len(b)) % ALIGN))
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("tokenizer")
    ap.add_argument("out")
    ap.add_argument("--name", default="moeflow-default")
    args = ap.parse_args()
    ck = torch.load(args.ckpt, map_location="cpu")
    c = ck["cfg"]
    sd = {k: v.float().numpy() for k, v in ck["model"].items()}
    tok = bpe.Tokenizer.load(args.tokenizer)
    assert len(tok.tokens) == c["n_vocab"], (len(tok.tokens), c["n_vocab"])
    hd = c["n_embd"] // c["n_head"]
    p = "llama."
    kv = [
        ("general.architecture", STRING, "llama"),
        ("general.name", STRING, args.name),
        (p + "context_length", U32, c["n_ctx"]),
        (p + "embedding_length", U32, c["n_embd"]),
        (p + "block_count", U32, c["n_layer"]),
        (p + "feed_forward_length", U32, c["n_ff"]),
        (p + "expert_feed_forward_length", U32, c["n_ff"]),
        (p + "attention.head_count", U32, c["n_head"]),
        (p + "attention.head_count_kv", U32, c["n_head_kv"]),
        (p + "attention.key_length", U32, hd),
        (p + "attention.value_length", U32, hd),
        (p + "attention.layer_norm_rms_epsilon", F32, c["rms_eps"]),
        (p + "rope.freq_base", F32, c["rope_base"]),
        (p + "rope.dimension_count", U32, hd),
        (p + "expert_count", U32, c["n_expert"]),
        (p + "expert_used_count", U32, c["n_expert_used"]),
        (p + "vocab_size", U32, c["n_vocab"]),
        ("general.file_type", U32, 0),
        ("tokenizer.ggml.model", STRING, "gpt2"),
        ("tokenizer.ggml.pre", STRING, "gpt-2"),  # llama.cpp: GPT-2 pre-split, as we train and tokenize
        ("tokenizer.ggml.tokens", ARRAY, (STRING, tok.tokens)),
        ("tokenizer.ggml.token_type", ARRAY, (I32, [3 if i == tok.eot else 1 for i in range(len(tok.tokens))])),
        ("tokenizer.ggml.merges", ARRAY, (STRING, [a + " " + b for a, b in tok.merges])),
        ("tokenizer.ggml.bos_token_id", U32, tok.eot),
        ("tokenizer.ggml.eos_token_id", U32, tok.eot),
        ("tokenizer.ggml.add_bos_token", BOOL, True),
        ("tokenizer.chat_template", STRING, CHAT_TEMPLATE.read_text()),
    ]
    t = [("token_embd.weight", sd["tok_embd"])]
    for i in range(c["n_layer"]):
        b, L = f"blk.{i}.", f"layers.{i}."
        E = c["n_expert"]
        router = sd[L + "router"] if E > 1 else np.zeros((1, c["n_embd"]), np.float32)
        t += [
            (b + "attn_norm.weight", sd[L + "attn_norm"]),
            (b + "attn_q.weight", sd[L + "wq"]),
            (b + "attn_k.weight", sd[L + "wk"]),
            (b + "attn_v.weight", sd[L + "wv"]),
            (b + "attn_output.weight", sd[L + "wo"]),
            (b + "ffn_norm.weight", sd[L + "ffn_norm"]),
            (b + "ffn_gate_inp.weight", router),
            (b + "ffn_gate_exps.weight", sd[L + "w_gate"]),
            (b + "ffn_up_exps.weight", sd[L + "w_up"]),
            (b + "ffn_down_exps.weight", sd[L + "w_down"]),
        ]
    t += [("output_norm.weight", sd["output_norm"]), ("output.weight", sd["output"])]
    write_gguf(args.out, kv, t)
    print(f"wrote {args.out}: step {ck['step']}/{ck['total_steps']}, {os.path.getsize(args.out):,} bytes")


if __name__ == "__main__":
    main()

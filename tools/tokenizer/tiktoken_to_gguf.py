#!/usr/bin/python3
"""Writes a vocabulary-only GGUF (tokenizer.ggml.* keys, no tensors) from a tiktoken rank
file (one "base64(token bytes) rank" per line: Meta's Llama 3 tokenizer.model, OpenAI's
o200k_base.tiktoken), the way Hugging Face's tiktoken conversion and llama.cpp's converter
describe such a vocabulary: token id = rank, tokens written in GPT-2's byte-to-unicode
form, and merges derived from the ranks as Hugging Face's TikTokenConverter does: for a
token of rank r, every split into two tokens is a merge, those ordered by the ranks of
their left then right parts, and all merges ordered by r (so a token can be formed by
several merges; Llama 3's tokenizer.json lists 280147 merges for 128000 ranks). The
special tokens follow the ranks.

Used to check moeflow's tokenizer against the reference ids of llama.cpp's
ggml-vocab-llama-bpe.gguf.inp/.out when the 8 MB ggml-vocab-llama-bpe.gguf itself cannot
be had (docs/tokenizers.md).

Usage: tools/tokenizer/tiktoken_to_gguf.py --preset llama3 tokenizer.model out.gguf
       tools/tokenizer/tiktoken_to_gguf.py --preset gpt-4o o200k_base.tiktoken out.gguf
"""
import argparse
import base64
import struct
import sys

from vocab_subset import bytes_to_unicode


def llama3_specials():
    """Llama 3's 256 special tokens (ids 128000..128255), as Meta's tokenizer.py names them."""
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
             "<|reserved_special_token_1|>", "<|reserved_special_token_2|>", "<|reserved_special_token_3|>",
             "<|start_header_id|>", "<|end_header_id|>", "<|reserved_special_token_4|>", "<|eot_id|>"]
    names += ["<|reserved_special_token_%d|>" % i for i in range(5, 256 - 5)]
    return names


def o200k_specials():
    """o200k_base's two special tokens, as tiktoken and js-tiktoken define them. Their ids
    leave holes after the 199998 ranks (199998, 200000..200017); main() fills those with
    unused placeholders, as llama.cpp's converter does."""
    return {199999: "<|endoftext|>", 200018: "<|endofprompt|>"}


PRESETS = {
    # pre, specials (a list following the ranks, or {id: name}), bos, eos, add_bos
    "llama3": ("llama-bpe", llama3_specials(), 128000, 128001, True),
    "gpt-4o": ("gpt-4o", o200k_specials(), 199999, 199999, False),
}


def read_ranks(path):
    ranks = {}
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            tok, rank = line.split()
            ranks[base64.b64decode(tok)] = int(rank)
    if sorted(ranks.values()) != list(range(len(ranks))):
        sys.exit(path + ": ranks are not 0..n-1")
    return ranks


def merges_for(ranks, token):
    """Every split of `token` into two tokens, ordered by (rank of left, rank of right)."""
    splits = [(token[:i], token[i:]) for i in range(1, len(token)) if token[:i] in ranks and token[i:] in ranks]
    return sorted(splits, key=lambda lr: (ranks[lr[0]], ranks[lr[1]]))


def gguf_bytes(kv):
    def s(x):
        b = x.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    out = [b"GGUF", struct.pack("<IQQ", 3, 0, len(kv))]
    for key, (kind, value) in kv.items():
        out.append(s(key))
        if kind == "str":
            out.append(struct.pack("<I", 8) + s(value))
        elif kind == "u32":
            out.append(struct.pack("<II", 4, value))
        elif kind == "bool":
            out.append(struct.pack("<IB", 7, 1 if value else 0))
        elif kind == "str[]":
            out.append(struct.pack("<IIQ", 9, 8, len(value)) + b"".join(s(v) for v in value))
        elif kind == "i32[]":
            out.append(struct.pack("<IIQ", 9, 5, len(value)) + b"".join(struct.pack("<i", v) for v in value))
    return b"".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", choices=sorted(PRESETS), required=True)
    ap.add_argument("ranks")
    ap.add_argument("out")
    args = ap.parse_args()
    pre, specials, bos, eos, add_bos = PRESETS[args.preset]
    ranks = read_ranks(args.ranks)
    b2u = bytes_to_unicode()
    mapped = lambda b: "".join(b2u[x] for x in b)  # noqa: E731
    by_rank = sorted(ranks, key=ranks.get)
    tokens = [mapped(t) for t in by_rank]
    types = [1] * len(by_rank)
    if isinstance(specials, dict):
        for i in range(len(tokens), max(specials) + 1):
            tokens.append(specials.get(i, "[PAD%d]" % i))
            types.append(3 if i in specials else 5)  # 5: unused
        if any(tokens[i] != name for i, name in specials.items()):
            sys.exit(args.ranks + ": a special token's id is taken by a rank")
    else:
        tokens += specials
        types += [3] * len(specials)
    n_specials = sum(1 for t in types if t == 3)
    merges = []
    for t in by_rank:
        for a, b in merges_for(ranks, t):
            merges.append(mapped(a) + " " + mapped(b))
    kv = {
        "general.architecture": ("str", "llama"),
        "general.name": ("str", "vocabulary from " + args.ranks.split("/")[-1]),
        "tokenizer.ggml.model": ("str", "gpt2"),
        "tokenizer.ggml.pre": ("str", pre),
        "tokenizer.ggml.tokens": ("str[]", tokens),
        "tokenizer.ggml.token_type": ("i32[]", types),
        "tokenizer.ggml.merges": ("str[]", merges),
        "tokenizer.ggml.bos_token_id": ("u32", bos),
        "tokenizer.ggml.eos_token_id": ("u32", eos),
        "tokenizer.ggml.add_bos_token": ("bool", add_bos),
    }
    with open(args.out, "wb") as f:
        f.write(gguf_bytes(kv))
    print("wrote %s: %d tokens (%d special), %d merges" % (args.out, len(tokens), n_specials, len(merges)))


if __name__ == "__main__":
    main()

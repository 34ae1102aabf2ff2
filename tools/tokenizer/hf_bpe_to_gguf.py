#!/usr/bin/python3
"""Writes a vocabulary-only GGUF (tokenizer.ggml.* keys, no tensors) from a Hugging Face
byte-level BPE vocabulary in its two-file form: vocab.json (token -> id), merges.txt (one
"left right" merge per line, in rank order, after a "#version" line) and optionally
added_tokens.json (special token -> id, written as control tokens). Ids with no token
(padding up to the model's vocabulary size) are left out: the vocabulary ends at the
largest id.

Or from the one-file form, tokenizer.json (--tokenizer-json): model.vocab, model.merges
("left right" strings or [left, right] pairs) and added_tokens, those with "special" as
control tokens and the others (DeepSeek-V3's <｜User｜>, <｜fim▁hole｜>, ...) as
user-defined ones, as llama.cpp's converter writes them.

Used to check moeflow's tokenizer against the reference ids of llama.cpp's
ggml-vocab-qwen2.gguf.inp/.out when ggml-vocab-qwen2.gguf itself cannot be had
(docs/tokenizers.md).

Usage: tools/tokenizer/hf_bpe_to_gguf.py --pre qwen2 VOCAB_JSON MERGES_TXT [ADDED_JSON] OUT
       tools/tokenizer/hf_bpe_to_gguf.py --pre deepseek-v3 --tokenizer-json tokenizer.json OUT
"""
import argparse
import json
import sys

from tiktoken_to_gguf import gguf_bytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pre", required=True, help="tokenizer.ggml.pre to write")
    ap.add_argument("--tokenizer-json", action="store_true", help="read one tokenizer.json instead")
    ap.add_argument("files", nargs="+", help="vocab.json merges.txt [added_tokens.json] out.gguf, "
                    "or tokenizer.json out.gguf")
    args = ap.parse_args()
    added_types = {}  # added token -> 3 (control) or 4 (user-defined)
    if args.tokenizer_json:
        if len(args.files) != 2:
            sys.exit("expected tokenizer.json out.gguf")
        vocab_path, out = args.files
        with open(vocab_path, encoding="utf-8") as f:
            j = json.load(f)
        if j["model"]["type"] != "BPE":
            sys.exit(vocab_path + ": model.type is not BPE")
        vocab = j["model"]["vocab"]
        merges = [m if isinstance(m, str) else " ".join(m) for m in j["model"]["merges"]]
        added = {t["content"]: t["id"] for t in j.get("added_tokens", [])}
        added_types = {t["content"]: 3 if t["special"] else 4 for t in j.get("added_tokens", [])}
    else:
        if len(args.files) not in (3, 4):
            sys.exit("expected vocab.json merges.txt [added_tokens.json] out.gguf")
        vocab_path, merges_path, out = args.files[0], args.files[1], args.files[-1]
        with open(vocab_path, encoding="utf-8") as f:
            vocab = json.load(f)
        added = {}
        if len(args.files) == 4:
            with open(args.files[2], encoding="utf-8") as f:
                added = json.load(f)
        with open(merges_path, encoding="utf-8") as f:
            merges = [line.rstrip("\n") for line in f if line.strip() and not line.startswith("#version")]
    n = max(list(vocab.values()) + list(added.values())) + 1
    tokens = [None] * n
    types = [1] * n
    for tok, i in vocab.items():
        tokens[i] = tok
    for tok, i in added.items():
        tokens[i] = tok
        types[i] = added_types.get(tok, 3)
    missing = [i for i, t in enumerate(tokens) if t is None]
    if missing:
        sys.exit("ids without a token, e.g. %d" % missing[0])
    kv = {
        "general.architecture": ("str", "qwen2"),
        "general.name": ("str", "vocabulary from " + vocab_path.split("/")[-1]),
        "tokenizer.ggml.model": ("str", "gpt2"),
        "tokenizer.ggml.pre": ("str", args.pre),
        "tokenizer.ggml.tokens": ("str[]", tokens),
        "tokenizer.ggml.token_type": ("i32[]", types),
        "tokenizer.ggml.merges": ("str[]", merges),
    }
    with open(out, "wb") as f:
        f.write(gguf_bytes(kv))
    print("wrote %s: %d tokens (%d added), %d merges" % (out, n, len(added), len(merges)))


if __name__ == "__main__":
    main()

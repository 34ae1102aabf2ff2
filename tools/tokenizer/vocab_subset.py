#!/usr/bin/python3
"""Cuts llama.cpp's vocabulary test pairs down to a committed fixture: from
ggml-vocab-NAME.gguf (a multi-MB byte-level BPE vocabulary) keeps only what encoding the
texts of NAME.gguf.inp can touch, with their reference ids from NAME.gguf.out.

BPE inside a pre-token piece only ever forms substrings of that piece, and a piece is a
substring of its text, so keeping every token that is a substring of a text (in the
byte-to-unicode mapped form), every merge whose result is such a substring (in the
original order), and every control or user-defined token that occurs in a text leaves
the encoding of those texts unchanged, whatever the pre-tokenizer: a wrong split still
shows up as different ids.
Token ids are kept; the C++ test fills the ids left out with placeholders. Where
reference_ids.py wrote NAME.gguf.edge.inp/.out, the edge-case texts and their ids (from
the independent Python BPE, not the model's tokenizer) go in too, as "edge_tests".

Usage (from the repository root; VOCAB_DIR holds llama.cpp's models/ggml-vocab-*):
  tools/tokenizer/vocab_subset.py VOCAB_DIR gpt-2 deepseek-llm deepseek-coder
  tools/tokenizer/vocab_subset.py --source "WHERE THE VOCABULARY AND IDS CAME FROM" VOCAB_DIR gpt-4o
"""
import json
import os
import struct
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import patterns  # noqa: E402

MAX_TOKEN_CHARS = 128  # longer than any token of these vocabularies (checked below)
_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def gguf_metadata(path):
    """The key/value section of a GGUF v2/v3 file (tensors are not needed)."""
    with open(path, "rb") as f:
        buf = f.read()
    pos = 0

    def read(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, buf, pos)[0]
        pos += struct.calcsize(fmt)
        return v

    def string():
        nonlocal pos
        n = read("<Q")
        s = buf[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def value(t):
        if t == 8:
            return string()
        if t == 9:
            et, n = read("<I"), read("<Q")
            return [value(et) for _ in range(n)]
        return read(_SCALAR[t])

    if buf[:4] != b"GGUF":
        sys.exit(path + ": not a GGUF file")
    pos = 4
    if read("<I") not in (2, 3):
        sys.exit(path + ": unsupported GGUF version")
    read("<Q")
    n_kv = read("<Q")
    meta = {}
    for _ in range(n_kv):
        key = string()
        meta[key] = value(read("<I"))
    return meta


def bytes_to_unicode():
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


def read_pairs(inp, out):
    """llama.cpp's test pair format: texts separated by the separator line, ids per line."""
    with open(inp, "rb") as f:
        raw = f.read().decode("utf-8")
    texts = raw.split("\n__ggml_vocab_test__\n")
    if texts and texts[-1] == "":
        texts.pop()
    with open(out) as f:
        ids = [[int(x) for x in line.split()] for line in f]
    if len(texts) != len(ids):
        sys.exit(inp + ": the .inp and .out files disagree on the number of texts")
    return texts, ids


def main():
    args = sys.argv[1:]
    source = None  # the fixture's "source" note, where the pairs are not llama.cpp's
    if len(args) >= 2 and args[0] == "--source":
        source, args = args[1], args[2:]
    if len(args) < 2:
        sys.exit(__doc__)
    vocab_dir, names = args[0], args[1:]
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    b2u = bytes_to_unicode()
    for name in names:
        base = os.path.join(vocab_dir, "ggml-vocab-%s.gguf" % name)
        meta = gguf_metadata(base)
        if meta["tokenizer.ggml.model"] != "gpt2":
            sys.exit(base + ": not a byte-level BPE vocabulary")
        pre = meta.get("tokenizer.ggml.pre", "")
        if pre not in patterns.BY_NAME:
            sys.exit(base + ": tokenizer.ggml.pre '%s' is not in patterns.py" % pre)
        texts, ids = read_pairs(base + ".inp", base + ".out")
        edge_texts, edge_ids = [], []
        if os.path.exists(base + ".edge.inp"):
            edge_texts, edge_ids = read_pairs(base + ".edge.inp", base + ".edge.out")
        all_texts = texts + edge_texts
        all_texts += [unicodedata.normalize("NFC", t) for t in all_texts]  # qwen2 encodes the NFC form

        # Substrings of the whole mapped texts, not only of their pieces: then the subset
        # encodes the texts as the full vocabulary would under any split into pieces, so a
        # wrong pre-tokenizer still shows up as different ids.
        substrings = set()
        for t in all_texts:
            m = "".join(b2u[x] for x in t.encode("utf-8"))
            for i in range(len(m)):
                for j in range(i + 1, min(len(m), i + MAX_TOKEN_CHARS) + 1):
                    substrings.add(m[i:j])

        tokens = meta["tokenizer.ggml.tokens"]
        if max(len(t) for t in tokens) > MAX_TOKEN_CHARS:
            sys.exit(base + ": a token is longer than MAX_TOKEN_CHARS")
        types = meta.get("tokenizer.ggml.token_type", [1] * len(tokens))
        keep = {}
        for i, (tok, ty) in enumerate(zip(tokens, types)):
            if tok in substrings or (ty in (3, 4) and any(tok in t for t in all_texts)):
                keep[i] = [ty, tok]
        merges = [m for m in meta["tokenizer.ggml.merges"] if m.replace(" ", "", 1) in substrings]
        fixture = {
            "source": (source or "llama.cpp models/ggml-vocab-%s.gguf(.inp/.out)" % name)
            + ", cut by tools/tokenizer/vocab_subset.py",
            "pre": pre,
            "n_tokens": len(tokens),
            "bos": meta.get("tokenizer.ggml.bos_token_id", -1),
            "eos": meta.get("tokenizer.ggml.eos_token_id", -1),
            "tokens": [[i] + keep[i] for i in sorted(keep)],
            "merges": merges,
            "tests": [[t, i] for t, i in zip(texts, ids)],
            # ids from the independent Python BPE (reference_ids.py), where written
            "edge_tests": [[t, i] for t, i in zip(edge_texts, edge_ids)],
        }
        out = os.path.join(root, "tests", "fixtures", "tokenizer", "vocab_subset_%s.json" % name)
        with open(out, "w", encoding="utf-8") as f:
            json.dump(fixture, f, ensure_ascii=False, separators=(",", ":"))
            f.write("\n")
        print("wrote %s: %d of %d tokens, %d of %d merges, %d texts, %d edge cases" % (
            out, len(keep), len(tokens), len(merges), len(meta["tokenizer.ggml.merges"]), len(texts), len(edge_texts)))


if __name__ == "__main__":
    main()

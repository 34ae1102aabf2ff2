#!/usr/bin/python3
"""Token ids for the edge-case corpus of reference_splits.py (CJK, emoji with ZWJ and
skin tones, combining marks, digit runs, whitespace runs, contractions, ...) from an
independent Python byte-level BPE: the control and user-defined tokens written in the
text cut out first (longest match, as the tokenizers library does with added tokens;
DeepSeek's vocabularies have such tokens for single characters like "ö"), Qwen2's text
normalised to NFC (Python's unicodedata), the reference splits (patterns.py run by
Python's regex), GPT-2's byte-to-unicode mapping, then the Hugging Face BPE rule
(repeatedly merge the adjacent pair of lowest merge rank, leftmost first; with
ignore_merges a piece that is a token is taken whole). It extends the check of
llama.cpp's 46 reference texts to the edge cases, against a second implementation rather
than the models' own tokenizers.

Writes ggml-vocab-NAME.gguf.edge.inp/.out beside each vocabulary, in llama.cpp's .inp/.out
format; tokenizer_vocab_test.cpp checks them when MOEFLOW_VOCAB_DIR is set. Inputs that
are not valid UTF-8 are left out (the Hugging Face tokenizers take only text).

Usage: tools/tokenizer/reference_ids.py VOCAB_DIR NAME...
"""
import os
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import patterns  # noqa: E402
from reference_splits import EDGE_CASES, split  # noqa: E402
from vocab_subset import bytes_to_unicode, gguf_metadata  # noqa: E402

IGNORE_MERGES = {"llama-bpe", "gpt-4o"}
NFC = {"qwen2"}  # tokenizer.json "normalizer": NFC, applied between the added tokens


def bpe(word, ranks):
    syms = list(word)
    while len(syms) > 1:
        best, best_rank = None, None
        for i in range(len(syms) - 1):
            r = ranks.get((syms[i], syms[i + 1]))
            if r is not None and (best_rank is None or r < best_rank):
                best, best_rank = i, r
        if best is None:
            break
        syms[best:best + 2] = [syms[best] + syms[best + 1]]
    return syms


def cut_added(text, added):
    """[(fragment, added token id or None)], splitting out the added tokens."""
    out, start, i = [], 0, 0
    while i < len(text):
        best = None
        for tok in added.get(text[i], ()):
            if text.startswith(tok, i) and (best is None or len(tok) > len(best)):
                best = tok
        if best is None:
            i += 1
            continue
        if start < i:
            out.append((text[start:i], None))
        out.append((best, added[text[i]][best]))
        i += len(best)
        start = i
    if start < len(text):
        out.append((text[start:], None))
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    vocab_dir, names = sys.argv[1], sys.argv[2:]
    b2u = bytes_to_unicode()
    for name in names:
        base = os.path.join(vocab_dir, "ggml-vocab-%s.gguf" % name)
        meta = gguf_metadata(base)
        pre = meta.get("tokenizer.ggml.pre", "")
        pats = patterns.BY_NAME[pre]
        tokens = meta["tokenizer.ggml.tokens"]
        ids = {}
        for i, t in enumerate(tokens):
            ids.setdefault(t, i)
        types = meta.get("tokenizer.ggml.token_type", [1] * len(tokens))
        added = {}
        for i, (t, ty) in enumerate(zip(tokens, types)):
            if ty in (3, 4) and t:
                added.setdefault(t[0], {}).setdefault(t, i)
        ranks = {}
        for r, m in enumerate(meta["tokenizer.ggml.merges"]):
            a, b = m.split(" ", 1)
            ranks.setdefault((a, b), r)
        texts, outs = [], []
        for text in EDGE_CASES:
            out = []
            for frag, added_id in cut_added(text, added):
                if added_id is not None:
                    out.append(added_id)
                    continue
                if pre in NFC:
                    frag = unicodedata.normalize("NFC", frag)
                for b, e in split(pats, frag):
                    word = "".join(b2u[x] for x in frag[b:e].encode("utf-8"))
                    if pre in IGNORE_MERGES and word in ids:
                        out.append(ids[word])
                        continue
                    out.extend(ids[s] for s in bpe(word, ranks))
            texts.append(text)
            outs.append(out)
        with open(base + ".edge.inp", "w", encoding="utf-8") as f:
            for t in texts:
                f.write(t + "\n__ggml_vocab_test__\n")
        with open(base + ".edge.out", "w") as f:
            for o in outs:
                f.write("".join(" %d" % i for i in o) + "\n")
        print("wrote %s.edge.inp/.out: %d texts" % (base, len(texts)))


if __name__ == "__main__":
    main()

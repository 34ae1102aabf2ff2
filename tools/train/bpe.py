"""Byte-level BPE (GPT-2 style) that encodes exactly as moeflow's C++ "gpt2" tokenizer.

Pre-tokenisation mirrors src/engine/tokenizer_bpe.cpp: the GPT-2 regex
  's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+
with the C++ file's approximate character classes (ASCII digits only for \\p{N}, its
whitespace list, its symbol blocks; every other code point >= 0x80 is a letter),
built here as explicit regex character classes. Merges apply lowest rank first, so
the result equals the C++ priority-queue BPE. The end-of-text token is split out of
the text first, as the C++ tokenizer does for control tokens.
"""
import heapq
import json
import re
from collections import Counter, defaultdict

EOT = "<|endoftext|>"


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


B2U = bytes_to_unicode()
U2B = {v: k for k, v in B2U.items()}


# ---- character classes, ported from tokenizer_bpe.cpp ----
def _is_space(c):
    if c == 0x20 or 0x09 <= c <= 0x0D:
        return True
    if c < 0x80:
        return False
    return c in (0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000) or 0x2000 <= c <= 0x200A


def _is_symbol(c):
    if c <= 0xBF:
        return c not in (0xAA, 0xB5, 0xBA)
    if c in (0xD7, 0xF7):
        return True
    if 0x2C2 <= c <= 0x2C5 or 0x2D2 <= c <= 0x2DF or 0x2E5 <= c <= 0x2EB or c == 0x2ED or 0x2EF <= c <= 0x2FF:
        return True
    if 0x300 <= c <= 0x36F:
        return True
    if c in (0x37E, 0x387):
        return True
    if 0x55A <= c <= 0x55F:
        return True
    if c in (0x589, 0x5BE, 0x5C0, 0x5C3, 0x5C6, 0x5F3, 0x5F4):
        return True
    if 0x591 <= c <= 0x5C7:
        return True
    if c in (0x60C, 0x61B, 0x61F, 0x66A, 0x66B, 0x66C, 0x6D4):
        return True
    if 0x64B <= c <= 0x65F:
        return True
    if c in (0x964, 0x965, 0x970):
        return True
    if c == 0xE3F:
        return True
    if 0x2010 <= c <= 0x206F:
        return True
    if 0x2070 <= c <= 0x209F:
        return False
    if 0x20A0 <= c <= 0x20FF:
        return True
    if 0x2100 <= c <= 0x214F:
        return False
    if 0x2190 <= c <= 0x2BFF:
        return True
    if 0x2E00 <= c <= 0x2E7F:
        return True
    if 0x3001 <= c <= 0x3004 or 0x3008 <= c <= 0x3020:
        return True
    if c in (0x3030, 0x303D, 0x30FB):
        return True
    if 0xFE00 <= c <= 0xFE0F or 0xFE10 <= c <= 0xFE6F or c == 0xFEFF:
        return True
    if 0xFF01 <= c <= 0xFF0F or 0xFF1A <= c <= 0xFF20 or 0xFF3B <= c <= 0xFF40 or 0xFF5B <= c <= 0xFF65:
        return True
    if 0xFFF0 <= c <= 0xFFFF:
        return True
    if 0x1F000 <= c <= 0x1FAFF or 0xE0000 <= c <= 0xE007F:
        return True
    return False


def _classify(c):
    if c < 0x80:
        if 0x41 <= c <= 0x5A or 0x61 <= c <= 0x7A:
            return "L"
        if 0x30 <= c <= 0x39:
            return "N"
        return "S" if _is_space(c) else "O"
    if _is_space(c):
        return "S"
    return "O" if _is_symbol(c) else "L"


def _ranges(cls):
    out, start, prev = [], None, None
    for c in list(range(0, 0xD800)) + list(range(0xE000, 0x110000)):
        if _classify(c) == cls:
            if start is None or c != prev + 1:
                if start is not None:
                    out.append((start, prev))
                start = c
            prev = c
    out.append((start, prev))
    return "".join(re.escape(chr(a)) if a == b else re.escape(chr(a)) + "-" + re.escape(chr(b)) for a, b in out)


def _build_regex():
    L, N, O, S = (_ranges(k) for k in "LNOS")
    return re.compile(
        rf"'s|'t|'re|'ve|'m|'ll|'d| ?[{L}]+| ?[{N}]+| ?[{O}]+|[{S}]+(?![^{S}])|[{S}]+")


PAT = _build_regex()


def pretokenize(text):
    return PAT.findall(text)


def mapped(word):
    return "".join(B2U[b] for b in word.encode("utf-8"))


# ---- training ----
def train(texts, vocab_size):
    """texts: iterable of strings (EOT already removed). Returns merges [(a, b)]."""
    counts = Counter()
    for t in texts:
        counts.update(pretokenize(t))
    words = [list(mapped(w)) for w in counts]
    freqs = list(counts.values())
    pair_count = defaultdict(int)
    where = defaultdict(set)
    for i, (w, f) in enumerate(zip(words, freqs)):
        for a, b in zip(w, w[1:]):
            pair_count[(a, b)] += f
            where[(a, b)].add(i)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    n_merges = vocab_size - 256 - 1  # bytes + merges + end-of-text
    while len(merges) < n_merges and heap:
        c, p = heapq.heappop(heap)
        if pair_count.get(p, 0) != -c or -c <= 0:
            continue
        merges.append(p)
        new = p[0] + p[1]
        changed = set()
        for i in sorted(where.pop(p, ())):
            w, f = words[i], freqs[i]
            for a, b in zip(w, w[1:]):
                pair_count[(a, b)] -= f
                changed.add((a, b))
            j, out = 0, []
            while j < len(w):
                if j + 1 < len(w) and w[j] == p[0] and w[j + 1] == p[1]:
                    out.append(new)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for a, b in zip(out, out[1:]):
                pair_count[(a, b)] += f
                where[(a, b)].add(i)
                changed.add((a, b))
        pair_count.pop(p, None)
        for q in changed:
            if q != p and pair_count.get(q, 0) > 0:
                heapq.heappush(heap, (-pair_count[q], q))
    return merges


class Tokenizer:
    def __init__(self, merges):
        self.merges = [tuple(m) for m in merges]
        self.rank = {m: i for i, m in enumerate(self.merges)}
        self.tokens = [B2U[b] for b in range(256)] + [a + b for a, b in self.merges] + [EOT]
        self.id = {t: i for i, t in enumerate(self.tokens)}
        self.eot = self.id[EOT]
        self.cache = {}

    @staticmethod
    def load(path):
        with open(path) as f:
            return Tokenizer(json.load(f)["merges"])

    def save(self, path):
        with open(path, "w") as f:
            json.dump({"merges": [list(m) for m in self.merges]}, f, ensure_ascii=False)

    def _bpe(self, word):
        w = list(word)
        while len(w) > 1:
            best, bi = None, -1
            for i in range(len(w) - 1):
                r = self.rank.get((w[i], w[i + 1]))
                if r is not None and (best is None or r < best):
                    best, bi = r, i
            if best is None:
                break
            a, b = self.merges[best]
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    out.append(a + b)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            w = out
        return [self.id[t] for t in w]

    def encode(self, text):
        out = []
        for k, frag in enumerate(text.split(EOT)):
            if k:
                out.append(self.eot)
            for w in pretokenize(frag):
                ids = self.cache.get(w)
                if ids is None:
                    ids = self._bpe(mapped(w))
                    if len(self.cache) < 2_000_000:
                        self.cache[w] = ids
                out.extend(ids)
        return out

    def decode(self, ids):
        return b"".join(bytes(U2B[c] for c in self.tokens[i]) if i != self.eot else EOT.encode() for i in ids).decode("utf-8", "replace")

#!/usr/bin/env python3
"""Builds the multi-domain training corpus from installed Debian packages.

Each domain ("task") becomes OUT/<domain>/train.txt and OUT/<domain>/heldout.txt:
UTF-8 text, documents separated by the literal end-of-text token <|endoftext|>
(which the tokenizer maps to its special token, so the files can be fed to
`moeflow perplexity` as they are).

Deterministic: sources are read in sorted order, every document is assigned by
the SHA-1 of "<domain>:<document text>": held out when the first 4 bytes mod 20 == 0
(5 %), otherwise training. Training documents are then taken in order of that
hash until the domain's byte cap; held-out ones likewise up to HELDOUT_CAP.
"""
import glob
import gzip
import hashlib
import os
import re
import subprocess
import sys

EOT = "<|endoftext|>"
TRAIN_CAP = int(os.environ.get("CORPUS_TRAIN_CAP", 3_000_000))      # bytes per domain
HELDOUT_CAP = int(os.environ.get("CORPUS_HELDOUT_CAP", 60_000))     # bytes per domain
FORTUNES = "/usr/share/games/fortunes"


def read_text(path):
    with open(path, "rb") as f:
        b = f.read()
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return None


def clean(t):
    # No literal end-of-text markers and no NULs inside documents; tabs/newlines stay.
    t = t.replace(EOT, "").replace("\x00", "").replace("\r\n", "\n")
    return t.strip("\n") + "\n"


def prose():
    # `bible` prints "<Book> <chapter>" headers, then "  <verse> text" lines wrapped
    # at 80 columns. One document per chapter, one verse per line.
    out = subprocess.run(["bible", "Ge1:1-Re22:21"], capture_output=True, text=True, check=True).stdout
    docs, cur = [], []
    for line in out.splitlines():
        m = re.match(r"^\s+(\d+) (.*)$", line)
        if m:
            cur.append(m.group(2).strip())
        elif re.match(r"^\S.* \d+$", line) and not (cur and not cur[-1].endswith((".", ":", ";", ",", "?", "!"))):
            if len(cur) > 1:
                docs.append("\n".join(cur))
            cur = [line.strip()]
        elif line.strip() and cur:
            cur[-1] += " " + line.strip()
    if len(cur) > 1:
        docs.append("\n".join(cur))
    return docs


def dictionary():
    with gzip.open("/usr/share/dictd/gcide.dict.dz", "rt", encoding="utf-8", errors="replace") as f:
        text = f.read()
    i = text.find("\n\n", text.find("Begin file 1 of 26"))
    entries, cur = [], []
    for line in text[i:].split("\n"):
        if line and not line[0].isspace() and cur and cur[-1] == "":
            entries.append("\n".join(cur).strip("\n"))
            cur = []
        cur.append(line.rstrip())
    if cur:
        entries.append("\n".join(cur).strip("\n"))
    entries = [e for e in entries if e and "Begin file" not in e and "\ufffd" not in e]
    return ["\n\n".join(entries[k:k + 8]) for k in range(0, len(entries), 8)]


def files(pattern, exclude=None):
    docs = []
    for p in sorted(glob.glob(pattern, recursive=True)):
        if exclude and re.search(exclude, p):
            continue
        if not os.path.isfile(p) or os.path.getsize(p) > 200_000:
            continue
        t = read_text(p)
        if t and t.strip():
            docs.append(t)
    return docs


def fortunes(lang):
    docs = []
    d = os.path.join(FORTUNES, lang)
    names = sorted(os.listdir(d))
    for n in names:
        p = os.path.join(d, n)
        if n.endswith(".dat") or not os.path.isfile(p):
            continue
        if not n.endswith(".u8") and (n + ".u8") in names:
            continue  # the .u8 file is the UTF-8 version of this one
        t = read_text(p)
        if t is None:
            continue
        for fort in re.split(r"\n%\n", "\n" + t):
            fort = fort.strip("\n%")
            if fort.strip():
                docs.append(fort)
    return docs


DOMAINS = {
    "prose": prose,
    "dict": dictionary,
    "c": lambda: files("/usr/include/**/*.h"),
    "python": lambda: files(sorted(glob.glob("/usr/lib/python3.*/"))[0] + "**/*.py", r"/(test|tests|idle_test)/"),
    "de": lambda: fortunes("de"),
    "es": lambda: fortunes("es"),
    "it": lambda: fortunes("it"),
    "ru": lambda: fortunes("ru"),
}


def key(domain, doc):
    return hashlib.sha1((domain + ":" + doc).encode("utf-8")).digest()


def take(docs, cap):
    out, n = [], 0
    for h, d in sorted(docs):
        if n >= cap:
            break
        out.append(d)
        n += len(d.encode("utf-8")) + len(EOT)
    return out


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "build-corpus"
    only = sys.argv[2:] or list(DOMAINS)
    for name in only:
        docs = sorted(set(clean(d) for d in DOMAINS[name]()))
        train, held = [], []
        for d in docs:
            h = key(name, d)
            (held if int.from_bytes(h[:4], "little") % 20 == 0 else train).append((h, d))
        train, held = take(train, TRAIN_CAP), take(held, HELDOUT_CAP)
        os.makedirs(os.path.join(out_dir, name), exist_ok=True)
        for split, ds in (("train", train), ("heldout", held)):
            with open(os.path.join(out_dir, name, split + ".txt"), "w", encoding="utf-8") as f:
                f.write(EOT.join(ds))
        print(f"{name:8s} docs {len(docs):7d}  train {len(train):6d} docs {sum(map(len, train)):9d} chars"
              f"  heldout {len(held):5d} docs {sum(map(len, held)):7d} chars")


if __name__ == "__main__":
    main()

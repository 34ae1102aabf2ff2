#!/usr/bin/python3
"""Cuts the Unicode Character Database's own normalization conformance test
(NormalizationTest.txt, shipped compressed by Debian's unicode-data package) down to the
committed fixture tests/fixtures/tokenizer/nfc_conformance.txt: every line of parts 0 and
3, every 40th line of part 1 (one character each) and every 10th of part 2 (canonical
ordering), comments dropped.
tests/unit/unicode_normalize_test.cpp runs the full file when
MOEFLOW_NORMALIZATION_TEST names a decompressed copy.

Usage: tools/tokenizer/nfc_conformance_subset.py [/usr/share/unicode/NormalizationTest.txt.bz2]
"""
import bz2
import os
import sys


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/unicode/NormalizationTest.txt.bz2"
    opener = bz2.open if src.endswith(".bz2") else open
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out_path = os.path.join(root, "tests", "fixtures", "tokenizer", "nfc_conformance.txt")
    every = {"@Part1": 40, "@Part2": 10}
    part, n_in_part, kept = None, 0, []
    with opener(src, "rt", encoding="utf-8") as f:
        header = f.readline().strip()
        for line in f:
            if line.startswith("@Part"):
                part = line.split()[0]
                n_in_part = 0
                kept.append(part)
                continue
            body = line.split("#")[0].strip()
            if not body:
                continue
            n_in_part += 1
            if (n_in_part - 1) % every.get(part, 1) != 0:
                continue
            kept.append(body)
    with open(out_path, "w", encoding="ascii") as f:
        f.write("# Subset of %s (%s), by tools/tokenizer/nfc_conformance_subset.py\n" % (header.lstrip("# "), src))
        f.write("\n".join(kept) + "\n")
    print("wrote %s: %d lines" % (out_path, len(kept)))


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Reference pre-tokenizer splits: runs the exact patterns of patterns.py with Python's
`regex` module (Debian's python3-regex; run with /usr/bin/python3 so that module, which
implements Unicode 15.0.0 like our tables, is the one used) over a corpus of edge cases
and seeded random strings, and writes what tests/unit/pretokenizer_test.cpp compares
against.

Output: one line per input, tab-separated: the input bytes in hex, then for each pattern
"name=L1,L2,..." with the byte lengths of the pieces in order ("name=" for no piece).
Ill-formed UTF-8 in an input is decoded byte by byte (surrogateescape) and each such byte
is matched as U+FFFD, which is how the C++ side classifies it.

Usage (from the repository root):
  tools/tokenizer/reference_splits.py                     # the committed fixture
  tools/tokenizer/reference_splits.py --random 5000 --seed 7 --no-edge --out /tmp/big.tsv
  MOEFLOW_PRETOKENIZER_SPLITS=/tmp/big.tsv build/moeflow_tests --gtest_filter='PreTokenizer*'
"""
import argparse
import os
import random
import sys

import regex

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import patterns  # noqa: E402

EDGE_CASES = [
    # ASCII words, contractions in several cases
    "Hello world", "hello  world", " leading", "trailing ", "it's", "IT'S", "It'S", "don't", "DON'T",
    "we're WE'RE We'Re", "I'll I'LL i'Ll", "they've THEY'VE", "he'd HE'D", "I'm I'M", "''s", "'s'",
    "rock'n'roll", "'ſ 'ſt", "x'\u017fy", "o'clock", "James' book", "'", "'''",
    # camelCase, caps, titlecase (o200k splits these)
    "HelloWorld", "XMLHttpRequest", "iPhone", "ALLCAPS words", "mIxEd CaSe", "\u01c5ungla \u01c4UNGLA",
    "McDonald's", "HELLO'S", "snake_case_name", "\u02b0aspirated\u02b0",
    # digits: grouping, other numerals
    "1", "12", "123", "1234", "12345678901234567890", "3.14159", "1,000,000", "v1.2.3-rc4",
    "\u0663\u0664\u0665\u0666\u0667", "\uff11\uff12\uff13\uff14", "\u216b \u00bd \u00b2\u00b3", "abc123def",
    "2024-01-01T12:34:56Z", "$100.00", "100%",
    # whitespace runs, newlines
    " ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n", " \n", "\n ", " \n \n ",
    "a   b", "a\n\nb", "a \n\n b", "  \t\n  x", "x  \n", "\u00a0\u3000\u2003x", "a\u00a0b", "a\u3000b",
    "\u3000\u3000", "tab\tsep\tvalues", "line1\nline2\r\nline3\rline4", "\v\f x", "\u0085x\u2028y\u2029",
    # code
    "def f(x):\n    return x**2  # comment\n", "if (a && b) { c(); }", "a/b/c\n/path/\n//x",
    "https://example.com/a?b=c&d=e#f", "<html><body>text</body></html>", "x = [1, 2, 3];\n\n",
    "    indented\n\tline", "!!!???...", "--- ***", "(parens) [brackets] {braces}",
    # CJK, kana, Hangul, other scripts
    "\u4f60\u597d\u4e16\u754c\uff0c\u6211\u662f\u4e2d\u56fd\u4eba\u3002",
    "\u3053\u3093\u306b\u3061\u306f\u3001\u30ab\u30bf\u30ab\u30ca\u6f22\u5b57\u3072\u3089\u304c\u306a",
    "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4", "\u9fa5\u9fa6\u9fff\u3400\U00020000",
    "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440", "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645", "\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
    "\u10d2\u10d0\u10db\u10d0\u10e0\u10ef\u10dd\u10d1\u10d0", "\u00b5 \u00c0\u00d6\u00d7\u00d8 \u00f7",
    "\u0800\u0801 \u4e00", "\uff21\uff22\uff43 \uff01\uff1f",
    # mixed scripts
    "Hello\u4e16\u754c123abc", "naïve café", "caf\u00e9 vs cafe\u0301", "\u4e2d\u6587English\u6df7\u5408",
    "\u65e5\u672c\u8a9e\u306etext", "2023\u5e74\u3067\u3059", "\u00e9t\u00e9 \u00c9T\u00c9",
    # combining marks
    "e\u0301", "\u0301", " \u0301", "a\u0301\u0302\u0303", "Z\u0324\u0354\u0367\u0311\u0313a\u0308",
    "\u0301abc", "!\u0301", "1\u0301", "\u0915\u094d\u0937", "\u20dd\u20dd",
    # emoji: ZWJ sequences, skin tones, flags, keycaps, variation selectors
    "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
    "\U0001f44d\U0001f3fd \U0001f44b\U0001f3ff", "\U0001f1fa\U0001f1f8\U0001f1ef\U0001f1f5",
    "1\ufe0f\u20e3 #\ufe0f\u20e3", "\u2764\ufe0f \u2764", "I \u2764\ufe0f NY", "hi\U0001f600there",
    " \U0001f600\U0001f600", "\U0001f9d1\u200d\U0001f4bb code", "\u200b\u200c\u200d\u2060\ufeff",
    # control characters
    "\x00\x01\x1f", "a\x7fb",
    # Han against the other CJK scripts and letters (Kimi K2 splits Han runs first)
    "\u4f60\u597dworld \u4e16\u754cHello", "\u4e2d\u3001\u6587\u3002", "\u3005\u3007\u3006 \u30ab\u4e00b",
    "AB\u4e00cd", " \u4e00\u4e8c", "x\u4e00's", "\u2e80\u2f00\U00020000abc", "\u4e00/\n/x",
]

# Raw byte inputs, including ill-formed UTF-8.
EDGE_BYTES = [
    b"a\xffb", b"\xc3", b"\xe2\x82 x", b"\xed\xa0\x80", b"\x80\x80abc", b"ok\xf0\x9f\x98",
    b"\xf4\x90\x80\x80", b"\xc0\xaf", b"word\xfe word", b"  \xff\n", b"12\xff34",
    b"\xe4\xb8\xad\xff\xe6\x96\x87",
]

POOL = (
    list("abcdeXYZsStTrReEvVmMlLdD") + list("0123456789") + [" "] * 6 + ["\n"] * 3 + ["\r", "\t", "'"] * 2 +
    list(".,;:!?-/_()[]{}\"#$%&*+<=>@\\^`|~") +
    ["\u00a0", "\u3000", "\u2003", "\u0085", "\u00b5", "\u00e9", "\u00c9", "\u00df", "\u017f", "\u01c5",
     "\u02b0", "\u0301", "\u0308", "\u20e3", "\u0663", "\uff11", "\u216b", "\u00bd", "\u4e00", "\u4e2d",
     "\u9fa5", "\u9fa6", "\u3042", "\u30ab", "\u30fc", "\uac00", "\ud7a3", "\u0800", "\u3001", "\u3002",
     "\uff0c", "\uff01", "\u2018", "\u201c", "\u2014", "\u0416", "\u0436", "\u03a9", "\u03c9", "\u0627",
     "\u05d0", "\u0915", "\u094d", "\u0e01", "\u10d0", "\u1c90", "\U0001f600", "\U0001f44d", "\U0001f3fd",
     "\u200d", "\ufe0f", "\u2764", "\U0001f1fa", "\u00ac", "\u20ac", "\u00a9", "\U00020000", "\U0001d400",
     "\u0130", "\u0131", "\u1e9e"]
)
POOL_BYTES = [b"\xff", b"\x80", b"\xc3", b"\xe2\x82"]


def to_text(data):
    """str for matching (ill-formed bytes as U+FFFD) and each character's byte length."""
    s = data.decode("utf-8", errors="surrogateescape")
    lens, chars = [], []
    for ch in s:
        if 0xDC80 <= ord(ch) <= 0xDCFF:
            chars.append("\ufffd")
            lens.append(1)
        else:
            chars.append(ch)
            lens.append(len(ch.encode("utf-8")))
    return "".join(chars), lens


def split(pats, text):
    """Pieces as (start, end) character offsets: each regex splits every piece into its
    matches and the gaps between them."""
    pieces = [(0, len(text))] if text else []
    for pat in pats:
        # Set operations (&&) need regex's V1 mode; (?-f) keeps Rust's simple case folding.
        rx = regex.compile("(?-f)" + pat, regex.V1) if "&&" in pat else regex.compile(pat)
        out = []
        for b, e in pieces:
            piece = text[b:e]
            pos = 0
            for m in rx.finditer(piece):
                if m.end() == m.start():
                    continue
                if m.start() > pos:
                    out.append((b + pos, b + m.start()))
                out.append((b + m.start(), b + m.end()))
                pos = m.end()
            if pos < len(piece):
                out.append((b + pos, e))
        pieces = out
    return pieces


def piece_byte_lengths(data, pats):
    text, lens = to_text(data)
    return [sum(lens[b:e]) for b, e in split(pats, text)]


def random_input(rng):
    parts = []
    for _ in range(rng.randint(1, 24)):
        r = rng.random()
        if r < 0.04:
            parts.append(rng.choice(POOL_BYTES))
        elif r < 0.12:  # any Unicode scalar value
            cp = rng.randrange(0x110000 - 0x800)
            parts.append(chr(cp if cp < 0xD800 else cp + 0x800).encode("utf-8"))
        else:
            parts.append(rng.choice(POOL).encode("utf-8"))
    return b"".join(parts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--random", type=int, default=60, help="seeded random inputs to add")
    ap.add_argument("--seed", type=int, default=20)
    ap.add_argument("--no-edge", action="store_true", help="leave out the edge cases")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "tokenizer", "pretokenizer_splits.tsv"))
    args = ap.parse_args()

    inputs = [] if args.no_edge else [s.encode("utf-8") for s in EDGE_CASES] + EDGE_BYTES
    rng = random.Random(args.seed)
    inputs += [random_input(rng) for _ in range(args.random)]
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w", encoding="ascii") as f:
        for data in inputs:
            fields = [data.hex()]
            for name, pats in patterns.BY_NAME.items():
                fields.append(name + "=" + ",".join(str(n) for n in piece_byte_lengths(data, pats)))
            f.write("\t".join(fields) + "\n")
    print("wrote %s: %d inputs x %d patterns (regex %s)" % (args.out, len(inputs), len(patterns.BY_NAME),
                                                              regex.__version__))


if __name__ == "__main__":
    main()

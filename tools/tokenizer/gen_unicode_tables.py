#!/usr/bin/python3
"""Generates src/engine/unicode_tables.inc (character classes, for the pre-tokenizers) and
src/engine/unicode_normalization.inc (NFC data) from
the Unicode Character Database as Debian ships it (package `unicode-data`, files under
/usr/share/unicode; Debian 12 ships Unicode 15.0.0, the version Debian's python3-regex
implements, so the reference splits and ours agree on every code point):

  * the general category of every code point (UnicodeData.txt; unlisted ones are Cn),
    with the White_Space property (PropList.txt), as runs of equal value;
  * the code points whose simple case folding (CaseFolding.txt, status C or S) is one of
    the letters of the contractions 's 't 're 've 'm 'll 'd, for (?i:...) matching;
  * the explicit character classes of the DeepSeek patterns (from patterns.py), as
    code point ranges, each checked against Python's `regex` over all of Unicode;
  * the code points of Script=Han (Scripts.txt), Kimi K2's \p{Han}, checked the same way;
  * what NFC needs (Qwen2's tokenizer.json normalises its input to NFC): canonical
    combining classes and canonical decomposition mappings (UnicodeData.txt), the
    primary composites (those not Full_Composition_Exclusion, DerivedNormalizationProps.txt)
    and the code points whose NFC_Quick_Check is not Yes.

Usage: tools/tokenizer/gen_unicode_tables.py [UCD_DIR]   (run from the repository root)
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import patterns  # noqa: E402

CATEGORIES = ["Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd", "Nl", "No", "Pc", "Pd", "Ps",
              "Pe", "Pi", "Pf", "Po", "Sm", "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs",
              "Co", "Cn"]
WHITE_SPACE_BIT = 0x20
MAX_CP = 0x10FFFF


def ucd_version(ucd):
    with open(os.path.join(ucd, "PropList.txt"), encoding="utf-8") as f:
        m = re.match(r"# PropList-(\d+\.\d+\.\d+)\.txt", f.readline())
    if not m:
        sys.exit("cannot read the Unicode version from PropList.txt")
    return m.group(1)


def read_categories(ucd):
    cat = [CATEGORIES.index("Cn")] * (MAX_CP + 1)
    first = None
    with open(os.path.join(ucd, "UnicodeData.txt"), encoding="utf-8") as f:
        for line in f:
            fields = line.split(";")
            cp, name, gc = int(fields[0], 16), fields[1], fields[2]
            if name.endswith(", First>"):
                first = cp
                continue
            lo = first if name.endswith(", Last>") else cp
            first = None
            for c in range(lo, cp + 1):
                cat[c] = CATEGORIES.index(gc)
    return cat


def read_white_space(ucd):
    ws = set()
    with open(os.path.join(ucd, "PropList.txt"), encoding="utf-8") as f:
        for line in f:
            line = line.split("#")[0].strip()
            if not line:
                continue
            rng, prop = [x.strip() for x in line.split(";")]
            if prop != "White_Space":
                continue
            lo, _, hi = rng.partition("..")
            ws.update(range(int(lo, 16), int(hi or lo, 16) + 1))
    return ws


def read_normalization(ucd):
    """(ccc, decompositions, compositions, nfc_qc_not_yes) from the UCD."""
    ccc, decomp = {}, {}
    first = None
    with open(os.path.join(ucd, "UnicodeData.txt"), encoding="utf-8") as f:
        for line in f:
            fields = line.split(";")
            cp, name = int(fields[0], 16), fields[1]
            if name.endswith(", First>"):
                first = cp
                continue
            lo = first if name.endswith(", Last>") else cp
            first = None
            c = int(fields[3])
            if c:
                for x in range(lo, cp + 1):
                    ccc[x] = c
            d = fields[5].strip()
            if d and not d.startswith("<"):
                decomp[cp] = [int(x, 16) for x in d.split()]
    exclusions, qc = set(), set()
    with open(os.path.join(ucd, "DerivedNormalizationProps.txt"), encoding="utf-8") as f:
        for line in f:
            line = line.split("#")[0].strip()
            if not line:
                continue
            parts = [x.strip() for x in line.split(";")]
            lo, _, hi = parts[0].partition("..")
            rng = range(int(lo, 16), int(hi or lo, 16) + 1)
            if parts[1] == "Full_Composition_Exclusion":
                exclusions.update(rng)
            elif parts[1] == "NFC_QC" and parts[2] in ("N", "M"):
                qc.update(rng)
    compositions = sorted((d[0], d[1], cp) for cp, d in decomp.items() if len(d) == 2 and cp not in exclusions)
    return ccc, decomp, compositions, qc


def ranges_of(cps):
    out = []
    for cp in sorted(cps):
        if out and cp == out[-1][1] + 1:
            out[-1][1] = cp
        else:
            out.append([cp, cp])
    return out


def emit_items(out, decl, items):
    out.append(decl + " = {")
    line = ""
    for item in items:
        if len(line) + len(item) > 96:
            out.append("    " + line)
            line = ""
        line += item
    out.append("    " + line)
    out.append("};")


def contraction_folds(ucd):
    """(code point, ASCII letter) for every code point other than the letter itself whose
    simple case folding is one of the contraction letters."""
    letters = set("strvemld")
    out = []
    with open(os.path.join(ucd, "CaseFolding.txt"), encoding="utf-8") as f:
        for line in f:
            line = line.split("#")[0].strip()
            if not line:
                continue
            code, status, mapping = [x.strip() for x in line.split(";")[:3]]
            if status not in ("C", "S"):
                continue
            target = chr(int(mapping, 16))
            if target in letters:
                out.append((int(code, 16), target))
    return sorted(out)


def class_ranges(pattern):
    """Ranges of the first [...] class of `pattern` (literal characters and a-b ranges)."""
    body = pattern[pattern.index("[") + 1:]
    ranges, i = [], 0
    while body[i] != "]":
        lo = body[i]
        if lo == "\\":
            raise ValueError("escapes are not expected in " + pattern)
        if body[i + 1] == "-" and body[i + 2] != "]":
            ranges.append((ord(lo), ord(body[i + 2])))
            i += 3
        else:
            ranges.append((ord(lo), ord(lo)))
            i += 1
    ranges.sort()
    merged = []
    for lo, hi in ranges:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def check_class(pattern, ranges):
    """Every code point is in `ranges` exactly when Python's regex says it is in the class."""
    check_property(pattern[pattern.index("["):pattern.index("]") + 1], ranges)


def emit_ranges(out, name, ranges):
    """A CodePointRange array of inclusive [lo, hi] ranges, lines of at most ~100 columns."""
    out.append("inline constexpr CodePointRange %s[] = {" % name)
    line = ""
    for lo, hi in ranges:
        item = "{0x%X,0x%X}," % (lo, hi)
        if len(line) + len(item) > 96:
            out.append("    " + line)
            line = ""
        line += item
    out.append("    " + line)
    out.append("};")


def read_script(ucd, name):
    """Code point ranges of one Script value (Scripts.txt), merged."""
    cps = set()
    with open(os.path.join(ucd, "Scripts.txt"), encoding="utf-8") as f:
        for line in f:
            line = line.split("#")[0].strip()
            if not line:
                continue
            rng, script = [x.strip() for x in line.split(";")]
            if script != name:
                continue
            lo, _, hi = rng.partition("..")
            cps.update(range(int(lo, 16), int(hi or lo, 16) + 1))
    return ranges_of(cps)


def check_property(prop, ranges):
    """Every code point is in `ranges` exactly when Python's regex matches `prop`."""
    import regex
    rx = regex.compile(prop)
    inside = set()
    for lo, hi in ranges:
        inside.update(range(lo, hi + 1))
    for cp in range(MAX_CP + 1):
        if (rx.fullmatch(chr(cp)) is not None) != (cp in inside):
            sys.exit("%s disagrees with regex at U+%04X" % (prop, cp))


def main():
    ucd = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/unicode"
    version = ucd_version(ucd)
    cat = read_categories(ucd)
    ws = read_white_space(ucd)
    runs = []
    for cp in range(MAX_CP + 1):
        v = cat[cp] | (WHITE_SPACE_BIT if cp in ws else 0)
        if not runs or runs[-1][1] != v:
            runs.append((cp, v))

    classes = {
        "kDeepseekLlmLetters": "DEEPSEEK_LLM_LETTERS",
        "kDeepseekLlmPunct": "DEEPSEEK_LLM_PUNCT",
        "kDeepseekCjk": "DEEPSEEK_CJK",
        "kDeepseekV3Cjk": "DEEPSEEK_V3_CJK",
    }
    out = []
    out.append("// Generated by tools/tokenizer/gen_unicode_tables.py from the Unicode Character")
    out.append("// Database %s (%s). Do not edit." % (version, ucd))
    out.append("// Included by unicode_class.cpp only.")
    out.append("")
    out.append('inline constexpr const char* kUnicodeVersion = "%s";' % version)
    out.append("")
    out.append("// Runs of code points with equal properties: low 5 bits the general category")
    out.append("// (enum GeneralCategory order), bit 5 White_Space. A run lasts until the next one.")
    out.append("inline constexpr CodePointRun kCodePointRuns[] = {")
    line = ""
    for first, v in runs:
        item = "{0x%X,%d}," % (first, v)
        if len(line) + len(item) > 96:
            out.append("    " + line)
            line = ""
        line += item
    if line:
        out.append("    " + line)
    out.append("};")
    out.append("")
    out.append("// Code points whose simple case folding is a contraction letter (other than the")
    out.append("// letter itself), with that letter.")
    out.append("inline constexpr CaseFold kContractionFolds[] = {")
    for cp, letter in contraction_folds(ucd):
        out.append("    {0x%X, '%s'}," % (cp, letter))
    out.append("};")
    for name, pyname in classes.items():
        pat = getattr(patterns, pyname)
        ranges = class_ranges(pat)
        check_class(pat, ranges)
        out.append("")
        out.append("// The character class of patterns.%s." % pyname)
        emit_ranges(out, name, ranges)
    han = read_script(ucd, "Han")
    check_property(r"\p{Han}", han)
    out.append("")
    out.append("// Script=Han (Scripts.txt): Kimi K2's \\p{Han}.")
    emit_ranges(out, "kHanScript", han)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.path.join(root, "src", "engine", "unicode_tables.inc")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    print("wrote %s: Unicode %s, %d runs" % (path, version, len(runs)))

    ccc, decomp, compositions, qc = read_normalization(ucd)
    out = []
    out.append("// Generated by tools/tokenizer/gen_unicode_tables.py from the Unicode Character")
    out.append("// Database %s (%s). Do not edit." % (version, ucd))
    out.append("// Included by unicode_normalize.cpp only.")
    out.append("")
    out.append("// Canonical combining class of every code point whose class is not 0.")
    emit_items(out, "inline constexpr CombiningClass kCombiningClasses[]",
               ["{0x%X,%d}," % (cp, c) for cp, c in sorted(ccc.items())])
    out.append("")
    out.append("// Canonical decomposition mappings (one level; second 0 for a singleton).")
    emit_items(out, "inline constexpr Decomposition kDecompositions[]",
               ["{0x%X,0x%X,0x%X}," % (cp, d[0], d[1] if len(d) > 1 else 0) for cp, d in sorted(decomp.items())])
    out.append("")
    out.append("// Primary composites, by (first, second): canonical pairs that are not")
    out.append("// Full_Composition_Exclusion (Hangul syllables are composed arithmetically).")
    emit_items(out, "inline constexpr Composition kCompositions[]",
               ["{0x%X,0x%X,0x%X}," % c for c in compositions])
    out.append("")
    out.append("// Code points whose NFC_Quick_Check is No or Maybe.")
    emit_items(out, "inline constexpr CodePointRange kNfcQuickCheckNotYes[]",
               ["{0x%X,0x%X}," % (lo, hi) for lo, hi in ranges_of(qc)])
    path = os.path.join(root, "src", "engine", "unicode_normalization.inc")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    print("wrote %s: %d combining classes, %d decompositions, %d compositions" % (
        path, len(ccc), len(decomp), len(compositions)))


if __name__ == "__main__":
    main()

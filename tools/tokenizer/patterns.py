"""The pre-tokenizer regexes selected by the GGUF key tokenizer.ggml.pre, exactly as the
models' Hugging Face tokenizer.json files define them (facts, as also listed in llama.cpp's
llama-vocab.cpp). Each entry is a list of regexes applied one after another: every regex
splits each piece left by the previous one into its matches and the gaps between them
("Isolated" behaviour of a tokenizers Split pre-tokenizer). Used by reference_splits.py
(which runs them with Python's `regex` module) and gen_unicode_tables.py (which takes the
explicit character classes of the DeepSeek patterns from here)."""

CONTRACTIONS_CI = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"

GPT2 = [r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"]

LLAMA3 = [CONTRACTIONS_CI + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"]

QWEN2 = [CONTRACTIONS_CI + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"]

GPT4O = [r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+" + CONTRACTIONS_CI + "?"
         r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*" + CONTRACTIONS_CI + "?"
         r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"]

# Kimi K2 (tokenization_kimi.py's pat_str, run by tiktoken on Rust's regex): o200k with
# [\p{Han}]+ first and Han taken out of the letter classes by set intersection (&&),
# which Python's regex parses in its V1 mode (reference_splits.py compiles patterns
# holding && so, with simple case folding as Rust's regex uses).
KIMI_K2 = ["|".join([
    r"[\p{Han}]+",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+"
    + CONTRACTIONS_CI + "?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*"
    + CONTRACTIONS_CI + "?",
    r"\p{N}{1,3}",
    r" ?[^\s\p{L}\p{N}]+[\r\n]*",
    r"\s*[\r\n]+",
    r"\s+(?!\S)",
    r"\s+",
])]

# StarCoder's tokenizer (Granite 3.x, Refact; llama.cpp's "refact" and "starcoder"): each
# digit split off first (a Digits pre-tokenizer with individual_digits), then GPT-2's.
REFACT = [r"\p{N}", GPT2[0]]

DEEPSEEK_LLM_LETTERS = '\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+'
DEEPSEEK_LLM_PUNCT = '\\s?[!-/:-~！-／：-～‘-‟\u3000-。]+'
DEEPSEEK_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"

DEEPSEEK_LLM = [
    "[\r\n]",
    DEEPSEEK_LLM_LETTERS,
    DEEPSEEK_LLM_PUNCT,
    r"\s+$",
    DEEPSEEK_CJK,
    r"\p{N}+",
]

DEEPSEEK_CODER = [
    "[\r\n]",
    r"\s?\p{L}+",
    r"\s?\p{P}+",
    DEEPSEEK_CJK,
    r"\p{N}",
]

DEEPSEEK_V3_CJK = '[一-龥\u3040-ゟ゠-ヿ]+'
DEEPSEEK_V3 = [
    r"\p{N}{1,3}",
    DEEPSEEK_V3_CJK,
    '[!"#$%&\'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+',
]

# tokenizer.ggml.pre value -> patterns (the names llama.cpp's converter writes).
BY_NAME = {
    "gpt-2": GPT2,
    "llama-bpe": LLAMA3,
    "qwen2": QWEN2,
    "deepseek-llm": DEEPSEEK_LLM,
    "deepseek-coder": DEEPSEEK_CODER,
    "deepseek-v3": DEEPSEEK_V3,
    "gpt-4o": GPT4O,
    "refact": REFACT,
    "kimi-k2": KIMI_K2,
}

// Byte-level BPE pre-tokenizers: the regex splits that cut text into the pieces BPE then
// merges inside, selected by the GGUF key tokenizer.ggml.pre. Each is the exact pattern
// of the model's Hugging Face tokenizer.json (listed in tools/tokenizer/patterns.py),
// matched by hand over Unicode general categories (unicode_class.h) with the same
// leftmost-first, backtracking semantics a regex engine gives them:
//   Gpt2          's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   Llama3        (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}
//                 | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   Qwen2         as Llama3 with \p{N} (one digit per piece)
//   Refact        two in sequence: \p{N} (each digit its own piece), then Gpt2 (StarCoder's
//                 tokenizer: Granite 3.x)
//   Gpt4o         o200k: letters split at lower->upper case changes, contractions kept
//                 on the word, \p{N}{1,3}, punctuation runs take trailing [\r\n/]*
//   KimiK2        [\p{Han}]+ first, then o200k's rules with Han out of the letter classes
//                 and punctuation runs taking [\r\n]* only (tokenization_kimi.py)
//   DeepseekLlm   six regexes in sequence ([\r\n], Latin/Greek/Cyrillic/... letter runs,
//                 ASCII/CJK punctuation runs, trailing whitespace, CJK runs, \p{N}+)
//   DeepseekCoder five regexes in sequence ([\r\n], \s?\p{L}+, \s?\p{P}+, CJK runs, \p{N})
//   DeepseekV3    three in sequence (\p{N}{1,3}, kana/CJK runs, then a Llama3-like rule
//                 over letters+marks and punctuation+symbols)
// A sequence applies each regex to every piece the previous one left; the matches and the
// gaps between them both become pieces ("Isolated" splitting).
// Ill-formed UTF-8 is carried through byte for byte: each ill-formed byte is one
// character that classifies as U+FFFD (a symbol, So). The split covers the text exactly.
// Thread safety: pure functions.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moeflow {

enum class PreTokenizer { Gpt2, Llama3, Qwen2, Gpt4o, DeepseekLlm, DeepseekCoder, DeepseekV3, Refact, KimiK2 };

struct PreTokenizerSpec {
  PreTokenizer kind = PreTokenizer::Gpt2;
  // The whole piece is emitted as one token when it is in the vocabulary, before any
  // merge (tokenizer.json "ignore_merges": Llama 3; tiktoken's rule for o200k).
  bool ignore_merges = false;
  // llama.cpp's default for tokenizer.ggml.add_bos_token when the key is absent.
  bool add_bos = false;
  // The text is normalised to NFC first (tokenizer.json "normalizer": NFC: Qwen's).
  bool nfc = false;
};

// The spec for a tokenizer.ggml.pre value, with the aliases llama.cpp accepts for the same
// pattern ("llama-bpe", "llama3", "llama-v3", ...; "qwen2", "deepseek-r1-qwen", ...);
// an empty value means GPT-2's split. nullopt for a name whose split is not implemented
// (including llama.cpp's own "default" rule).
std::optional<PreTokenizerSpec> pretokenizer_for(const std::string& pre);

// The pattern's name as tools/tokenizer/patterns.py lists it ("llama-bpe", "qwen2", ...).
const char* pretokenizer_name(PreTokenizer kind);

// Splits `text` into pieces; returns their [begin, end) byte ranges, in order, covering
// the text exactly (no empty piece).
std::vector<std::pair<size_t, size_t>> pretokenize(PreTokenizer kind, std::string_view text);

}  // namespace moeflow

// The pre-tokenizer patterns as hand-written matchers. Each matcher is one regex: given
// a start position inside a piece it returns the length (in characters) of the match a
// backtracking regex engine finds there, trying the alternatives left to right, or 0.
// Quantifiers are greedy and give back characters only as far as the rest of the
// alternative needs; where that matters (\s+(?!\S), \s*[\r\n]+, the o200k letter
// classes, which overlap) the comment at the matcher says which match results.
#include "engine/pretokenizer.h"

#include <algorithm>
#include <cstdint>

#include "engine/unicode_class.h"
#include "engine/utf8.h"

namespace moeflow {
namespace {

using namespace unicode;  // ClassBit

// The text as characters: code point, class bits, byte offset (off has n + 1 entries),
// and where each whitespace run ends (so that \s+$ is not rescanned from every start).
struct Chars {
  std::vector<uint32_t> cp;
  std::vector<uint16_t> cls;
  std::vector<size_t> off;
  std::vector<size_t> ws_end;  // k: end of the whitespace run holding k (k if none)
  size_t size() const { return cp.size(); }
  bool has(size_t k, uint16_t bits) const { return (cls[k] & bits) != 0; }
};

Chars decode_chars(std::string_view s) {
  Chars c;
  c.cp.reserve(s.size());
  c.cls.reserve(s.size());
  c.off.reserve(s.size() + 1);
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const int r = utf8::decode(p + i, s.size() - i, &cp);
    const size_t len = r > 0 ? static_cast<size_t>(r) : 1;
    if (r <= 0) cp = 0xFFFD;  // one ill-formed byte: classifies as U+FFFD
    c.cp.push_back(cp);
    c.cls.push_back(classes(cp));
    c.off.push_back(i);
    i += len;
  }
  c.off.push_back(s.size());
  const size_t n = c.cp.size();
  c.ws_end.resize(n);
  for (size_t k = n; k-- > 0;)
    c.ws_end[k] = !c.has(k, kWhiteSpace) ? k : (k + 1 < n && c.has(k + 1, kWhiteSpace) ? c.ws_end[k + 1] : k + 1);
  return c;
}

// First index >= k (< end) whose character lacks every bit of `bits`, or end.
size_t run(const Chars& c, size_t k, size_t end, uint16_t bits) {
  while (k < end && c.has(k, bits)) ++k;
  return k;
}

// As run(), but at most `max` characters long: bounded quantifiers such as \p{N}{1,3}
// must not scan a whole run from every start (quadratic on a long digit run).
size_t run_at_most(const Chars& c, size_t k, size_t end, uint16_t bits, size_t max) {
  return run(c, k, std::min(end, k + max), bits);
}

template <class Pred>
size_t run_if(const Chars& c, size_t k, size_t end, Pred&& in) {
  while (k < end && in(c.cp[k])) ++k;
  return k;
}

bool is_ascii_alpha(uint32_t cp) { return (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z'); }
bool is_ascii_punct(uint32_t cp) {
  return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
         (cp >= 0x7B && cp <= 0x7E);
}

// 's|'t|'re|'ve|'m|'ll|'d, case-sensitive (GPT-2) or (?i:...) with Unicode simple case
// folding (so 'S and U+017F LONG S count as 's).
size_t contraction(const Chars& c, size_t i, size_t end, bool ignore_case) {
  if (i + 1 >= end || c.cp[i] != '\'') return 0;
  auto letter = [&](size_t k) -> char {
    if (k >= end) return 0;
    if (ignore_case) return fold_contraction_letter(c.cp[k]);
    return c.cp[k] < 0x80 ? static_cast<char>(c.cp[k]) : 0;
  };
  const char a = letter(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  const char b = letter(i + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// The whitespace tail shared by the Llama 3 family: \s*[\r\n]+|\s+(?!\S)|\s+ (with
// `newline_rule` false: \s+(?!\S)|\s+, GPT-2's).
//   \s*[\r\n]+  ends just after the last CR/LF of the whitespace run (\s* gives back
//               characters until a newline follows);
//   \s+(?!\S)   takes the whole run at the end of the piece, otherwise all of it but the
//               last character (which then prefixes the next word), if that leaves one;
//   \s+         the whole run.
size_t whitespace_tail(const Chars& c, size_t i, size_t end, bool newline_rule) {
  if (!c.has(i, kWhiteSpace)) return 0;
  const size_t j = std::min(c.ws_end[i], end);
  if (newline_rule) {
    for (size_t k = j; k > i; --k)
      if (c.has(k - 1, kCrLf)) return k - i;
  }
  if (j == end) return j - i;
  if (j - i >= 2) return j - 1 - i;
  return j - i;
}

// ` ?X+T*`: an optional space, a run of class X, then a run of trailing characters T.
template <class InX, class InT>
size_t space_run_trailing(const Chars& c, size_t i, size_t end, InX&& in_x, InT&& in_t) {
  size_t k = i;
  if (c.cp[i] == ' ' && i + 1 < end && in_x(i + 1)) k = i + 1;
  if (!in_x(k)) return 0;
  while (k < end && in_x(k)) ++k;
  while (k < end && in_t(k)) ++k;
  return k - i;
}

size_t match_gpt2(const Chars& c, size_t i, size_t end) {
  if (size_t n = contraction(c, i, end, false)) return n;
  const uint16_t kOther = kWhiteSpace | kLetter | kNumber;
  auto none = [](size_t) { return false; };
  if (size_t n = space_run_trailing(c, i, end, [&](size_t k) { return c.has(k, kLetter); }, none)) return n;
  if (size_t n = space_run_trailing(c, i, end, [&](size_t k) { return c.has(k, kNumber); }, none)) return n;
  if (size_t n = space_run_trailing(c, i, end, [&](size_t k) { return !c.has(k, kOther); }, none)) return n;
  return whitespace_tail(c, i, end, false);
}

// Llama 3 (max_digits 3) and Qwen2 (max_digits 1).
size_t match_llama3(const Chars& c, size_t i, size_t end, size_t max_digits) {
  if (size_t n = contraction(c, i, end, true)) return n;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (!c.has(i, kCrLf | kLetter | kNumber) && i + 1 < end && c.has(i + 1, kLetter))
    return run(c, i + 1, end, kLetter) - i;
  if (c.has(i, kLetter)) return run(c, i, end, kLetter) - i;
  // \p{N}{1,3}
  if (c.has(i, kNumber)) return run_at_most(c, i, end, kNumber, max_digits) - i;
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  const uint16_t kNotOther = kWhiteSpace | kLetter | kNumber;
  if (size_t n = space_run_trailing(
          c, i, end, [&](size_t k) { return !c.has(k, kNotOther); }, [&](size_t k) { return c.has(k, kCrLf); }))
    return n;
  return whitespace_tail(c, i, end, true);
}

// o200k's letter alternatives after the optional prefix, from s:
//   [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+   (upper_first false)
//   [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*   (upper_first true)
// with the characters of class `excl` taken out of both classes (Kimi K2's &&[^\p{Han}]).
// Returns the end of the match, or s if none. The classes overlap on Lm, Lo and M. For
// the first form the upper run takes as much as it can while a lower character still
// follows it: all of the upper run if an Ll follows, else up to its last Lm/Lo/M.
size_t o200k_letters(const Chars& c, size_t s, size_t end, bool upper_first, uint16_t excl) {
  auto in = [&](size_t k, uint16_t bits) { return c.has(k, bits) && !c.has(k, excl); };
  auto run_of = [&](size_t k, uint16_t bits) {
    while (k < end && in(k, bits)) ++k;
    return k;
  };
  if (s >= end) return s;
  const size_t r = run_of(s, kUpperish);
  if (upper_first) return r == s ? s : run_of(r, kLowerish);
  size_t k = r;
  if (!(r < end && in(r, kLowerish))) {
    while (k > s && !in(k - 1, kLowerish)) --k;
    if (k == s) return s;
    --k;
  }
  return run_of(k, kLowerish);
}

// o200k (gpt-4o) and Kimi K2's pattern, which puts [\p{Han}]+ first, takes Han out of the
// letter classes and lets a punctuation run take [\r\n]* only (o200k: [\r\n/]*).
size_t match_o200k(const Chars& c, size_t i, size_t end, bool kimi) {
  if (kimi && c.has(i, kHan)) return run(c, i, end, kHan) - i;
  const uint16_t excl = kimi ? kHan : 0;
  const bool prefix = !c.has(i, kCrLf | kLetter | kNumber);  // [^\r\n\p{L}\p{N}]?
  for (bool upper_first : {false, true}) {
    for (size_t p = prefix ? 1 : 0;; --p) {
      const size_t s = i + p;
      const size_t e = o200k_letters(c, s, end, upper_first, excl);
      if (e > s) return e + contraction(c, e, end, true) - i;
      if (p == 0) break;
    }
  }
  if (c.has(i, kNumber)) return run_at_most(c, i, end, kNumber, 3) - i;
  // ` ?[^\s\p{L}\p{N}]+[\r\n/]*` (Kimi K2: `[\r\n]*`)
  const uint16_t kNotOther = kWhiteSpace | kLetter | kNumber;
  if (size_t n = space_run_trailing(
          c, i, end, [&](size_t k) { return !c.has(k, kNotOther); },
          [&](size_t k) { return c.has(k, kCrLf) || (!kimi && c.cp[k] == '/'); }))
    return n;
  return whitespace_tail(c, i, end, true);
}
size_t match_gpt4o(const Chars& c, size_t i, size_t end) { return match_o200k(c, i, end, false); }
size_t match_kimi_k2(const Chars& c, size_t i, size_t end) { return match_o200k(c, i, end, true); }

// DeepSeek's `\s?[X]+` (X a code point predicate): the run of X, with the whitespace
// character before it if there is one.
template <class In>
size_t ws_opt_run(const Chars& c, size_t i, size_t end, In&& in) {
  size_t k = i;
  if (c.has(i, kWhiteSpace) && i + 1 < end && in(c.cp[i + 1])) k = i + 1;
  if (!in(c.cp[k])) return 0;
  return run_if(c, k, end, in) - i;
}

size_t match_crlf(const Chars& c, size_t i, size_t) { return c.has(i, kCrLf) ? 1 : 0; }

size_t match_ds_llm_letters(const Chars& c, size_t i, size_t end) {
  return ws_opt_run(c, i, end, in_deepseek_llm_letters);
}
size_t match_ds_llm_punct(const Chars& c, size_t i, size_t end) {
  return ws_opt_run(c, i, end, in_deepseek_llm_punct);
}
// \s+$ (newlines are pieces of their own by then, so $ is the end of the piece).
size_t match_trailing_space(const Chars& c, size_t i, size_t end) {
  if (!c.has(i, kWhiteSpace)) return 0;
  const size_t j = std::min(c.ws_end[i], end);
  return j == end ? j - i : 0;
}
size_t match_ds_cjk(const Chars& c, size_t i, size_t end) { return run_if(c, i, end, in_deepseek_cjk) - i; }
size_t match_numbers(const Chars& c, size_t i, size_t end) { return run(c, i, end, kNumber) - i; }
size_t match_number(const Chars& c, size_t i, size_t) { return c.has(i, kNumber) ? 1 : 0; }
size_t match_numbers3(const Chars& c, size_t i, size_t end) { return run_at_most(c, i, end, kNumber, 3) - i; }
size_t match_ds_coder_letters(const Chars& c, size_t i, size_t end) {
  return ws_opt_run(c, i, end, [](uint32_t cp) { return (classes(cp) & kLetter) != 0; });
}
size_t match_ds_coder_punct(const Chars& c, size_t i, size_t end) {
  return ws_opt_run(c, i, end, [](uint32_t cp) { return (classes(cp) & kPunct) != 0; });
}
size_t match_ds_v3_cjk(const Chars& c, size_t i, size_t end) { return run_if(c, i, end, in_deepseek_v3_cjk) - i; }

// [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
// | ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
size_t match_ds_v3_main(const Chars& c, size_t i, size_t end) {
  if (is_ascii_punct(c.cp[i]) && i + 1 < end && is_ascii_alpha(c.cp[i + 1]))
    return run_if(c, i + 1, end, is_ascii_alpha) - i;
  const uint16_t kLM = kLetter | kMark;
  if (!c.has(i, kCrLf | kLetter | kPunct | kSymbol) && i + 1 < end && c.has(i + 1, kLM))
    return run(c, i + 1, end, kLM) - i;
  if (c.has(i, kLM)) return run(c, i, end, kLM) - i;
  if (size_t n = space_run_trailing(
          c, i, end, [&](size_t k) { return c.has(k, kPunct | kSymbol); }, [&](size_t k) { return c.has(k, kCrLf); }))
    return n;
  return whitespace_tail(c, i, end, true);
}

using Matcher = size_t (*)(const Chars&, size_t, size_t);
using Range = std::pair<size_t, size_t>;  // character indices [first, second)

// Replaces every piece by its matches and the gaps between them, in order.
void split_isolated(const Chars& c, Matcher m, std::vector<Range>& pieces) {
  std::vector<Range> out;
  out.reserve(pieces.size() * 2);
  for (const auto& [b, e] : pieces) {
    size_t gap = b;
    for (size_t i = b; i < e;) {
      const size_t n = m(c, i, e);
      if (n == 0) {
        ++i;
        continue;
      }
      if (gap < i) out.emplace_back(gap, i);
      out.emplace_back(i, i + n);
      i += n;
      gap = i;
    }
    if (gap < e) out.emplace_back(gap, e);
  }
  pieces.swap(out);
}

std::vector<Matcher> matchers(PreTokenizer kind) {
  switch (kind) {
    case PreTokenizer::Gpt2: return {match_gpt2};
    case PreTokenizer::Llama3: return {[](const Chars& c, size_t i, size_t e) { return match_llama3(c, i, e, 3); }};
    case PreTokenizer::Qwen2: return {[](const Chars& c, size_t i, size_t e) { return match_llama3(c, i, e, 1); }};
    case PreTokenizer::Gpt4o: return {match_gpt4o};
    case PreTokenizer::DeepseekLlm:
      return {match_crlf, match_ds_llm_letters, match_ds_llm_punct, match_trailing_space, match_ds_cjk, match_numbers};
    case PreTokenizer::DeepseekCoder:
      return {match_crlf, match_ds_coder_letters, match_ds_coder_punct, match_ds_cjk, match_number};
    case PreTokenizer::DeepseekV3: return {match_numbers3, match_ds_v3_cjk, match_ds_v3_main};
    case PreTokenizer::Refact: return {match_number, match_gpt2};
    case PreTokenizer::KimiK2: return {match_kimi_k2};
  }
  return {match_gpt2};
}

}  // namespace

std::optional<PreTokenizerSpec> pretokenizer_for(const std::string& pre) {
  auto is = [&](std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (pre == n) return true;
    return false;
  };
  if (pre.empty() || is({"gpt-2", "gpt2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
                         "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais", "exaone4", "a.x-4.0",
                         "mellum", "trillion"}))
    return PreTokenizerSpec{PreTokenizer::Gpt2, false, false};
  if (is({"llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"}))
    return PreTokenizerSpec{PreTokenizer::Llama3, true, true};
  // Same pattern, without Llama 3's ignore_merges and bos default (llama.cpp's table).
  if (is({"dbrx", "smaug-bpe", "glm4", "chatglm-bpe"})) return PreTokenizerSpec{PreTokenizer::Llama3, false, false};
  if (pre == "qwen2") return PreTokenizerSpec{PreTokenizer::Qwen2, false, false, true};
  if (is({"deepseek-r1-qwen", "stablelm2", "megrez", "hunyuan", "grok-2"}))
    return PreTokenizerSpec{PreTokenizer::Qwen2, false, false};
  if (is({"gpt-4o", "llama4"})) return PreTokenizerSpec{PreTokenizer::Gpt4o, true, false};
  if (pre == "kimi-k2") return PreTokenizerSpec{PreTokenizer::KimiK2, true, false};  // tiktoken's rule too
  if (pre == "deepseek-llm") return PreTokenizerSpec{PreTokenizer::DeepseekLlm, false, false};
  if (pre == "deepseek-coder") return PreTokenizerSpec{PreTokenizer::DeepseekCoder, false, false};
  if (pre == "deepseek-v3" || pre == "hunyuan-dense") return PreTokenizerSpec{PreTokenizer::DeepseekV3, false, false};
  // llama.cpp's one pattern for these (StarCoder's tokenizer and its descendants).
  if (is({"refact", "starcoder", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"}))
    return PreTokenizerSpec{PreTokenizer::Refact, false, false};
  return std::nullopt;
}

const char* pretokenizer_name(PreTokenizer kind) {
  switch (kind) {
    case PreTokenizer::Gpt2: return "gpt-2";
    case PreTokenizer::Llama3: return "llama-bpe";
    case PreTokenizer::Qwen2: return "qwen2";
    case PreTokenizer::Gpt4o: return "gpt-4o";
    case PreTokenizer::DeepseekLlm: return "deepseek-llm";
    case PreTokenizer::DeepseekCoder: return "deepseek-coder";
    case PreTokenizer::DeepseekV3: return "deepseek-v3";
    case PreTokenizer::Refact: return "refact";
    case PreTokenizer::KimiK2: return "kimi-k2";
  }
  return "?";
}

std::vector<std::pair<size_t, size_t>> pretokenize(PreTokenizer kind, std::string_view text) {
  const Chars c = decode_chars(text);
  std::vector<Range> pieces;
  if (c.size() > 0) pieces.emplace_back(0, c.size());
  for (Matcher m : matchers(kind)) split_isolated(c, m, pieces);
  std::vector<std::pair<size_t, size_t>> out;
  out.reserve(pieces.size());
  for (const auto& [b, e] : pieces) out.emplace_back(c.off[b], c.off[e]);
  return out;
}

}  // namespace moeflow

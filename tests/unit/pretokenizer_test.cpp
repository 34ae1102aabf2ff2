// Pre-tokenizer splits against the reference: the exact patterns run by Python's regex
// module (tools/tokenizer/reference_splits.py writes the fixture; point
// MOEFLOW_PRETOKENIZER_SPLITS at a larger file it wrote to check more inputs), plus
// hand-computed cases, the Unicode tables, and the tokenizer's use of the split.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/pretokenizer.h"
#include "engine/tokenizer.h"
#include "engine/unicode_class.h"
#include "engine/unicode_normalize.h"
#include "test_paths.h"

namespace moeflow {
namespace {

std::vector<std::string> pieces(PreTokenizer k, const std::string& s) {
  std::vector<std::string> out;
  for (const auto& [b, e] : pretokenize(k, s)) out.push_back(s.substr(b, e - b));
  return out;
}

std::string from_hex(const std::string& h) {
  std::string out;
  for (size_t i = 0; i + 1 < h.size(); i += 2) out += static_cast<char>(std::stoi(h.substr(i, 2), nullptr, 16));
  return out;
}

std::string escaped(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    char buf[8];
    if (ch >= 0x20 && ch < 0x7F && ch != '\\') out += static_cast<char>(ch);
    else { std::snprintf(buf, sizeof buf, "\\x%02X", ch); out += buf; }
  }
  return out;
}

TEST(PreTokenizer, MatchesReferenceSplits) {
  const char* env = std::getenv("MOEFLOW_PRETOKENIZER_SPLITS");
  const std::string path = env ? env : testing::fixture_path("tokenizer/pretokenizer_splits.tsv");
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot open " << path;
  size_t lines = 0, checks = 0, mismatches = 0;
  std::string line;
  while (std::getline(in, line)) {
    ++lines;
    std::istringstream fields(line);
    std::string hex, field;
    std::getline(fields, hex, '\t');
    const std::string text = from_hex(hex);
    while (std::getline(fields, field, '\t')) {
      const size_t eq = field.find('=');
      ASSERT_NE(eq, std::string::npos) << path << ":" << lines;
      const std::string name = field.substr(0, eq);
      const auto spec = pretokenizer_for(name);
      ASSERT_TRUE(spec.has_value()) << "unknown pattern " << name;
      std::vector<size_t> want;
      std::istringstream lens(field.substr(eq + 1));
      for (std::string n; std::getline(lens, n, ',');) want.push_back(std::stoul(n));
      std::vector<size_t> got;
      for (const auto& [b, e] : pretokenize(spec->kind, text)) got.push_back(e - b);
      ++checks;
      if (got != want) {
        if (++mismatches <= 10) {
          std::string g, w;
          for (size_t n : got) g += std::to_string(n) + ",";
          for (size_t n : want) w += std::to_string(n) + ",";
          ADD_FAILURE() << name << " on \"" << escaped(text) << "\": got " << g << " want " << w;
        }
      }
    }
  }
  std::printf("pre-tokenizer splits: %zu inputs, %zu (input, pattern) checks, %zu differ from the reference\n",
              lines, checks, mismatches);
  EXPECT_GT(lines, 0u);
  EXPECT_EQ(mismatches, 0u);
}

TEST(PreTokenizer, HandComputedCases) {
  using V = std::vector<std::string>;
  // Digits: groups of three (Llama 3, o200k, DeepSeek-V3), one at a time (Qwen2), whole
  // runs (GPT-2).
  EXPECT_EQ(pieces(PreTokenizer::Llama3, "1234567"), (V{"123", "456", "7"}));
  EXPECT_EQ(pieces(PreTokenizer::Qwen2, "123"), (V{"1", "2", "3"}));
  EXPECT_EQ(pieces(PreTokenizer::Gpt2, "a 1234567"), (V{"a", " 1234567"}));
  // Kimi K2: Han runs first, letters of other scripts split at case changes as o200k, a
  // space before Han a piece of its own, punctuation not taking a slash.
  EXPECT_EQ(pieces(PreTokenizer::KimiK2, "\xE4\xBD\xA0\xE5\xA5\xBDworld HelloWorld"),
            (V{"\xE4\xBD\xA0\xE5\xA5\xBD", "world", " Hello", "World"}));
  EXPECT_EQ(pieces(PreTokenizer::KimiK2, "a \xE4\xB8\x80\xE4\xBA\x8C"), (V{"a", " ", "\xE4\xB8\x80\xE4\xBA\x8C"}));
  EXPECT_EQ(pieces(PreTokenizer::KimiK2, "x.//y"), (V{"x", ".//", "y"}));
  EXPECT_EQ(pieces(PreTokenizer::Gpt4o, "\xE4\xBD\xA0\xE5\xA5\xBDworld"), (V{"\xE4\xBD\xA0\xE5\xA5\xBDworld"}));
  // StarCoder's: every digit alone, the space before them a piece of its own.
  EXPECT_EQ(pieces(PreTokenizer::Refact, "a 1234 b"), (V{"a", " ", "1", "2", "3", "4", " b"}));
  EXPECT_EQ(pieces(PreTokenizer::DeepseekV3, "1234567"), (V{"123", "456", "7"}));
  // Contractions: case-insensitive for Llama 3 (split off), kept on the word by o200k.
  EXPECT_EQ(pieces(PreTokenizer::Llama3, "DON'T"), (V{"DON", "'T"}));
  EXPECT_EQ(pieces(PreTokenizer::Gpt2, "DON'T"), (V{"DON", "'", "T"}));
  EXPECT_EQ(pieces(PreTokenizer::Gpt4o, "DON'T stop"), (V{"DON'T", " stop"}));
  // o200k splits at a lower-to-upper case change.
  EXPECT_EQ(pieces(PreTokenizer::Gpt4o, "HelloWorld XMLHttp"), (V{"Hello", "World", " XMLHttp"}));
  // Whitespace: the last space of a run prefixes the next word; newlines end runs.
  EXPECT_EQ(pieces(PreTokenizer::Llama3, "a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(pieces(PreTokenizer::Llama3, "a \n\n b"), (V{"a", " \n\n", " b"}));
  EXPECT_EQ(pieces(PreTokenizer::Llama3, "x\n"), (V{"x", "\n"}));
  // A non-letter prefixes a word for Llama 3 ("(abc"), not for GPT-2.
  EXPECT_EQ(pieces(PreTokenizer::Llama3, "(abc)"), (V{"(abc", ")"}));
  EXPECT_EQ(pieces(PreTokenizer::Gpt2, "(abc)"), (V{"(", "abc", ")"}));
  // DeepSeek-V3: CJK runs stand alone; ASCII punctuation prefixes ASCII letters.
  EXPECT_EQ(pieces(PreTokenizer::DeepseekV3, "\xE4\xBD\xA0\xE5\xA5\xBD.com"),
            (V{"\xE4\xBD\xA0\xE5\xA5\xBD", ".com"}));
  // DeepSeek LLM: every newline is a piece; trailing whitespace is a piece.
  EXPECT_EQ(pieces(PreTokenizer::DeepseekLlm, "ab\n\ncd  "), (V{"ab", "\n", "\n", "cd", "  "}));
}

TEST(PreTokenizer, CoversEveryByteOfAnyInput) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int t = 0; t < 300; ++t) {
    std::string s;
    for (int i = 0; i < 1 + t % 50; ++i) s += static_cast<char>(byte(rng));
    for (PreTokenizer k : {PreTokenizer::Gpt2, PreTokenizer::Llama3, PreTokenizer::Qwen2, PreTokenizer::Gpt4o,
                           PreTokenizer::DeepseekLlm, PreTokenizer::DeepseekCoder, PreTokenizer::DeepseekV3}) {
      size_t at = 0;
      for (const auto& [b, e] : pretokenize(k, s)) {
        ASSERT_EQ(b, at) << pretokenizer_name(k);
        ASSERT_LT(b, e) << pretokenizer_name(k);
        at = e;
      }
      ASSERT_EQ(at, s.size()) << pretokenizer_name(k);
    }
  }
}

TEST(PreTokenizer, NamesAndAliases) {
  EXPECT_EQ(pretokenizer_for("llama-bpe")->kind, PreTokenizer::Llama3);
  EXPECT_EQ(pretokenizer_for("llama3")->kind, PreTokenizer::Llama3);
  EXPECT_TRUE(pretokenizer_for("llama-bpe")->ignore_merges);
  EXPECT_TRUE(pretokenizer_for("llama-bpe")->add_bos);
  EXPECT_EQ(pretokenizer_for("qwen2")->kind, PreTokenizer::Qwen2);
  EXPECT_EQ(pretokenizer_for("deepseek-r1-qwen")->kind, PreTokenizer::Qwen2);
  EXPECT_EQ(pretokenizer_for("gpt-4o")->kind, PreTokenizer::Gpt4o);
  EXPECT_EQ(pretokenizer_for("deepseek-llm")->kind, PreTokenizer::DeepseekLlm);
  EXPECT_EQ(pretokenizer_for("deepseek-coder")->kind, PreTokenizer::DeepseekCoder);
  EXPECT_EQ(pretokenizer_for("deepseek-v3")->kind, PreTokenizer::DeepseekV3);
  EXPECT_EQ(pretokenizer_for("refact")->kind, PreTokenizer::Refact);  // Granite 3.x
  EXPECT_EQ(pretokenizer_for("starcoder")->kind, PreTokenizer::Refact);
  EXPECT_FALSE(pretokenizer_for("refact")->add_bos);
  EXPECT_EQ(pretokenizer_for("gpt-2")->kind, PreTokenizer::Gpt2);
  EXPECT_EQ(pretokenizer_for("")->kind, PreTokenizer::Gpt2);
  EXPECT_FALSE(pretokenizer_for("default").has_value());
  EXPECT_EQ(pretokenizer_for("kimi-k2")->kind, PreTokenizer::KimiK2);
  EXPECT_TRUE(pretokenizer_for("kimi-k2")->ignore_merges) << "tiktoken's rule";
  EXPECT_FALSE(pretokenizer_for("tekken").has_value());
}

TEST(PreTokenizer, UnknownNameIsWarnedByName) {
  TokenizerData d;
  d.model = "gpt2";
  d.pre = "tekken";
  const std::string w = pretokenizer_warning(d);
  EXPECT_NE(w.find("tokenizer.ggml.pre 'tekken'"), std::string::npos) << w;
  EXPECT_NE(w.find("GPT-2"), std::string::npos) << w;
  d.pre = "llama-bpe";
  EXPECT_EQ(pretokenizer_warning(d), "");
  d.pre = "";
  EXPECT_EQ(pretokenizer_warning(d), "");
  d.model = "llama";  // SentencePiece vocabularies have no pre-tokenizer
  d.pre = "whatever";
  EXPECT_EQ(pretokenizer_warning(d), "");
}

TEST(UnicodeClass, GeneratedTables) {
  using unicode::GeneralCategory;
  EXPECT_STREQ(unicode::unicode_version(), "15.0.0");
  EXPECT_EQ(unicode::general_category('A'), GeneralCategory::Lu);
  EXPECT_EQ(unicode::general_category('a'), GeneralCategory::Ll);
  EXPECT_EQ(unicode::general_category(0x01C5), GeneralCategory::Lt);
  EXPECT_EQ(unicode::general_category(0x02B0), GeneralCategory::Lm);
  EXPECT_EQ(unicode::general_category(0x4E2D), GeneralCategory::Lo);
  EXPECT_EQ(unicode::general_category(0x31350), GeneralCategory::Lo);  // CJK Ext. H, new in 15.0
  EXPECT_EQ(unicode::general_category(0x0301), GeneralCategory::Mn);
  EXPECT_EQ(unicode::general_category(0x0663), GeneralCategory::Nd);
  EXPECT_EQ(unicode::general_category(0x216B), GeneralCategory::Nl);
  EXPECT_EQ(unicode::general_category(0x1F600), GeneralCategory::So);
  EXPECT_EQ(unicode::general_category(0x1F3FD), GeneralCategory::Sk);
  EXPECT_EQ(unicode::general_category(0x200D), GeneralCategory::Cf);
  EXPECT_EQ(unicode::general_category(0xE000), GeneralCategory::Co);
  EXPECT_EQ(unicode::general_category(0x0378), GeneralCategory::Cn);
  EXPECT_EQ(unicode::general_category(0x110000), GeneralCategory::Cn);
  EXPECT_TRUE(unicode::is_white_space(0x3000));
  EXPECT_TRUE(unicode::is_white_space(0x85));
  EXPECT_FALSE(unicode::is_white_space(0x200B));  // zero width space is Cf, not White_Space
  EXPECT_FALSE(unicode::is_white_space(0x1C));
  EXPECT_EQ(unicode::fold_contraction_letter('S'), 's');
  EXPECT_EQ(unicode::fold_contraction_letter(0x017F), 's');
  EXPECT_EQ(unicode::fold_contraction_letter('k'), 0);
}

// ---------------------------------------------------------------- in the tokenizer

std::string byte_char(int b) {  // GPT-2 bytes_to_unicode, as UTF-8
  int n = 0;
  for (int i = 0; i < 256; ++i) {
    const bool keep = (i >= '!' && i <= '~') || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE && i <= 0xFF);
    const int cp = keep ? i : 256 + n++;
    if (i == b) {
      std::string s;
      if (cp < 0x80) s += static_cast<char>(cp);
      else { s += static_cast<char>(0xC0 | (cp >> 6)); s += static_cast<char>(0x80 | (cp & 0x3F)); }
      return s;
    }
  }
  return {};
}

// Ids 0..255 the byte tokens; then "ab", "abc" (in the vocabulary but reachable only by
// ignore_merges: the merges build "bc" first) and "bc".
TokenizerData merge_vocab(const std::string& pre) {
  TokenizerData d;
  d.model = "gpt2";
  d.pre = pre;
  for (int b = 0; b < 256; ++b) d.tokens.push_back(byte_char(b));
  d.tokens.push_back("ab");
  d.tokens.push_back("abc");
  d.tokens.push_back("bc");
  d.merges = {"b c", "a b"};
  return d;
}

TEST(PreTokenizer, IgnoreMergesTakesWholePieces) {
  const Tokenizer llama3(merge_vocab("llama-bpe"));
  const Tokenizer qwen2(merge_vocab("qwen2"));
  EXPECT_EQ(llama3.encode("abc", false), (std::vector<int32_t>{257}));      // whole piece
  EXPECT_EQ(qwen2.encode("abc", false), (std::vector<int32_t>{'a', 258}));  // merges: a + bc
  EXPECT_EQ(llama3.encode("abcab", false), (std::vector<int32_t>{'a', 258, 256}));
}

TEST(PreTokenizer, ByteLevelRoundTripForEveryPattern) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> byte(0, 255);
  const std::vector<std::string> samples = {
      "Hello World 12345 it's DON'T \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD\n\n  x",
      "e\xCC\x81 \xE3\x80\x80 \t\r\n", "a\xFF\xC3 b\xE2\x82 \x80z\xF0\x9F"};
  for (const char* pre :
       {"gpt-2", "llama-bpe", "qwen2", "gpt-4o", "deepseek-llm", "deepseek-coder", "deepseek-v3", "refact", "kimi-k2"}) {
    const Tokenizer t(merge_vocab(pre));
    // qwen2 normalises to NFC first: it gives back the NFC form.
    auto expected = [&](const std::string& s) { return t.pretokenizer().nfc ? unicode::to_nfc(s) : s; };
    for (const std::string& s : samples) EXPECT_EQ(t.decode(t.encode(s, false)), expected(s)) << pre;
    for (int i = 0; i < 50; ++i) {
      std::string s;
      for (int k = 0; k < 1 + i; ++k) s += static_cast<char>(byte(rng));
      ASSERT_EQ(t.decode(t.encode(s, false)), expected(s)) << pre;
    }
  }
}

TEST(PreTokenizer, Qwen2NormalisesToNfc) {
  EXPECT_TRUE(pretokenizer_for("qwen2")->nfc);
  EXPECT_FALSE(pretokenizer_for("llama-bpe")->nfc);
  const Tokenizer qwen2(merge_vocab("qwen2"));
  const Tokenizer llama3(merge_vocab("llama-bpe"));
  const std::string decomposed = "e\xCC\x81", composed = "\xC3\xA9";  // e + U+0301, U+00E9
  EXPECT_EQ(qwen2.encode(decomposed, false), qwen2.encode(composed, false));
  EXPECT_EQ(qwen2.decode(qwen2.encode(decomposed, false)), composed);
  EXPECT_EQ(llama3.decode(llama3.encode(decomposed, false)), decomposed);
}

TEST(PreTokenizer, HundredKilobytesIsFast) {
  std::string text;
  const std::string para =
      "The quick brown fox jumps over the lazy dog; it's 1234567 \xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C "
      "caf\xC3\xA9 \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD HelloWorld\n\n    indented code(x) { return y; }\n";
  while (text.size() < 100 * 1024) text += para;
  // Inputs that make a naive matcher rescan a long run from every start.
  std::string alternating, titlecase, marks = "a";
  while (alternating.size() < 100 * 1024) alternating += " \n\t";
  while (titlecase.size() < 100 * 1024) titlecase += "\xC7\x85";  // U+01C5, Lt
  while (marks.size() < 100 * 1024) marks += "\xCC\x81";         // U+0301
  const std::vector<std::string> texts = {text, std::string(100 * 1024, '7'), std::string(100 * 1024, ' ') + "1",
                                          "\n" + std::string(100 * 1024, ' ') + "x", alternating, titlecase, marks};
  for (PreTokenizer k : {PreTokenizer::Gpt2, PreTokenizer::Llama3, PreTokenizer::Qwen2, PreTokenizer::Gpt4o,
                         PreTokenizer::DeepseekLlm, PreTokenizer::DeepseekCoder, PreTokenizer::DeepseekV3}) {
    double worst = 0;
    for (const std::string& t : texts) {
      const auto t0 = std::chrono::steady_clock::now();
      const size_t n = pretokenize(k, t).size();
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (&t == &texts[0]) std::printf("pretokenize %s: %zu bytes -> %zu pieces in %.2f ms", pretokenizer_name(k), t.size(), n, ms);
      worst = std::max(worst, ms);
    }
    std::printf("; slowest of %zu 100 KB inputs %.2f ms\n", texts.size(), worst);
    EXPECT_LT(worst, 2000.0);  // loose: sanitizer builds are ~10x slower; release takes a few ms
  }
}

}  // namespace
}  // namespace moeflow

// Tokenizer tests over small hand-built vocabularies (no GGUF file needed).
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "engine/tokenizer.h"
#include "base/error.h"

namespace moeflow {
namespace {

std::string cp_utf8(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

// GPT-2 bytes_to_unicode, written independently of the implementation.
std::string gpt2_char(int b) {
  std::vector<int> bs;
  for (int i = '!'; i <= '~'; ++i) bs.push_back(i);
  for (int i = 0xA1; i <= 0xAC; ++i) bs.push_back(i);
  for (int i = 0xAE; i <= 0xFF; ++i) bs.push_back(i);
  int n = 0;
  for (int i = 0; i < 256; ++i) {
    bool present = false;
    for (int x : bs) present = present || x == i;
    if (!present) {
      if (i == b) return cp_utf8(256 + n);
      ++n;
    } else if (i == b) {
      return cp_utf8(static_cast<uint32_t>(i));
    }
  }
  return {};
}

// Ids 0..255: the mapped bytes (id == byte value). Then merge results, then specials.
struct Gpt2Fixture {
  TokenizerData d;
  int32_t id(const std::string& tok) const {
    for (size_t i = 0; i < d.tokens.size(); ++i)
      if (d.tokens[i] == tok) return static_cast<int32_t>(i);
    ADD_FAILURE() << "no token " << tok;
    return -1;
  }
};

Gpt2Fixture make_gpt2() {
  Gpt2Fixture f;
  TokenizerData& d = f.d;
  d.model = "gpt2";
  for (int b = 0; b < 256; ++b) {
    d.tokens.push_back(gpt2_char(b));
    d.types.push_back(1);
  }
  const std::string G = gpt2_char(' ');  // "Ġ"
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {G, "w"}, {"o", "r"},
      {G + "w", "or"}, {"l", "d"}, {G + "wor", "ld"}, {"o", G}, {G, G}, {"'", "s"},
      {"x", "y"},  // "xy" deliberately not in the vocabulary
  };
  for (const auto& [l, r] : merges) {
    d.merges.push_back(l + " " + r);
    if (l + r != "xy") {
      d.tokens.push_back(l + r);
      d.types.push_back(1);
    }
  }
  for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    d.tokens.push_back(s);
    d.types.push_back(3);
  }
  d.tokens.push_back("<|");  // user-defined prefix of the control tokens
  d.types.push_back(4);
  d.eos = f.id("<|endoftext|>");
  d.bos = d.eos;
  return f;
}

// 0 <unk>, 1 <s>, 2 </s>, 3..258 <0x00>..<0xFF>, then scored pieces.
struct LlamaFixture {
  TokenizerData d;
  int32_t id(const std::string& tok) const {
    for (size_t i = 0; i < d.tokens.size(); ++i)
      if (d.tokens[i] == tok) return static_cast<int32_t>(i);
    ADD_FAILURE() << "no token " << tok;
    return -1;
  }
  void add(const std::string& t, float score, int32_t type = 1) {
    d.tokens.push_back(t);
    d.scores.push_back(score);
    d.types.push_back(type);
  }
};

const std::string kSp = "\xE2\x96\x81";  // U+2581

LlamaFixture make_llama() {
  LlamaFixture f;
  f.add("<unk>", 0, 2);
  f.add("<s>", 0, 3);
  f.add("</s>", 0, 3);
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    f.add(buf, 0, 6);
  }
  for (const char* c : {"h", "e", "l", "o", "w", "r", "d", "a", "b", "c"}) f.add(c, -20);
  f.add(kSp, -20);
  f.add("he", -1);
  f.add("ll", -2);
  f.add("hell", -3);
  f.add("hello", -4);
  f.add(kSp + "hello", -5);
  f.add(kSp + "w", -6);
  f.add("or", -7);
  f.add(kSp + "wor", -8);
  f.add("ld", -9);
  f.add(kSp + "world", -10);
  f.add("ab", -11);
  f.add("bc", -11);  // same score as "ab": the leftmost pair merges first
  f.add("<|im_start|>", 0, 3);
  f.d.model = "llama";
  f.d.unk = 0;
  f.d.bos = 1;
  f.d.eos = 2;
  f.d.add_bos = true;
  return f;
}

std::string random_utf8(std::mt19937& rng, int n) {
  std::string s;
  std::uniform_int_distribution<int> kind(0, 5);
  for (int i = 0; i < n; ++i) {
    uint32_t cp;
    switch (kind(rng)) {
      case 0: cp = std::uniform_int_distribution<uint32_t>(0x20, 0x7E)(rng); break;
      case 1: cp = std::uniform_int_distribution<uint32_t>(0, 3)(rng) == 0 ? '\n' : ' '; break;
      case 2: cp = std::uniform_int_distribution<uint32_t>(0x80, 0x7FF)(rng); break;
      case 3: cp = std::uniform_int_distribution<uint32_t>(0x800, 0xFFFF)(rng); break;
      case 4: cp = std::uniform_int_distribution<uint32_t>(0x1F300, 0x1FAFF)(rng); break;
      default: cp = std::uniform_int_distribution<uint32_t>(0x10000, 0x10FFFF)(rng); break;
    }
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 'x';
    s += cp_utf8(cp);
  }
  return s;
}

std::vector<std::string> sample_texts() {
  return {"",
          "hello world",
          "h\xC3\xA9llo \xE4\xB8\x96\xE7\x95\x8C",  // héllo 世界
          "emoji \xF0\x9F\x98\x80\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD!",
          "  leading and trailing  ",
          "tabs\tand\nnewlines\n\n\r\n",
          "it's we're I'll they've he'd I'm don't '' 'S",
          "numbers 12345 and 3.14, symbols #$%^&*()",
          "a   b    c",
          " ",
          "\xC2\xA0non-breaking\xE3\x80\x80ideographic space",
          "caf\xC3\xA9 na\xC3\xAFve \xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82 \xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7",
          "xyxy"};
}

// ---------------------------------------------------------------- gpt2

TEST(TokenizerGpt2, ExactIdsHelloWorld) {
  Gpt2Fixture f = make_gpt2();
  Tokenizer t(f.d);
  const std::string G = gpt2_char(' ');
  EXPECT_EQ(t.encode("hello world", false), (std::vector<int32_t>{f.id("hello"), f.id(G + "world")}));
  // add_bos puts bos first.
  EXPECT_EQ(t.encode("hello", true), (std::vector<int32_t>{f.d.bos, f.id("hello")}));
  EXPECT_FALSE(t.add_bos_default());
  EXPECT_EQ(t.decode(t.encode("hello world", false)), "hello world");
}

TEST(TokenizerGpt2, PreTokenizerBoundaries) {
  Gpt2Fixture f = make_gpt2();
  Tokenizer t(f.d);
  const std::string G = gpt2_char(' ');
  // "o Ġ" is a merge, but the regex splits "hello" from " world" first.
  EXPECT_EQ(t.encode("hello world", false)[0], f.id("hello"));
  // Whitespace runs: "a", "  " (all but the last space), " b".
  EXPECT_EQ(t.encode("a   b", false),
            (std::vector<int32_t>{'a', f.id(G + G), ' ', 'b'}));
  // Trailing whitespace is one run.
  EXPECT_EQ(t.encode("a  ", false), (std::vector<int32_t>{'a', f.id(G + G)}));
  // Contractions.
  EXPECT_EQ(t.encode("it's", false), (std::vector<int32_t>{'i', 't', f.id("'s")}));
  // A merge whose result is not in the vocabulary falls back to bytes.
  EXPECT_EQ(t.encode("xy", false), (std::vector<int32_t>{'x', 'y'}));
}

TEST(TokenizerGpt2, UnicodeIdsAreMappedBytes) {
  Gpt2Fixture f = make_gpt2();
  Tokenizer t(f.d);
  // "é" = C3 A9: two byte tokens (id == byte value in this vocabulary).
  EXPECT_EQ(t.encode("\xC3\xA9", false), (std::vector<int32_t>{0xC3, 0xA9}));
  EXPECT_EQ(t.token_bytes(0xC3), "\xC3");
  EXPECT_EQ(t.token_bytes(' '), " ");
  EXPECT_EQ(t.token_bytes('\n'), "\n");
  EXPECT_EQ(t.token_bytes(f.id(gpt2_char(' ') + "world")), " world");
}

TEST(TokenizerGpt2, RoundTrip) {
  Gpt2Fixture f = make_gpt2();
  Tokenizer t(f.d);
  for (const std::string& s : sample_texts()) EXPECT_EQ(t.decode(t.encode(s, false)), s) << s;
  std::mt19937 rng(1234);
  for (int i = 0; i < 300; ++i) {
    const std::string s = random_utf8(rng, 1 + i % 40);
    ASSERT_EQ(t.decode(t.encode(s, false)), s) << s;
  }
  // Ill-formed UTF-8 still round-trips byte for byte.
  const std::string bad = "a\xFF\xC3 b\xE2\x82 \x80\x80z\xF0\x9F";
  EXPECT_EQ(t.decode(t.encode(bad, false)), bad);
}

TEST(TokenizerGpt2, SpecialTokensSplit) {
  Gpt2Fixture f = make_gpt2();
  Tokenizer t(f.d);
  const int32_t start = f.id("<|im_start|>"), end = f.id("<|im_end|>");
  EXPECT_EQ(t.encode("<|im_start|>hello<|im_end|>", false),
            (std::vector<int32_t>{start, f.id("hello"), end}));
  // Longest match wins over the user-defined prefix "<|"; a lone "<|" is user-defined.
  EXPECT_EQ(t.encode("<|x", false), (std::vector<int32_t>{f.id("<|"), 'x'}));
  EXPECT_EQ(t.encode("<|im_end", false), (std::vector<int32_t>{f.id("<|"), 'i', 'm', '_', 'e', 'n', 'd'}));
  // Control tokens decode to "" unless show_special; user-defined ones to their text.
  EXPECT_EQ(t.token_bytes(end), "");
  EXPECT_EQ(t.token_bytes(end, true), "<|im_end|>");
  EXPECT_EQ(t.token_bytes(f.id("<|")), "<|");
  EXPECT_EQ(t.decode(t.encode("<|im_start|>hello world<|im_end|>", false)), "hello world");
}

// Special tokens are looked up only where the next byte can continue one (a run of "<"
// skips DeepSeek-V3's ~800 "<｜...｜>" tokens at once): that shortcut must find every
// match the plain longest-first scan finds, one-byte tokens and the text's last byte too.
TEST(TokenizerGpt2, SpecialTokensAfterRunsOfTheirFirstByte) {
  Gpt2Fixture f = make_gpt2();
  f.d.tokens.push_back("\x7F");  // a one-byte user-defined token (no second byte to check)
  f.d.types.push_back(4);
  Tokenizer t(f.d);
  const int32_t start = f.id("<|im_start|>"), end = f.id("<|im_end|>"), del = f.id("\x7F");
  EXPECT_EQ(t.encode("<<<|im_start|>", false), (std::vector<int32_t>{'<', '<', start}));
  EXPECT_EQ(t.encode("x<", false), (std::vector<int32_t>{'x', '<'}));
  EXPECT_EQ(t.encode("<", false), (std::vector<int32_t>{'<'}));
  EXPECT_EQ(t.encode("a<|", false), (std::vector<int32_t>{'a', f.id("<|")}));
  EXPECT_EQ(t.encode("a\x7F\x7F<|im_end|>\x7F", false), (std::vector<int32_t>{'a', del, del, end, del}));
  // Random strings over the specials' bytes against a plain longest-first scan, with the
  // pieces between matches encoded alone.
  const std::vector<std::string> specials = {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|", "\x7F"};
  const std::string alphabet = "<|<|im_startendoftx\x7F ";
  std::mt19937 rng(7);
  for (int k = 0; k < 2000; ++k) {
    std::string text;
    const int n = 1 + k % 30;
    for (int i = 0; i < n; ++i) text += alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)];
    if (k % 3 == 0) text.insert(std::uniform_int_distribution<size_t>(0, text.size())(rng), specials[k % 3]);
    std::vector<int32_t> want;
    size_t from = 0, i = 0;
    while (i < text.size()) {
      std::string best;
      for (const std::string& sp : specials)
        if (text.compare(i, sp.size(), sp) == 0 && sp.size() > best.size()) best = sp;
      if (best.empty()) { ++i; continue; }
      if (i > from) {
        const std::vector<int32_t> piece = t.encode(text.substr(from, i - from), false);
        want.insert(want.end(), piece.begin(), piece.end());
      }
      want.push_back(f.id(best));
      i += best.size();
      from = i;
    }
    if (from < text.size()) {
      const std::vector<int32_t> piece = t.encode(text.substr(from), false);
      want.insert(want.end(), piece.begin(), piece.end());
    }
    ASSERT_EQ(t.encode(text, false), want) << text;
  }
}

TEST(TokenizerGpt2, HarmonyRepliesRunPastEndAndShowTheirMarkup) {
  // gpt-oss's vocabulary: <|end|> closes a message (the reasoning, say), <|return|> and
  // <|call|> end the reply; the markup is text the server reads.
  Gpt2Fixture f = make_gpt2();
  for (const char* s : {"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>", "<|return|>", "<|call|>"}) {
    f.d.tokens.push_back(s);
    f.d.types.push_back(3);
  }
  Tokenizer t(f.d);
  EXPECT_TRUE(t.harmony());
  EXPECT_FALSE(t.is_end_of_generation(f.id("<|end|>")));
  EXPECT_TRUE(t.is_end_of_generation(f.id("<|return|>")));
  EXPECT_TRUE(t.is_end_of_generation(f.id("<|call|>")));
  TokenizerData with_end_as_eos = f.d;
  with_end_as_eos.eos = f.id("<|end|>");
  EXPECT_FALSE(Tokenizer(with_end_as_eos).is_end_of_generation(f.id("<|end|>")));
  EXPECT_EQ(t.decode({f.id("<|channel|>"), f.id("h"), f.id("<|message|>"), f.id("<|end|>"), f.id("<|start|>"),
                      f.id("<|constrain|>"), f.id("<|return|>")}),
            "<|channel|>h<|message|><|end|><|start|><|constrain|>");
  // Elsewhere (Phi's vocabulary, say) <|end|> ends the reply and shows nothing.
  Gpt2Fixture g = make_gpt2();
  g.d.tokens.push_back("<|end|>");
  g.d.types.push_back(3);
  Tokenizer u(g.d);
  EXPECT_FALSE(u.harmony());
  EXPECT_TRUE(u.is_end_of_generation(g.id("<|end|>")));
  EXPECT_EQ(u.token_bytes(g.id("<|end|>")), "");
}

TEST(TokenizerGpt2, DeepSeekToolCallTagsAreText) {
  Gpt2Fixture f = make_gpt2();
  for (const char* s : {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
                        "<｜tool▁calls▁end｜>"}) {
    f.d.tokens.push_back(s);
    f.d.types.push_back(3);
  }
  Tokenizer t(f.d);
  EXPECT_EQ(t.decode({f.id("<｜tool▁calls▁begin｜>"), f.id("<｜tool▁call▁begin｜>"), f.id("h"), f.id("<｜tool▁sep｜>"),
                      f.id("<｜tool▁call▁end｜>"), f.id("<｜tool▁calls▁end｜>"), f.id("<|im_end|>")}),
            "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>h<｜tool▁sep｜><｜tool▁call▁end｜><｜tool▁calls▁end｜>");
}

TEST(TokenizerGpt2, EndOfGeneration) {
  Gpt2Fixture f = make_gpt2();
  Tokenizer t(f.d);
  EXPECT_TRUE(t.is_end_of_generation(f.id("<|endoftext|>")));
  EXPECT_TRUE(t.is_end_of_generation(f.id("<|im_end|>")));
  EXPECT_FALSE(t.is_end_of_generation(f.id("<|im_start|>")));
  EXPECT_FALSE(t.is_end_of_generation(f.id("hello")));
  EXPECT_FALSE(t.is_end_of_generation(-1));
  EXPECT_FALSE(t.is_end_of_generation(static_cast<int32_t>(t.vocab_size())));
}

// ---------------------------------------------------------------- llama

TEST(TokenizerLlama, ExactIds) {
  LlamaFixture f = make_llama();
  Tokenizer t(f.d);
  EXPECT_TRUE(t.add_bos_default());
  EXPECT_EQ(t.encode("hello world", true),
            (std::vector<int32_t>{1, f.id(kSp + "hello"), f.id(kSp + "world")}));
  EXPECT_EQ(t.encode("hello world", false),
            (std::vector<int32_t>{f.id(kSp + "hello"), f.id(kSp + "world")}));
  // Leftmost of two equal-score merges: "ab" then "c" (not "a" + "bc").
  EXPECT_EQ(t.encode("abc", false), (std::vector<int32_t>{f.id(kSp), f.id("ab"), f.id("c")}));
  // Byte fallback: "é" = C3 A9 has no piece.
  EXPECT_EQ(t.encode("\xC3\xA9", false),
            (std::vector<int32_t>{f.id(kSp), 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(t.encode("", false), (std::vector<int32_t>{}));
  EXPECT_EQ(t.encode("", true), (std::vector<int32_t>{1}));
}

TEST(TokenizerLlama, NoSpacePrefix) {
  LlamaFixture f = make_llama();
  f.d.add_space_prefix = false;
  Tokenizer t(f.d);
  EXPECT_EQ(t.encode("hello world", false), (std::vector<int32_t>{f.id("hello"), f.id(kSp + "world")}));
  EXPECT_EQ(t.decode(t.encode("hello world", false)), "hello world");
}

TEST(TokenizerLlama, UnkWithoutByteTokens) {
  LlamaFixture f = make_llama();
  for (int b = 0; b < 256; ++b) f.d.tokens[3 + b] = "unused" + std::to_string(b);
  Tokenizer t(f.d);
  // One unk per character that has no piece.
  EXPECT_EQ(t.encode("h\xC3\xA9", false), (std::vector<int32_t>{f.id(kSp), f.id("h"), 0}));
}

TEST(TokenizerLlama, RoundTripKeepsLeadingSpace) {
  LlamaFixture f = make_llama();
  Tokenizer t(f.d);
  EXPECT_EQ(t.decode(t.encode("hello world", true)), " hello world");
  for (const std::string& s : sample_texts()) {
    if (s.empty()) continue;
    EXPECT_EQ(t.decode(t.encode(s, false)), " " + s) << s;
  }
  std::mt19937 rng(99);
  for (int i = 0; i < 300; ++i) {
    const std::string s = random_utf8(rng, 1 + i % 40);
    ASSERT_EQ(t.decode(t.encode(s, true)), " " + s) << s;
  }
  EXPECT_EQ(t.token_bytes(f.id(kSp + "world")), " world");
  EXPECT_EQ(t.token_bytes(3 + 0x41), "A");
  EXPECT_EQ(t.token_bytes(1), "");
  EXPECT_EQ(t.token_bytes(1, true), "<s>");
}

TEST(TokenizerLlama, SpecialTokensSplit) {
  LlamaFixture f = make_llama();
  Tokenizer t(f.d);
  const int32_t start = f.id("<|im_start|>");
  // Each text piece after a special token gets the space prefix, as in llama.cpp.
  EXPECT_EQ(t.encode("<|im_start|>hello</s>", false),
            (std::vector<int32_t>{start, f.id(kSp + "hello"), 2}));
  EXPECT_EQ(t.encode("hello<|im_start|>world", false),
            (std::vector<int32_t>{f.id(kSp + "hello"), start, f.id(kSp + "world")}));
  EXPECT_TRUE(t.is_end_of_generation(2));
  EXPECT_FALSE(t.is_end_of_generation(1));
  EXPECT_FALSE(t.is_end_of_generation(start));
}

// ---------------------------------------------------------------- streaming

TEST(StreamingDetokenizer, HoldsBackSplitEmoji) {
  LlamaFixture f = make_llama();
  Tokenizer t(f.d);
  const std::string emoji = "\xF0\x9F\x98\x80";  // U+1F600
  const std::vector<int32_t> ids = t.encode(emoji + "hello", false);
  ASSERT_GE(ids.size(), 6u);
  StreamingDetokenizer sd(t);
  std::string all;
  for (int32_t id : ids) {
    const std::string piece = sd.push(id);
    // Every emitted piece is complete UTF-8 on its own.
    if (!piece.empty()) {
      const unsigned char first = static_cast<unsigned char>(piece[0]);
      EXPECT_FALSE(first >= 0x80 && first < 0xC0) << "starts mid-character";
    }
    if (piece.find('\xF0') != std::string::npos) {
      EXPECT_NE(piece.find(emoji), std::string::npos);
    }
    all += piece;
  }
  all += sd.flush();
  EXPECT_EQ(all, " " + emoji + "hello");

  StreamingDetokenizer s2(t);
  EXPECT_EQ(s2.push(3 + 0xF0), "");
  EXPECT_EQ(s2.push(3 + 0x9F), "");
  EXPECT_EQ(s2.push(3 + 0x98), "");
  EXPECT_EQ(s2.push(3 + 0x80), emoji);
  EXPECT_EQ(s2.flush(), "");
}

TEST(StreamingDetokenizer, InvalidBytesBecomeReplacement) {
  LlamaFixture f = make_llama();
  Tokenizer t(f.d);
  const std::string fffd = "\xEF\xBF\xBD";
  StreamingDetokenizer sd(t);
  EXPECT_EQ(sd.push(3 + 0xFF), fffd);                // can never start a character
  EXPECT_EQ(sd.push(3 + 0x80), fffd);                // stray continuation byte
  EXPECT_EQ(sd.push(3 + 0xE0), "");                  // could still complete
  EXPECT_EQ(sd.push(3 + 'A'), fffd + "A");           // ...but did not
  EXPECT_EQ(sd.push(3 + 0xE4), "");
  EXPECT_EQ(sd.push(3 + 0xB8), "");
  EXPECT_EQ(sd.flush(), fffd);                       // truncated at the end
  EXPECT_EQ(sd.flush(), "");
  EXPECT_EQ(sd.push(f.id(kSp + "hello")), " hello");
  EXPECT_EQ(sd.push(1), "");                         // control token prints nothing
}

TEST(StreamingDetokenizer, Gpt2RandomSplitsMatchDecode) {
  Gpt2Fixture f = make_gpt2();
  Tokenizer t(f.d);
  std::mt19937 rng(7);
  for (int i = 0; i < 100; ++i) {
    const std::string s = random_utf8(rng, 1 + i % 30);
    StreamingDetokenizer sd(t);
    std::string all;
    for (int32_t id : t.encode(s, false)) {
      const std::string piece = sd.push(id);
      if (!piece.empty()) {
        const unsigned char first = static_cast<unsigned char>(piece[0]);
        ASSERT_FALSE(first >= 0x80 && first < 0xC0);
      }
      all += piece;
    }
    all += sd.flush();
    ASSERT_EQ(all, s);
  }
}

// ---------------------------------------------------------------- validation

TEST(TokenizerData, ValidationErrors) {
  {
    LlamaFixture f = make_llama();
    f.d.eos = static_cast<int32_t>(f.d.tokens.size());
    try {
      Tokenizer t(f.d);
      FAIL() << "expected InputError";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.eos_token_id"), std::string::npos) << e.what();
    }
  }
  {
    LlamaFixture f = make_llama();
    f.d.bos = -5;
    EXPECT_THROW(Tokenizer{f.d}, InputError);
  }
  {
    LlamaFixture f = make_llama();
    f.d.scores.pop_back();
    try {
      Tokenizer t(f.d);
      FAIL() << "expected InputError";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.scores"), std::string::npos) << e.what();
    }
  }
  {
    Gpt2Fixture f = make_gpt2();
    f.d.types.push_back(1);
    EXPECT_THROW(Tokenizer{f.d}, InputError);
  }
  {
    Gpt2Fixture f = make_gpt2();
    f.d.model = "wordpiece";
    try {
      Tokenizer t(f.d);
      FAIL() << "expected InputError";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("unsupported tokenizer model 'wordpiece'"), std::string::npos);
      EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.model"), std::string::npos);
    }
  }
  {
    TokenizerData d;
    d.model = "llama";
    EXPECT_THROW(Tokenizer{d}, InputError);  // empty vocabulary
  }
}

}  // namespace
}  // namespace moeflow

// JSON mode's whole-vocabulary filter: for every state reached on the way through random
// objects (escapes and \u digits included) it allows exactly the tokens
// JsonPrefix::accepts allows.
#include "serve/json_token_filter.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "serve/json_prefix.h"

namespace moeflow::serve {
namespace {

// Every single byte, the empty token, JSON-shaped tokens of a BPE vocabulary, and random
// byte strings over JSON's punctuation, letters, control and non-ASCII bytes.
std::vector<std::string> vocabulary() {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.emplace_back(1, static_cast<char>(b));
  v.emplace_back();
  for (const char* t : {"{\"", "\":", "\",", "\":\"", "\"}", "}}", "]}", "],", " \"", "\\n", "\\u00", "\\\"", "true",
                        "nul", "null", "false", " the", "name", "123", "-0.5", "e+1", "1e", ".5", "\n  ", "   \"",
                        "\xc3\xa9t\xc3\xa9", "caf\xc3", "\"\\", "\\u12", "34\"", ",\n", "[{", "[]", "{}", "\t\t"})
    v.emplace_back(t);
  const std::string alphabet = "{}[]\":,.-+eE0123456789 \n\t\\ufnrlsatbx/\x01\x1f\x7f\x80\xc3\xff";
  std::mt19937 rng(11);
  for (int i = 0; i < 3000; ++i) {
    std::string s(2 + rng() % 7, ' ');
    for (char& c : s) c = alphabet[rng() % alphabet.size()];
    v.push_back(s);
  }
  return v;
}

TEST(JsonTokenFilter, AllowsWhatAcceptsAllowsInEveryState) {
  const std::vector<std::string> vocab = vocabulary();
  const JsonTokenFilter filter(vocab);
  const std::string texts[] = {
      R"({"a" : [1, -2.5e+3, 0, 0.25E-2, true, false, null], "b\"\\\/\n\u00e9x" : {"c":{}}, "d":"caf)"
      "\xc3\xa9"
      R"(", "e": [[], {"f": -0}]})",
      "{\n  \"key\": \"value with spaces\",\n  \"n\": 12345,\n  \"o\": {\"p\": [\"q\", 1e5]}\n}",
  };
  std::vector<uint8_t> allowed;
  int states = 0;
  for (const std::string& text : texts) {
    JsonPrefix p;
    for (size_t n = 0; n <= text.size(); ++n) {
      filter.allowed(p, allowed);
      ASSERT_EQ(allowed.size(), vocab.size());
      int n_allowed = 0;
      for (size_t t = 0; t < vocab.size(); ++t) {
        ASSERT_EQ(allowed[t] != 0, p.accepts(vocab[t])) << "after " << text.substr(0, n) << ": token " << t;
        n_allowed += allowed[t];
      }
      ++states;
      if (n == text.size()) break;   // closed: nothing goes on (the next test)
      EXPECT_GT(n_allowed, 0) << text.substr(0, n);  // an open prefix always goes on
      ASSERT_TRUE(p.feed(static_cast<unsigned char>(text[n]))) << text.substr(0, n + 1);
    }
  }
  EXPECT_GT(states, 150);
}

TEST(JsonTokenFilter, AllowsNothingOnceTheObjectIsClosed) {
  const std::vector<std::string> vocab = vocabulary();
  const JsonTokenFilter filter(vocab);
  JsonPrefix p;
  for (const char c : std::string("{}")) ASSERT_TRUE(p.feed(static_cast<unsigned char>(c)));
  std::vector<uint8_t> allowed(3, 1);
  filter.allowed(p, allowed);
  for (const uint8_t a : allowed) EXPECT_EQ(a, 0);
}

}  // namespace
}  // namespace moeflow::serve

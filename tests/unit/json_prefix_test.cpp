// JSON mode's prefix check: every prefix of a JSON object is accepted and nothing else;
// done() exactly when the object closes. Cross-checked against nlohmann::json on random
// objects and on their random mutations.
#include "serve/json_prefix.h"
#include "serve/json_lexer.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>

namespace moeflow::serve {
namespace {

// How many bytes of `text` are accepted; -1 if all of them.
int accepted_bytes(const std::string& text, bool* done = nullptr) {
  JsonPrefix p;
  for (size_t i = 0; i < text.size(); ++i)
    if (!p.feed(static_cast<unsigned char>(text[i]))) return static_cast<int>(i);
  if (done) *done = p.done();
  return -1;
}

TEST(JsonPrefix, AcceptsObjectsAndTheirPrefixes) {
  for (const std::string text :
       {R"({})", R"({"a":1})", R"( { "a" : [1, -2.5e+3, 0, 0.25E-2, true, false, null], "b\"\\\/\n\u00e9" : {"c":{}} } )",
        "{\"k\":\"caf\xc3\xa9\"}", R"({"a":[[],[[]],{}],"n":-0})", "{\n  \"a\": \"x\",\n  \"b\": 2\n}"}) {
    // White space after the object is never fed: the request ends at its brace.
    const size_t end = text.find_last_of('}') + 1;
    bool done_at_brace = false;
    EXPECT_EQ(accepted_bytes(text.substr(0, end), &done_at_brace), -1) << text;
    EXPECT_TRUE(done_at_brace) << text;
    for (size_t n = 0; n < end; ++n) {
      bool d = true;
      EXPECT_EQ(accepted_bytes(text.substr(0, n), &d), -1) << text.substr(0, n);
      EXPECT_FALSE(d) << text.substr(0, n);
    }
  }
}

TEST(JsonPrefix, RefusesAtTheFirstWrongByte) {
  const std::pair<std::string, int> cases[] = {
      {"[1]", 0},          {"true", 0},           {"{a:1}", 1},          {"{\"a\" 1}", 5},    {"{\"a\":01}", 6},
      {"{\"a\":-}", 6},    {"{\"a\":1.}", 7},     {"{\"a\":1e}", 7},      {"{\"a\":tru}", 8}, {"{\"a\":1,}", 7},
      {"{\"a\":[1,]}", 8}, {"{\"a\":]", 5},        {"{\"a\":\"\\x\"}", 7},  {"{\"a\":\"\\u12g4\"}", 10},
      {"{\"a\":\"\x01\"}", 6}, {"{\"a\":1]", 6},  {"{} ", 2},             {"{\"a\":nul}", 8},
  };
  for (const auto& [text, at] : cases) EXPECT_EQ(accepted_bytes(text), at) << text;
}

TEST(JsonPrefix, BoundsNestingAndWhiteSpace) {
  std::string deep = "{\"a\":";
  for (int i = 1; i < JsonPrefix::kMaxDepth; ++i) deep += "[";
  EXPECT_EQ(accepted_bytes(deep), -1);
  EXPECT_EQ(accepted_bytes(deep + "["), static_cast<int>(deep.size()));
  // One space, or a newline and up to 20 spaces or tabs, between tokens.
  const std::string indent(json_lexer::kMaxIndent, ' ');
  EXPECT_EQ(accepted_bytes("{ }"), -1);
  EXPECT_EQ(accepted_bytes("{\n" + indent + "\"a\": 1,\n\t\"b\" : 2\n}"), -1);
  EXPECT_EQ(accepted_bytes("{  }"), 2);
  EXPECT_EQ(accepted_bytes("{\n" + indent + " }"), 2 + json_lexer::kMaxIndent);
  EXPECT_EQ(accepted_bytes("{\n\n}"), 2);
  EXPECT_EQ(accepted_bytes("{\t}"), 1);
  EXPECT_EQ(accepted_bytes("{\r\n}"), 1);
}

TEST(JsonPrefix, AcceptsOnACopy) {
  JsonPrefix p;
  EXPECT_TRUE(p.accepts("{\"a\""));
  EXPECT_FALSE(p.accepts("x"));
  EXPECT_FALSE(p.accepts(""));  // a token of no bytes makes no progress
  ASSERT_TRUE(p.feed('{'));     // accepts() did not move it
  EXPECT_TRUE(p.accepts("}"));
}

// Random objects (every prefix accepted, done at the end), and random mutations of them
// (when every byte is accepted and the object closed, nlohmann parses it as an object).
TEST(JsonPrefix, AgreesWithAJsonParser) {
  std::mt19937 rng(7);
  std::function<nlohmann::json(int)> value = [&](int depth) -> nlohmann::json {
    switch (rng() % (depth > 3 ? 4 : 6)) {
      case 0: return static_cast<int>(rng() % 2000) - 1000;
      case 1: return std::ldexp(static_cast<double>(rng() % 100000), -static_cast<int>(rng() % 20));
      case 2: return std::string(1 + rng() % 5, static_cast<char>('a' + rng() % 26)) + "\"\\\n\t";
      case 3: return rng() % 3 == 0 ? nlohmann::json(nullptr) : nlohmann::json(rng() % 2 == 0);
      case 4: {
        nlohmann::json a = nlohmann::json::array();
        for (int i = 0, n = rng() % 4; i < n; ++i) a.push_back(value(depth + 1));
        return a;
      }
      default: {
        nlohmann::json o = nlohmann::json::object();
        for (int i = 0, n = rng() % 4; i < n; ++i) o["k" + std::to_string(rng() % 50)] = value(depth + 1);
        return o;
      }
    }
  };
  const std::string alphabet = "{}[]\":,.-+eE0123456789 \n\\tfnrul\"a";
  for (int round = 0; round < 300; ++round) {
    nlohmann::json o = nlohmann::json::object();
    for (int i = 0, n = 1 + rng() % 4; i < n; ++i) o["f" + std::to_string(i)] = value(0);
    const std::string text = o.dump(round % 2 ? 2 : -1);
    bool done = false;
    ASSERT_EQ(accepted_bytes(text, &done), -1) << text;
    EXPECT_TRUE(done) << text;
    for (int m = 0; m < 20; ++m) {
      std::string t = text;
      const size_t at = rng() % t.size();
      switch (rng() % 3) {
        case 0: t[at] = alphabet[rng() % alphabet.size()]; break;
        case 1: t.erase(at, 1); break;
        default: t.insert(at, 1, alphabet[rng() % alphabet.size()]); break;
      }
      bool d = false;
      if (accepted_bytes(t, &d) == -1 && d) {
        try {
          EXPECT_TRUE(nlohmann::json::parse(t).is_object()) << t;
        } catch (const nlohmann::json::out_of_range&) {
          // A number past a double's range (1e375): valid JSON text, which this parser
          // refuses to hold.
        } catch (const nlohmann::json::parse_error& e) {
          ADD_FAILURE() << t << ": " << e.what();
        }
      }
    }
  }
}

}  // namespace
}  // namespace moeflow::serve

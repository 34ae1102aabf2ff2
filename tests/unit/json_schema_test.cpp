// response_format json_schema: the compiled schema and its prefix check. Instances in
// the schema's order are accepted byte by byte and close; texts that break the schema
// are refused at the byte that breaks it; random walks through the check never reach a
// dead end, and every text they close parses and validates against the schema (a
// reference validator below, written from JSON Schema's definitions); unsupported
// keywords are refused with their place named.
#include "serve/json_schema.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "serve/json_schema_prefix.h"
#include "serve/json_token_filter.h"

namespace moeflow::serve {
namespace {

using ojson = nlohmann::ordered_json;

// JSON Schema's meaning of the keywords the compiler takes (validation, not generation).
bool valid(const ojson& v, const ojson& s, const ojson& root) {
  if (s.is_boolean()) return s.get<bool>();
  if (s.contains("$ref")) {
    const std::string r = s["$ref"].get<std::string>().substr(1);
    return valid(v, root.at(ojson::json_pointer(r)), root);
  }
  if (s.contains("anyOf")) {
    for (const ojson& alt : s["anyOf"])
      if (valid(v, alt, root)) return true;
    return false;
  }
  if (s.contains("const") && v != s["const"]) return false;
  if (s.contains("enum")) {
    bool in = false;
    for (const ojson& e : s["enum"]) in |= e == v;
    if (!in) return false;
  }
  if (s.contains("type")) {
    const ojson types = s["type"].is_array() ? s["type"] : ojson::array({s["type"]});
    bool ok = false;
    for (const ojson& t : types) {
      const std::string n = t.get<std::string>();
      ok |= (n == "object" && v.is_object()) || (n == "array" && v.is_array()) || (n == "string" && v.is_string()) ||
            (n == "number" && v.is_number()) ||
            (n == "integer" && (v.is_number_integer() ||  // a whole number past int64 parses as a double
                                (v.is_number_float() && v.get<double>() == std::floor(v.get<double>())))) ||
            (n == "boolean" && v.is_boolean()) || (n == "null" && v.is_null());
    }
    if (!ok) return false;
  }
  if (v.is_object()) {
    if (s.contains("required"))
      for (const ojson& r : s["required"])
        if (!v.contains(r.get<std::string>())) return false;
    if (s.contains("properties"))
      for (const auto& [k, sub] : s["properties"].items())
        if (v.contains(k) && !valid(v[k], sub, root)) return false;
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return false;
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return false;
    if (s.contains("items"))
      for (const ojson& x : v)
        if (!valid(x, s["items"], root)) return false;
  }
  return true;
}

const char* kPerson = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string"},
    "age": {"type": "integer"},
    "email": {"type": ["string", "null"]},
    "role": {"enum": ["admin", "user", "guest"]},
    "scores": {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 3},
    "active": {"type": "boolean"}
  },
  "required": ["name", "role", "scores"],
  "additionalProperties": false
})";

const char* kTree = R"({
  "$defs": {
    "node": {
      "type": "object",
      "properties": {"value": {"enum": [1, 12, 1.5, "x", null]}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
      "required": ["value"]
    }
  },
  "type": "object",
  "properties": {"root": {"$ref": "#/$defs/node"}, "tag": {"const": "t\"q"}, "any": {}, "pick": {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "object", "properties": {"k": {"type": "boolean"}}, "required": ["k"]}]}},
  "required": ["root", "pick"]
})";

// How many bytes of `text` are accepted; -1 if all, with done() then in *done.
int accepted_bytes(const JsonSchema& schema, const std::string& text, bool* done = nullptr) {
  JsonSchemaPrefix p(schema);
  for (size_t i = 0; i < text.size(); ++i)
    if (!p.feed(static_cast<unsigned char>(text[i]))) return static_cast<int>(i);
  if (done) *done = p.done();
  return -1;
}

TEST(JsonSchema, InstancesInTheSchemasOrderAreAcceptedAndClose) {
  const JsonSchema person = JsonSchema::compile(ojson::parse(kPerson));
  const JsonSchema tree = JsonSchema::compile(ojson::parse(kTree));
  const std::pair<const JsonSchema*, std::string> cases[] = {
      {&person, R"({"name":"Ann","role":"admin","scores":[1]})"},
      {&person,
       R"({ "name" : "B\"o\u00e9b", "age": -12, "email": null, "role": "guest", "scores": [0.5, 1e3, -2E-2], "active": true })"},
      {&person, "{\n  \"name\": \"x\",\n  \"email\": \"a@b\",\n  \"role\": \"user\",\n  \"scores\": [3]\n}"},
      {&tree, R"({"root":{"value":1},"pick":"s"})"},
      {&tree,
       R"({"root":{"value":12,"children":[{"value":1.5},{"value":"x","children":[]}]},"tag":"t\"q","any":[1,"a",[null,{}],true],"pick":{"k":false}})"},
      {&tree, R"({"root":{"value":null},"any":-0.5,"pick":-7})"},
  };
  for (const auto& [schema, text] : cases) {
    for (size_t n = 0; n < text.size(); ++n) {
      bool done = true;
      ASSERT_EQ(accepted_bytes(*schema, text.substr(0, n), &done), -1) << text.substr(0, n);
      EXPECT_FALSE(done) << text.substr(0, n);
    }
    bool done = false;
    EXPECT_EQ(accepted_bytes(*schema, text, &done), -1) << text;
    EXPECT_TRUE(done) << text;
  }
}

TEST(JsonSchema, RefusesAtTheByteThatBreaksTheSchema) {
  const JsonSchema person = JsonSchema::compile(ojson::parse(kPerson));
  const JsonSchema tree = JsonSchema::compile(ojson::parse(kTree));
  const std::tuple<const JsonSchema*, std::string, int> cases[] = {
      {&person, R"([)", 0},                                            // the root is an object
      {&person, R"({})", 1},                                           // name, role and scores are required
      {&person, R"({"role")", 2},                                      // name comes first
      {&person, R"({"name":1)", 8},                                    // a string
      {&person, R"({"name":"a","age":1.5)", 19},                       // an integer
      {&person, R"({"name":"a","role":"root")", 20},                   // not in the enum
      {&person, R"({"name":"a","nick")", 13},                          // not a property
      {&person, R"({"name":"a","role":"user","scores":[])", 36},       // minItems 1
      {&person, R"({"name":"a","role":"user","scores":[1,2,3,)", 41},  // maxItems 3
      {&person, R"({"name":"a","role":"user","scores":[1]})", -1},
      {&person, R"({"name":"a","role":"user","scores":[1]},)", 39},               // nothing after the root
      {&person, R"({"name":"a","age":3,"name")", 21},                             // no property twice
      {&tree, R"({"root":{"value":2)", 17},                                       // 2 is no enum value
      {&tree, R"({"root":{"value":1.)", -1},                                      // 1. goes on, as 1.5
      {&tree, R"({"root":{"value":1},"tag":"t")", 28},                            // const "t\"q"
      {&tree, R"({"root":{"value":1},"pick":{})", 28},                            // k is required
      {&tree, R"({"root":{"value":1},"pick":true)", 27},                          // no alternative takes true
      {&tree, R"({"root":{"value":1,"children":[{"value":1},{"value":1},)", 54},  // maxItems 2
  };
  for (const auto& [schema, text, at] : cases) EXPECT_EQ(accepted_bytes(*schema, text), at) << text;
}

// Random walks over the bytes the check accepts, leaning towards closing: never stuck,
// and every closed text is an instance.
TEST(JsonSchema, RandomWalksNeverStickAndCloseOnInstances) {
  for (const char* text : {kPerson, kTree}) {
    const ojson s = ojson::parse(text);
    const JsonSchema schema = JsonSchema::compile(s);
    std::mt19937 rng(5);
    int closed = 0;
    for (int walk = 0; walk < 300; ++walk) {
      JsonSchemaPrefix p(schema);
      std::string out;
      while (!p.done() && out.size() < 600) {
        std::vector<unsigned char> ok, closing;
        for (int b = 0; b < 128; ++b) {  // ASCII: random high bytes would not be UTF-8
          if (!JsonSchemaPrefix(p).feed(static_cast<unsigned char>(b))) continue;
          ok.push_back(static_cast<unsigned char>(b));
          if (b == '}' || b == ']' || b == '"' || b == ',' || b == ':' || (b >= '0' && b <= '9'))
            closing.push_back(static_cast<unsigned char>(b));
        }
        ASSERT_FALSE(ok.empty()) << "stuck after " << out;
        const bool lean = !closing.empty() && rng() % 4 != 0;
        const unsigned char c = lean ? closing[rng() % closing.size()] : ok[rng() % ok.size()];
        ASSERT_TRUE(p.feed(c));
        out += static_cast<char>(c);
      }
      if (!p.done()) continue;
      ++closed;
      ojson v;
      try {
        v = ojson::parse(out);
      } catch (const ojson::out_of_range&) {
        continue;  // a number past a double's range (4e96395): valid JSON this parser will not hold
      } catch (const ojson::exception& e) {
        FAIL() << out << ": " << e.what();
      }
      EXPECT_TRUE(valid(v, s, s)) << out;
    }
    EXPECT_GT(closed, 100) << text;
  }
}

TEST(JsonSchema, TheVocabularyFilterAgreesWithTheCheck) {
  const JsonSchema schema = JsonSchema::compile(ojson::parse(kTree));
  std::vector<std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab.emplace_back(1, static_cast<char>(b));
  for (const char* t : {"{\"",        "\":",  "\",",   "\"root", "\"value\":", "12",     "1.",   ".5",
                        "null",       "nu",   "\"x\"", "},",     "}}",         "]}",     "[{",   "\"children\":[",
                        "\"t\\\"q\"", "\\\"", "true",  "false",  " \"",        "\"pick", "ab\"", "k\":"})
    vocab.emplace_back(t);
  const JsonTokenFilter filter(vocab);
  const std::string text =
      R"({"root": {"value": 12, "children": [{"value": "x"}]}, "tag": "t\"q", "any": [1, "a b"], "pick": {"k": true}})";
  JsonSchemaPrefix p(schema);
  std::vector<uint8_t> allowed;
  for (size_t n = 0; n < text.size(); ++n) {
    filter.allowed(p, allowed);
    for (size_t t = 0; t < vocab.size(); ++t)
      ASSERT_EQ(allowed[t] != 0, p.accepts(vocab[t])) << text.substr(0, n) << " | token " << vocab[t];
    ASSERT_TRUE(p.feed(static_cast<unsigned char>(text[n]))) << text.substr(0, n + 1);
  }
  EXPECT_TRUE(p.done());
}

TEST(JsonSchema, UnsupportedKeywordsAndContradictionsAreRefusedWithTheirPlace) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type":"object","properties":{"a":{"type":"string","pattern":"^x"}}})",
       "#/properties/a: the keyword 'pattern'"},
      {R"({"type":"object","properties":{"a":{"oneOf":[{"type":"string"}]}}})", "'oneOf'"},
      {R"({"type":"array","items":{"type":"string"}})", "the root must be an object"},
      {R"({"type":"object","required":["a"]})", "required property \"a\" is not in 'properties'"},
      {R"({"type":"object","properties":{"a":{"$ref":"#/$defs/missing"}}})", "names nothing"},
      {R"({"type":"object","properties":{"a":{"$ref":"http://x/y"}}})", "only references into this schema"},
      {R"({"type":"object","properties":{"a":{"enum":[]}}})", "'enum' must be a non-empty array"},
      {R"({"type":"object","properties":{"a":{"type":"string","enum":[1,2]}}})", "no value of 'enum'"},
      {R"({"type":"object","properties":{"a":{"type":"array","minItems":3,"maxItems":2}}})", "'minItems' is above"},
      {R"({"type":"object","properties":{"a":{"type":"strin"}}})", "unknown type 'strin'"},
      {R"({"type":"object","properties":{"a":false}})", "admits no value"},
      {R"({"type":"object","properties":{"a":{"type":"string","anyOf":[{}]}}})", "beside"},
      {R"({"type":"object","properties":{"a":{"type":"array","items":[{}]}}})", "a tuple"},
      {R"({"type":"object","properties":{"a":{"$ref":"#/properties/a"}}})", "leads only back to itself"},
  };
  for (const auto& [schema, message] : cases) {
    try {
      JsonSchema::compile(ojson::parse(schema));
      ADD_FAILURE() << schema << " compiled";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
  // A schema that refers to itself without end still compiles to a finite graph.
  const JsonSchema loop = JsonSchema::compile(ojson::parse(R"({"type":"object","properties":{"self":{"$ref":"#"}}})"));
  EXPECT_EQ(accepted_bytes(loop, R"({"self":{"self":{}}})"), -1);
}

}  // namespace
}  // namespace moeflow::serve

// response_format json_schema: the compiled schema and its prefix check. Instances in
// the schema's order are accepted byte by byte and close; texts that break the schema
// are refused at the byte that breaks it; random walks through the check never reach a
// dead end, and every text they close parses and validates against the schema (a
// reference validator below, written from JSON Schema's definitions); unsupported
// keywords are refused with their place named.
#include "serve/json_schema.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
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
// `walks` random walks over the ASCII bytes the check accepts, leaning towards closing:
// none may get stuck, and every text one closes must parse and validate. Returns how
// many closed.
int random_walks(const ojson& s, int walks, std::mt19937& rng) {
  const JsonSchema schema = JsonSchema::compile(s);
  int closed = 0;
  for (int walk = 0; walk < walks; ++walk) {
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
      if (ok.empty()) {
        ADD_FAILURE() << s.dump() << ": stuck after " << out;
        return closed;
      }
      const bool lean = !closing.empty() && rng() % 4 != 0;
      const unsigned char c = lean ? closing[rng() % closing.size()] : ok[rng() % ok.size()];
      EXPECT_TRUE(p.feed(c));
      out += static_cast<char>(c);
    }
    if (!p.done()) continue;
    ++closed;
    try {
      EXPECT_TRUE(valid(ojson::parse(out), s, s)) << s.dump() << " | " << out;
    } catch (const ojson::out_of_range&) {
      // A number past a double's range (4e96395): valid JSON this parser will not hold.
    } catch (const ojson::exception& e) {
      ADD_FAILURE() << s.dump() << " | " << out << ": " << e.what();
    }
  }
  return closed;
}

TEST(JsonSchema, RandomWalksNeverStickAndCloseOnInstances) {
  std::mt19937 rng(5);
  for (const char* text : {kPerson, kTree}) EXPECT_GT(random_walks(ojson::parse(text), 300, rng), 100) << text;
}

// Random schemas of every supported keyword: random walks through each never get stuck
// and close on instances; random instances written in the schema's order (compact and
// pretty-printed) are accepted whole; and of their random one-byte mutations, one the
// check takes whole is still an instance.
TEST(JsonSchema, RandomSchemasAcceptTheirInstancesAndOnlyInstances) {
  std::mt19937 rng(23);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const std::vector<ojson> scalars = {"a", "b\"c", "", 0, 12, -3, 1.5, 2e-3, true, false, nullptr};
  std::function<ojson(int)> schema = [&](int depth) -> ojson {
    switch (pick(depth > 2 ? 6 : 10)) {
      case 0: return {{"type", "string"}};
      case 1: return {{"type", "integer"}};
      case 2: return {{"type", "number"}};
      case 3: return {{"type", pick(2) ? "boolean" : "null"}};
      case 4: {
        ojson e = ojson::array();
        for (size_t i = 0, n = 1 + pick(4); i < n; ++i) e.push_back(scalars[pick(scalars.size())]);
        return {{"enum", e}};
      }
      case 5: return {{"const", scalars[pick(scalars.size())]}};
      case 6: {
        ojson a = {{"type", "array"}, {"items", schema(depth + 1)}};
        if (pick(2)) a["minItems"] = pick(3);
        if (pick(2)) a["maxItems"] = a.value("minItems", 0) + pick(3);
        return a;
      }
      case 7: {
        ojson alts = ojson::array();
        for (size_t i = 0, n = 2 + pick(2); i < n; ++i) alts.push_back(schema(depth + 1));
        return {{"anyOf", alts}};
      }
      case 8: return {{"type", ojson::array({"string", "null"})}};
      default: {
        ojson props = ojson::object(), req = ojson::array();
        for (size_t i = 0, n = 1 + pick(4); i < n; ++i) {
          const std::string key = std::string(1, static_cast<char>('z' - i)) + (pick(3) ? "" : "\"k");
          props[key] = schema(depth + 1);
          if (pick(2)) req.push_back(key);
        }
        return {{"type", "object"}, {"properties", props}, {"required", req}};
      }
    }
  };
  std::function<ojson(const ojson&)> instance = [&](const ojson& s) -> ojson {
    if (s.contains("enum")) return s["enum"][pick(s["enum"].size())];
    if (s.contains("const")) return s["const"];
    if (s.contains("anyOf")) return instance(s["anyOf"][pick(s["anyOf"].size())]);
    const ojson t = s["type"].is_array() ? s["type"][pick(s["type"].size())] : s["type"];
    if (t == "string") return std::string(pick(4), static_cast<char>('a' + pick(26))) + (pick(3) ? "" : "\\\n\t\"");
    if (t == "integer") return static_cast<int>(rng() % 20001) - 10000;
    if (t == "number") return std::ldexp(static_cast<double>(rng() % 100000) - 50000, -static_cast<int>(pick(12)));
    if (t == "boolean") return pick(2) == 1;
    if (t == "null") return nullptr;
    if (t == "array") {
      ojson a = ojson::array();
      const size_t lo = s.value("minItems", 0), hi = s.contains("maxItems") ? s["maxItems"].get<size_t>() : lo + 3;
      for (size_t i = 0, n = lo + pick(hi - lo + 1); i < n; ++i) a.push_back(instance(s["items"]));
      return a;
    }
    ojson o = ojson::object();
    for (const auto& [k, sub] : s["properties"].items()) {
      bool required = false;
      for (const ojson& r : s["required"]) required |= r == k;
      if (required || pick(2)) o[k] = instance(sub);
    }
    return o;
  };
  const std::string alphabet = "{}[]\":,.-+eE0123456789 \n\tatrufnlbcz\\";
  int accepted_mutations = 0;
  for (int round = 0; round < 500; ++round) {
    const ojson s = {{"type", "object"}, {"properties", {{"v", schema(0)}, {"w", schema(0)}}}, {"required", {"v"}}};
    const JsonSchema compiled = JsonSchema::compile(s);
    random_walks(s, 2, rng);
    for (int k = 0; k < 5; ++k) {
      const ojson v = instance(s);
      ASSERT_TRUE(valid(v, s, s)) << s.dump() << " | " << v.dump();
      for (const std::string& text : {v.dump(), v.dump(2)}) {
        bool done = false;
        ASSERT_EQ(accepted_bytes(compiled, text, &done), -1) << s.dump() << " | " << text;
        ASSERT_TRUE(done) << s.dump() << " | " << text;
        for (int m = 0; m < 10; ++m) {
          std::string t = text;
          const size_t at = pick(t.size());
          switch (pick(3)) {
            case 0: t[at] = alphabet[pick(alphabet.size())]; break;
            case 1: t.erase(at, 1); break;
            default: t.insert(at, 1, alphabet[pick(alphabet.size())]); break;
          }
          bool d = false;
          if (accepted_bytes(compiled, t, &d) != -1 || !d) continue;
          ++accepted_mutations;
          ojson w;
          try {
            w = ojson::parse(t);
          } catch (const ojson::out_of_range&) {
            continue;  // a number past a double's range: valid JSON this parser will not hold
          } catch (const ojson::exception& e) {
            FAIL() << s.dump() << " | " << t << ": " << e.what();
          }
          EXPECT_TRUE(valid(w, s, s)) << s.dump() << " | " << t;
        }
      }
    }
  }
  EXPECT_GT(accepted_mutations, 2000);
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
      {R"({"anyOf":[{"type":"object"},{"type":"string"}]})", "the root must be an object"},
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
  // A root of object alternatives (a call of one of several functions) is an object root.
  EXPECT_NO_THROW(JsonSchema::compile(ojson::parse(R"({"anyOf":[{"type":"object"},{"anyOf":[{"type":"object"}]}]})")));
  // A schema that refers to itself without end still compiles to a finite graph.
  const JsonSchema loop = JsonSchema::compile(ojson::parse(R"({"type":"object","properties":{"self":{"$ref":"#"}}})"));
  EXPECT_EQ(accepted_bytes(loop, R"({"self":{"self":{}}})"), -1);
}

}  // namespace
}  // namespace moeflow::serve

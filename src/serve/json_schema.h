// response_format {"type": "json_schema"}: a JSON Schema compiled into the graph that
// JsonSchemaPrefix walks while the model writes, so that the text stays a prefix of an
// instance of the schema.
//
// The output only has to be valid, not to reach every valid instance, so the graph
// keeps a subset: properties appear in the schema's order, each required one present,
// and no property the schema does not name (additionalProperties only widens what is
// valid, so it is accepted and never used); a schema that allows anything ({} or true)
// writes a string, number, literal, array of anything, or an empty object; keys and
// enum/const values are written as nlohmann::json dumps them (no escapes beyond the
// necessary, no white space inside a const array or object).
//
// Supported: type (one or a list), properties, required, additionalProperties, items,
// minItems, maxItems, enum, const, anyOf, $ref to "#" or "#/$defs/..." /
// "#/definitions/...", and the annotations (title, description, default, examples,
// $schema, $id, $comment). Any other keyword (pattern, format, minimum, oneOf, ...)
// is refused with the keyword and its place named, never ignored. The root must be an
// object schema, as OpenAI's structured outputs require, or an anyOf of object schemas
// (a call of one of several functions, serve/tool_calls.h).
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace moeflow::serve {

struct SchemaNode {
  enum class Kind : uint8_t { object, array, string, number, integer, literals, any_of };
  struct Property {
    std::string key;  // the name as written, quotes included ("\"name\"")
    int32_t node = -1;
    bool required = false;
  };
  Kind kind = Kind::any_of;
  std::vector<Property> properties;       // object, in the schema's order
  std::vector<uint16_t> keys_sorted;      // object: property indices by key bytes
  std::vector<uint16_t> next_required;    // object: [i] = first required property >= i, or properties.size()
  int32_t items = -1;                     // array: every item's node
  int64_t min_items = 0, max_items = -1;  // array; -1: no limit
  std::vector<std::string> literals;      // literals: compact JSON texts, sorted (enum, const, true/false, null)
  std::vector<int32_t> alternatives;      // any_of: the alternatives (any_of among them too, via $ref)
};

struct JsonSchema {
  static constexpr size_t kMaxNodes = 4096;
  static constexpr size_t kMaxProperties = 1024;  // of one object
  static constexpr size_t kMaxLiterals = 1024;    // of one enum
  static constexpr int64_t kMaxItems = 65535;     // minItems and maxItems (an array's count past it stays there)
  std::vector<SchemaNode> nodes;
  int32_t root = -1;
  // Throws InputError naming the unsupported keyword or the contradiction and where
  // (a JSON pointer into the schema). Parsed as ordered_json, so that properties keep
  // the order the schema gives them (a model told to write "reasoning" before "answer").
  static JsonSchema compile(const nlohmann::ordered_json& schema);
};

}  // namespace moeflow::serve

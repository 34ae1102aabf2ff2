#include "serve/json_schema.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "base/error.h"

namespace moeflow::serve {

namespace {

using json = nlohmann::ordered_json;

// Keywords that say nothing about which values are valid, or only widen them.
const std::set<std::string> kIgnored = {"title", "description", "default", "examples",    "$schema",
                                        "$id",   "$comment",    "$defs",   "definitions", "additionalProperties"};
const std::set<std::string> kSupported = {"type",     "properties", "required", "items", "minItems",
                                          "maxItems", "enum",       "const",    "anyOf", "$ref"};
constexpr int kMaxNesting = 64;

std::string pointer_token(const std::string& s) {
  std::string out;
  for (const char c : s) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

class Compiler {
 public:
  explicit Compiler(const json& root) : root_(root) {}

  int32_t compile(const json& s, const std::string& where) {
    if (++depth_ > kMaxNesting) fail(where, "schemas nest deeper than " + std::to_string(kMaxNesting));
    const int32_t n = compile_here(s, where);
    --depth_;
    return n;
  }

  std::vector<SchemaNode> nodes;

 private:
  [[noreturn]] static void fail(const std::string& where, const std::string& what) {
    throw InputError("json_schema at " + where + ": " + what);
  }

  int32_t add(SchemaNode n, const std::string& where) {
    if (nodes.size() >= JsonSchema::kMaxNodes)
      fail(where, "the schema needs more than " + std::to_string(JsonSchema::kMaxNodes) + " nodes");
    nodes.push_back(std::move(n));
    return static_cast<int32_t>(nodes.size() - 1);
  }

  static int64_t count_of(const json& s, const char* key, const std::string& where) {
    const json& v = s.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > JsonSchema::kMaxItems)
      fail(where,
           std::string("'") + key + "' must be a whole number from 0 to " + std::to_string(JsonSchema::kMaxItems));
    return v.get<int64_t>();
  }

  int32_t compile_here(const json& s, const std::string& where) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(where, "the schema false admits no value");
      return any(where);
    }
    if (!s.is_object()) fail(where, "a schema is an object or a boolean, not " + std::string(s.type_name()));
    for (const auto& [key, v] : s.items())
      if (!kIgnored.count(key) && !kSupported.count(key))
        fail(where, "the keyword '" + key +
                        "' is not supported (supported: type, properties, required, additionalProperties, items, "
                        "minItems, maxItems, enum, const, anyOf, $ref, $defs)");
    auto only = [&](const char* keyword) {
      for (const auto& [key, v] : s.items())
        if (key != keyword && kSupported.count(key))
          fail(where, std::string("'") + keyword + "' beside '" + key + "' is not supported");
    };
    if (s.contains("$ref")) {
      only("$ref");
      return reference(s.at("$ref"), where);
    }
    if (s.contains("anyOf")) {
      only("anyOf");
      const json& alts = s.at("anyOf");
      if (!alts.is_array() || alts.empty()) fail(where, "'anyOf' must be a non-empty array of schemas");
      SchemaNode n;
      n.kind = SchemaNode::Kind::any_of;
      for (size_t i = 0; i < alts.size(); ++i)
        n.alternatives.push_back(compile(alts[i], where + "/anyOf/" + std::to_string(i)));
      return add(std::move(n), where);
    }
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s.at("type");
      if (t.is_string()) {
        types.push_back(t.get<std::string>());
      } else if (t.is_array() && !t.empty()) {
        for (const json& x : t) {
          if (!x.is_string()) fail(where, "'type' must be a string or a non-empty array of strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        fail(where, "'type' must be a string or a non-empty array of strings");
      }
    }
    if (s.contains("enum") || s.contains("const")) return literals(s, types, where);
    if (types.empty()) {
      if (s.contains("properties") || s.contains("required")) {
        types.push_back("object");
      } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
        types.push_back("array");
      } else {
        return any(where);
      }
    }
    if (types.size() == 1) return typed(s, types[0], where);
    SchemaNode n;
    n.kind = SchemaNode::Kind::any_of;
    for (const std::string& t : types) n.alternatives.push_back(typed(s, t, where));
    return add(std::move(n), where);
  }

  int32_t reference(const json& ref, const std::string& where) {
    if (!ref.is_string()) fail(where, "'$ref' must be a string");
    const std::string r = ref.get<std::string>();
    if (r.empty() || r[0] != '#')
      fail(where, "'$ref' '" + r + "': only references into this schema (#...) are supported");
    const std::string pointer = r.substr(1);
    if (const auto it = refs_.find(pointer); it != refs_.end()) return it->second;
    const json* target = nullptr;
    try {
      target = &root_.at(json::json_pointer(pointer));
    } catch (const json::exception&) {
      fail(where, "'$ref' '" + r + "' names nothing in the schema");
    }
    // Reserved before the target is compiled, so that a reference back to it (a tree of
    // nodes) finds it.
    const int32_t slot = add(SchemaNode{}, where);
    refs_[pointer] = slot;
    const int32_t n = compile(*target, "#" + pointer);
    nodes[static_cast<size_t>(slot)] = nodes[static_cast<size_t>(n)];
    return slot;
  }

  // The values of enum or const, those of `types` when given.
  int32_t literals(const json& s, const std::vector<std::string>& types, const std::string& where) {
    std::vector<json> values;
    if (s.contains("const")) values.push_back(s.at("const"));
    if (s.contains("enum")) {
      const json& e = s.at("enum");
      if (!e.is_array() || e.empty()) fail(where, "'enum' must be a non-empty array");
      if (e.size() > JsonSchema::kMaxLiterals)
        fail(where, "'enum' holds more than " + std::to_string(JsonSchema::kMaxLiterals) + " values");
      for (const json& v : e)
        if (!s.contains("const") || v == s.at("const")) values.push_back(v);
      if (s.contains("const")) values.erase(values.begin());  // const kept only where enum also has it
    }
    auto of_types = [&](const json& v) {
      if (types.empty()) return true;
      for (const std::string& t : types) {
        if ((t == "object" && v.is_object()) || (t == "array" && v.is_array()) || (t == "string" && v.is_string()) ||
            (t == "number" && v.is_number()) || (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null()) ||
            (t == "integer" &&
             (v.is_number_integer() ||
              (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>()))))))
          return true;
      }
      return false;
    };
    SchemaNode n;
    n.kind = SchemaNode::Kind::literals;
    for (const json& v : values)
      if (of_types(v)) n.literals.push_back(v.dump());
    if (n.literals.empty()) fail(where, "no value of 'enum' / 'const' is of the schema's 'type'");
    std::sort(n.literals.begin(), n.literals.end());
    n.literals.erase(std::unique(n.literals.begin(), n.literals.end()), n.literals.end());
    return add(std::move(n), where);
  }

  int32_t typed(const json& s, const std::string& type, const std::string& where) {
    SchemaNode n;
    if (type == "object") {
      n.kind = SchemaNode::Kind::object;
      if (s.contains("properties")) {
        const json& props = s.at("properties");
        if (!props.is_object()) fail(where, "'properties' must be an object");
        if (props.size() > JsonSchema::kMaxProperties)
          fail(where, "more than " + std::to_string(JsonSchema::kMaxProperties) + " properties");
        for (const auto& [name, sub] : props.items())
          n.properties.push_back(
              {json(name).dump(), compile(sub, where + "/properties/" + pointer_token(name)), false});
      }
      if (s.contains("required")) {
        const json& req = s.at("required");
        if (!req.is_array()) fail(where, "'required' must be an array of property names");
        for (const json& r : req) {
          if (!r.is_string()) fail(where, "'required' must be an array of property names");
          const std::string key = json(r.get<std::string>()).dump();
          auto it = std::find_if(n.properties.begin(), n.properties.end(), [&](const auto& p) { return p.key == key; });
          if (it == n.properties.end())
            fail(where, "required property " + key + " is not in 'properties' (its values are not known)");
          it->required = true;
        }
      }
      for (size_t i = 0; i < n.properties.size(); ++i) n.keys_sorted.push_back(static_cast<uint16_t>(i));
      std::sort(n.keys_sorted.begin(), n.keys_sorted.end(),
                [&](uint16_t a, uint16_t b) { return n.properties[a].key < n.properties[b].key; });
      n.next_required.assign(n.properties.size() + 1, static_cast<uint16_t>(n.properties.size()));
      for (size_t i = n.properties.size(); i-- > 0;)
        n.next_required[i] = n.properties[i].required ? static_cast<uint16_t>(i) : n.next_required[i + 1];
    } else if (type == "array") {
      n.kind = SchemaNode::Kind::array;
      if (s.contains("minItems")) n.min_items = count_of(s, "minItems", where);
      if (s.contains("maxItems")) n.max_items = count_of(s, "maxItems", where);
      if (n.max_items >= 0 && n.min_items > n.max_items) fail(where, "'minItems' is above 'maxItems'");
      if (s.contains("items") && s.at("items").is_array())
        fail(where, "'items' as an array (a tuple) is not supported");
      n.items = s.contains("items") ? compile(s.at("items"), where + "/items") : any(where);
    } else if (type == "string") {
      n.kind = SchemaNode::Kind::string;
    } else if (type == "number" || type == "integer") {
      n.kind = type == "number" ? SchemaNode::Kind::number : SchemaNode::Kind::integer;
    } else if (type == "boolean" || type == "null") {
      n.kind = SchemaNode::Kind::literals;
      n.literals = type == "null" ? std::vector<std::string>{"null"} : std::vector<std::string>{"false", "true"};
    } else {
      fail(where, "unknown type '" + type + "' (object, array, string, number, integer, boolean, null)");
    }
    return add(std::move(n), where);
  }

  // Anything: a string, a number, true, false, null, an array of anything, or {}.
  int32_t any(const std::string& where) {
    if (any_ >= 0) return any_;
    any_ = add(SchemaNode{}, where);
    SchemaNode n;
    n.kind = SchemaNode::Kind::any_of;
    SchemaNode object, array, string, number, literals;
    object.kind = SchemaNode::Kind::object;
    object.next_required = {0};
    array.kind = SchemaNode::Kind::array;
    array.items = any_;
    string.kind = SchemaNode::Kind::string;
    number.kind = SchemaNode::Kind::number;
    literals.kind = SchemaNode::Kind::literals;
    literals.literals = {"false", "null", "true"};
    for (SchemaNode* x : {&object, &array, &string, &number, &literals})
      n.alternatives.push_back(add(std::move(*x), where));
    nodes[static_cast<size_t>(any_)] = std::move(n);
    return any_;
  }

  const json& root_;
  std::map<std::string, int32_t> refs_;  // JSON pointer -> node
  int32_t any_ = -1;
  int depth_ = 0;
};

// Whether every value `n` admits is an object (an object node, or alternatives that all
// are; a cycle of alternatives admits nothing of its own).
bool only_objects(const std::vector<SchemaNode>& nodes, int32_t n, int depth = 0) {
  const SchemaNode& node = nodes[static_cast<size_t>(n)];
  if (node.kind == SchemaNode::Kind::object) return true;
  if (node.kind != SchemaNode::Kind::any_of || depth > 64) return false;
  for (const int32_t a : node.alternatives)
    if (!only_objects(nodes, a, depth + 1)) return false;
  return true;
}

}  // namespace

JsonSchema JsonSchema::compile(const json& schema) {
  Compiler c(schema);
  JsonSchema s;
  s.root = c.compile(schema, "#");
  s.nodes = std::move(c.nodes);
  for (const SchemaNode& n : s.nodes)
    if (n.kind == SchemaNode::Kind::any_of && n.alternatives.empty())
      throw InputError("json_schema: a '$ref' that leads only back to itself admits no value");
  if (!only_objects(s.nodes, s.root))
    throw InputError("json_schema at #: the root must be an object schema (\"type\": \"object\", or an anyOf of them)");
  return s;
}

}  // namespace moeflow::serve

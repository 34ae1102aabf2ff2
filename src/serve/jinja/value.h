// A value of the Jinja subset chat templates use, with Python's semantics where the
// rendered text depends on them (str() and repr() of numbers and containers, equality
// across int/float/bool, truthiness, code-point string length and slicing).
//
// Values are immutable and cheap to copy (strings and containers are shared), except a
// Namespace, whose attributes `{% set ns.x = ... %}` assigns in place. So that no cycle can
// form (and no value can nest without bound), a namespace never holds another namespace
// and every container records its nesting depth; the evaluator refuses values deeper
// than its limit.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

namespace moeflow::serve::jinja {

class Value;
class CallContext;

struct Undefined {
  std::shared_ptr<const std::string> name;  // what was looked up, for error messages
};
struct None {};

struct ListData {
  std::vector<Value> items;
  bool tuple = false;  // a tuple prints as (a, b); otherwise it behaves as a list
  // What jinja2's lazy filters (select, map, items, reverse ...) return: a generator, which
  // is always true, has no length, cannot be indexed or serialized, and is not a sequence.
  bool generator = false;
  int depth = 1;
  bool has_namespace = false;
};

// Insertion-ordered, keyed by string, integer, boolean or none (what JSON and templates use).
class DictData {
 public:
  const std::vector<std::pair<Value, Value>>& items() const { return items_; }
  const Value* find(const Value& key) const;
  // Sets key to value (replacing an existing entry in place). Throws InputError for an
  // unhashable key.
  void set(const Value& key, Value value);
  size_t size() const;
  int depth = 1;
  bool has_namespace = false;

 private:
  std::vector<std::pair<Value, Value>> items_;
  std::unordered_map<std::string, size_t> index_;
};

struct NamespaceData {
  DictData attrs;
};

// A function templates can call: a global (range, namespace, raise_exception), a bound
// string or dict method, or a macro. Arguments arrive evaluated.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
struct Callable {
  std::string name;
  std::function<Value(CallArgs&, CallContext&)> call;
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

  Value() : v_(Undefined{}) {}
  static Value undefined(std::string name);
  static Value none() { return Value(None{}); }
  static Value boolean(bool b) { return Value(b); }
  static Value integer(int64_t i) { return Value(i); }
  static Value floating(double d) { return Value(d); }
  static Value string(std::string s);
  static Value list(std::vector<Value> items, bool tuple = false);
  static Value generator(std::vector<Value> items);
  static Value dict(DictData d);
  static Value namespace_(std::shared_ptr<NamespaceData> ns);
  static Value callable(std::string name, std::function<Value(CallArgs&, CallContext&)> fn);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_tuple() const { return is_list() && list_data().tuple; }
  bool is_generator() const { return is_list() && list_data().generator; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_namespace() const { return kind() == Kind::kNamespace; }
  bool is_callable() const { return kind() == Kind::kCallable; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  double as_double() const;  // int, float or bool as a double
  const std::string& as_string() const { return *std::get<std::shared_ptr<const std::string>>(v_); }
  const ListData& list_data() const { return *std::get<std::shared_ptr<const ListData>>(v_); }
  const std::vector<Value>& items() const { return list_data().items; }
  const DictData& dict_data() const { return *std::get<std::shared_ptr<const DictData>>(v_); }
  NamespaceData& namespace_data() const { return *std::get<std::shared_ptr<NamespaceData>>(v_); }
  const Callable& callable_data() const { return *std::get<std::shared_ptr<const Callable>>(v_); }
  const std::string& undefined_name() const;

  // Container nesting depth (0 for a scalar) and whether a namespace is inside.
  int depth() const;
  bool contains_namespace() const;

  bool truthy() const;
  // Python's str(): what {{ value }} prints ("" for undefined).
  std::string str() const;
  // Python's repr(), used for the items of a printed container.
  std::string repr() const;
  // The type's name as Python would say it, for error messages.
  const char* type_name() const;

 private:
  using Storage = std::variant<Undefined, None, bool, int64_t, double, std::shared_ptr<const std::string>,
                               std::shared_ptr<const ListData>, std::shared_ptr<const DictData>,
                               std::shared_ptr<NamespaceData>, std::shared_ptr<const Callable>>;
  template <class T>
  explicit Value(T v) : v_(std::move(v)) {}
  Storage v_;
};

// Python's ==, with Jinja's rule that two undefined values are equal.
bool equal(const Value& a, const Value& b);
// Python's <; throws InputError for types Python cannot order.
bool less(const Value& a, const Value& b);
// Python's repr() of a float ("1.0", "0.1", "1e+16", "inf").
std::string float_repr(double d);

}  // namespace moeflow::serve::jinja

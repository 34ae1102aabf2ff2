// jinja2's tests (`x is defined`, `x is string`, `n is divisibleby 3` ...).
#include <cmath>

#include "serve/jinja/builtins.h"
#include "serve/jinja/text.h"

namespace moeflow::serve::jinja {
namespace {

const char* const kTests[] = {"defined",  "undefined", "none",     "boolean",     "false",     "true",   "integer",
                              "float",    "number",    "string",   "mapping",     "iterable",  "sequence",
                              "callable", "sameas",    "equalto",  "eq",          "==",        "ne",     "!=",
                              "lt",       "lessthan",  "<",        "le",          "<=",        "gt",     "greaterthan",
                              ">",        "ge",        ">=",       "in",          "odd",       "even",   "divisibleby",
                              "lower",    "upper"};

const Value& operand(const CallArgs& args, const std::string& test, CallContext& ctx) {
  const Value* v = find_arg(args, 0, "other");
  if (!v) ctx.fail("test '" + test + "' needs an argument");
  return *v;
}

int64_t int_of(const Value& v, const std::string& test, CallContext& ctx) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool();
  ctx.fail("test '" + test + "' needs an integer, got '" + std::string(v.type_name()) + "'");
}

bool ordered(const std::string& op, const Value& a, const Value& b, CallContext& ctx) {
  try {
    if (op == "<") return less(a, b);
    if (op == ">") return less(b, a);
    if (op == "<=") return less(a, b) || equal(a, b);
    return less(b, a) || equal(a, b);
  } catch (const std::exception& e) {
    ctx.fail(e.what());
  }
}

}  // namespace

bool is_known_test(const std::string& name) {
  for (const char* t : kTests)
    if (name == t) return true;
  return false;
}

bool apply_test(const std::string& name, const Value& v, CallArgs& args, CallContext& ctx) {
  using K = Value::Kind;
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return v.is_dict();
  // Undefined is an empty iterable and sequence in jinja2; dicts have a length and items,
  // so they count as sequences there too.
  if (name == "iterable") return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
  if (name == "sequence") return v.is_undefined() || v.is_string() || (v.is_list() && !v.is_generator()) || v.is_dict();
  if (name == "callable") return v.is_callable();
  if (name == "sameas") {
    const Value& o = operand(args, name, ctx);
    if (v.kind() != o.kind()) return false;
    switch (v.kind()) {
      case K::kNone:
      case K::kUndefined: return true;
      case K::kBool: return v.as_bool() == o.as_bool();
      case K::kInt: return v.as_int() == o.as_int();  // CPython caches small ints; larger ones are rarely compared
      case K::kString: return &v.as_string() == &o.as_string();
      case K::kList: return &v.list_data() == &o.list_data();
      case K::kDict: return &v.dict_data() == &o.dict_data();
      default: return equal(v, o);
    }
  }
  if (name == "equalto" || name == "eq" || name == "==") return equal(v, operand(args, name, ctx));
  if (name == "ne" || name == "!=") return !equal(v, operand(args, name, ctx));
  if (name == "lt" || name == "lessthan" || name == "<") return ordered("<", v, operand(args, name, ctx), ctx);
  if (name == "le" || name == "<=") return ordered("<=", v, operand(args, name, ctx), ctx);
  if (name == "gt" || name == "greaterthan" || name == ">") return ordered(">", v, operand(args, name, ctx), ctx);
  if (name == "ge" || name == ">=") return ordered(">=", v, operand(args, name, ctx), ctx);
  if (name == "in") return contains(operand(args, name, ctx), v, ctx);
  if (name == "odd" || name == "even" || name == "divisibleby") {
    const Value d = name == "divisibleby" ? operand(args, name, ctx) : Value::integer(2);
    if (v.is_float() || d.is_float()) {  // Python's float modulo: 4.0 is divisibleby 2
      if (!v.is_number() || !d.is_number()) ctx.fail("test '" + name + "' needs numbers");
      if (d.as_double() == 0) ctx.fail("test '" + name + "': modulo by zero");
      const double r = std::fmod(v.as_double(), d.as_double());
      return name == "odd" ? r != 0 : r == 0;
    }
    const int64_t divisor = int_of(d, name, ctx);
    if (divisor == 0) ctx.fail("test '" + name + "': modulo by zero");
    const int64_t r = int_of(v, name, ctx) % divisor;
    return name == "odd" ? r != 0 : r == 0;
  }
  if (name == "lower" || name == "upper") {
    if (!v.is_string()) return false;
    const std::string& s = v.as_string();
    const std::string t = name == "lower" ? text::ascii_lower(s) : text::ascii_upper(s);
    const std::string other = name == "lower" ? text::ascii_upper(s) : text::ascii_lower(s);
    return s == t && s != other;
  }
  ctx.fail("unknown test '" + name + "'");
}

}  // namespace moeflow::serve::jinja

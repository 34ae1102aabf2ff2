// The library a template's expressions reach: filters (`x | trim`), tests (`x is
// defined`), attribute and item access with the methods of str and dict, the global
// functions (range, namespace, dict, raise_exception, strftime_now), operators, and
// iteration. Each follows Python's and jinja2's behaviour for the values templates use;
// what is outside the subset fails with an InputError that names it.
#pragma once
#include <string>
#include <vector>

#include "serve/jinja/call_context.h"
#include "serve/jinja/value.h"

namespace moeflow::serve::jinja {

bool is_known_filter(const std::string& name);
bool is_known_test(const std::string& name);
Value apply_filter(const std::string& name, const Value& v, CallArgs& args, CallContext& ctx);
bool apply_test(const std::string& name, const Value& v, CallArgs& args, CallContext& ctx);

// jinja2's `obj.name` (attribute first, then item) and `obj[key]` (item first, then attribute).
// A missing entry is undefined; an undefined object fails.
Value get_attribute(const Value& obj, const std::string& name, CallContext& ctx);
Value get_item(const Value& obj, const Value& key, CallContext& ctx);
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step, CallContext& ctx);

// The items a for-loop visits: a list's items, a dict's keys, a string's characters;
// nothing for undefined. Fails for anything else.
std::vector<Value> iterate(const Value& v, CallContext& ctx);
// Python's `needle in haystack`.
bool contains(const Value& haystack, const Value& needle, CallContext& ctx);

// Binary operators + - * / // % ** ~, with Python's rules (int overflow is an error).
Value binary_op(const std::string& op, const Value& a, const Value& b, CallContext& ctx);
Value negate(const Value& v, CallContext& ctx);

// The global functions every template sees.
std::vector<std::pair<std::string, Value>> global_functions();

// Argument helpers for builtins: the i-th positional or the keyword `name`, else `fallback`.
const Value* find_arg(const CallArgs& args, size_t index, const char* name);
Value arg_or(const CallArgs& args, size_t index, const char* name, Value fallback);

}  // namespace moeflow::serve::jinja

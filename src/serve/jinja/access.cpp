// Attribute, item and slice access, iteration and `in`, with the methods of str and dict
// that templates call (Python's semantics; strings index by code point).
#include <algorithm>

#include "serve/jinja/builtins.h"
#include "serve/jinja/text.h"

namespace moeflow::serve::jinja {
namespace {

std::string object_name(const Value& v) {
  if (v.is_none()) return "None";
  return std::string("'") + v.type_name() + " object'";
}

const std::string& string_arg(const CallArgs& args, size_t i, const char* name, const char* method, CallContext& ctx) {
  const Value* v = find_arg(args, i, name);
  if (!v || !v->is_string()) ctx.fail(std::string("str.") + method + "(): argument '" + name + "' must be a string");
  return v->as_string();
}

int64_t int_or(const CallArgs& args, size_t i, const char* name, int64_t fallback, CallContext& ctx) {
  const Value* v = find_arg(args, i, name);
  if (!v || v->is_none()) return fallback;
  if (v->is_int()) return v->as_int();
  if (v->is_bool()) return v->as_bool();
  ctx.fail(std::string("argument '") + name + "' must be an integer");
}

Value strings(std::vector<std::string> parts, CallContext& ctx) {
  std::vector<Value> items;
  items.reserve(parts.size());
  ctx.charge_items(parts.size());
  for (auto& p : parts) items.push_back(Value::string(std::move(p)));
  return Value::list(std::move(items));
}

Value new_string(std::string s, CallContext& ctx) {
  ctx.charge_string(s.size());
  return Value::string(std::move(s));
}

// prefix may be a string or a tuple of strings, as in Python.
bool affix_match(const std::string& s, const Value& affix, bool start, CallContext& ctx) {
  auto one = [&](const Value& a) {
    if (!a.is_string()) ctx.fail("startswith/endswith: the argument must be a string or a tuple of strings");
    const std::string& p = a.as_string();
    if (p.size() > s.size()) return false;
    return start ? s.compare(0, p.size(), p) == 0 : s.compare(s.size() - p.size(), p.size(), p) == 0;
  };
  if (affix.is_list()) {
    for (const Value& a : affix.items())
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

Value string_method(const Value& self, const std::string& name) {
  static const char* const kMethods[] = {"startswith", "endswith", "strip",  "lstrip", "rstrip",     "split",
                                         "rsplit",     "upper",    "lower",  "replace", "title",     "capitalize",
                                         "find",       "count",    "join",   "splitlines", "isdigit", "isspace"};
  bool known = false;
  for (const char* m : kMethods) known = known || name == m;
  if (!known) return Value::undefined(object_name(self) + " has no attribute '" + name + "'");
  return Value::callable("str." + name, [self, name](CallArgs& args, CallContext& ctx) -> Value {
    const std::string& s = self.as_string();
    if (name == "startswith" || name == "endswith") {
      const Value* a = find_arg(args, 0, "prefix");
      if (!a) ctx.fail("str." + name + "() takes one argument");
      return Value::boolean(affix_match(s, *a, name == "startswith", ctx));
    }
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const Value* chars = find_arg(args, 0, "chars");
      const bool has = chars && !chars->is_none();
      if (has && !chars->is_string()) ctx.fail("str." + name + "(): chars must be a string");
      return new_string(text::strip(s, name != "rstrip", name != "lstrip", has, has ? chars->as_string() : ""), ctx);
    }
    if (name == "split" || name == "rsplit") {
      const Value* sep = find_arg(args, 0, "sep");
      const bool has = sep && !sep->is_none();
      if (has && (!sep->is_string() || sep->as_string().empty())) ctx.fail("str." + name + "(): empty or non-string separator");
      const int64_t maxsplit = int_or(args, 1, "maxsplit", -1, ctx);
      if (name == "rsplit" && maxsplit >= 0) ctx.fail("str.rsplit() with maxsplit is not supported");
      return strings(text::split(s, has, has ? sep->as_string() : "", maxsplit), ctx);
    }
    if (name == "splitlines") {
      std::vector<std::string> lines;
      size_t start = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\n' || s[i] == '\r') {
          lines.push_back(s.substr(start, i - start));
          if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
          start = i + 1;
        }
      }
      if (start < s.size()) lines.push_back(s.substr(start));
      return strings(std::move(lines), ctx);
    }
    if (name == "upper") return new_string(text::ascii_upper(s), ctx);
    if (name == "lower") return new_string(text::ascii_lower(s), ctx);
    if (name == "title") return new_string(text::title(s), ctx);
    if (name == "capitalize") return new_string(text::capitalize(s), ctx);
    if (name == "isdigit") {
      bool all = !s.empty();
      for (char c : s) all = all && c >= '0' && c <= '9';
      return Value::boolean(all);
    }
    if (name == "isspace") {
      return Value::boolean(!s.empty() && text::strip(s, true, false, false, "").empty());
    }
    if (name == "replace") {
      const std::string& from = string_arg(args, 0, "old", "replace", ctx);
      const std::string& to = string_arg(args, 1, "new", "replace", ctx);
      const int64_t count = int_or(args, 2, "count", -1, ctx);
      // Bound the result before building it.
      if (!from.empty() && to.size() > from.size()) {
        size_t hits = 0;
        for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + from.size())) ++hits;
        if (s.size() + hits * (to.size() - from.size()) > ctx.limits().max_string_bytes)
          ctx.fail("str.replace() result exceeds the string limit");
      } else if (from.empty() && (s.size() + 1) * (to.size() + 4) > ctx.limits().max_string_bytes) {
        ctx.fail("str.replace() result exceeds the string limit");
      }
      return new_string(text::replace(s, from, to, count), ctx);
    }
    if (name == "find" || name == "count") {
      const std::string& sub = string_arg(args, 0, "sub", name.c_str(), ctx);
      if (name == "find") {
        const size_t p = s.find(sub);
        return Value::integer(p == std::string::npos ? -1 : static_cast<int64_t>(text::code_point_count(s.substr(0, p))));
      }
      if (sub.empty()) return Value::integer(static_cast<int64_t>(text::code_point_count(s) + 1));
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value::integer(n);
    }
    // join
    const Value* items = find_arg(args, 0, "iterable");
    if (!items) ctx.fail("str.join() takes one argument");
    std::string out;
    bool first = true;
    for (const Value& v : iterate(*items, ctx)) {
      if (!v.is_string()) ctx.fail(std::string("str.join(): expected str items, found '") + v.type_name() + "'");
      if (!first) out += s;
      first = false;
      out += v.as_string();
      if (out.size() > ctx.limits().max_string_bytes) ctx.fail("str.join() result exceeds the string limit");
    }
    return new_string(std::move(out), ctx);
  });
}

Value dict_method(const Value& self, const std::string& name) {
  if (name != "items" && name != "keys" && name != "values" && name != "get") return Value();
  return Value::callable("dict." + name, [self, name](CallArgs& args, CallContext& ctx) -> Value {
    const DictData& d = self.dict_data();
    if (name == "get") {
      const Value* key = find_arg(args, 0, "key");
      if (!key) ctx.fail("dict.get() needs a key");
      const Value* v = d.find(*key);
      return v ? *v : arg_or(args, 1, "default", Value::none());
    }
    ctx.charge_items(d.size());
    std::vector<Value> out;
    out.reserve(d.size());
    for (const auto& kv : d.items()) {
      if (name == "keys") out.push_back(kv.first);
      else if (name == "values") out.push_back(kv.second);
      else out.push_back(Value::list({kv.first, kv.second}, true));
    }
    return Value::list(std::move(out));
  });
}

// list.count(x) and list.index(x): the read-only methods (HF's sandbox refuses append & co).
Value list_method(const Value& self, const std::string& name) {
  if (self.is_generator() || (name != "count" && name != "index"))
    return Value::undefined(object_name(self) + " has no attribute '" + name + "'");
  return Value::callable("list." + name, [self, name](CallArgs& args, CallContext& ctx) -> Value {
    const Value* x = find_arg(args, 0, "value");
    if (!x) ctx.fail("list." + name + "() takes one argument");
    int64_t n = 0;
    for (size_t i = 0; i < self.items().size(); ++i) {
      if (!equal(self.items()[i], *x)) continue;
      if (name == "index") return Value::integer(static_cast<int64_t>(i));
      ++n;
    }
    if (name == "index") ctx.fail("list.index(): " + x->repr() + " is not in the list");
    return Value::integer(n);
  });
}

// Python's slice.indices(): clamps start and stop for a sequence of length n.
void slice_bounds(int64_t n, const Value& start, const Value& stop, int64_t step, int64_t* b, int64_t* e,
                  CallContext& ctx) {
  auto get = [&](const Value& v, int64_t dflt) -> int64_t {
    if (v.is_none() || v.is_undefined()) return dflt;
    if (v.is_bool()) return v.as_bool();
    if (!v.is_int()) ctx.fail("slice indices must be integers or none");
    return v.as_int();
  };
  auto clamp = [&](int64_t x) {
    if (x < 0) {
      x += n;
      if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = step < 0 ? n - 1 : n;
    }
    return x;
  };
  *b = clamp(get(start, step > 0 ? 0 : n - 1));
  // A negative step with no stop runs to the first item (index -1 means "before it").
  *e = step > 0 ? clamp(get(stop, n)) : (stop.is_none() || stop.is_undefined() ? -1 : clamp(get(stop, -1)));
}

// The indices b, b + step, ... before e; a step past the int64 range ends the walk.
std::vector<int64_t> slice_indices(int64_t b, int64_t e, int64_t step) {
  std::vector<int64_t> out;
  for (int64_t i = b; step > 0 ? i < e : i > e;) {
    out.push_back(i);
    if (__builtin_add_overflow(i, step, &i)) break;
  }
  return out;
}

}  // namespace

Value get_attribute(const Value& obj, const std::string& name, CallContext& ctx) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined: ctx.fail(obj.undefined_name().empty() ? "undefined value has no attribute '" + name + "'" : obj.undefined_name());
    case Value::Kind::kString: return string_method(obj, name);
    case Value::Kind::kList: return list_method(obj, name);
    case Value::Kind::kDict: {
      Value m = dict_method(obj, name);
      if (m.is_callable()) return m;
      const Value* v = obj.dict_data().find(Value::string(name));
      return v ? *v : Value::undefined("'dict object' has no attribute '" + name + "'");
    }
    case Value::Kind::kNamespace: {
      const Value* v = obj.namespace_data().attrs.find(Value::string(name));
      return v ? *v : Value::undefined("'Namespace object' has no attribute '" + name + "'");
    }
    default: return Value::undefined(object_name(obj) + " has no attribute '" + name + "'");
  }
}

Value get_item(const Value& obj, const Value& key, CallContext& ctx) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined: ctx.fail(obj.undefined_name().empty() ? "undefined value is not subscriptable" : obj.undefined_name());
    case Value::Kind::kDict: {
      const Value* v = obj.dict_data().find(key);
      if (v) return *v;
      if (key.is_string()) return get_attribute(obj, key.as_string(), ctx);
      return Value::undefined("'dict object' has no element " + key.repr());
    }
    case Value::Kind::kList:
    case Value::Kind::kString: {
      if (key.is_string()) return get_attribute(obj, key.as_string(), ctx);
      if (obj.is_generator()) return Value::undefined("'generator' object is not subscriptable");
      if (!key.is_int() && !key.is_bool()) return Value::undefined(object_name(obj) + " has no element " + key.repr());
      int64_t i = key.is_bool() ? key.as_bool() : key.as_int();
      if (obj.is_list()) {
        const int64_t n = static_cast<int64_t>(obj.items().size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value::undefined(object_name(obj) + " has no element " + key.repr());
        return obj.items()[static_cast<size_t>(i)];
      }
      const std::string& s = obj.as_string();
      const bool ascii = text::is_ascii(s);
      const int64_t n = static_cast<int64_t>(ascii ? s.size() : text::code_point_count(s));
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("'str object' has no element " + key.repr());
      const size_t at = ascii ? static_cast<size_t>(i) : text::byte_offset(s, static_cast<size_t>(i));
      return Value::string(s.substr(at, text::code_point_length(s, at)));
    }
    case Value::Kind::kNamespace:
      if (key.is_string()) return get_attribute(obj, key.as_string(), ctx);
      return Value::undefined("'Namespace object' has no element " + key.repr());
    default: return Value::undefined(object_name(obj) + " has no element " + key.repr());
  }
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step_v, CallContext& ctx) {
  if (obj.is_undefined()) ctx.fail(obj.undefined_name().empty() ? "undefined value is not subscriptable" : obj.undefined_name());
  int64_t step = 1;
  if (!step_v.is_none()) {
    if (!step_v.is_int()) ctx.fail("slice step must be an integer");
    step = step_v.as_int();
    if (step == 0) ctx.fail("slice step cannot be zero");
  }
  if (obj.is_list() && !obj.is_generator()) {
    const auto& items = obj.items();
    int64_t b = 0, e = 0;
    slice_bounds(static_cast<int64_t>(items.size()), start, stop, step, &b, &e, ctx);
    std::vector<Value> out;
    for (int64_t i : slice_indices(b, e, step)) out.push_back(items[static_cast<size_t>(i)]);
    ctx.charge_items(out.size());
    return Value::list(std::move(out), obj.is_tuple());
  }
  if (obj.is_string()) {
    const std::string& s = obj.as_string();
    std::string out;
    if (text::is_ascii(s)) {
      int64_t b = 0, e = 0;
      slice_bounds(static_cast<int64_t>(s.size()), start, stop, step, &b, &e, ctx);
      if (step == 1) {
        if (e > b) out = s.substr(static_cast<size_t>(b), static_cast<size_t>(e - b));
      } else {
        for (int64_t i : slice_indices(b, e, step)) out += s[static_cast<size_t>(i)];
      }
    } else {
      const std::vector<size_t> off = text::code_point_offsets(s);
      int64_t b = 0, e = 0;
      slice_bounds(static_cast<int64_t>(off.size()) - 1, start, stop, step, &b, &e, ctx);
      for (int64_t i : slice_indices(b, e, step))
        out += s.substr(off[static_cast<size_t>(i)], off[static_cast<size_t>(i) + 1] - off[static_cast<size_t>(i)]);
    }
    ctx.charge_string(out.size());
    return Value::string(std::move(out));
  }
  // jinja2 falls back to an undefined value when the object cannot be sliced.
  return Value::undefined(object_name(obj) + " cannot be sliced");
}

std::vector<Value> iterate(const Value& v, CallContext& ctx) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList: return v.items();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      keys.reserve(v.dict_data().size());
      for (const auto& kv : v.dict_data().items()) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::kString: {
      const std::string& s = v.as_string();
      const size_t n = text::code_point_count(s);
      ctx.charge_items(n);  // before building: a long string fails here
      std::vector<Value> chars;
      chars.reserve(n);
      for (size_t i = 0; i < s.size();) {
        const size_t len = text::code_point_length(s, i);
        chars.push_back(Value::string(s.substr(i, len)));
        i += len;
      }
      return chars;
    }
    default: ctx.fail(std::string("'") + v.type_name() + "' object is not iterable");
  }
}

bool contains(const Value& haystack, const Value& needle, CallContext& ctx) {
  switch (haystack.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!needle.is_string())
        ctx.fail(std::string("'in <string>' requires a string as left operand, not '") + needle.type_name() + "'");
      return haystack.as_string().find(needle.as_string()) != std::string::npos;
    case Value::Kind::kList:  // a generator too: `in` iterates it
      return std::any_of(haystack.items().begin(), haystack.items().end(),
                         [&needle](const Value& x) { return equal(x, needle); });
    case Value::Kind::kDict: return haystack.dict_data().find(needle) != nullptr;
    case Value::Kind::kNamespace: return haystack.namespace_data().attrs.find(needle) != nullptr;
    default: ctx.fail(std::string("argument of type '") + haystack.type_name() + "' is not iterable ('in')");
  }
}

}  // namespace moeflow::serve::jinja

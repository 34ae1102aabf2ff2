// jinja2's filters that chat templates use, with jinja2 3.1's behaviour (soft string
// conversion: an undefined value reads as "").
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "serve/jinja/builtins.h"
#include "serve/jinja/text.h"
#include "serve/jinja/tojson.h"

namespace moeflow::serve::jinja {
namespace {

const char* const kFilters[] = {"abs",     "capitalize", "count",      "d",       "default", "dictsort", "first",
                                "float",   "indent",     "int",        "items",   "join",    "last",     "length",
                                "list",    "lower",      "map",        "max",     "min",     "reject",   "rejectattr",
                                "replace", "reverse",    "safe",       "select",  "selectattr", "sort",  "string",
                                "sum",     "title",      "tojson",     "trim",    "unique",  "upper",    "wordcount"};

Value new_string(std::string s, CallContext& ctx) {
  ctx.charge_string(s.size());
  return Value::string(std::move(s));
}

Value new_list(std::vector<Value> items, CallContext& ctx) {
  ctx.charge_items(items.size());
  return Value::list(std::move(items));
}

// What jinja2's lazy filters return (see ListData::generator).
Value new_generator(std::vector<Value> items, CallContext& ctx) {
  ctx.charge_items(items.size());
  return Value::generator(std::move(items));
}

// `attribute` may be dotted ("function.name") or an integer index, as in jinja2.
Value attribute_of(const Value& item, const Value& attribute, CallContext& ctx) {
  if (attribute.is_int()) return get_item(item, attribute, ctx);
  const std::string path = attribute.str();
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = get_item(v, numeric ? Value::integer(std::atoll(part.c_str())) : Value::string(part), ctx);
    if (dot == std::string::npos) return v;
    if (v.is_undefined()) return v;
    start = dot + 1;
  }
}

size_t length_of(const Value& v, CallContext& ctx) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return text::code_point_count(v.as_string());
    case Value::Kind::kList:
      if (v.is_generator()) ctx.fail("object of type 'generator' has no len()");
      return v.items().size();
    case Value::Kind::kDict: return v.dict_data().size();
    default: ctx.fail(std::string("object of type '") + v.type_name() + "' has no len()");
  }
}

// select/reject/selectattr/rejectattr: the test name and its arguments follow `skip`
// positional arguments.
std::vector<Value> select_items(const Value& seq, CallArgs& args, size_t skip, bool by_attr, bool keep_when,
                                CallContext& ctx) {
  Value attribute;
  if (by_attr) {
    if (args.positional.empty()) ctx.fail("selectattr/rejectattr needs an attribute name");
    attribute = args.positional[0];
  }
  std::string test;
  CallArgs test_args;
  if (args.positional.size() > skip) {
    if (!args.positional[skip].is_string()) ctx.fail("select: the test name must be a string");
    test = args.positional[skip].as_string();
    if (!is_known_test(test)) ctx.fail("unknown test '" + test + "'");
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(skip) + 1, args.positional.end());
  }
  std::vector<Value> out;
  for (const Value& item : iterate(seq, ctx)) {
    const Value v = by_attr ? attribute_of(item, attribute, ctx) : item;
    const bool pass = test.empty() ? v.truthy() : apply_test(test, v, test_args, ctx);
    if (pass == keep_when) out.push_back(item);
  }
  return out;
}

Value sorted(const Value& seq, CallArgs& args, CallContext& ctx) {
  const bool reverse = arg_or(args, 0, "reverse", Value::boolean(false)).truthy();
  const bool case_sensitive = arg_or(args, 1, "case_sensitive", Value::boolean(false)).truthy();
  const Value attribute = arg_or(args, 2, "attribute", Value::none());
  std::vector<Value> items = iterate(seq, ctx);
  std::vector<std::pair<Value, size_t>> keyed;
  for (size_t i = 0; i < items.size(); ++i) {
    Value k = attribute.is_none() ? items[i] : attribute_of(items[i], attribute, ctx);
    if (!case_sensitive && k.is_string()) k = Value::string(text::ascii_lower(k.as_string()));
    keyed.emplace_back(std::move(k), i);
  }
  try {
    std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
      return reverse ? less(b.first, a.first) : less(a.first, b.first);
    });
  } catch (const std::exception& e) {
    ctx.fail(std::string("sort: ") + e.what());
  }
  std::vector<Value> out;
  for (const auto& k : keyed) out.push_back(items[k.second]);
  return new_list(std::move(out), ctx);
}

Value indent(const Value& v, CallArgs& args, CallContext& ctx) {
  const Value width = arg_or(args, 0, "width", Value::integer(4));
  const bool first = arg_or(args, 1, "first", Value::boolean(false)).truthy();
  const bool blank = arg_or(args, 2, "blank", Value::boolean(false)).truthy();
  std::string pad;
  if (width.is_string()) {
    pad = width.as_string();
  } else if (width.is_int() && width.as_int() >= 0 && width.as_int() <= 256) {
    pad.assign(static_cast<size_t>(width.as_int()), ' ');
  } else {
    ctx.fail("indent: width must be a string or an integer in [0, 256]");
  }
  std::vector<std::string> lines = text::split(v.str() + "\n", true, "\n", -1);
  lines.pop_back();  // jinja2 appends "\n" and splits lines, so the last empty piece goes
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i) out += "\n";
    const bool pad_line = i == 0 ? first : (blank || !lines[i].empty());
    if (pad_line) out += pad;
    out += lines[i];
    if (out.size() > ctx.limits().max_string_bytes) ctx.fail("indent: result exceeds the string limit");
  }
  return new_string(std::move(out), ctx);
}

Value to_number(const Value& v, bool want_int, const Value& fallback) {
  if (v.is_int()) return want_int ? v : Value::floating(static_cast<double>(v.as_int()));
  if (v.is_bool()) return want_int ? Value::integer(v.as_bool()) : Value::floating(v.as_bool());
  if (v.is_float()) {
    if (!want_int) return v;
    if (!std::isfinite(v.as_float()) || std::fabs(v.as_float()) > 9.2e18) return fallback;
    return Value::integer(static_cast<int64_t>(v.as_float()));
  }
  if (v.is_string()) {
    const std::string s = text::strip(v.as_string(), true, true, false, "");
    if (s.empty()) return fallback;
    char* end = nullptr;
    if (want_int) {
      errno = 0;
      const long long i = std::strtoll(s.c_str(), &end, 10);
      if (end == s.c_str() + s.size() && errno == 0) return Value::integer(i);
      // jinja2's int filter falls back to float(s) then truncates.
    }
    const double d = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size()) return fallback;
    if (!want_int) return Value::floating(d);
    if (!std::isfinite(d) || std::fabs(d) > 9.2e18) return fallback;
    return Value::integer(static_cast<int64_t>(d));
  }
  return fallback;
}

Value extreme(const Value& seq, CallArgs& args, bool want_max, CallContext& ctx) {
  const bool case_sensitive = arg_or(args, 0, "case_sensitive", Value::boolean(false)).truthy();
  const Value attribute = arg_or(args, 1, "attribute", Value::none());
  std::vector<Value> items = iterate(seq, ctx);
  if (items.empty()) return Value::undefined("max/min of an empty sequence");
  size_t best = 0;
  Value best_key;
  for (size_t i = 0; i < items.size(); ++i) {
    Value k = attribute.is_none() ? items[i] : attribute_of(items[i], attribute, ctx);
    if (!case_sensitive && k.is_string()) k = Value::string(text::ascii_lower(k.as_string()));
    try {
      if (i == 0 || (want_max ? less(best_key, k) : less(k, best_key))) best = i, best_key = k;
    } catch (const std::exception& e) {
      ctx.fail(std::string(want_max ? "max: " : "min: ") + e.what());
    }
  }
  return items[best];
}

}  // namespace

bool is_known_filter(const std::string& name) {
  for (const char* f : kFilters)
    if (name == f) return true;
  return false;
}

Value apply_filter(const std::string& name, const Value& v, CallArgs& args, CallContext& ctx) {
  if (name == "safe") return v;
  if (name == "string") return v.is_string() ? v : new_string(v.str(), ctx);
  if (name == "trim") {
    const Value chars = arg_or(args, 0, "chars", Value::none());
    const bool has = !chars.is_none();
    if (has && !chars.is_string()) ctx.fail("trim: chars must be a string");
    return new_string(text::strip(v.str(), true, true, has, has ? chars.as_string() : ""), ctx);
  }
  if (name == "lower") return new_string(text::ascii_lower(v.str()), ctx);
  if (name == "upper") return new_string(text::ascii_upper(v.str()), ctx);
  if (name == "capitalize") return new_string(text::capitalize(v.str()), ctx);
  if (name == "title") return new_string(text::title(v.str()), ctx);
  if (name == "length" || name == "count") return Value::integer(static_cast<int64_t>(length_of(v, ctx)));
  if (name == "wordcount") return Value::integer(static_cast<int64_t>(text::split(v.str(), false, "", -1).size()));
  if (name == "default" || name == "d") {
    const Value fallback = arg_or(args, 0, "default_value", Value::string(""));
    const bool boolean = arg_or(args, 1, "boolean", Value::boolean(false)).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return fallback;
    return v;
  }
  if (name == "tojson") {
    JsonStyle style;
    const Value ind = arg_or(args, 0, "indent", Value::none());
    if (ind.is_int()) {
      if (ind.as_int() < 0 || ind.as_int() > 64) ctx.fail("tojson: indent must be in [0, 64]");
      style.indent = static_cast<int>(ind.as_int());
    } else if (!ind.is_none()) {
      ctx.fail("tojson: indent must be an integer");
    }
    style.sort_keys = arg_or(args, 99, "sort_keys", Value::boolean(false)).truthy();
    style.ensure_ascii = arg_or(args, 99, "ensure_ascii", Value::boolean(false)).truthy();
    const Value seps = arg_or(args, 99, "separators", Value::none());
    if (!seps.is_none()) {
      if (!seps.is_list() || seps.items().size() != 2 || !seps.items()[0].is_string() || !seps.items()[1].is_string())
        ctx.fail("tojson: separators must be a pair of strings");
      style.item_separator = seps.items()[0].as_string();
      style.key_separator = seps.items()[1].as_string();
    }
    return Value::string(to_json(v, style, ctx));
  }
  if (name == "join") {
    const Value sep = arg_or(args, 0, "d", Value::string(""));
    const Value attribute = arg_or(args, 1, "attribute", Value::none());
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v, ctx)) {
      if (!first) out += sep.str();
      first = false;
      out += (attribute.is_none() ? item : attribute_of(item, attribute, ctx)).str();
      if (out.size() > ctx.limits().max_string_bytes) ctx.fail("join: result exceeds the string limit");
    }
    return new_string(std::move(out), ctx);
  }
  if (name == "replace") {
    const Value from = arg_or(args, 0, "old", Value());
    const Value to = arg_or(args, 1, "new", Value());
    if (!from.is_string() || !to.is_string()) ctx.fail("replace: old and new must be strings");
    const Value count = arg_or(args, 2, "count", Value::none());
    const std::string s = v.str();
    if (from.as_string().empty() ? (s.size() + 1) * (to.as_string().size() + 4) > ctx.limits().max_string_bytes
                                 : to.as_string().size() > from.as_string().size() &&
                                       s.size() / from.as_string().size() * to.as_string().size() + s.size() >
                                           ctx.limits().max_string_bytes)
      ctx.fail("replace: result may exceed the string limit");
    return new_string(text::replace(s, from.as_string(), to.as_string(), count.is_int() ? count.as_int() : -1), ctx);
  }
  if (name == "first" || name == "last") {
    if (name == "last" && v.is_generator()) ctx.fail("last: 'generator' object is not reversible");
    if (v.is_list()) {
      if (v.items().empty()) return Value::undefined("'" + name + "' of an empty sequence");
      return name == "first" ? v.items().front() : v.items().back();
    }
    std::vector<Value> items = iterate(v, ctx);
    if (items.empty()) return Value::undefined("'" + name + "' of an empty sequence");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "items") {
    if (v.is_undefined()) return Value::generator({});
    if (!v.is_dict()) ctx.fail(std::string("items: expected a mapping, got '") + v.type_name() + "'");
    std::vector<Value> out;
    for (const auto& kv : v.dict_data().items()) out.push_back(Value::list({kv.first, kv.second}, true));
    return new_generator(std::move(out), ctx);
  }
  if (name == "list") return v.is_list() && !v.is_tuple() && !v.is_generator() ? v : new_list(iterate(v, ctx), ctx);
  if (name == "reverse") {
    if (v.is_string()) {
      const std::string& s = v.as_string();
      const std::vector<size_t> off = text::code_point_offsets(s);
      std::string out;
      for (size_t k = off.size() - 1; k > 0; --k) out += s.substr(off[k - 1], off[k] - off[k - 1]);
      return new_string(std::move(out), ctx);
    }
    // reversed() of a sequence is an iterator; a generator is listed and reversed.
    std::vector<Value> items = iterate(v, ctx);
    std::reverse(items.begin(), items.end());
    return v.is_generator() ? new_list(std::move(items), ctx) : new_generator(std::move(items), ctx);
  }
  if (name == "select" || name == "reject")
    return new_generator(select_items(v, args, 0, false, name == "select", ctx), ctx);
  if (name == "selectattr" || name == "rejectattr")
    return new_generator(select_items(v, args, 1, true, name == "selectattr", ctx), ctx);
  if (name == "map") {
    std::vector<Value> out;
    const Value* attribute = find_arg(args, 99, "attribute");
    if (attribute) {
      const Value fallback = arg_or(args, 99, "default", Value());
      for (const Value& item : iterate(v, ctx)) {
        Value a = attribute_of(item, *attribute, ctx);
        out.push_back(a.is_undefined() && !fallback.is_undefined() ? fallback : a);
      }
      return new_generator(std::move(out), ctx);
    }
    if (args.positional.empty() || !args.positional[0].is_string()) ctx.fail("map: needs a filter name or attribute=");
    const std::string filter = args.positional[0].as_string();
    if (!is_known_filter(filter)) ctx.fail("map: unknown filter '" + filter + "'");
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keyword = args.keyword;
    for (const Value& item : iterate(v, ctx)) out.push_back(apply_filter(filter, item, rest, ctx));
    return new_generator(std::move(out), ctx);
  }
  if (name == "unique") {
    std::vector<Value> out;
    for (const Value& item : iterate(v, ctx)) {
      const Value key = item.is_string() ? Value::string(text::ascii_lower(item.as_string())) : item;
      bool seen = false;
      for (const Value& o : out) {
        const Value ok = o.is_string() ? Value::string(text::ascii_lower(o.as_string())) : o;
        seen = seen || equal(ok, key);
      }
      if (!seen) out.push_back(item);
    }
    return new_generator(std::move(out), ctx);
  }
  if (name == "sort") return sorted(v, args, ctx);
  if (name == "dictsort") {
    if (!v.is_dict()) ctx.fail("dictsort: expected a mapping");
    std::vector<Value> pairs;
    for (const auto& kv : v.dict_data().items()) pairs.push_back(Value::list({kv.first, kv.second}, true));
    CallArgs sort_args;
    sort_args.keyword.emplace_back("case_sensitive", arg_or(args, 0, "case_sensitive", Value::boolean(false)));
    sort_args.keyword.emplace_back("reverse", arg_or(args, 2, "reverse", Value::boolean(false)));
    sort_args.keyword.emplace_back("attribute", Value::integer(arg_or(args, 1, "by", Value::string("key")).str() == "value"));
    return sorted(Value::list(std::move(pairs)), sort_args, ctx);
  }
  if (name == "max" || name == "min") return extreme(v, args, name == "max", ctx);
  if (name == "sum") {
    const Value attribute = arg_or(args, 0, "attribute", Value::none());
    Value total = arg_or(args, 1, "start", Value::integer(0));
    for (const Value& item : iterate(v, ctx))
      total = binary_op("+", total, attribute.is_none() ? item : attribute_of(item, attribute, ctx), ctx);
    return total;
  }
  if (name == "int") return to_number(v, true, arg_or(args, 0, "default", Value::integer(0)));
  if (name == "float") return to_number(v, false, arg_or(args, 0, "default", Value::floating(0.0)));
  if (name == "abs") {
    if (v.is_int()) {
      if (v.as_int() == INT64_MIN) ctx.fail("abs: integer overflow");
      return Value::integer(std::llabs(v.as_int()));
    }
    if (v.is_bool()) return Value::integer(v.as_bool());
    if (v.is_float()) return Value::floating(std::fabs(v.as_float()));
    ctx.fail(std::string("abs: bad operand type '") + v.type_name() + "'");
  }
  if (name == "indent") return indent(v, args, ctx);
  ctx.fail("unknown filter '" + name + "'");
}

}  // namespace moeflow::serve::jinja

// The global functions: range, namespace, dict, raise_exception (Hugging Face's way for a
// template to refuse a conversation) and strftime_now (Hugging Face's clock), plus the
// argument helpers every builtin uses.
#include <ctime>

#include "serve/jinja/builtins.h"

namespace moeflow::serve::jinja {

const Value* find_arg(const CallArgs& args, size_t index, const char* name) {
  if (index < args.positional.size()) return &args.positional[index];
  for (const auto& kv : args.keyword)
    if (kv.first == name) return &kv.second;
  return nullptr;
}

Value arg_or(const CallArgs& args, size_t index, const char* name, Value fallback) {
  const Value* v = find_arg(args, index, name);
  return v ? *v : std::move(fallback);
}

namespace {

int64_t int_arg(const Value& v, const char* fn, CallContext& ctx) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool() ? 1 : 0;
  ctx.fail(std::string(fn) + ": expected an integer, got '" + v.type_name() + "'");
}

Value range_fn(CallArgs& args, CallContext& ctx) {
  if (!args.keyword.empty()) ctx.fail("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3) ctx.fail("range() takes 1 to 3 arguments");
  int64_t start = 0, stop = 0, step = 1;
  if (p.size() == 1) {
    stop = int_arg(p[0], "range", ctx);
  } else {
    start = int_arg(p[0], "range", ctx);
    stop = int_arg(p[1], "range", ctx);
    if (p.size() == 3) step = int_arg(p[2], "range", ctx);
  }
  if (step == 0) ctx.fail("range() step must not be zero");
  // Count first, exactly and without overflow, so that a huge range fails before it is built.
  const __int128 span = static_cast<__int128>(stop) - start;
  __int128 count = 0;
  if (step > 0 && span > 0) count = (span + step - 1) / step;
  if (step < 0 && span < 0) count = (-span + (-static_cast<__int128>(step)) - 1) / -static_cast<__int128>(step);
  if (count > static_cast<__int128>(ctx.limits().max_list_items))
    ctx.fail("range() of " + std::to_string(static_cast<uint64_t>(count)) + " items exceeds the limit of " +
             std::to_string(ctx.limits().max_list_items));
  ctx.charge_items(static_cast<size_t>(count));
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(count));
  for (__int128 i = 0; i < count; ++i) items.push_back(Value::integer(static_cast<int64_t>(start + i * step)));
  return Value::list(std::move(items));
}

DictData kwargs_dict(CallArgs& args, const char* fn, CallContext& ctx) {
  DictData d;
  if (args.positional.size() > 1) ctx.fail(std::string(fn) + "() takes at most one positional argument");
  if (!args.positional.empty()) {
    const Value& init = args.positional[0];
    if (!init.is_dict()) ctx.fail(std::string(fn) + "(): the positional argument must be a dict");
    for (const auto& kv : init.dict_data().items()) d.set(kv.first, kv.second);
  }
  for (auto& kv : args.keyword) d.set(Value::string(kv.first), kv.second);
  ctx.charge_items(d.size());
  return d;
}

Value namespace_fn(CallArgs& args, CallContext& ctx) {
  DictData d = kwargs_dict(args, "namespace", ctx);
  if (d.has_namespace) ctx.fail("a namespace cannot hold another namespace");
  auto ns = std::make_shared<NamespaceData>();
  ns->attrs = std::move(d);
  return Value::namespace_(std::move(ns));
}

Value dict_fn(CallArgs& args, CallContext& ctx) { return Value::dict(kwargs_dict(args, "dict", ctx)); }

Value raise_exception_fn(CallArgs& args, CallContext& ctx) {
  const Value msg = arg_or(args, 0, "message", Value::string(""));
  ctx.fail("raise_exception: " + msg.str());
}

Value strftime_now_fn(CallArgs& args, CallContext& ctx) {
  const Value fmt = arg_or(args, 0, "format", Value());
  if (!fmt.is_string()) ctx.fail("strftime_now() needs a format string");
  if (fmt.as_string().size() > 256) ctx.fail("strftime_now(): format longer than 256 bytes");
  bool utc = false;
  const std::time_t t = static_cast<std::time_t>(ctx.now_seconds(&utc));
  std::tm tm{};
  if (utc) gmtime_r(&t, &tm);
  else localtime_r(&t, &tm);
  std::string buf(fmt.as_string().size() * 16 + 64, '\0');
  const size_t n = fmt.as_string().empty() ? 0 : std::strftime(buf.data(), buf.size(), fmt.as_string().c_str(), &tm);
  buf.resize(n);
  return Value::string(std::move(buf));
}

}  // namespace

std::vector<std::pair<std::string, Value>> global_functions() {
  return {
      {"range", Value::callable("range", range_fn)},
      {"namespace", Value::callable("namespace", namespace_fn)},
      {"dict", Value::callable("dict", dict_fn)},
      {"raise_exception", Value::callable("raise_exception", raise_exception_fn)},
      {"strftime_now", Value::callable("strftime_now", strftime_now_fn)},
  };
}

}  // namespace moeflow::serve::jinja

// Python's binary operators on template values. Integers are 64-bit: a result Python
// would widen past that is an error rather than a silently wrong number.
#include <cmath>
#include <cstdint>

#include "serve/jinja/builtins.h"

namespace moeflow::serve::jinja {
namespace {

bool is_integral(const Value& v) { return v.is_int() || v.is_bool(); }
int64_t to_int(const Value& v) { return v.is_bool() ? (v.as_bool() ? 1 : 0) : v.as_int(); }

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b, CallContext& ctx) {
  if (a.is_undefined()) ctx.fail(a.undefined_name().empty() ? "undefined value" : a.undefined_name());
  if (b.is_undefined()) ctx.fail(b.undefined_name().empty() ? "undefined value" : b.undefined_name());
  ctx.fail("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
}

[[noreturn]] void overflow(CallContext& ctx) { ctx.fail("integer overflow (beyond 64 bits)"); }

Value repeat(const Value& seq, int64_t times, CallContext& ctx) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && static_cast<uint64_t>(times) > ctx.limits().max_string_bytes / s.size())
      ctx.fail("string repetition exceeds the string limit");
    ctx.charge_string(s.size() * static_cast<size_t>(times));
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(times));
    for (int64_t i = 0; i < times; ++i) out += s;
    return Value::string(std::move(out));
  }
  const auto& items = seq.items();
  if (!items.empty() && static_cast<uint64_t>(times) > ctx.limits().max_list_items / items.size())
    ctx.fail("list repetition exceeds the list limit");
  ctx.charge_items(items.size() * static_cast<size_t>(times));
  std::vector<Value> out;
  out.reserve(items.size() * static_cast<size_t>(times));
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::list(std::move(out), seq.is_tuple());
}

double py_fmod(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b, CallContext& ctx) {
  if (op == "~") {
    std::string s = a.str();
    const std::string t = b.str();
    if (s.size() + t.size() > ctx.limits().max_string_bytes) ctx.fail("'~' result exceeds the string limit");
    ctx.charge_string(s.size() + t.size());
    s += t;
    return Value::string(std::move(s));
  }
  const bool numbers = a.is_number() && b.is_number();
  const bool ints = is_integral(a) && is_integral(b);
  if (op == "+") {
    if (ints) {
      int64_t r = 0;
      if (__builtin_add_overflow(to_int(a), to_int(b), &r)) overflow(ctx);
      return Value::integer(r);
    }
    if (numbers) return Value::floating(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      if (a.as_string().size() + b.as_string().size() > ctx.limits().max_string_bytes)
        ctx.fail("'+' result exceeds the string limit");
      ctx.charge_string(a.as_string().size() + b.as_string().size());
      return Value::string(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple() && !a.is_generator() && !b.is_generator()) {
      ctx.charge_items(a.items().size() + b.items().size());
      std::vector<Value> out = a.items();
      out.insert(out.end(), b.items().begin(), b.items().end());
      return Value::list(std::move(out), a.is_tuple());
    }
    unsupported(op, a, b, ctx);
  }
  if (op == "*") {
    if (ints) {
      int64_t r = 0;
      if (__builtin_mul_overflow(to_int(a), to_int(b), &r)) overflow(ctx);
      return Value::integer(r);
    }
    if (numbers) return Value::floating(a.as_double() * b.as_double());
    if ((a.is_string() || (a.is_list() && !a.is_generator())) && is_integral(b)) return repeat(a, to_int(b), ctx);
    if ((b.is_string() || (b.is_list() && !b.is_generator())) && is_integral(a)) return repeat(b, to_int(a), ctx);
    unsupported(op, a, b, ctx);
  }
  if (op == "%" && a.is_string()) ctx.fail("string formatting with '%' is not supported");
  if (!numbers) unsupported(op, a, b, ctx);
  if (op == "-") {
    if (ints) {
      int64_t r = 0;
      if (__builtin_sub_overflow(to_int(a), to_int(b), &r)) overflow(ctx);
      return Value::integer(r);
    }
    return Value::floating(a.as_double() - b.as_double());
  }
  if (op == "/") {
    if (b.as_double() == 0) ctx.fail("division by zero");
    return Value::floating(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (b.as_double() == 0) ctx.fail(op == "//" ? "integer division by zero" : "modulo by zero");
    if (ints) {
      const int64_t x = to_int(a), y = to_int(b);
      if (x == INT64_MIN && y == -1) ctx.fail("integer overflow (beyond 64 bits)");
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) --q, r += y;
      return Value::integer(op == "//" ? q : r);
    }
    const double x = a.as_double(), y = b.as_double();
    if (op == "%") return Value::floating(py_fmod(x, y));
    return Value::floating(std::floor(x / y));
  }
  if (op == "**") {
    if (ints && to_int(b) >= 0) {
      int64_t base = to_int(a), e = to_int(b), r = 1;
      while (e > 0) {
        if (e & 1)
          if (__builtin_mul_overflow(r, base, &r)) ctx.fail("integer overflow (beyond 64 bits)");
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base)) ctx.fail("integer overflow (beyond 64 bits)");
      }
      return Value::integer(r);
    }
    return Value::floating(std::pow(a.as_double(), b.as_double()));
  }
  ctx.fail("unknown operator '" + op + "'");
}

Value negate(const Value& v, CallContext& ctx) {
  if (is_integral(v)) {
    if (to_int(v) == INT64_MIN) ctx.fail("integer overflow (beyond 64 bits)");
    return Value::integer(-to_int(v));
  }
  if (v.is_float()) return Value::floating(-v.as_float());
  if (v.is_undefined()) ctx.fail(v.undefined_name().empty() ? "undefined value" : v.undefined_name());
  ctx.fail(std::string("bad operand type for unary -: '") + v.type_name() + "'");
}

}  // namespace moeflow::serve::jinja

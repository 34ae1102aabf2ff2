#include "serve/jinja/value.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "base/error.h"
#include "serve/jinja/text.h"

namespace moeflow::serve::jinja {
namespace {

// Python hashes 1, 1.0 and True alike, so they name the same dict entry. The key is a
// type letter then the value ("n" numbers, "f" other floats, "s" strings, "0" none).
bool hash_key(const Value& k, std::string* out) {
  out->clear();
  switch (k.kind()) {
    case Value::Kind::kNone: out->push_back('0'); return true;
    case Value::Kind::kBool:
      out->push_back('n');
      out->push_back(k.as_bool() ? '1' : '0');
      return true;
    case Value::Kind::kInt:
      out->push_back('n');
      out->append(std::to_string(k.as_int()));
      return true;
    case Value::Kind::kFloat: {
      const double d = k.as_float();
      const bool integral = std::isfinite(d) && d == std::trunc(d) && std::fabs(d) < 9e18;
      out->push_back(integral ? 'n' : 'f');
      out->append(integral ? std::to_string(static_cast<int64_t>(d)) : float_repr(d));
      return true;
    }
    case Value::Kind::kString:
      out->push_back('s');
      out->append(k.as_string());
      return true;
    default: return false;
  }
}

}  // namespace

size_t DictData::size() const { return items_.size(); }

// Dicts of up to this many entries (messages, loop, most literals) are searched linearly:
// no hashing, no index allocation. equal() agrees with Python's hashing on the key types
// hash_key accepts (1 == 1.0 == True).
namespace {
constexpr size_t kLinearDictSize = 16;

bool hashable(const Value& k) { return k.is_none() || k.is_number() || k.is_string(); }
}  // namespace

const Value* DictData::find(const Value& key) const {
  if (!hashable(key)) return nullptr;
  if (index_.empty()) {
    for (const auto& kv : items_)
      if (equal(kv.first, key)) return &kv.second;
    return nullptr;
  }
  std::string h;
  hash_key(key, &h);
  const auto it = index_.find(h);
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

void DictData::set(const Value& key, Value value) {
  if (!hashable(key)) throw InputError(std::string("unhashable type: '") + key.type_name() + "' as a dict key");
  depth = std::max(depth, value.depth() + 1);
  has_namespace = has_namespace || value.contains_namespace();
  if (index_.empty()) {
    for (auto& kv : items_) {
      if (equal(kv.first, key)) {
        kv.second = std::move(value);
        return;
      }
    }
    items_.emplace_back(key, std::move(value));
    if (items_.size() > kLinearDictSize) {
      std::string h;
      for (size_t i = 0; i < items_.size(); ++i) {
        hash_key(items_[i].first, &h);
        index_.emplace(h, i);
      }
    }
    return;
  }
  std::string h;
  hash_key(key, &h);
  const auto it = index_.find(h);
  if (it != index_.end()) {
    items_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(std::move(h), items_.size());
  items_.emplace_back(key, std::move(value));
}

Value Value::undefined(std::string name) {
  return Value(Undefined{std::make_shared<const std::string>(std::move(name))});
}
Value Value::string(std::string s) { return Value(std::make_shared<const std::string>(std::move(s))); }
Value Value::list(std::vector<Value> items, bool tuple) {
  auto d = std::make_shared<ListData>();
  for (const Value& v : items) {
    d->depth = std::max(d->depth, v.depth() + 1);
    d->has_namespace = d->has_namespace || v.contains_namespace();
  }
  d->items = std::move(items);
  d->tuple = tuple;
  return Value(std::shared_ptr<const ListData>(std::move(d)));
}
Value Value::generator(std::vector<Value> items) {
  Value v = list(std::move(items));
  std::const_pointer_cast<ListData>(std::get<std::shared_ptr<const ListData>>(v.v_))->generator = true;
  return v;
}
Value Value::dict(DictData d) { return Value(std::shared_ptr<const DictData>(std::make_shared<DictData>(std::move(d)))); }
Value Value::namespace_(std::shared_ptr<NamespaceData> ns) { return Value(std::move(ns)); }
Value Value::callable(std::string name, std::function<Value(CallArgs&, CallContext&)> fn) {
  return Value(std::shared_ptr<const Callable>(std::make_shared<Callable>(Callable{std::move(name), std::move(fn)})));
}

double Value::as_double() const {
  if (is_int()) return static_cast<double>(as_int());
  if (is_bool()) return as_bool() ? 1.0 : 0.0;
  return as_float();
}

const std::string& Value::undefined_name() const {
  static const std::string empty;
  const auto& u = std::get<Undefined>(v_);
  return u.name ? *u.name : empty;
}

int Value::depth() const {
  switch (kind()) {
    case Kind::kList: return list_data().depth;
    case Kind::kDict: return dict_data().depth;
    case Kind::kNamespace: return namespace_data().attrs.depth;
    default: return 0;
  }
}

bool Value::contains_namespace() const {
  switch (kind()) {
    case Kind::kList: return list_data().has_namespace;
    case Kind::kDict: return dict_data().has_namespace;
    case Kind::kNamespace: return true;
    default: return false;
  }
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return as_int() != 0;
    case Kind::kFloat: return as_float() != 0.0;
    case Kind::kString: return !as_string().empty();
    case Kind::kList: return is_generator() || !items().empty();
    case Kind::kDict: return dict_data().size() != 0;
    default: return true;
  }
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  // Shortest round-trip digits, then Python's layout: fixed for 1e-4 <= |d| < 1e16.
  const auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::atoi(sci.c_str() + e + 1);
  bool neg = false;
  if (!mant.empty() && mant[0] == '-') neg = true, mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  // Appends only: GCC 12 warns (falsely, -Wrestrict) on "literal" + std::string here.
  std::string out;
  if (neg) out.push_back('-');
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      const size_t int_digits = static_cast<size_t>(exp + 1);
      if (digits.size() <= int_digits) {
        out.append(digits).append(int_digits - digits.size(), '0').append(".0");
      } else {
        out.append(digits, 0, int_digits).push_back('.');
        out.append(digits, int_digits, std::string::npos);
      }
    } else {
      out.append("0.").append(static_cast<size_t>(-exp - 1), '0').append(digits);
    }
    return out;
  }
  out.push_back(digits[0]);
  if (digits.size() > 1) {
    out.push_back('.');
    out.append(digits, 1, std::string::npos);
  }
  out.append(exp < 0 ? "e-" : "e+");
  const int a = exp < 0 ? -exp : exp;
  if (a < 10) out.push_back('0');
  out.append(std::to_string(a));
  return out;
}

std::string Value::str() const {
  switch (kind()) {
    case Kind::kUndefined: return "";
    case Kind::kString: return as_string();
    default: return repr();
  }
}

std::string Value::repr() const {
  switch (kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "None";
    case Kind::kBool: return as_bool() ? "True" : "False";
    case Kind::kInt: return std::to_string(as_int());
    case Kind::kFloat: return float_repr(as_float());
    case Kind::kString: return text::py_repr(as_string());
    case Kind::kList: {
      const ListData& l = list_data();
      if (l.generator) return "<generator object>";  // jinja2 adds the object's address
      std::string out = l.tuple ? "(" : "[";
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += ", ";
        out += l.items[i].repr();
      }
      if (l.tuple && l.items.size() == 1) out += ",";
      out += l.tuple ? ")" : "]";
      return out;
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      const DictData& d = is_dict() ? dict_data() : namespace_data().attrs;
      std::string out = is_dict() ? "{" : "<Namespace {";
      bool first = true;
      for (const auto& [k, v] : d.items()) {
        if (!first) out += ", ";
        first = false;
        out += k.repr() + ": " + v.repr();
      }
      out += is_dict() ? "}" : "}>";
      return out;
    }
    case Kind::kCallable: return "<function " + callable_data().name + ">";
  }
  return "";
}

const char* Value::type_name() const {
  switch (kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return is_generator() ? "generator" : is_tuple() ? "tuple" : "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kCallable: return "function";
  }
  return "?";
}

bool equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    const int64_t x = a.is_bool() ? a.as_bool() : a.as_int();
    const int64_t y = b.is_bool() ? b.as_bool() : b.as_int();
    return x == y;
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      if (a.is_generator() || b.is_generator()) return &a.list_data() == &b.list_data();
      if (a.is_tuple() != b.is_tuple() || a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i)
        if (!equal(a.items()[i], b.items()[i])) return false;
      return true;
    }
    case Value::Kind::kDict: {
      const DictData& x = a.dict_data();
      const DictData& y = b.dict_data();
      if (x.size() != y.size()) return false;
      for (const auto& [k, v] : x.items()) {
        const Value* w = y.find(k);
        if (!w || !equal(v, *w)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace: return &a.namespace_data() == &b.namespace_data();
    case Value::Kind::kCallable: return &a.callable_data() == &b.callable_data();
    default: return false;
  }
}

bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    const int64_t x = a.is_bool() ? a.as_bool() : a.as_int();
    const int64_t y = b.is_bool() ? b.as_bool() : b.as_int();
    return x < y;
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 byte order = code point order
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple() && !a.is_generator() && !b.is_generator()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equal(x[i], y[i])) return less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  throw InputError(std::string("'<' not supported between instances of '") + a.type_name() + "' and '" +
                   b.type_name() + "'");
}

}  // namespace moeflow::serve::jinja

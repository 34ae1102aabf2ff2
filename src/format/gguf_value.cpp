#include <cstdint>
#include <cstdio>
#include <string>

#include "format/gguf.h"

namespace moeflow::gguf {

const char* value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8: return "uint8";
    case ValueType::INT8: return "int8";
    case ValueType::UINT16: return "uint16";
    case ValueType::INT16: return "int16";
    case ValueType::UINT32: return "uint32";
    case ValueType::INT32: return "int32";
    case ValueType::FLOAT32: return "float32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::UINT64: return "uint64";
    case ValueType::INT64: return "int64";
    case ValueType::FLOAT64: return "float64";
  }
  return "unknown";
}

namespace {
bool is_unsigned(ValueType t) {
  return t == ValueType::UINT8 || t == ValueType::UINT16 || t == ValueType::UINT32 || t == ValueType::UINT64 ||
         t == ValueType::BOOL;
}
bool is_signed(ValueType t) {
  return t == ValueType::INT8 || t == ValueType::INT16 || t == ValueType::INT32 || t == ValueType::INT64;
}
InputError wrong_type(const std::string& key, ValueType got, const char* want) {
  return InputError("metadata key '" + key + "' has type " + value_type_name(got) + ", expected " + want);
}
}  // namespace

Value Value::make_u32(uint32_t v) { Value x; x.type = ValueType::UINT32; x.u = v; return x; }
Value Value::make_i32(int32_t v) { Value x; x.type = ValueType::INT32; x.i = v; return x; }
Value Value::make_u64(uint64_t v) { Value x; x.type = ValueType::UINT64; x.u = v; return x; }
Value Value::make_f32(float v) { Value x; x.type = ValueType::FLOAT32; x.f = v; return x; }
Value Value::make_bool(bool v) { Value x; x.type = ValueType::BOOL; x.u = v ? 1 : 0; return x; }
Value Value::make_string(std::string v) { Value x; x.type = ValueType::STRING; x.s = std::move(v); return x; }
Value Value::make_array(ValueType elem, std::vector<Value> items) {
  Value x;
  x.type = ValueType::ARRAY;
  x.elem_type = elem;
  x.array = std::move(items);
  return x;
}

int64_t Value::as_int(const std::string& key) const {
  if (is_signed(type)) return i;
  if (is_unsigned(type)) {
    if (u > static_cast<uint64_t>(INT64_MAX)) throw InputError("metadata key '" + key + "' value " + std::to_string(u) + " is too large");
    return static_cast<int64_t>(u);
  }
  throw wrong_type(key, type, "an integer");
}

double Value::as_float(const std::string& key) const {
  if (type == ValueType::FLOAT32 || type == ValueType::FLOAT64) return f;
  if (is_signed(type)) return static_cast<double>(i);
  if (is_unsigned(type) && type != ValueType::BOOL) return static_cast<double>(u);
  throw wrong_type(key, type, "a number");
}

bool Value::as_bool(const std::string& key) const {
  if (type == ValueType::BOOL) return u != 0;
  throw wrong_type(key, type, "bool");
}

const std::string& Value::as_string(const std::string& key) const {
  if (type == ValueType::STRING) return s;
  throw wrong_type(key, type, "string");
}

const std::vector<Value>& Value::as_array(const std::string& key) const {
  if (type == ValueType::ARRAY) return array;
  throw wrong_type(key, type, "array");
}

std::string Value::to_display(size_t max_items) const {
  switch (type) {
    case ValueType::STRING: {
      std::string q = "\"";
      for (char c : s.substr(0, 80)) q += (c == '\n') ? std::string("\\n") : std::string(1, c);
      return q + (s.size() > 80 ? "...\"" : "\"");
    }
    case ValueType::BOOL: return u ? "true" : "false";
    case ValueType::FLOAT32:
    case ValueType::FLOAT64: {
      // %g with the type's round-trip precision: std::to_string would print 1e-5 as
      // "0.000010" and hide small epsilons entirely.
      char buf[40];
      std::snprintf(buf, sizeof buf, type == ValueType::FLOAT32 ? "%.7g" : "%.15g", f);
      return buf;
    }
    case ValueType::ARRAY: {
      std::string out = "[";
      for (size_t k = 0; k < array.size() && k < max_items; ++k) out += (k ? ", " : "") + array[k].to_display(max_items);
      if (array.size() > max_items) out += max_items ? ", ..." : "...";
      return out + " (" + std::to_string(array.size()) + " items)]";
    }
    default: return is_signed(type) ? std::to_string(i) : std::to_string(u);
  }
}

uint64_t TensorInfo::n_elements() const {
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;
  return n;
}

}  // namespace moeflow::gguf

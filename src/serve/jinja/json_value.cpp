#include "serve/jinja/json_value.h"

#include <limits>

#include "base/error.h"

namespace moeflow::serve::jinja {

Value value_from_json(const nlohmann::ordered_json& j, int max_depth) {
  if (max_depth < 0) throw InputError("chat template input: JSON nested too deeply");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return Value::floating(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::floating(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(value_from_json(e, max_depth - 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      DictData d;
      for (auto it = j.begin(); it != j.end(); ++it) d.set(Value::string(it.key()), value_from_json(it.value(), max_depth - 1));
      return Value::dict(std::move(d));
    }
    default: throw InputError("chat template input: unsupported JSON value");
  }
}

}  // namespace moeflow::serve::jinja

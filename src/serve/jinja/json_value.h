// JSON from a request (an OpenAI `tools` array, say) as template values: objects keep
// their key order (Hugging Face passes the request's dicts through, and tojson prints
// them in that order), integers stay integers, other numbers become floats.
#pragma once
#include <nlohmann/json.hpp>

#include "serve/jinja/value.h"

namespace moeflow::serve::jinja {

// Throws InputError for nesting deeper than max_depth (the render's value-depth limit).
Value value_from_json(const nlohmann::ordered_json& j, int max_depth);

}  // namespace moeflow::serve::jinja

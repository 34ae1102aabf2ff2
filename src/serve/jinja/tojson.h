// The tojson filter as Hugging Face defines it for chat templates:
// json.dumps(value, ensure_ascii=False, indent=indent, separators=None, sort_keys=False)
// (not jinja2's own HTML-safe tojson). Python's layout: ", " and ": " without indent,
// "," and newlines with it; floats as Python's repr; tuples as arrays.
#pragma once
#include <string>

#include "serve/jinja/call_context.h"
#include "serve/jinja/value.h"

namespace moeflow::serve::jinja {

struct JsonStyle {
  int indent = -1;  // < 0: one line
  bool sort_keys = false;
  bool ensure_ascii = false;
  std::string item_separator = ", ", key_separator = ": ";  // Python's defaults (item "," with indent)
};

// Fails (through ctx) for a value JSON cannot hold (undefined, a function, a namespace).
std::string to_json(const Value& v, const JsonStyle& style, CallContext& ctx);

}  // namespace moeflow::serve::jinja

// Renders a parsed template with jinja2's semantics as Hugging Face configures it
// (sandboxed: lists and dicts are immutable; loop controls enabled). Scoping follows
// jinja2: `{% set %}` in a for-loop body is local to that iteration, if-blocks share the
// enclosing scope, a macro sees its arguments and the template's top-level variables,
// namespace() objects carry values out of loops.
//
// Throws InputError naming line and column for a runtime error (an undefined value used
// where it cannot be, a type error, raise_exception's message) and for any RenderLimits
// bound exceeded.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "serve/jinja/ast.h"
#include "serve/jinja/call_context.h"

namespace moeflow::serve::jinja {

struct RenderOptions {
  RenderLimits limits;
  // strftime_now's clock: seconds since the epoch, formatted as UTC; unset: the local clock.
  std::optional<int64_t> now_unix_seconds;
};

std::string render_template(const Template& tpl, const std::vector<std::pair<std::string, Value>>& variables,
                            const RenderOptions& options);

}  // namespace moeflow::serve::jinja

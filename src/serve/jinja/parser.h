// Parses a template's tokens into its AST with jinja2's grammar and operator precedence
// (or < and < not < comparisons < + - < ~ < * / // % < ** < unary minus < filters, tests,
// calls, subscripts). Throws InputError naming line:column and the construct for a
// syntax error, an unclosed block, or a construct outside the supported subset
// (include, import, extends, call blocks, recursive loops, *args ...). Nesting deeper
// than kMaxParseDepth is refused, so a hostile template cannot exhaust the stack.
#pragma once
#include <memory>
#include <string_view>

#include "serve/jinja/ast.h"

namespace moeflow::serve::jinja {

inline constexpr int kMaxParseDepth = 128;

std::shared_ptr<const Template> parse_template(std::string_view source);

}  // namespace moeflow::serve::jinja

// Splits a Jinja template into text and tag tokens the way Python's jinja2 does under
// Hugging Face's settings (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline
// False): newlines normalised to \n, one trailing newline dropped, `{%-`/`-%}` (and the
// same on `{{ }}` and `{# #}`) strip the whitespace beside the tag, `+` turns the block
// settings off for that side, comments vanish, `{% raw %}` bodies stay text.
// Throws InputError naming line:column for an unclosed tag or an unexpected character.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moeflow::serve::jinja {

struct SourcePos {
  int line = 1, column = 1;
};
std::string to_string(SourcePos p);  // "line L, column C"

enum class TokenKind { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOperator, kEnd };

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;  // the text, name, operator, or a string literal's decoded value
  SourcePos pos;
  int64_t int_value = 0;
  double float_value = 0;
};

std::vector<Token> tokenize(std::string_view source);

}  // namespace moeflow::serve::jinja

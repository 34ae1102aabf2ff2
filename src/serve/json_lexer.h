// The byte-level pieces of JSON's grammar (RFC 8259) that JSON mode's check
// (json_prefix.h) and a schema's check (json_schema_prefix.h) share: white space
// between tokens, the number grammar, and a string's content and escapes, each a small
// state machine fed one byte at a time.
#pragma once
#include <cstdint>
#include <string_view>

namespace moeflow::serve::json_lexer {

inline bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
inline bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
inline bool is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

// White space between tokens, as llama.cpp's JSON grammars allow it: one ' ', or a
// newline and at most kMaxIndent spaces or tabs (pretty-printed JSON fits; a model
// cannot idle in white space). The state: 0 none yet, kOneSpace, or 1 + the indent.
constexpr int kMaxIndent = 20;
constexpr uint8_t kOneSpace = 255;
// The state after white-space byte c, or -1 if the rule refuses it.
inline int space_next(uint8_t state, unsigned char c) {
  if (state == 0) return c == ' ' ? kOneSpace : c == '\n' ? 1 : -1;
  if (state == kOneSpace || (c != ' ' && c != '\t') || state > kMaxIndent) return -1;
  return state + 1;
}

// Number states, from the first byte on.
enum Num : uint8_t { kSign, kZero, kInteger, kDot, kFraction, kExp, kExpSign, kExpDigits };
constexpr int kRefused = -1;
constexpr int kEnded = -2;  // the value was complete and c is the first byte after it
// The state a number starts in with c ('-' or a digit), or kRefused.
inline int number_start(unsigned char c) { return c == '-' ? kSign : c == '0' ? kZero : is_digit(c) ? kInteger : kRefused; }
// The state after c; kEnded when c ends a complete number; kRefused. `integer`: no
// fraction and no exponent.
inline int number_next(uint8_t state, unsigned char c, bool integer) {
  switch (state) {
    case kSign:
      return !is_digit(c) ? kRefused : c == '0' ? kZero : kInteger;
    case kInteger:
      if (is_digit(c)) return kInteger;
      [[fallthrough]];
    case kZero:
      if (!integer && c == '.') return kDot;
      if (!integer && (c == 'e' || c == 'E')) return kExp;
      return kEnded;
    case kDot:
      return is_digit(c) ? kFraction : kRefused;
    case kFraction:
      if (is_digit(c)) return kFraction;
      if (c == 'e' || c == 'E') return kExp;
      return kEnded;
    case kExp:
      if (c == '+' || c == '-') return kExpSign;
      [[fallthrough]];
    case kExpSign:
      return is_digit(c) ? kExpDigits : kRefused;
    case kExpDigits:
      return is_digit(c) ? kExpDigits : kEnded;
  }
  return kRefused;
}

// Inside a string (after its opening quote): 0 content, kEscape after '\\', kHex + k
// with k digits of \uXXXX to come.
constexpr uint8_t kEscape = 1, kHex = 10;
// The state after c; kEnded for the closing quote; kRefused (control bytes are escaped
// in JSON strings).
inline int string_next(uint8_t state, unsigned char c) {
  if (state == 0) return c == '"' ? kEnded : c == '\\' ? kEscape : c >= 0x20 ? 0 : kRefused;
  if (state == kEscape) {
    if (c == 'u') return kHex + 4;
    const bool simple = c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't';
    return simple ? 0 : kRefused;
  }
  if (!is_hex(c)) return kRefused;
  return state == kHex + 1 ? 0 : state - 1;
}

// Appends bytes to a copy of a check: whether all of them keep the text a prefix.
// Empty bytes do not (a token of no bytes makes no progress).
template <class Prefix>
bool accepts_on_copy(const Prefix& p, std::string_view bytes) {
  if (bytes.empty()) return false;
  Prefix q = p;
  for (const char c : bytes)
    if (!q.feed(static_cast<unsigned char>(c))) return false;
  return true;
}

}  // namespace moeflow::serve::json_lexer

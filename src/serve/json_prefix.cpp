#include "serve/json_prefix.h"

namespace moeflow::serve {

namespace {

bool is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

}  // namespace

void JsonPrefix::value_done() { at_ = depth_ == 0 ? At::done : At::after_value; }

bool JsonPrefix::close(unsigned char c) {
  if (depth_ == 0 || stack_[depth_ - 1] != (c == '}' ? '{' : '[')) return false;
  --depth_;
  value_done();
  return true;
}

bool JsonPrefix::value_start(unsigned char c) {
  switch (c) {
    case '{':
    case '[':
      if (depth_ == kMaxDepth) return false;
      stack_[depth_++] = static_cast<char>(c);
      at_ = c == '{' ? At::key_or_end : At::value_or_end;
      return true;
    case '"':
      at_ = At::string;
      key_ = false;
      return true;
    case 't':
      literal_ = "rue";
      at_ = At::literal;
      return true;
    case 'f':
      literal_ = "alse";
      at_ = At::literal;
      return true;
    case 'n':
      literal_ = "ull";
      at_ = At::literal;
      return true;
    default:
      if (c != '-' && !is_digit(c)) return false;
      at_ = At::number;
      num_ = c == '-' ? Num::sign : c == '0' ? Num::zero : Num::integer;
      return true;
  }
}

bool JsonPrefix::feed(unsigned char c) {
  // White space between tokens of the grammar.
  const bool between = at_ != At::string && at_ != At::number && at_ != At::literal && at_ != At::done;
  if (between && is_space(c)) {
    const int next = JsonSpace::next(spaces_, c);
    spaces_ = static_cast<uint8_t>(next);
    return next >= 0;
  }
  if (between) spaces_ = 0;
  switch (at_) {
    case At::start:
      return c == '{' && value_start(c);  // json_object: the top level is an object
    case At::value:
      return value_start(c);
    case At::value_or_end:
      return c == ']' ? close(c) : value_start(c);
    case At::key_or_end:
      if (c == '}') return close(c);
      [[fallthrough]];
    case At::key:
      if (c != '"') return false;
      at_ = At::string;
      key_ = true;
      return true;
    case At::colon:
      if (c != ':') return false;
      at_ = At::value;
      return true;
    case At::after_value:
      if (c == '}' || c == ']') return close(c);
      if (c != ',') return false;
      at_ = stack_[depth_ - 1] == '{' ? At::key : At::value;
      return true;
    case At::string:
      if (hex_left_ > 0) {
        --hex_left_;
        return is_hex(c);
      }
      if (escape_) {
        escape_ = false;
        if (c == 'u') {
          hex_left_ = 4;
          return true;
        }
        return c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't';
      }
      if (c == '\\') {
        escape_ = true;
        return true;
      }
      if (c == '"') {
        if (key_) {
          at_ = At::colon;
        } else {
          value_done();
        }
        return true;
      }
      return c >= 0x20;  // control characters are escaped in JSON strings
    case At::literal:
      if (c != static_cast<unsigned char>(*literal_)) return false;
      if (*++literal_ == '\0') value_done();
      return true;
    case At::number: {
      switch (num_) {
        case Num::sign:
          if (!is_digit(c)) return false;
          num_ = c == '0' ? Num::zero : Num::integer;
          return true;
        case Num::integer:
          if (is_digit(c)) return true;
          [[fallthrough]];
        case Num::zero:
          if (c == '.') {
            num_ = Num::dot;
            return true;
          }
          if (c == 'e' || c == 'E') {
            num_ = Num::exp;
            return true;
          }
          break;  // the number ends here
        case Num::dot:
          if (!is_digit(c)) return false;
          num_ = Num::fraction;
          return true;
        case Num::fraction:
          if (is_digit(c)) return true;
          if (c == 'e' || c == 'E') {
            num_ = Num::exp;
            return true;
          }
          break;
        case Num::exp:
          if (c == '+' || c == '-') {
            num_ = Num::exp_sign;
            return true;
          }
          [[fallthrough]];
        case Num::exp_sign:
          if (!is_digit(c)) return false;
          num_ = Num::exp_digits;
          return true;
        case Num::exp_digits:
          if (is_digit(c)) return true;
          break;
      }
      // A complete number, and c begins what follows it.
      value_done();
      return feed(c);
    }
    case At::done:
      return false;
  }
  return false;
}

bool JsonPrefix::accepts(std::string_view bytes) const {
  if (bytes.empty()) return false;
  JsonPrefix p = *this;
  for (const char c : bytes)
    if (!p.feed(static_cast<unsigned char>(c))) return false;
  return true;
}

}  // namespace moeflow::serve

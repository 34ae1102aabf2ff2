#include "serve/json_prefix.h"

#include "serve/json_lexer.h"

namespace moeflow::serve {

using namespace json_lexer;

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
      string_ = 0;
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
    default: {
      const int n = number_start(c);
      if (n == kRefused) return false;
      at_ = At::number;
      num_ = static_cast<uint8_t>(n);
      return true;
    }
  }
}

bool JsonPrefix::feed(unsigned char c) {
  // White space between tokens of the grammar.
  const bool between = at_ != At::string && at_ != At::number && at_ != At::literal && at_ != At::done;
  if (between && is_space(c)) {
    const int next = space_next(spaces_, c);
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
      string_ = 0;
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
    case At::string: {
      const int next = string_next(string_, c);
      if (next == kRefused) return false;
      if (next != kEnded) {
        string_ = static_cast<uint8_t>(next);
      } else if (key_) {
        at_ = At::colon;
      } else {
        value_done();
      }
      return true;
    }
    case At::literal:
      if (c != static_cast<unsigned char>(*literal_)) return false;
      if (*++literal_ == '\0') value_done();
      return true;
    case At::number: {
      const int next = number_next(num_, c, /*integer=*/false);
      if (next == kRefused) return false;
      if (next != kEnded) {
        num_ = static_cast<uint8_t>(next);
        return true;
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

bool JsonPrefix::accepts(std::string_view bytes) const { return accepts_on_copy(*this, bytes); }

}  // namespace moeflow::serve

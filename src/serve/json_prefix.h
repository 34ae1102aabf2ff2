// JSON mode (`response_format: {"type": "json_object"}`): whether a text is a prefix of
// a JSON object (RFC 8259), fed a byte at a time. The sampler asks it of every token's
// bytes before each pick, so the model can only write text that still becomes one JSON
// object; the request ends when the object closes.
//
// Small and copied per token tried: a fixed stack of containers (deeper nesting than
// kMaxDepth is refused), and white space held to json_lexer's rule, so that a model
// cannot idle in white space until max_tokens.
#pragma once
#include <cstdint>
#include <string_view>

namespace moeflow::serve {

class JsonPrefix {
 public:
  static constexpr int kMaxDepth = 32;

  // Appends one byte; false (the state then undefined) if the text would no longer be a
  // prefix of one JSON object.
  bool feed(unsigned char c);
  // Appends bytes on a copy: whether they keep the text a prefix. Empty bytes do not.
  bool accepts(std::string_view bytes) const;
  // The top-level object is closed.
  bool done() const { return at_ == At::done; }
  // Inside a string, past any escape: every byte but '"', '\\' and control bytes is
  // taken as content and leaves the state as it is.
  bool in_string_body() const { return at_ == At::string && string_ == 0; }

 private:
  enum class At : uint8_t { start, value, key_or_end, key, colon, after_value, value_or_end, string, number, literal, done };
  bool value_start(unsigned char c);
  bool close(unsigned char c);   // '}' or ']' ends the innermost container
  void value_done();             // a value ended: after it, or done at the top level

  At at_ = At::start;
  char stack_[kMaxDepth] = {};   // '{' or '['
  int depth_ = 0;
  uint8_t spaces_ = 0;           // json_lexer::space_next's state
  bool key_ = false;             // the string is an object key
  uint8_t string_ = 0;           // json_lexer::string_next's state
  uint8_t num_ = 0;              // json_lexer::number_next's state
  const char* literal_ = nullptr;  // what is left of true / false / null
};

}  // namespace moeflow::serve

// response_format {"type": "json_schema"}: whether a text is a prefix of an instance of a
// compiled schema (serve/json_schema.h), fed a byte at a time, with the interface of
// JsonPrefix so that the same vocabulary filter serves both.
//
// A byte can leave several readings open (anyOf alternatives that start alike, an enum
// value that may go on or end), so the state is a set of paths, each a stack of frames;
// a byte keeps the paths that take it. The state is copied for every token tried, so
// the frames live in fixed arrays and a copy moves only the frames in use.
#pragma once
#include <cstdint>
#include <string_view>

#include "serve/json_schema.h"

namespace moeflow::serve {

class JsonSchemaPrefix {
 public:
  static constexpr int kMaxDepth = 32;  // nesting of objects and arrays
  static constexpr int kMaxPaths = 16;  // readings kept open; more are dropped (the text stays valid)

  explicit JsonSchemaPrefix(const JsonSchema& schema);
  JsonSchemaPrefix(const JsonSchemaPrefix& o) { copy_from(o); }
  JsonSchemaPrefix& operator=(const JsonSchemaPrefix& o) {
    if (this != &o) copy_from(o);
    return *this;
  }

  // Appends one byte; false (the state then unchanged) if the text would no longer be
  // a prefix of an instance.
  bool feed(unsigned char c);
  // Appends bytes on a copy: whether they keep the text a prefix. Empty bytes do not.
  bool accepts(std::string_view bytes) const;
  // The root object is closed.
  bool done() const;
  // Every path is inside a free string (no enum, no key), past any escape: every byte
  // but '"', '\\' and control bytes is taken as content and leaves the state as it is.
  bool in_string_body() const;

  struct Frame {
    int32_t node;
    uint8_t phase;
    uint8_t sub;           // string: json_lexer::string_next's state; number: number_next's
    uint16_t count;        // object: the next property's index; array: items so far
    uint16_t lo, hi, pos;  // literal and key matching: the candidate range and bytes matched
    uint16_t chosen;       // object: the property whose value is being written
  };
  struct Path {
    uint8_t depth;
    uint8_t spaces;  // json_lexer::space_next's state
    bool started;
    Frame frames[kMaxDepth];
  };

 private:
  void copy_from(const JsonSchemaPrefix& o);

  const JsonSchema* schema_;
  int n_paths_ = 0;
  Path paths_[kMaxPaths];
};

}  // namespace moeflow::serve

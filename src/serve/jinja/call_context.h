// What builtins (filters, tests, methods, globals, operators) may ask of the evaluator
// that calls them: raise an error at the node being evaluated, account for the bytes a
// new value holds against the render's budget, and call a value (a macro or builtin).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/error.h"
#include "serve/jinja/value.h"

namespace moeflow::serve::jinja {

// Bounds on one render, so that a hostile template from a model file cannot hang the
// server, exhaust its memory or its stack. Each bound, when hit, is an InputError that
// names it.
struct RenderLimits {
  size_t max_output_bytes = size_t{16} << 20;   // the rendered prompt
  size_t max_string_bytes = size_t{16} << 20;   // any one string value
  size_t max_list_items = size_t{1} << 20;      // any one list or dict (range() included)
  uint64_t max_bytes_built = uint64_t{1} << 30; // all strings and containers made, summed
  uint64_t max_steps = 20'000'000;              // expression and statement evaluations
  uint64_t max_loop_iterations = 1'000'000;     // for-loop iterations, summed over the render
  int max_depth = 256;                          // nested evaluation (expressions, blocks, macro calls)
  int max_value_depth = 32;                     // lists and dicts inside each other
};

class CallContext {
 public:
  virtual ~CallContext() = default;
  // Throws InputError naming the template position being evaluated.
  [[noreturn]] void fail(const std::string& what) const { throw InputError(where() + what); }
  // "chat template: line L, column C: " for the node being evaluated.
  virtual std::string where() const = 0;
  // Accounts for a newly built value of `bytes` bytes (or `items` container entries);
  // fails when a limit is passed.
  virtual void charge_string(size_t bytes) = 0;
  virtual void charge_items(size_t items) = 0;
  virtual Value call(const Value& callee, CallArgs& args) = 0;
  virtual const RenderLimits& limits() const = 0;
  // Seconds since the epoch for strftime_now, and whether to format it as UTC (a fixed
  // time given by the caller) or local time (the clock).
  virtual int64_t now_seconds(bool* utc) const = 0;
};

}  // namespace moeflow::serve::jinja

// Streamed text is sent as it comes except where a marker (a stop string, a tool-call
// tag, a reply's section tag) may be starting: these find a complete marker, and the
// tail that could still become one once the next token arrives.
#pragma once
#include <algorithm>
#include <cstddef>
#include <string_view>

namespace moeflow::serve {

// Where the first of `markers` occurs in `s`, or npos.
template <class Markers>
size_t find_first_marker(std::string_view s, const Markers& markers) {
  size_t at = std::string_view::npos;
  for (const std::string_view m : markers) at = std::min(at, s.find(m));
  return at;
}

// The length of the longest tail of `s` that is a proper prefix of one of `markers`.
template <class Markers>
size_t partial_marker_tail(std::string_view s, const Markers& markers) {
  size_t keep = 0;
  for (const std::string_view m : markers)
    for (size_t k = std::min(s.size(), m.empty() ? 0 : m.size() - 1); k > keep; --k)
      if (s.substr(s.size() - k) == m.substr(0, k)) {
        keep = k;
        break;
      }
  return keep;
}

}  // namespace moeflow::serve

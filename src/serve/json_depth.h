// How deep a parsed JSON value nests, found without recursion. nlohmann::json parses
// and frees any depth without recursing, but dump() and most code walking a value
// recurse once per level: a request's 8 MiB of "[[[[..." would overflow the stack. Values
// from outside that are walked or written again are checked first.
#pragma once
#include <utility>
#include <vector>

namespace moeflow::serve {

constexpr int kMaxJsonDepth = 128;  // far past any real schema or arguments object

template <class Json>
bool json_deeper_than(const Json& root, int limit) {
  std::vector<std::pair<const Json*, int>> todo{{&root, 1}};
  while (!todo.empty()) {
    const auto [v, depth] = todo.back();
    todo.pop_back();
    if (depth > limit) return true;
    if (v->is_object() || v->is_array())
      for (const auto& child : *v) todo.emplace_back(&child, depth + 1);
  }
  return false;
}

}  // namespace moeflow::serve

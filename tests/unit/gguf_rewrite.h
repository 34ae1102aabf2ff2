// A copy of a fixture with metadata keys set (added if absent) or dropped and tensors
// dropped: how the loader tests make a bad or variant file from a good one.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "test_paths.h"

namespace moeflow::testing {

inline std::string rewrite_gguf(const std::string& src, const std::string& scratch_name,
                                const std::map<std::string, gguf::Value>& set,
                                const std::set<std::string>& drop_keys = {},
                                const std::set<std::string>& drop_tensors = {}) {
  auto f = gguf::GgufFile::open(src);
  gguf::GgufWriter w(f->alignment());
  for (const std::string& k : f->metadata_order())
    if (!drop_keys.count(k)) w.set(k, set.count(k) ? set.at(k) : f->get(k));
  for (const auto& [k, v] : set)
    if (!f->has(k)) w.set(k, v);
  for (const auto& t : f->tensors())
    if (!drop_tensors.count(t.name)) w.add_tensor(t.name, t.dims, t.dtype, std::vector<uint8_t>(t.data, t.data + t.nbytes));
  const std::string out = scratch_path(scratch_name) + ".gguf";
  w.write(out);
  return out;
}

}  // namespace moeflow::testing

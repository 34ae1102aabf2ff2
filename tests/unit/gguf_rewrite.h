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

// A copy of a fixture with f32 tensors added: name -> (dims, values).
inline std::string add_f32_tensors(const std::string& src, const std::string& scratch_name,
                                   const std::map<std::string, std::pair<std::vector<uint64_t>, std::vector<float>>>& add) {
  auto f = gguf::GgufFile::open(src);
  gguf::GgufWriter w(f->alignment());
  for (const std::string& k : f->metadata_order()) w.set(k, f->get(k));
  for (const auto& t : f->tensors()) w.add_tensor(t.name, t.dims, t.dtype, std::vector<uint8_t>(t.data, t.data + t.nbytes));
  for (const auto& [name, tensor] : add) {
    const auto* p = reinterpret_cast<const uint8_t*>(tensor.second.data());
    w.add_tensor(name, tensor.first, DType::F32, std::vector<uint8_t>(p, p + tensor.second.size() * sizeof(float)));
  }
  const std::string out = scratch_path(scratch_name) + ".gguf";
  w.write(out);
  return out;
}

// A copy of a fixture with every layer's ffn_gate_exps and ffn_up_exps (and their
// biases, gpt-oss) fused into ffn_gate_up_exps as llama.cpp's converter writes it with
// --fuse-gate-up-exps: {n_embd, 2 ff, n_expert}, each expert's gate rows then its up rows.
inline std::string fuse_gate_up(const std::string& src, const std::string& scratch_name) {
  auto f = gguf::GgufFile::open(src);
  gguf::GgufWriter w(f->alignment());
  for (const std::string& k : f->metadata_order()) w.set(k, f->get(k));
  const auto fused_name = [](const std::string& gate) {
    std::string n = gate;
    n.replace(n.find("ffn_gate_exps"), 13, "ffn_gate_up_exps");
    return n;
  };
  for (const auto& t : f->tensors()) {
    const size_t at = t.name.find("ffn_up_exps");
    if (at != std::string::npos) continue;  // written with its gate
    if (t.name.find("ffn_gate_exps") == std::string::npos) {
      w.add_tensor(t.name, t.dims, t.dtype, std::vector<uint8_t>(t.data, t.data + t.nbytes));
      continue;
    }
    std::string up_name = t.name;
    up_name.replace(up_name.find("ffn_gate_exps"), 13, "ffn_up_exps");
    const gguf::TensorInfo& up = f->tensor(up_name);
    const uint64_t n_expert = t.dims.back();
    const size_t per = t.nbytes / n_expert;
    std::vector<uint8_t> bytes;
    for (uint64_t e = 0; e < n_expert; ++e) {
      bytes.insert(bytes.end(), t.data + e * per, t.data + (e + 1) * per);
      bytes.insert(bytes.end(), up.data + e * per, up.data + (e + 1) * per);
    }
    std::vector<uint64_t> dims = t.dims;
    dims[dims.size() - 2] *= 2;  // the rows (a weight) or the values (a bias) per expert
    w.add_tensor(fused_name(t.name), dims, t.dtype, bytes);
  }
  const std::string out = scratch_path(scratch_name) + ".gguf";
  w.write(out);
  return out;
}

}  // namespace moeflow::testing

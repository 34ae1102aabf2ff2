// The logits interchange file written by `moeflow run --logits-out` and by the
// PyTorch reference (tools/reference), so any two implementations can be compared.
// Little-endian:
//   bytes 0-3  magic "MFLG"
//   u32        version (1)
//   u32        n_positions
//   u32        n_vocab
//   i32        token id fed at each position          [n_positions]
//   f32        logits after each position, row-major  [n_positions][n_vocab]
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace moeflow {

struct LogitsRecord {
  int64_t n_vocab = 0;
  std::vector<int32_t> tokens;  // one per position
  std::vector<float> logits;    // tokens.size() * n_vocab
};

void write_logits_file(const std::string& path, const LogitsRecord& r);
// Throws InputError naming the file and what is wrong (magic, version, size).
LogitsRecord read_logits_file(const std::string& path);

}  // namespace moeflow

#include "engine/logits_file.h"

#include <cstring>
#include <fstream>

#include "base/atomic_file.h"
#include "base/error.h"
#include "base/input_file.h"

namespace moeflow {

void write_logits_file(const std::string& path, const LogitsRecord& r) {
  AtomicFile out(path);
  const uint32_t hdr[3] = {1, static_cast<uint32_t>(r.tokens.size()), static_cast<uint32_t>(r.n_vocab)};
  out.write("MFLG", 4);
  out.write(hdr, sizeof hdr);
  out.write(r.tokens.data(), r.tokens.size() * 4);
  out.write(r.logits.data(), r.logits.size() * 4);
  out.commit();
}

LogitsRecord read_logits_file(const std::string& path) {
  std::ifstream in = open_input_file(path, "logits file", true);
  char magic[4];
  uint32_t hdr[3];
  in.read(magic, 4);
  in.read(reinterpret_cast<char*>(hdr), sizeof hdr);
  if (!in || std::memcmp(magic, "MFLG", 4) != 0) throw InputError(path + ": not a logits file (bad magic at offset 0)");
  if (hdr[0] != 1) throw InputError(path + ": unsupported logits file version " + std::to_string(hdr[0]) + " at offset 4");
  if (hdr[1] > (1u << 24) || hdr[2] > (1u << 24) || static_cast<uint64_t>(hdr[1]) * hdr[2] > (1ull << 32))
    throw InputError(path + ": absurd size " + std::to_string(hdr[1]) + " x " + std::to_string(hdr[2]) + " at offset 8");
  LogitsRecord r;
  r.n_vocab = hdr[2];
  r.tokens.resize(hdr[1]);
  r.logits.resize(static_cast<size_t>(hdr[1]) * hdr[2]);
  in.read(reinterpret_cast<char*>(r.tokens.data()), static_cast<std::streamsize>(r.tokens.size() * 4));
  in.read(reinterpret_cast<char*>(r.logits.data()), static_cast<std::streamsize>(r.logits.size() * 4));
  if (!in) throw InputError(path + ": truncated (expected " + std::to_string(16 + r.tokens.size() * 4 + r.logits.size() * 4) + " bytes)");
  return r;
}

}  // namespace moeflow

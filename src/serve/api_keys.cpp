#include "serve/api_keys.h"

#include <cctype>
#include <fstream>

#include "base/error.h"
#include "base/input_file.h"

namespace moeflow::serve {

void check_api_key(const std::string& key, const std::string& where) {
  if (key.empty()) throw InputError(where + ": the API key is empty");
  for (size_t i = 0; i < key.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(key[i]);
    if (c <= 0x20 || c >= 0x7f)
      throw InputError(where + ": the API key has a space, control or non-ASCII byte at offset " + std::to_string(i) +
                       " (keys are printable ASCII, as an HTTP header carries them)");
  }
}

std::vector<std::string> read_api_keys(const std::string& path) {
  std::ifstream in = open_input_file(path, "--api-key-file");
  std::vector<std::string> keys;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const size_t b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos || line[b] == '#') continue;
    const size_t e = line.find_last_not_of(" \t\r");
    keys.push_back(line.substr(b, e - b + 1));
    check_api_key(keys.back(), "--api-key-file '" + path + "' line " + std::to_string(n));
  }
  if (in.bad()) throw InputError("--api-key-file '" + path + "' cannot be read");
  if (keys.empty()) throw InputError("--api-key-file '" + path + "' holds no key (one a line; '#' starts a comment)");
  return keys;
}

namespace {

// Equal strings, in time that depends on their lengths only.
bool same_bytes(std::string_view a, std::string_view b) {
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i]) ^ static_cast<unsigned char>(i < b.size() ? b[i] : 0);
  return diff == 0;
}

}  // namespace

bool authorized(const std::vector<std::string>& keys, std::string_view authorization) {
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() < kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kScheme[i]) return false;
  std::string_view token = authorization.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  bool ok = false;
  for (const std::string& k : keys) ok |= same_bytes(k, token);  // every key compared, a match or not
  return ok;
}

}  // namespace moeflow::serve

// JSON mode's question before each pick, "which tokens keep the text a prefix of one
// object?", answered for a whole vocabulary at once. Asking JsonPrefix::accepts of every
// token walks each token's bytes on a copy of the state (2-3 ms a pick at a 150k
// vocabulary); most of those walks are decided by the first byte, and inside a string
// most tokens are plain string bytes, which need no walk at all.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "serve/json_prefix.h"

namespace moeflow::serve {

class JsonTokenFilter {
 public:
  // `texts`: every token's bytes as the detokenizer writes them; kept by reference.
  explicit JsonTokenFilter(const std::vector<std::string>& texts);
  // allowed[t] = p.accepts(texts[t]) for every token t (1 or 0).
  void allowed(const JsonPrefix& p, std::vector<uint8_t>& allowed) const;

 private:
  const std::vector<std::string>& texts_;
  std::array<std::vector<int32_t>, 256> by_first_byte_;  // tokens of at least one byte
  // Every byte after the first is string content (not '"', '\\' or a control byte), so
  // a string that takes the first byte and stays open takes the rest.
  std::vector<uint8_t> plain_tail_;
};

}  // namespace moeflow::serve

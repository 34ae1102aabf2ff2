// JSON mode's and a schema's question before each pick, "which tokens keep the text a
// prefix of one object (of the schema)?", answered for a whole vocabulary at once.
// Asking accepts() of every token walks each token's bytes on a copy of the state; most
// of those walks are decided by the first byte, and inside a string most tokens are
// plain string bytes, which need no walk at all.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moeflow::serve {

class JsonTokenFilter {
 public:
  // `texts`: every token's bytes as the detokenizer writes them; kept by reference.
  explicit JsonTokenFilter(const std::vector<std::string>& texts);
  // allowed[t] = p.accepts(texts[t]) for every token t (1 or 0). Prefix is JsonPrefix
  // or JsonSchemaPrefix: feed(), accepts() and in_string_body().
  template <class Prefix>
  void allowed(const Prefix& p, std::vector<uint8_t>& allowed) const {
    allowed.assign(texts_.size(), 0);
    for (int b = 0; b < 256; ++b) {
      const std::vector<int32_t>& group = by_first_byte_[static_cast<size_t>(b)];
      if (group.empty()) continue;
      Prefix after_first = p;
      if (!after_first.feed(static_cast<unsigned char>(b))) continue;  // the whole group refused
      const bool in_string = after_first.in_string_body();
      for (const int32_t t : group) {
        const std::string& s = texts_[static_cast<size_t>(t)];
        allowed[static_cast<size_t>(t)] = s.size() == 1 || (in_string && plain_tail_[static_cast<size_t>(t)]) ||
                                          after_first.accepts(std::string_view(s).substr(1));
      }
    }
  }

 private:
  const std::vector<std::string>& texts_;
  std::array<std::vector<int32_t>, 256> by_first_byte_;  // tokens of at least one byte
  // Every byte after the first is string content (not '"', '\\' or a control byte), so
  // a string that takes the first byte and stays open takes the rest.
  std::vector<uint8_t> plain_tail_;
};

}  // namespace moeflow::serve

#include "serve/json_token_filter.h"

#include <string_view>

namespace moeflow::serve {

namespace {

bool string_content(unsigned char c) { return c >= 0x20 && c != '"' && c != '\\'; }

}  // namespace

JsonTokenFilter::JsonTokenFilter(const std::vector<std::string>& texts)
    : texts_(texts), plain_tail_(texts.size(), 0) {
  for (size_t t = 0; t < texts.size(); ++t) {
    const std::string& s = texts[t];
    if (s.empty()) continue;
    by_first_byte_[static_cast<unsigned char>(s[0])].push_back(static_cast<int32_t>(t));
    bool plain = true;
    for (size_t i = 1; i < s.size() && plain; ++i) plain = string_content(static_cast<unsigned char>(s[i]));
    plain_tail_[t] = plain;
  }
}

void JsonTokenFilter::allowed(const JsonPrefix& p, std::vector<uint8_t>& allowed) const {
  allowed.assign(texts_.size(), 0);
  for (int b = 0; b < 256; ++b) {
    const std::vector<int32_t>& group = by_first_byte_[static_cast<size_t>(b)];
    if (group.empty()) continue;
    JsonPrefix after_first = p;
    if (!after_first.feed(static_cast<unsigned char>(b))) continue;  // the whole group refused
    const bool in_string = after_first.in_string_body();
    for (const int32_t t : group) {
      const std::string& s = texts_[static_cast<size_t>(t)];
      allowed[static_cast<size_t>(t)] =
          s.size() == 1 || (in_string && plain_tail_[static_cast<size_t>(t)]) ||
          after_first.accepts(std::string_view(s).substr(1));
    }
  }
}

}  // namespace moeflow::serve

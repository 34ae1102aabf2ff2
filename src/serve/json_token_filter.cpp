#include "serve/json_token_filter.h"

namespace moeflow::serve {

namespace {

bool string_content(unsigned char c) { return c >= 0x20 && c != '"' && c != '\\'; }

}  // namespace

JsonTokenFilter::JsonTokenFilter(const std::vector<std::string>& texts) : texts_(texts), plain_tail_(texts.size(), 0) {
  for (size_t t = 0; t < texts.size(); ++t) {
    const std::string& s = texts[t];
    if (s.empty()) continue;
    by_first_byte_[static_cast<unsigned char>(s[0])].push_back(static_cast<int32_t>(t));
    bool plain = true;
    for (size_t i = 1; i < s.size() && plain; ++i) plain = string_content(static_cast<unsigned char>(s[i]));
    plain_tail_[t] = plain;
  }
}

}  // namespace moeflow::serve

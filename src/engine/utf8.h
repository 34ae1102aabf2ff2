// Small UTF-8 helpers shared by the tokenizers and the streaming detokenizer.
// Validation follows the Unicode "maximal subpart" rule (as ICU, Python and browsers
// do): an ill-formed sequence is replaced by one U+FFFD per maximal prefix of a
// well-formed sequence, so a truncated 4-byte character gives one U+FFFD, not four.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace moeflow::utf8 {

inline constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// Examines the sequence starting at p[0] (n >= 1 bytes available).
//   > 0 : a well-formed character of that many bytes; *cp receives its code point.
//   = 0 : a well-formed but truncated prefix (all n bytes belong to it); more bytes
//         could still complete it.
//   < 0 : ill-formed; -r is the length of the maximal subpart to replace (>= 1).
inline int decode(const unsigned char* p, size_t n, uint32_t* cp) {
  const unsigned b0 = p[0];
  if (b0 < 0x80) {
    if (cp) *cp = b0;
    return 1;
  }
  int need;
  unsigned lo = 0x80, hi = 0xBF;
  uint32_t v;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2; v = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3; v = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;        // no overlong forms
    if (b0 == 0xED) hi = 0x9F;        // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4; v = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;        // no overlong forms
    if (b0 == 0xF4) hi = 0x8F;        // nothing past U+10FFFF
  } else {
    return -1;  // stray continuation byte, C0/C1, F5..FF
  }
  for (int k = 1; k < need; ++k) {
    if (static_cast<size_t>(k) >= n) return 0;
    const unsigned b = p[k];
    const unsigned l = (k == 1) ? lo : 0x80u, h = (k == 1) ? hi : 0xBFu;
    if (b < l || b > h) return -k;
    v = (v << 6) | (b & 0x3F);
  }
  if (cp) *cp = v;
  return need;
}

// Length of the character (or of the single ill-formed/truncated byte run to treat as
// one unit) starting at s[i]; always >= 1 when i < s.size(). Used to split text into
// characters where ill-formed input must still be carried through byte for byte.
inline size_t char_len(const std::string& s, size_t i, uint32_t* cp = nullptr) {
  const int r = decode(reinterpret_cast<const unsigned char*>(s.data()) + i, s.size() - i, cp);
  if (r > 0) return static_cast<size_t>(r);
  if (cp) *cp = 0xFFFD;
  return 1;  // ill-formed or truncated: one byte at a time
}

inline void append(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Appends the well-formed part of `in` to `out`, replacing ill-formed bytes with
// U+FFFD. If `final` is false, a truncated trailing sequence is left unconsumed.
// Returns the number of bytes of `in` consumed.
inline size_t sanitize(const std::string& in, std::string& out, bool final) {
  const auto* p = reinterpret_cast<const unsigned char*>(in.data());
  size_t i = 0;
  while (i < in.size()) {
    const int r = decode(p + i, in.size() - i, nullptr);
    if (r > 0) {
      out.append(in, i, static_cast<size_t>(r));
      i += static_cast<size_t>(r);
    } else if (r == 0) {
      if (!final) break;
      out += kReplacement;  // the whole truncated tail is one maximal subpart
      i = in.size();
    } else {
      out += kReplacement;
      i += static_cast<size_t>(-r);
    }
  }
  return i;
}

}  // namespace moeflow::utf8

#include "serve/jinja/text.h"

#include <cstdio>

namespace moeflow::serve::jinja::text {
namespace {

// Length of the UTF-8 sequence starting at s[i] (1 for an invalid byte) and its code point.
size_t decode(std::string_view s, size_t i, uint32_t* cp) {
  const auto b = static_cast<unsigned char>(s[i]);
  size_t n = 1;
  uint32_t v = b;
  if (b >= 0xC0 && b < 0xE0) n = 2, v = b & 0x1F;
  else if (b >= 0xE0 && b < 0xF0) n = 3, v = b & 0x0F;
  else if (b >= 0xF0 && b < 0xF8) n = 4, v = b & 0x07;
  if (n == 1 || i + n > s.size()) {
    *cp = b;
    return 1;
  }
  for (size_t k = 1; k < n; ++k) {
    const auto c = static_cast<unsigned char>(s[i + k]);
    if ((c & 0xC0) != 0x80) {
      *cp = b;
      return 1;
    }
    v = (v << 6) | (c & 0x3F);
  }
  *cp = v;
  return n;
}

bool in_chars(uint32_t cp, std::string_view chars) {
  for (size_t i = 0; i < chars.size();) {
    uint32_t c = 0;
    i += decode(chars, i, &c);
    if (c == cp) return true;
  }
  return false;
}

bool ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char upper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 32) : c; }
char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }

void append_hex(std::string& out, const char* fmt, uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, fmt, static_cast<unsigned>(v));
  out += buf;
}

}  // namespace

std::vector<size_t> code_point_offsets(std::string_view s) {
  std::vector<size_t> off;
  off.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size();) {
    off.push_back(i);
    uint32_t cp = 0;
    i += decode(s, i, &cp);
  }
  off.push_back(s.size());
  return off;
}

size_t code_point_count(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) {
    uint32_t cp = 0;
    i += decode(s, i, &cp);
  }
  return n;
}

size_t byte_offset(std::string_view s, size_t index) {
  size_t i = 0;
  for (size_t k = 0; k < index && i < s.size(); ++k) {
    uint32_t cp = 0;
    i += decode(s, i, &cp);
  }
  return i;
}

size_t code_point_length(std::string_view s, size_t i) {
  uint32_t cp = 0;
  return decode(s, i, &cp);
}

bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

bool is_space(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

std::string strip(std::string_view s, bool left, bool right, bool has_chars, std::string_view chars) {
  auto strippable = [&](uint32_t cp) { return has_chars ? in_chars(cp, chars) : is_space(cp); };
  // One forward pass, no allocation: skip the leading run, then remember where the last
  // code point that stays ends.
  size_t b = 0;
  while (left && b < s.size()) {
    uint32_t cp = 0;
    const size_t n = decode(s, b, &cp);
    if (!strippable(cp)) break;
    b += n;
  }
  size_t e = right ? b : s.size();
  for (size_t i = b; right && i < s.size();) {
    uint32_t cp = 0;
    i += decode(s, i, &cp);
    if (!strippable(cp)) e = i;
  }
  return std::string(s.substr(b, e - b));
}

std::vector<std::string> split(std::string_view s, bool has_sep, std::string_view sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (has_sep) {
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t hit = s.find(sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep.size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  size_t i = 0;
  auto skip_space = [&] {
    while (i < s.size()) {
      uint32_t cp = 0;
      const size_t n = decode(s, i, &cp);
      if (!is_space(cp)) break;
      i += n;
    }
  };
  skip_space();
  while (i < s.size()) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.emplace_back(s.substr(i));  // the rest, trailing whitespace kept, as Python
      return out;
    }
    const size_t start = i;
    while (i < s.size()) {
      uint32_t cp = 0;
      const size_t n = decode(s, i, &cp);
      if (is_space(cp)) break;
      i += n;
    }
    out.emplace_back(s.substr(start, i - start));
    skip_space();
  }
  return out;
}

std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count) {
  std::string out;
  if (from.empty()) {
    const std::vector<size_t> off = code_point_offsets(s);
    int64_t done = 0;
    for (size_t k = 0; k + 1 < off.size(); ++k) {
      if (count < 0 || done < count) out += to, ++done;
      out += s.substr(off[k], off[k + 1] - off[k]);
    }
    if (count < 0 || done < count) out += to;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out += s.substr(pos, hit - pos);
    out += to;
    pos = hit + from.size();
    ++done;
  }
  out += s.substr(pos);
  return out;
}

std::string ascii_upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = upper(c);
  return out;
}

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = lower(c);
  return out;
}

std::string title(std::string_view s) {
  std::string out(s);
  bool prev_cased = false;
  for (char& c : out) {
    if (ascii_alpha(c)) {
      c = prev_cased ? lower(c) : upper(c);
      prev_cased = true;
    } else {
      prev_cased = false;
    }
  }
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out = ascii_lower(s);
  if (!out.empty()) out[0] = upper(out[0]);
  return out;
}

std::string py_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const size_t n = decode(s, i, &cp);
    if (cp == '\\') out += "\\\\";
    else if (cp == static_cast<uint32_t>(quote)) out += '\\', out += quote;
    else if (cp == '\n') out += "\\n";
    else if (cp == '\r') out += "\\r";
    else if (cp == '\t') out += "\\t";
    else if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) append_hex(out, "\\x%02x", cp);
    else if (cp == 0x2028 || cp == 0x2029 || (cp >= 0x200B && cp <= 0x200F) || cp == 0xFEFF)
      append_hex(out, "\\u%04x", cp);
    else out += s.substr(i, n);
    i += n;
  }
  out += quote;
  return out;
}

std::string json_quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) append_hex(out, "\\u%04x", static_cast<unsigned char>(c));
        else out += c;
    }
  }
  out += '"';
  return out;
}

}  // namespace moeflow::serve::jinja::text

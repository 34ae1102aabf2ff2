// Python's str operations on UTF-8 text, as far as chat templates reach them: strings are
// sequences of code points (length, indexing and slicing count code points), strip() and
// split() know Python's whitespace (Unicode included), and case changes are ASCII only
// (a non-ASCII letter keeps its case: documented in docs/chat_templates.md).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moeflow::serve::jinja::text {

// Byte offsets of each code point's start, plus one past the end (size = count + 1).
// Invalid UTF-8 bytes count as one code point each.
std::vector<size_t> code_point_offsets(std::string_view s);
size_t code_point_count(std::string_view s);
// The byte offset of code point `index` (s.size() for index == count), walking from the
// start without allocating.
size_t byte_offset(std::string_view s, size_t index);
// The byte length of the code point starting at byte i.
size_t code_point_length(std::string_view s, size_t i);
bool is_ascii(std::string_view s);

// Python's str.isspace() for one code point.
bool is_space(uint32_t cp);

// str.strip/lstrip/rstrip: with chars empty and !has_chars, Python's whitespace; else any
// code point in chars.
std::string strip(std::string_view s, bool left, bool right, bool has_chars, std::string_view chars);
// str.split(): on runs of whitespace when !has_sep, else on sep (non-empty). maxsplit < 0
// means no limit.
std::vector<std::string> split(std::string_view s, bool has_sep, std::string_view sep, int64_t maxsplit);
// str.replace(old, new, count); count < 0 replaces all. An empty old inserts between code points.
std::string replace(std::string_view s, std::string_view from, std::string_view to, int64_t count);

std::string ascii_upper(std::string_view s);
std::string ascii_lower(std::string_view s);
// str.title() and str.capitalize() for ASCII letters.
std::string title(std::string_view s);
std::string capitalize(std::string_view s);

// Python's repr() of a str ('it' or "it's", escapes for control characters).
std::string py_repr(std::string_view s);
// json.dumps of a str with ensure_ascii=False (as Hugging Face's tojson).
std::string json_quote(std::string_view s);

}  // namespace moeflow::serve::jinja::text

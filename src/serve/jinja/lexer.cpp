#include "serve/jinja/lexer.h"

#include <cstdlib>
#include <limits>

#include "base/error.h"
#include "engine/utf8.h"

namespace moeflow::serve::jinja {

std::string to_string(SourcePos p) { return "line " + std::to_string(p.line) + ", column " + std::to_string(p.column); }

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || static_cast<unsigned char>(c) >= 0x80;
}
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

class Lexer {
 public:
  explicit Lexer(std::string_view raw) {
    // jinja2 normalises \r\n and \r to \n and drops one trailing newline.
    src_.reserve(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '\r') {
        src_ += '\n';
        if (i + 1 < raw.size() && raw[i + 1] == '\n') ++i;
      } else {
        src_ += raw[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      const size_t tag = find_tag(pos);
      if (tag == std::string::npos) {
        emit_text(src_.substr(pos), pos);
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      char sign = 0;
      if (tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+')) sign = src_[tag + 2];
      std::string text = src_.substr(pos, tag - pos);
      if (sign == '-') {
        size_t e = text.size();
        while (e > 0 && is_ws(text[e - 1])) --e;
        text.resize(e);
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: a block or comment tag alone on its line after indentation.
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if ((l_pos > 0 || line_starting) && l_pos < text.size()) {
          bool all_ws = true;
          for (size_t i = l_pos; i < text.size(); ++i) all_ws = all_ws && is_ws(text[i]);
          if (all_ws) text.resize(l_pos);
        }
      }
      emit_text(text, pos);
      const size_t body = tag + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        pos = lex_comment(tag, body);
      } else if (kind == '%' && is_raw_begin(body)) {
        pos = lex_raw(tag, body);
      } else {
        pos = lex_tag(tag, body, kind == '{');
      }
      line_starting = pos > 0 && src_[pos - 1] == '\n';
    }
    Token end;
    end.kind = TokenKind::kEnd;
    end.pos = pos_of(src_.size());
    tokens_.push_back(end);
    return std::move(tokens_);
  }

 private:
  SourcePos pos_of(size_t off) const {
    size_t lo = 0, hi = line_starts_.size();
    while (hi - lo > 1) {
      const size_t mid = (lo + hi) / 2;
      if (line_starts_[mid] <= off) lo = mid;
      else hi = mid;
    }
    return SourcePos{static_cast<int>(lo + 1), static_cast<int>(off - line_starts_[lo] + 1)};
  }

  [[noreturn]] void fail(size_t off, const std::string& what) const {
    throw InputError("chat template: " + to_string(pos_of(off)) + ": " + what);
  }

  size_t find_tag(size_t from) const {
    for (size_t i = src_.find('{', from); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return std::string::npos;
  }

  void emit_text(std::string text, size_t off) {
    if (text.empty()) return;
    Token t;
    t.kind = TokenKind::kText;
    t.text = std::move(text);
    t.pos = pos_of(off);
    tokens_.push_back(std::move(t));
  }

  void push(TokenKind kind, std::string text, size_t off) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.pos = pos_of(off);
    tokens_.push_back(std::move(t));
  }

  // After a block or comment end: `-` strips all following whitespace, `+` nothing, and
  // otherwise trim_blocks removes one newline.
  size_t after_block_end(size_t end, char sign) const {
    if (sign == '-') {
      while (end < src_.size() && is_ws(src_[end])) ++end;
    } else if (sign != '+' && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    return end;
  }

  size_t lex_comment(size_t tag, size_t body) {
    const size_t close = src_.find("#}", body);
    if (close == std::string::npos) fail(tag, "unclosed comment '{#'");
    char sign = 0;
    if (close > body && (src_[close - 1] == '-' || src_[close - 1] == '+')) sign = src_[close - 1];
    return after_block_end(close + 2, sign);
  }

  // `{% raw %}` (no trim_blocks after it, as in jinja2).
  bool is_raw_begin(size_t body) const {
    size_t i = body;
    while (i < src_.size() && is_ws(src_[i])) ++i;
    if (src_.compare(i, 3, "raw") != 0) return false;
    i += 3;
    if (i < src_.size() && is_name_char(src_[i])) return false;
    while (i < src_.size() && is_ws(src_[i])) ++i;
    return src_.compare(i, 2, "%}") == 0 || src_.compare(i, 3, "-%}") == 0;
  }

  size_t lex_raw(size_t tag, size_t body) {
    size_t i = src_.find("%}", body);
    const bool strip_after = src_[i - 1] == '-';
    i += 2;
    if (strip_after)
      while (i < src_.size() && is_ws(src_[i])) ++i;
    for (size_t k = src_.find("{%", i); k != std::string::npos; k = src_.find("{%", k + 1)) {
      size_t j = k + 2;
      char sign = 0;
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) sign = src_[j++];
      while (j < src_.size() && is_ws(src_[j])) ++j;
      if (src_.compare(j, 6, "endraw") != 0) continue;
      j += 6;
      while (j < src_.size() && is_ws(src_[j])) ++j;
      char end_sign = 0;
      if (j < src_.size() && (src_[j] == '-' || src_[j] == '+')) end_sign = src_[j++];
      if (src_.compare(j, 2, "%}") != 0) continue;
      std::string text = src_.substr(i, k - i);
      if (sign == '-') {
        while (!text.empty() && is_ws(text.back())) text.pop_back();
      } else if (sign != '+') {
        const size_t nl = text.rfind('\n');
        const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
        if (l_pos > 0 && l_pos < text.size()) {
          bool all_ws = true;
          for (size_t q = l_pos; q < text.size(); ++q) all_ws = all_ws && is_ws(text[q]);
          if (all_ws) text.resize(l_pos);
        }
      }
      emit_text(std::move(text), i);
      return after_block_end(j + 2, end_sign);
    }
    fail(tag, "unclosed '{% raw %}' (no '{% endraw %}')");
  }

  size_t lex_tag(size_t tag, size_t i, bool variable) {
    push(variable ? TokenKind::kVarBegin : TokenKind::kBlockBegin, variable ? "{{" : "{%", tag);
    std::vector<char> open;  // brackets still open: the end tag only counts outside them
    while (true) {
      while (i < src_.size() && is_ws(src_[i])) ++i;
      if (i >= src_.size()) fail(tag, std::string("unclosed '") + (variable ? "{{" : "{%") + "' tag");
      if (open.empty()) {
        if (variable) {
          if (src_.compare(i, 3, "-}}") == 0) {
            push(TokenKind::kVarEnd, "}}", i);
            i += 3;
            while (i < src_.size() && is_ws(src_[i])) ++i;
            return i;
          }
          if (src_.compare(i, 2, "}}") == 0) {
            push(TokenKind::kVarEnd, "}}", i);
            return i + 2;
          }
        } else {
          char sign = 0;
          size_t j = i;
          if (src_[j] == '-' || src_[j] == '+') sign = src_[j++];
          if (src_.compare(j, 2, "%}") == 0) {
            push(TokenKind::kBlockEnd, "%}", i);
            return after_block_end(j + 2, sign);
          }
        }
      }
      const char c = src_[i];
      if (is_digit(c)) {
        i = lex_number(i);
      } else if (is_name_start(c)) {
        size_t j = i;
        while (j < src_.size() && is_name_char(src_[j])) ++j;
        push(TokenKind::kName, src_.substr(i, j - i), i);
        i = j;
      } else if (c == '\'' || c == '"') {
        i = lex_string(i);
      } else {
        static const char* const kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* t : kTwo)
          if (src_.compare(i, 2, t) == 0) op = t;
        if (op.empty()) {
          if (std::string_view("+-*/%~[](){}<>=.:|,;").find(c) == std::string_view::npos)
            fail(i, std::string("unexpected character '") + c + "' in a tag");
          op = std::string(1, c);
          if (c == '(' || c == '[' || c == '{') open.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
          if (c == ')' || c == ']' || c == '}') {
            if (open.empty() || open.back() != c) fail(i, std::string("unbalanced '") + c + "'");
            open.pop_back();
          }
        }
        push(TokenKind::kOperator, op, i);
        i += op.size();
      }
    }
  }

  size_t lex_number(size_t i) {
    const size_t start = i;
    auto digits = [&] {
      while (i < src_.size() && (is_digit(src_[i]) || (src_[i] == '_' && i + 1 < src_.size() && is_digit(src_[i + 1]))))
        ++i;
    };
    digits();
    bool is_float = false;
    // After '.', as in x.0, a number is an integer index (jinja2's (?<!\.) rule).
    const bool after_dot = !tokens_.empty() && tokens_.back().kind == TokenKind::kOperator && tokens_.back().text == ".";
    if (!after_dot && i + 1 < src_.size() && src_[i] == '.' && is_digit(src_[i + 1])) {
      is_float = true;
      ++i;
      digits();
    }
    if (!after_dot && i < src_.size() && (src_[i] == 'e' || src_[i] == 'E')) {
      size_t j = i + 1;
      if (j < src_.size() && (src_[j] == '+' || src_[j] == '-')) ++j;
      if (j < src_.size() && is_digit(src_[j])) {
        is_float = true;
        i = j;
        digits();
      }
    }
    std::string lit;
    for (size_t k = start; k < i; ++k)
      if (src_[k] != '_') lit += src_[k];
    Token t;
    t.pos = pos_of(start);
    t.text = lit;
    if (is_float) {
      t.kind = TokenKind::kFloat;
      t.float_value = std::strtod(lit.c_str(), nullptr);
    } else {
      t.kind = TokenKind::kInt;
      int64_t v = 0;
      for (char d : lit) {
        if (v > (std::numeric_limits<int64_t>::max() - (d - '0')) / 10) fail(start, "integer literal too large: " + lit);
        v = v * 10 + (d - '0');
      }
      t.int_value = v;
    }
    tokens_.push_back(std::move(t));
    return i;
  }

  // Python's unicode-escape rules, as jinja2 applies them to string literals.
  size_t lex_string(size_t i) {
    const char quote = src_[i];
    const size_t start = i++;
    std::string out;
    while (true) {
      if (i >= src_.size()) fail(start, "unterminated string literal");
      const char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) fail(start, "unterminated string literal");
      const char e = src_[i + 1];
      i += 2;
      switch (e) {
        case '\n': break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'v': out += '\v'; break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          for (size_t k = 0; k < n; ++k, ++i) {
            if (i >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[i])))
              fail(i - 2 - k, std::string("truncated \\") + e + " escape in a string literal");
            const char h = src_[i];
            cp = cp * 16 + static_cast<uint32_t>(is_digit(h) ? h - '0' : (h | 0x20) - 'a' + 10);
          }
          if (cp > 0x10FFFF) fail(start, "escape beyond U+10FFFF in a string literal");
          utf8::append(out, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i)
              cp = cp * 8 + static_cast<uint32_t>(src_[i] - '0');
            utf8::append(out, cp);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    Token t;
    t.kind = TokenKind::kString;
    t.text = std::move(out);
    t.pos = pos_of(start);
    tokens_.push_back(std::move(t));
    return i + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace moeflow::serve::jinja

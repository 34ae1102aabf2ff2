// The two BPE encoders: GPT-2 byte-level BPE (merge ranks) and SentencePiece-style
// BPE (piece scores), both as llama.cpp implements them for GGUF vocabularies.
//
// GPT-2 pre-tokenisation is the regex
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// matched by hand over code points. Without Unicode tables the classes are
// approximated:
//   \p{N} : ASCII digits only (other Unicode digits count as letters or symbols),
//   \s    : ASCII whitespace plus the Unicode space separators (U+0085, U+00A0,
//           U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000),
//   \p{L} : ASCII letters plus every code point >= 0x80 that is not whitespace and
//           not in a known punctuation / symbol / mark block (Latin-1 symbols,
//           x and / signs, combining marks, general punctuation, currency, arrows,
//           maths, box drawing, dingbats, CJK punctuation, fullwidth ASCII
//           punctuation, variation selectors, emoji). So "héllo" and "世界" are
//           letter runs and emoji are symbol runs, as in the real regex; rarer
//           scripts' punctuation may be grouped with letters. Ill-formed UTF-8
//           bytes are symbols of one byte each.
// The grouping only changes which merges can apply; decode(encode(x)) == x holds
// for any input because every byte ends in some token.
#include <queue>
#include <string>
#include <vector>

#include "engine/tokenizer.h"
#include "engine/utf8.h"

namespace moeflow {
namespace {

enum class Cls { Letter, Number, Space, Other };

bool is_space_cp(uint32_t c) {
  if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return true;
  if (c < 0x80) return false;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_symbol_cp(uint32_t c) {  // c >= 0x80, not whitespace
  if (c <= 0xBF) return !(c == 0xAA || c == 0xB5 || c == 0xBA);  // Latin-1 controls/symbols
  if (c == 0xD7 || c == 0xF7) return true;
  if ((c >= 0x2C2 && c <= 0x2C5) || (c >= 0x2D2 && c <= 0x2DF) || (c >= 0x2E5 && c <= 0x2EB) ||
      c == 0x2ED || (c >= 0x2EF && c <= 0x2FF)) return true;  // modifier symbols
  if (c >= 0x300 && c <= 0x36F) return true;    // combining diacritics
  if (c == 0x37E || c == 0x387) return true;    // Greek punctuation
  if (c >= 0x55A && c <= 0x55F) return true;    // Armenian punctuation
  if (c == 0x589 || c == 0x5BE || c == 0x5C0 || c == 0x5C3 || c == 0x5C6 || c == 0x5F3 || c == 0x5F4) return true;
  if (c >= 0x591 && c <= 0x5C7) return true;    // Hebrew points
  if (c == 0x60C || c == 0x61B || c == 0x61F || c == 0x66A || c == 0x66B || c == 0x66C || c == 0x6D4) return true;
  if (c >= 0x64B && c <= 0x65F) return true;    // Arabic marks
  if (c == 0x964 || c == 0x965 || c == 0x970) return true;  // Devanagari punctuation
  if (c == 0xE3F) return true;                  // Thai currency sign
  if (c >= 0x2010 && c <= 0x206F) return true;  // general punctuation
  if (c >= 0x2070 && c <= 0x209F) return false; // super/subscripts (mostly letters/digits)
  if (c >= 0x20A0 && c <= 0x20FF) return true;  // currency, combining marks for symbols
  if (c >= 0x2100 && c <= 0x214F) return false; // letterlike symbols (mixed; treat as letters)
  if (c >= 0x2190 && c <= 0x2BFF) return true;  // arrows, maths, technical, box, shapes, dingbats
  if (c >= 0x2E00 && c <= 0x2E7F) return true;  // supplemental punctuation
  if (c >= 0x3001 && c <= 0x3004) return true;  // CJK punctuation
  if (c >= 0x3008 && c <= 0x3020) return true;
  if (c == 0x3030 || c == 0x303D || c == 0x30FB) return true;
  if (c >= 0xFE00 && c <= 0xFE0F) return true;  // variation selectors
  if (c >= 0xFE10 && c <= 0xFE6F) return true;  // vertical / small forms
  if (c == 0xFEFF) return true;
  if ((c >= 0xFF01 && c <= 0xFF0F) || (c >= 0xFF1A && c <= 0xFF20) || (c >= 0xFF3B && c <= 0xFF40) ||
      (c >= 0xFF5B && c <= 0xFF65)) return true;  // fullwidth punctuation
  if (c >= 0xFFF0 && c <= 0xFFFF) return true;  // specials (incl. U+FFFD)
  if (c >= 0x1F000 && c <= 0x1FAFF) return true;  // emoji, pictographs, playing cards
  if (c >= 0xE0000 && c <= 0xE007F) return true;  // tags
  return false;
}

Cls classify(uint32_t c, bool ill_formed) {
  if (ill_formed) return Cls::Other;
  if (c < 0x80) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return Cls::Letter;
    if (c >= '0' && c <= '9') return Cls::Number;
    if (is_space_cp(c)) return Cls::Space;
    return Cls::Other;
  }
  if (is_space_cp(c)) return Cls::Space;
  return is_symbol_cp(c) ? Cls::Other : Cls::Letter;
}

struct Chr {
  size_t off, len;
  uint32_t cp;
  Cls cls;
};

std::vector<Chr> split_chars(const std::string& s) {
  std::vector<Chr> v;
  v.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const int r = utf8::decode(reinterpret_cast<const unsigned char*>(s.data()) + i, s.size() - i, &cp);
    const bool bad = r <= 0;
    const size_t len = bad ? 1 : static_cast<size_t>(r);
    v.push_back({i, len, bad ? 0xFFFDu : cp, classify(cp, bad)});
    i += len;
  }
  return v;
}

// GPT-2 regex split; returns [begin, end) byte ranges.
std::vector<std::pair<size_t, size_t>> gpt2_pretokenize(const std::string& s) {
  const std::vector<Chr> c = split_chars(s);
  const size_t n = c.size();
  std::vector<std::pair<size_t, size_t>> out;
  auto emit = [&](size_t a, size_t b) {  // char indices [a, b)
    out.emplace_back(c[a].off, b < n ? c[b].off : s.size());
  };
  auto cp_at = [&](size_t k) -> uint32_t { return k < n ? c[k].cp : 0; };
  size_t i = 0;
  while (i < n) {
    // Contractions: 's 't 're 've 'm 'll 'd (case-sensitive, as GPT-2).
    if (c[i].cp == '\'' && i + 1 < n) {
      const uint32_t a = cp_at(i + 1), b = cp_at(i + 2);
      if (a == 's' || a == 't' || a == 'm' || a == 'd') { emit(i, i + 2); i += 2; continue; }
      if (i + 2 < n && ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))) {
        emit(i, i + 3); i += 3; continue;
      }
    }
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`
    const bool lead_space = c[i].cp == ' ' && i + 1 < n && c[i + 1].cls != Cls::Space;
    const size_t k = lead_space ? i + 1 : i;
    if (c[k].cls != Cls::Space) {
      const Cls cls = c[k].cls;
      size_t j = k + 1;
      while (j < n && c[j].cls == cls) ++j;
      emit(i, j);
      i = j;
      continue;
    }
    // `\s+(?!\S)|\s+`
    size_t j = i;
    while (j < n && c[j].cls == Cls::Space) ++j;
    if (j < n && j - i > 1) --j;  // leave the last space to prefix the next word
    emit(i, j);
    i = j;
  }
  return out;
}

struct Sym {
  int prev, next;
  size_t off, len;
};

struct Bigram {
  double priority;  // lower merges first
  int left, right;
  size_t len;       // combined length when queued (to detect stale entries)
};
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.priority > b.priority || (a.priority == b.priority && a.left > b.left);
  }
};

// Repeatedly merges the adjacent pair of lowest priority (ties: leftmost) over the
// characters of `s`. `pair_priority(l_off, l_len, r_off, r_len, &p)` says whether
// the pair may merge. Returns the symbols (len 0 = merged away), linked by next.
template <class F>
std::vector<Sym> bpe(const std::string& s, F&& pair_priority) {
  std::vector<Sym> sym;
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8::char_len(s, i);
    const int idx = static_cast<int>(sym.size());
    sym.push_back({idx - 1, idx + 1, i, len});
    i += len;
  }
  if (sym.empty()) return sym;
  sym.back().next = -1;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> q;
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    double p;
    if (pair_priority(sym[l].off, sym[l].len, sym[r].off, sym[r].len, &p)) {
      q.push({p, l, r, sym[l].len + sym[r].len});
    }
  };
  for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i) try_add(i, i + 1);
  while (!q.empty()) {
    const Bigram b = q.top();
    q.pop();
    Sym& l = sym[b.left];
    Sym& r = sym[b.right];
    if (l.len == 0 || r.len == 0 || l.next != b.right || l.len + r.len != b.len) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) sym[r.next].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  return sym;
}

}  // namespace

void Tokenizer::encode_gpt2(const std::string& text, std::vector<int32_t>& out) const {
  std::string mapped, key;
  for (const auto& [b, e] : gpt2_pretokenize(text)) {
    mapped.clear();
    for (size_t i = b; i < e; ++i) {
      utf8::append(mapped, static_cast<uint32_t>(gpt2_byte_to_cp_[static_cast<unsigned char>(text[i])]));
    }
    const std::vector<Sym> sym = bpe(mapped, [&](size_t lo, size_t ll, size_t ro, size_t rl, double* p) {
      key.assign(mapped, lo, ll);
      key += ' ';
      key.append(mapped, ro, rl);
      auto it = merge_rank_.find(key);
      if (it == merge_rank_.end()) return false;
      *p = it->second;
      return true;
    });
    for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) {
      key.assign(mapped, sym[i].off, sym[i].len);
      auto it = token_to_id_.find(key);
      if (it != token_to_id_.end()) {
        out.push_back(it->second);
        continue;
      }
      // Not in the vocabulary: one token per (mapped) byte; unk, or dropped, if even
      // that is missing.
      for (size_t p = sym[i].off; p < sym[i].off + sym[i].len;) {
        const size_t len = utf8::char_len(mapped, p);
        auto bt = token_to_id_.find(mapped.substr(p, len));
        if (bt != token_to_id_.end()) out.push_back(bt->second);
        else if (d_.unk >= 0) out.push_back(d_.unk);
        p += len;
      }
    }
  }
}

void Tokenizer::encode_llama(const std::string& text, std::vector<int32_t>& out) const {
  std::string s;
  s.reserve(text.size() + 8);
  for (char ch : text) {
    if (ch == ' ') s += "\xE2\x96\x81";
    else s += ch;
  }
  // Pairs merge when their concatenation is a piece; the highest score goes first.
  // Control and byte tokens are never produced by merging.
  const std::vector<Sym> sym = bpe(s, [&](size_t lo, size_t ll, size_t, size_t rl, double* p) {
    auto it = token_to_id_.find(s.substr(lo, ll + rl));
    if (it == token_to_id_.end()) return false;
    if (!d_.types.empty()) {
      const int32_t t = d_.types[it->second];
      if (t == 3 || t == 6) return false;
    }
    *p = d_.scores.empty() ? 0.0 : -static_cast<double>(d_.scores[it->second]);
    return true;
  });
  for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) {
    auto it = token_to_id_.find(s.substr(sym[i].off, sym[i].len));
    if (it != token_to_id_.end()) {
      out.push_back(it->second);
      continue;
    }
    // Byte fallback: one <0xNN> token per byte; if any byte lacks one, a single unk
    // for the whole character (dropped if there is no unk either).
    bool all_bytes = true;
    for (size_t p = sym[i].off; p < sym[i].off + sym[i].len; ++p) {
      all_bytes = all_bytes && byte_token_[static_cast<unsigned char>(s[p])] >= 0;
    }
    if (all_bytes) {
      for (size_t p = sym[i].off; p < sym[i].off + sym[i].len; ++p) {
        out.push_back(byte_token_[static_cast<unsigned char>(s[p])]);
      }
    } else if (d_.unk >= 0) {
      out.push_back(d_.unk);
    }
  }
}

}  // namespace moeflow

// The two BPE encoders: byte-level BPE (merge ranks) after the pre-tokenizer that
// tokenizer.ggml.pre selects (pretokenizer.h), and SentencePiece-style BPE (piece
// scores), both as llama.cpp implements them for GGUF vocabularies.
// decode(encode(x)) == x holds for any input because every byte ends in some token.
#include <queue>
#include <string>
#include <vector>

#include "engine/pretokenizer.h"
#include "engine/tokenizer.h"
#include "engine/unicode_normalize.h"
#include "engine/utf8.h"

namespace moeflow {
namespace {

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

void Tokenizer::encode_gpt2(const std::string& raw, std::vector<int32_t>& out) const {
  const std::string normalized = pre_.nfc ? unicode::to_nfc(raw) : std::string();
  const std::string& text = pre_.nfc ? normalized : raw;
  std::string mapped, key;
  for (const auto& [b, e] : pretokenize(pre_.kind, text)) {
    mapped.clear();
    for (size_t i = b; i < e; ++i) {
      utf8::append(mapped, static_cast<uint32_t>(gpt2_byte_to_cp_[static_cast<unsigned char>(text[i])]));
    }
    if (pre_.ignore_merges) {  // the whole piece is a token: no merging
      auto whole = token_to_id_.find(mapped);
      if (whole != token_to_id_.end()) {
        out.push_back(whole->second);
        continue;
      }
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

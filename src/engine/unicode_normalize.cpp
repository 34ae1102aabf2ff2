// NFC as UAX #15 specifies it. A quick check (NFC_Quick_Check = Yes for every code point,
// combining classes in order) returns most text unchanged without decomposing it.
#include "engine/unicode_normalize.h"

#include <algorithm>
#include <iterator>
#include <vector>

#include "engine/utf8.h"

namespace moeflow::unicode {
namespace {

struct CombiningClass {
  uint32_t cp;
  uint8_t ccc;
};
struct Decomposition {
  uint32_t cp, first, second;  // second 0: a singleton
};
struct Composition {
  uint32_t first, second, composite;
};
struct CodePointRange {
  uint32_t lo, hi;
};

#include "engine/unicode_normalization.inc"

// Hangul syllables (UAX #15 / Unicode 3.12): composed and decomposed arithmetically.
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

// An ill-formed byte b is carried as kIllFormed | b: combining class 0, no mapping.
constexpr uint32_t kIllFormed = 0x80000000u;

const Decomposition* find_decomposition(uint32_t cp) {
  const auto* it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), cp,
                                    [](const Decomposition& d, uint32_t c) { return d.cp < c; });
  return it != std::end(kDecompositions) && it->cp == cp ? it : nullptr;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (const Decomposition* d = find_decomposition(cp)) {
    decompose(d->first, out);
    if (d->second != 0) decompose(d->second, out);
    return;
  }
  out.push_back(cp);
}

// The primary composite of (a, b), or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto* it = std::lower_bound(std::begin(kCompositions), std::end(kCompositions), std::make_pair(a, b),
                                    [](const Composition& c, const std::pair<uint32_t, uint32_t>& k) {
                                      return c.first < k.first || (c.first == k.first && c.second < k.second);
                                    });
  return it != std::end(kCompositions) && it->first == a && it->second == b ? it->composite : 0;
}

bool nfc_quick_check_not_yes(uint32_t cp) {
  const auto* it = std::upper_bound(std::begin(kNfcQuickCheckNotYes), std::end(kNfcQuickCheckNotYes), cp,
                                    [](uint32_t c, const CodePointRange& r) { return c < r.lo; });
  return it != std::begin(kNfcQuickCheckNotYes) && cp <= std::prev(it)->hi;
}

}  // namespace

uint8_t combining_class(uint32_t cp) {
  if (cp < 0x300) return 0;
  const auto* it = std::lower_bound(std::begin(kCombiningClasses), std::end(kCombiningClasses), cp,
                                    [](const CombiningClass& c, uint32_t x) { return c.cp < x; });
  return it != std::end(kCombiningClasses) && it->cp == cp ? it->ccc : 0;
}

std::string to_nfc(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  // Quick check: every code point NFC_QC = Yes and combining classes non-decreasing.
  bool already = true;
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  uint8_t last_ccc = 0;
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const int r = utf8::decode(p + i, text.size() - i, &cp);
    if (r <= 0) {
      cps.push_back(kIllFormed | p[i]);
      last_ccc = 0;
      ++i;
      continue;
    }
    cps.push_back(cp);
    i += static_cast<size_t>(r);
    if (cp < 0x300) {
      last_ccc = 0;
      continue;
    }
    const uint8_t ccc = combining_class(cp);
    if (nfc_quick_check_not_yes(cp) || (ccc != 0 && last_ccc > ccc)) already = false;
    last_ccc = ccc;
  }
  if (already) return std::string(text);

  std::vector<uint32_t> d;
  d.reserve(cps.size() + 8);
  for (uint32_t cp : cps) {
    if (cp & kIllFormed) d.push_back(cp);
    else decompose(cp, d);
  }
  auto ccc_of = [](uint32_t cp) -> uint8_t { return (cp & kIllFormed) ? 0 : combining_class(cp); };
  // Canonical ordering: stable sort of every run of non-starters by combining class.
  for (size_t i = 0; i < d.size();) {
    if (ccc_of(d[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && ccc_of(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + static_cast<std::ptrdiff_t>(i), d.begin() + static_cast<std::ptrdiff_t>(j),
                     [&](uint32_t a, uint32_t b) { return ccc_of(a) < ccc_of(b); });
    i = j;
  }
  // Canonical composition: a character joins the last starter unless blocked (a
  // character between them of class 0 or of a class not below its own).
  size_t starter = 0, kept = 0;
  bool have_starter = false;
  int last_class = -1;  // class of the last kept character after the starter (-1: none)
  for (size_t i = 0; i < d.size(); ++i) {
    const uint32_t ch = d[i];
    const int cls = ccc_of(ch);
    if (have_starter && !(ch & kIllFormed) && !(d[starter] & kIllFormed) && (last_class == -1 || last_class < cls)) {
      if (const uint32_t c = compose(d[starter], ch)) {
        d[starter] = c;
        continue;
      }
    }
    if (cls == 0) {
      starter = kept;
      have_starter = true;
      last_class = -1;
    } else {
      last_class = cls;
    }
    d[kept++] = ch;
  }
  d.resize(kept);

  std::string out;
  out.reserve(text.size());
  for (uint32_t cp : d) {
    if (cp & kIllFormed) out += static_cast<char>(cp & 0xFF);
    else utf8::append(out, cp);
  }
  return out;
}

}  // namespace moeflow::unicode

// Lookups over the generated tables: binary search over runs of equal properties, with
// a direct table for the first 0x800 code points (ASCII, Latin, Greek, Cyrillic, ...),
// where almost all text lives.
#include "engine/unicode_class.h"

#include <algorithm>
#include <array>
#include <iterator>

namespace moeflow::unicode {
namespace {

struct CodePointRun {
  uint32_t first;
  uint8_t props;  // general category | 0x20 if White_Space
};
struct CaseFold {
  uint32_t cp;
  char letter;
};
struct CodePointRange {
  uint32_t lo, hi;
};

#include "engine/unicode_tables.inc"

constexpr uint8_t kWhiteSpaceProp = 0x20;
constexpr uint32_t kDirect = 0x800;

uint8_t props_slow(uint32_t cp) {
  if (cp > 0x10FFFF) return static_cast<uint8_t>(GeneralCategory::Cn);
  const auto* it = std::upper_bound(std::begin(kCodePointRuns), std::end(kCodePointRuns), cp,
                                    [](uint32_t c, const CodePointRun& r) { return c < r.first; });
  return std::prev(it)->props;
}

template <size_t N>
bool in_ranges(const CodePointRange (&r)[N], uint32_t cp) {
  const auto* it = std::upper_bound(std::begin(r), std::end(r), cp,
                                    [](uint32_t c, const CodePointRange& x) { return c < x.lo; });
  return it != std::begin(r) && cp <= std::prev(it)->hi;
}

uint16_t classes_of(uint8_t props, uint32_t cp) {
  using G = GeneralCategory;
  const auto g = static_cast<G>(props & 0x1F);
  uint16_t c = 0;
  switch (g) {
    case G::Lu: case G::Lt: c = kLetter | kUpperish; break;
    case G::Ll: c = kLetter | kLowerish; break;
    case G::Lm: case G::Lo: c = kLetter | kUpperish | kLowerish; break;
    case G::Mn: case G::Mc: case G::Me: c = kMark | kUpperish | kLowerish; break;
    case G::Nd: case G::Nl: case G::No: c = kNumber; break;
    case G::Pc: case G::Pd: case G::Ps: case G::Pe: case G::Pi: case G::Pf: case G::Po: c = kPunct; break;
    case G::Sm: case G::Sc: case G::Sk: case G::So: c = kSymbol; break;
    default: break;
  }
  if (props & kWhiteSpaceProp) c |= kWhiteSpace;
  if (cp == '\r' || cp == '\n') c |= kCrLf;
  if (cp >= 0x2E80 && in_ranges(kHanScript, cp)) c |= kHan;
  return c;
}

struct DirectTable {
  std::array<uint8_t, kDirect> props;
  std::array<uint16_t, kDirect> cls;
  DirectTable() {
    for (uint32_t cp = 0; cp < kDirect; ++cp) {
      props[cp] = props_slow(cp);
      cls[cp] = classes_of(props[cp], cp);
    }
  }
};

const DirectTable& direct() {
  static const DirectTable t;
  return t;
}

uint8_t props(uint32_t cp) { return cp < kDirect ? direct().props[cp] : props_slow(cp); }

}  // namespace

GeneralCategory general_category(uint32_t cp) { return static_cast<GeneralCategory>(props(cp) & 0x1F); }
bool is_white_space(uint32_t cp) { return (props(cp) & kWhiteSpaceProp) != 0; }

uint16_t classes(uint32_t cp) {
  if (cp < kDirect) return direct().cls[cp];
  return classes_of(props_slow(cp), cp);
}

char fold_contraction_letter(uint32_t cp) {
  if (cp >= 'a' && cp <= 'z') {
    const char c = static_cast<char>(cp);
    return (c == 's' || c == 't' || c == 'r' || c == 'v' || c == 'e' || c == 'm' || c == 'l' || c == 'd') ? c : 0;
  }
  for (const CaseFold& f : kContractionFolds)
    if (f.cp == cp) return f.letter;
  return 0;
}

bool in_deepseek_llm_letters(uint32_t cp) { return in_ranges(kDeepseekLlmLetters, cp); }
bool in_deepseek_llm_punct(uint32_t cp) { return in_ranges(kDeepseekLlmPunct, cp); }
bool in_deepseek_cjk(uint32_t cp) { return in_ranges(kDeepseekCjk, cp); }
bool in_deepseek_v3_cjk(uint32_t cp) { return in_ranges(kDeepseekV3Cjk, cp); }

const char* unicode_version() { return kUnicodeVersion; }

}  // namespace moeflow::unicode

// NFC against the Unicode Character Database's conformance test (NormalizationTest.txt):
// for every line c1;c2;c3;c4;c5, NFC(c1) = NFC(c2) = NFC(c3) = c2 and NFC(c4) = NFC(c5) = c4;
// and every code point not listed in part 1 is its own NFC. The committed fixture is a
// subset (tools/tokenizer/nfc_conformance_subset.py); MOEFLOW_NORMALIZATION_TEST may name
// the full, decompressed file.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "engine/unicode_normalize.h"
#include "engine/utf8.h"
#include "test_paths.h"

namespace moeflow {
namespace {

std::string from_hex_cps(const std::string& field) {
  std::istringstream ss(field);
  std::string out;
  for (std::string h; ss >> h;) utf8::append(out, static_cast<uint32_t>(std::stoul(h, nullptr, 16)));
  return out;
}

TEST(UnicodeNormalize, ConformanceTest) {
  const char* env = std::getenv("MOEFLOW_NORMALIZATION_TEST");
  const std::string path = env ? env : testing::fixture_path("tokenizer/nfc_conformance.txt");
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot open " << path;
  std::string part;
  std::set<uint32_t> part1;
  size_t lines = 0, failures = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("@Part", 0) == 0) {
      part = line.substr(0, 6);
      continue;
    }
    const std::string body = line.substr(0, line.find('#'));
    if (body.find(';') == std::string::npos) continue;
    std::vector<std::string> c;
    std::istringstream fields(body);
    for (std::string f; std::getline(fields, f, ';');) c.push_back(from_hex_cps(f));
    ASSERT_GE(c.size(), 5u) << path << ": " << line;
    ++lines;
    if (part == "@Part1") {
      uint32_t cp = 0;
      utf8::decode(reinterpret_cast<const unsigned char*>(c[0].data()), c[0].size(), &cp);
      part1.insert(cp);
    }
    const bool ok = unicode::to_nfc(c[0]) == c[1] && unicode::to_nfc(c[1]) == c[1] && unicode::to_nfc(c[2]) == c[1] &&
                    unicode::to_nfc(c[3]) == c[3] && unicode::to_nfc(c[4]) == c[3];
    if (!ok && ++failures <= 10) ADD_FAILURE() << "NFC fails on line: " << line;
  }
  // Code points absent from part 1 are unchanged (only meaningful with the full file).
  size_t unchanged_checked = 0;
  if (env) {
    for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
      if ((cp >= 0xD800 && cp <= 0xDFFF) || part1.count(cp)) continue;
      std::string s;
      utf8::append(s, cp);
      ++unchanged_checked;
      if (unicode::to_nfc(s) != s && ++failures <= 10) ADD_FAILURE() << "NFC changes U+" << std::hex << cp;
    }
  }
  std::printf("NFC conformance: %zu lines of %s, %zu other code points, %zu failures\n", lines, path.c_str(),
              unchanged_checked, failures);
  EXPECT_GT(lines, 500u);
  EXPECT_EQ(failures, 0u);
}

TEST(UnicodeNormalize, HandComputedCases) {
  EXPECT_EQ(unicode::to_nfc("cafe\xCC\x81"), "caf\xC3\xA9");                    // e + U+0301 -> é
  EXPECT_EQ(unicode::to_nfc("caf\xC3\xA9"), "caf\xC3\xA9");                     // already NFC
  EXPECT_EQ(unicode::to_nfc("\xE1\x84\x80\xE1\x85\xA1"), "\xEA\xB0\x80");       // Hangul L + V -> 가
  EXPECT_EQ(unicode::to_nfc("\xE2\x84\xAB"), "\xC3\x85");                       // ANGSTROM SIGN -> Å
  EXPECT_EQ(unicode::to_nfc("a\xCC\xA3\xCC\x87"), "\xE1\xBA\xA1\xCC\x87");      // a + dot below + dot above
  // Ill-formed bytes pass through and block composition.
  EXPECT_EQ(unicode::to_nfc("e\xFF\xCC\x81"), "e\xFF\xCC\x81");
  EXPECT_EQ(unicode::to_nfc("\xC3"), "\xC3");
  EXPECT_EQ(unicode::combining_class(0x0301), 230);
  EXPECT_EQ(unicode::combining_class('a'), 0);
}

}  // namespace
}  // namespace moeflow

// Token ids against the reference tokenizers on llama.cpp's vocabulary test pairs:
// models/ggml-vocab-NAME.gguf (vocabulary only) with NAME.gguf.inp (texts separated by
// "\n__ggml_vocab_test__\n") and NAME.gguf.out (the ids the model's Hugging Face
// tokenizer gives, encode(text, add_special_tokens=False), one line per text). The
// vocabularies are megabytes, so they are not in the repository: set
// MOEFLOW_VOCAB_DIR to a directory holding them (docs/tokenizers.md says where they come
// from); without it the test is skipped. The committed subset check is
// tokenizer_subset_test.cpp. Where tools/tokenizer/reference_ids.py has written
// NAME.gguf.edge.inp/.out beside a vocabulary, the edge-case corpus is checked too.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "engine/tokenizer.h"
#include "engine/unicode_normalize.h"
#include "format/gguf.h"

namespace moeflow {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> split_inputs(const std::string& raw) {
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> out;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      out.push_back(raw.substr(pos));
      break;
    }
    out.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  return out;
}

std::vector<std::vector<int32_t>> read_ids(const std::string& path) {
  std::vector<std::vector<int32_t>> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream ss(line);
    std::vector<int32_t> ids;
    for (int32_t id; ss >> id;) ids.push_back(id);
    out.push_back(ids);
  }
  return out;
}

TEST(TokenizerVocab, LlamaCppReferenceIds) {
  const char* dir = std::getenv("MOEFLOW_VOCAB_DIR");
  if (!dir) GTEST_SKIP() << "MOEFLOW_VOCAB_DIR is not set: point it at llama.cpp's models/ directory "
                            "(ggml-vocab-*.gguf with .inp/.out) to check token ids against the reference";
  size_t vocabs = 0;
  for (const char* name : {"gpt-2", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder", "deepseek-v3", "gpt-4o",
                           "llama-spm", "mpt", "phi-3"}) {
    const std::string base = std::string(dir) + "/ggml-vocab-" + name + ".gguf";
    if (!std::filesystem::exists(base) || !std::filesystem::exists(base + ".inp") ||
        !std::filesystem::exists(base + ".out")) {
      std::printf("%-15s not in %s, skipped\n", name, dir);
      continue;
    }
    ++vocabs;
    const auto file = gguf::GgufFile::open(base);
    const Tokenizer tok(tokenizer_data_from_gguf(*file));
    const std::vector<std::string> inputs = split_inputs(read_all(base + ".inp"));
    const std::vector<std::vector<int32_t>> want = read_ids(base + ".out");
    ASSERT_EQ(inputs.size(), want.size()) << base;
    size_t same = 0, round_trips = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::vector<int32_t> got = tok.encode(inputs[i], false);
      if (got == want[i]) {
        ++same;
      } else {
        std::string g, w;
        for (int32_t id : got) g += " " + std::to_string(id);
        for (int32_t id : want[i]) w += " " + std::to_string(id);
        ADD_FAILURE() << name << " text #" << i << " \"" << inputs[i] << "\"\n  got " << g << "\n want" << w;
      }
      const std::string back = tok.decode(got);
      round_trips += back == inputs[i] || back == " " + inputs[i];  // SentencePiece adds the space prefix
    }
    std::printf("%-15s pre '%s': %zu/%zu texts give the reference ids, %zu/%zu decode back to the text\n", name,
                tok.data().pre.c_str(), same, inputs.size(), round_trips, inputs.size());
    EXPECT_EQ(round_trips, inputs.size()) << name;

    // The edge-case corpus with ids from the independent Python BPE
    // (tools/tokenizer/reference_ids.py), where it was generated.
    if (std::filesystem::exists(base + ".edge.inp") && std::filesystem::exists(base + ".edge.out")) {
      const std::vector<std::string> edge = split_inputs(read_all(base + ".edge.inp"));
      const std::vector<std::vector<int32_t>> edge_ids = read_ids(base + ".edge.out");
      ASSERT_EQ(edge.size(), edge_ids.size()) << base;
      size_t edge_same = 0, edge_round = 0;
      for (size_t i = 0; i < edge.size(); ++i) {
        const std::vector<int32_t> got = tok.encode(edge[i], false);
        edge_same += got == edge_ids[i];
        EXPECT_EQ(got, edge_ids[i]) << name << " edge text #" << i << " \"" << edge[i] << "\"";
        // qwen2 normalises to NFC first, so it decodes to the NFC form.
        edge_round += tok.decode(got) == (tok.pretokenizer().nfc ? unicode::to_nfc(edge[i]) : edge[i]);
      }
      std::printf("%-15s edge cases: %zu/%zu give the Python reference's ids, %zu/%zu decode back\n", name, edge_same,
                  edge.size(), edge_round, edge.size());
      EXPECT_EQ(edge_round, edge.size()) << name;
    }

    // Speed: the test texts (English, code, CJK, emoji, whitespace runs) repeated to 100 KB.
    std::string big;
    while (big.size() < 100 * 1024)
      for (const std::string& s : inputs) big += s + "\n";
    const auto t0 = std::chrono::steady_clock::now();
    const size_t n_ids = tok.encode(big, false).size();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%-15s encodes %zu bytes into %zu tokens in %.1f ms\n", name, big.size(), n_ids, ms);
    EXPECT_LT(ms, 1000.0) << name;
    // One 100 KB piece (a single letter run; CJK and Latin mixed): BPE over the whole of it.
    std::string run;
    while (run.size() < 100 * 1024) run += "abc\xE4\xBD\xA0\xE5\xA5\xBDxyz";
    const auto t1 = std::chrono::steady_clock::now();
    const size_t n_run = tok.encode(run, false).size();
    const double ms_run = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
    std::printf("%-15s encodes one %zu-byte word into %zu tokens in %.1f ms\n", name, run.size(), n_run, ms_run);
    EXPECT_LT(ms_run, 1000.0) << name;
    // Long runs of one kind (digits, spaces, combining marks, newlines): no quadratic path.
    std::string marks = "a";
    while (marks.size() < 100 * 1024) marks += "\xCC\x81";
    double worst = 0;
    for (const std::string& t : {std::string(100 * 1024, '7'), std::string(100 * 1024, ' ') + "1", marks,
                                 std::string(100 * 1024, '\n'), std::string(100 * 1024, '<')}) {
      const auto t2 = std::chrono::steady_clock::now();
      tok.encode(t, false);
      worst = std::max(worst, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t2).count());
    }
    std::printf("%-15s slowest of 5 single-kind 100 KB runs: %.1f ms\n", name, worst);
    EXPECT_LT(worst, 1000.0) << name;
  }
  EXPECT_GT(vocabs, 0u) << "no ggml-vocab-*.gguf with .inp/.out in " << dir;
}

}  // namespace
}  // namespace moeflow

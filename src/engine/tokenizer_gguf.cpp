// TokenizerData from GGUF metadata (tokenizer.ggml.*), with llama.cpp's defaults.
#include <cstdint>
#include <cstdio>
#include <string>

#include "engine/tokenizer.h"
#include "base/error.h"
#include "format/gguf.h"

namespace moeflow {
namespace {

int32_t read_id(const gguf::GgufFile& f, const char* key) {
  const gguf::Value* v = f.find(key);
  if (!v) return -1;
  const int64_t id = v->as_int(key);
  if (id < -1 || id > INT32_MAX) {
    throw InputError("tokenizer: " + std::string(key) + " = " + std::to_string(id) + " is out of range");
  }
  return static_cast<int32_t>(id);
}

}  // namespace

TokenizerData tokenizer_data_from_gguf(const gguf::GgufFile& f) {
  TokenizerData d;
  static const std::string kModel = "tokenizer.ggml.model", kTokens = "tokenizer.ggml.tokens",
                           kScores = "tokenizer.ggml.scores", kTypes = "tokenizer.ggml.token_type",
                           kMerges = "tokenizer.ggml.merges", kPre = "tokenizer.ggml.pre",
                           kAddBos = "tokenizer.ggml.add_bos_token",
                           kSpacePrefix = "tokenizer.ggml.add_space_prefix";
  d.model = f.get(kModel).as_string(kModel);
  if (d.model != "gpt2" && d.model != "llama") {
    throw InputError("unsupported tokenizer model '" + d.model + "' (key " + kModel + ")");
  }
  if (const gguf::Value* v = f.find(kPre)) d.pre = v->as_string(kPre);
  const auto& toks = f.get(kTokens).as_array(kTokens);
  d.tokens.reserve(toks.size());
  for (const auto& t : toks) d.tokens.push_back(t.as_string(kTokens));

  if (const gguf::Value* v = f.find(kScores)) {
    const auto& a = v->as_array(kScores);
    d.scores.reserve(a.size());
    for (const auto& x : a) d.scores.push_back(static_cast<float>(x.as_float(kScores)));
  }
  if (const gguf::Value* v = f.find(kTypes)) {
    const auto& a = v->as_array(kTypes);
    d.types.reserve(a.size());
    for (const auto& x : a) {
      const int64_t t = x.as_int(kTypes);
      if (t < INT32_MIN || t > INT32_MAX) throw InputError("tokenizer: " + kTypes + " has an out-of-range entry");
      d.types.push_back(static_cast<int32_t>(t));
    }
  }
  if (const gguf::Value* v = f.find(kMerges)) {
    const auto& a = v->as_array(kMerges);
    d.merges.reserve(a.size());
    for (const auto& x : a) d.merges.push_back(x.as_string(kMerges));
  }
  d.bos = read_id(f, "tokenizer.ggml.bos_token_id");
  d.eos = read_id(f, "tokenizer.ggml.eos_token_id");
  d.unk = read_id(f, "tokenizer.ggml.unknown_token_id");
  d.pad = read_id(f, "tokenizer.ggml.padding_token_id");
  d.add_bos = d.model == "llama";
  if (d.model == "gpt2") {
    if (const auto spec = pretokenizer_for(d.pre)) d.add_bos = spec->add_bos;  // llama.cpp: llama-bpe adds bos
  }
  if (const gguf::Value* v = f.find(kAddBos)) d.add_bos = v->as_bool(kAddBos);
  if (const gguf::Value* v = f.find(kSpacePrefix)) d.add_space_prefix = v->as_bool(kSpacePrefix);
  validate_tokenizer_data(d);
  const std::string warning = pretokenizer_warning(d);
  if (!warning.empty()) std::fprintf(stderr, "moeflow: warning: %s: %s\n", f.path().c_str(), warning.c_str());
  return d;
}

}  // namespace moeflow

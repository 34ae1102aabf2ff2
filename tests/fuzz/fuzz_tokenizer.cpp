// The tokenizer: any bytes encode to ids inside the vocabulary that decode back to the
// same bytes (byte-level BPE loses nothing), with and without special-token parsing; and
// every pre-tokenizer cuts any bytes into non-empty pieces that cover them in order; and
// NFC is idempotent on any bytes (NFC(NFC(x)) == NFC(x)).
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "base/error.h"
#include "engine/model_check.h"
#include "engine/pretokenizer.h"
#include "engine/unicode_normalize.h"
#include "engine/tokenizer.h"
#include "fuzz_input.h"
#include "model/model_weights.h"

namespace {

const moeflow::Tokenizer& tokenizer() {
  static std::unique_ptr<moeflow::Model> model = moeflow::Model::load(MOEFLOW_FIXTURES "/mixtral-f32.gguf");
  static std::unique_ptr<moeflow::Tokenizer> tok = moeflow::load_checked_tokenizer(*model);
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace moeflow;
  const Tokenizer& tok = tokenizer();
  const std::string text(reinterpret_cast<const char*>(data), size);
  MOEFLOW_FUZZ_BODY({
    for (PreTokenizer k : {PreTokenizer::Gpt2, PreTokenizer::Llama3, PreTokenizer::Qwen2, PreTokenizer::Gpt4o,
                           PreTokenizer::DeepseekLlm, PreTokenizer::DeepseekCoder, PreTokenizer::DeepseekV3}) {
      size_t at = 0;
      for (const auto& piece : pretokenize(k, text)) {
        if (piece.first != at || piece.second <= piece.first) std::abort();
        at = piece.second;
      }
      if (at != text.size()) std::abort();
    }
    const std::string nfc = unicode::to_nfc(text);
    if (unicode::to_nfc(nfc) != nfc) std::abort();
    for (bool bos : {false, true}) {
      const std::vector<int32_t> ids = tok.encode(text, bos);
      for (int32_t id : ids)
        if (id < 0 || static_cast<size_t>(id) >= tok.vocab_size()) std::abort();
      std::vector<int32_t> body(ids.begin() + (bos && tok.bos() >= 0 && !ids.empty() && ids[0] == tok.bos() ? 1 : 0),
                                ids.end());
      std::string back;
      for (int32_t id : body) back += tok.token_bytes(id, true);
      if (back != text) {
        std::fprintf(stderr, "fuzz: round trip lost bytes (%zu in, %zu out)\n", text.size(), back.size());
        std::abort();
      }
    }
  })
  return 0;
}

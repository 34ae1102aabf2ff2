#include "engine/model_check.h"

#include <string>

#include "base/error.h"

namespace moeflow {

std::unique_ptr<Tokenizer> load_checked_tokenizer(const Model& m) {
  auto tok = std::make_unique<Tokenizer>(tokenizer_data_from_gguf(m.file()));
  if (static_cast<int64_t>(tok->vocab_size()) != m.config().n_vocab)
    throw InputError(m.file().path() + ": tokenizer has " + std::to_string(tok->vocab_size()) +
                     " tokens but token_embd.weight has " + std::to_string(m.config().n_vocab) + " rows");
  return tok;
}

void check_loadable(const Model& m) {
  load_checked_tokenizer(m);
  for (const gguf::TensorInfo& t : m.file().tensors()) check_finite_weights(m.file(), t);
}

}  // namespace moeflow

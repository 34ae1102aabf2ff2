#include "engine/model_loading.h"

#include <algorithm>

#include "base/error.h"
#include "engine/forward_pass.h"

namespace moeflow {

LoadedWeights load_model_and_tokenizer(const std::string& path, bool mmap, bool offloaded, bool repack) {
  LoadedWeights m;
  m.model = Model::load(path);
  if (!mmap) m.model->make_resident(!offloaded, repack);
  m.tokenizer = std::make_unique<Tokenizer>(tokenizer_data_from_gguf(m.model->file()));
  if (static_cast<int64_t>(m.tokenizer->vocab_size()) != m.model->config().n_vocab)
    throw InputError(path + ": tokenizer has " + std::to_string(m.tokenizer->vocab_size()) +
                     " tokens but token_embd.weight has " + std::to_string(m.model->config().n_vocab) + " rows");
  return m;
}

int64_t default_ctx_size(const Model& model) { return std::min<int64_t>(model.config().n_ctx_train, 4096); }

DType kv_type_from_name(const std::string& kv, const Model& model) {
  if (kv == "auto") return default_kv_type(model);
  if (kv == "f32") return DType::F32;
  if (kv == "f16") return DType::F16;
  throw InputError("KV cache type '" + kv + "': expected f32, f16 or auto");
}

}  // namespace moeflow

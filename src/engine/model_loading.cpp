#include "engine/model_loading.h"

#include <algorithm>

#include "base/error.h"
#include "engine/forward_pass.h"
#include "engine/model_check.h"

namespace moeflow {

LoadedWeights load_model_and_tokenizer(const std::string& path, bool mmap, bool offloaded, WeightPlacer* placer,
                                       int threads) {
  LoadedWeights m;
  m.model = Model::load(path);
  if (!mmap) m.model->make_resident(!offloaded, placer, threads);
  m.tokenizer = load_checked_tokenizer(*m.model);  // the checks `inspect` runs too
  return m;
}

int64_t default_ctx_size(const Model& model) { return std::min<int64_t>(model.config().n_ctx_train, 4096); }

DType kv_type_from_name(const std::string& kv, const Model& model) {
  if (kv == "auto") return default_kv_type(model);
  if (kv == "f32") return DType::F32;
  if (kv == "f16") return DType::F16;
  if (kv == "q8_0") return DType::Q8_0;
  throw InputError("KV cache type '" + kv + "': expected f32, f16, q8_0 or auto");
}

}  // namespace moeflow

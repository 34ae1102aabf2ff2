// Opening a model as the engine runs it: the file, its weights copied out of the
// mapping (or not), its tokenizer checked against the embedding table, and the
// defaults that depend on the model (context size, KV cache type).
#pragma once
#include <memory>
#include <string>

#include "engine/tokenizer.h"
#include "model/model_weights.h"
#include "tensor/dtype.h"

namespace moeflow {

struct LoadedWeights {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

// Weights the forward pass reads go to anonymous memory unless `mmap` (Model::
// make_resident says why); with `offloaded`, only the dense ones: experts stream from
// the file. `placer` (the backend) gives the resident weights' memory and row layouts;
// `threads` copy them. Throws InputError naming the file and what is wrong.
LoadedWeights load_model_and_tokenizer(const std::string& path, bool mmap, bool offloaded, WeightPlacer* placer,
                                       int threads);

// The model's trained context, at most 4096.
int64_t default_ctx_size(const Model& model);

// "auto" (default_kv_type), "f32", "f16" or "q8_0"; throws InputError otherwise.
DType kv_type_from_name(const std::string& name, const Model& model);

}  // namespace moeflow

// Flags every model-running subcommand shares (-m, --threads, --ctx-size) and the
// objects they open.
#pragma once
#include <memory>
#include <string>

#include "cli/args.h"
#include "engine/tokenizer.h"
#include "kernels/cpu/thread_pool.h"
#include "model/model_weights.h"
#include "moeflow/engine.h"
#include "tensor/dtype.h"

namespace moeflow::cli {

void add_model_flags(Args& a);

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ThreadPool> pool;
  int64_t n_ctx = 0;
  DType kv_type = DType::F32;  // --kv-type, or default_kv_type(*model)
};

// Opens the model named by -m (the built-in default when absent), its tokenizer and
// a thread pool of --threads workers.
LoadedModel load_model_from_flags(const Args& a);

// Where the built-in default model lives (next to the binary's source tree or in
// the install prefix); empty if none is found.
std::string default_model_path();

// The engine's options as the model and offloading flags give them, with `policy`
// instead of --policy.
EngineOptions engine_options_from_flags(const Args& a, const std::string& policy);

std::string json_escape(const std::string& s);

// general.name from the file, else the file name without directory and extension.
std::string model_name(const Model& model);

}  // namespace moeflow::cli

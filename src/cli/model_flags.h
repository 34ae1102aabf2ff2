// Flags every model-running subcommand shares (-m, --threads, --ctx-size, --kv-type,
// --mmap, --no-repack) and the engine options they give.
#pragma once
#include <string>

#include "cli/args.h"
#include "model/model_weights.h"
#include "moeflow/engine.h"

namespace moeflow::cli {

void add_model_flags(Args& a);

// Where the built-in default model lives (next to the binary's source tree or in
// the install prefix); empty if none is found.
std::string default_model_path();

// The engine's options as the model and offloading flags give them, with `policy`
// instead of --policy.
EngineOptions engine_options_from_flags(const Args& a, const std::string& policy);

// general.name from the file, else the file name without directory and extension.
std::string model_name(const Model& model);

}  // namespace moeflow::cli

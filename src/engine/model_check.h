// Everything loading a model for generation checks, in one call, so `inspect` can say
// "loads" only for a file that `run` accepts: Model::load (metadata, shapes, dense
// weights finite), the tokenizer (tokenizer.ggml.*: special ids inside the vocabulary,
// array lengths, types), the tokenizer's vocabulary against token_embd.weight's rows,
// and the expert weights finite (which `run` checks as it copies them into memory).
#pragma once
#include <memory>

#include "engine/tokenizer.h"
#include "model/model_weights.h"

namespace moeflow {

// Throws InputError naming the file and what is wrong; returns the tokenizer.
std::unique_ptr<Tokenizer> load_checked_tokenizer(const Model& m);
// The above, plus every tensor checked for NaN and infinities, on `threads` threads
// (the error is the one a check on one thread, in file order, raises first).
void check_loadable(const Model& m, int threads);

}  // namespace moeflow

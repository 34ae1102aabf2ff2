// Prompt processing and token generation on top of a Transformer: the loop the CLI,
// the benchmarks and the tests share.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/sampler.h"
#include "engine/transformer.h"

namespace moeflow {

struct GenerateOptions {
  int64_t n_predict = 64;
  int64_t prefill_chunk = 512;  // prompt tokens per forward call
  bool stop_at_eog = true;
  bool record_logits = false;   // keep the logits of every position
  bool feed_last = false;       // also evaluate the last generated token (for --logits-out)
  SamplerOptions sampler;
};

struct GenerateResult {
  std::vector<int32_t> generated;
  std::vector<int32_t> fed_tokens;  // every token evaluated, in order
  std::vector<float> logits;        // [fed_tokens.size()][n_vocab] when record_logits
  double prompt_seconds = 0, gen_seconds = 0;
  int64_t gen_evals = 0;            // decode forward passes (for tokens/s)
};

// on_token is called with each generated id as soon as it is sampled.
GenerateResult generate(Transformer& tf, const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                        const std::function<bool(int32_t)>& is_eog,
                        const std::function<void(int32_t)>& on_token);

}  // namespace moeflow

// Log-probabilities of the model's next-token distribution (the raw logits, before
// temperature and top-k/top-p, as OpenAI reports them): the chosen token's and the
// n most likely tokens'.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

#include "serve/request_stream.h"

namespace moeflow::serve {

// `token_text(id)` gives a token's bytes. n_top alternatives (0-20), best first, ties
// to the lower id.
TokenLogprob token_logprobs(const float* logits, int64_t n_vocab, int32_t chosen, int n_top,
                            const std::function<std::string(int32_t)>& token_text);

}  // namespace moeflow::serve

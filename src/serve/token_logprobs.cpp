#include "serve/token_logprobs.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace moeflow::serve {

TokenLogprob token_logprobs(const float* logits, int64_t n_vocab, int32_t chosen, int n_top,
                            const std::function<std::string(int32_t)>& token_text) {
  // log p_i = l_i - max - log Σ exp(l_j - max), in double so that the sum of a large
  // vocabulary's small terms is not lost.
  float mx = logits[0];
  for (int64_t i = 1; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double log_z = static_cast<double>(mx) + std::log(sum);
  TokenLogprob r;
  r.token = token_text(chosen);
  r.logprob = static_cast<double>(logits[chosen]) - log_z;
  const int64_t n = std::min<int64_t>(std::max(n_top, 0), n_vocab);
  if (n > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(n_vocab));
    for (int64_t i = 0; i < n_vocab; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int32_t a, int32_t b) {
      return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    });
    for (int64_t i = 0; i < n; ++i)
      r.top.emplace_back(token_text(ids[static_cast<size_t>(i)]), static_cast<double>(logits[ids[static_cast<size_t>(i)]]) - log_z);
  }
  return r;
}

}  // namespace moeflow::serve

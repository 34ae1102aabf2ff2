#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

namespace moeflow {

int32_t argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

int32_t Sampler::sample(const float* logits, int64_t n_vocab) {
  if (opt_.temperature <= 0.0f) return argmax(logits, n_vocab);
  cand_.resize(static_cast<size_t>(n_vocab));
  for (int64_t i = 0; i < n_vocab; ++i) cand_[i] = {logits[i] / opt_.temperature, static_cast<int32_t>(i)};
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t n = cand_.size();
  if (opt_.top_k > 0 && static_cast<size_t>(opt_.top_k) < n) {
    std::partial_sort(cand_.begin(), cand_.begin() + opt_.top_k, cand_.end(), by_logit);
    n = static_cast<size_t>(opt_.top_k);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  const float mx = cand_[0].first;
  double sum = 0;
  std::vector<double> p(n);
  for (size_t i = 0; i < n; ++i) sum += (p[i] = std::exp(static_cast<double>(cand_[i].first - mx)));
  // Nucleus: keep the smallest prefix whose mass reaches top_p.
  if (opt_.top_p < 1.0f) {
    double acc = 0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      acc += p[i] / sum;
      if (acc >= opt_.top_p) { keep = i + 1; break; }
    }
    n = keep;
    sum = 0;
    for (size_t i = 0; i < n; ++i) sum += p[i];
  }
  std::uniform_real_distribution<double> u(0.0, sum);
  double r = u(rng_);
  for (size_t i = 0; i < n; ++i) {
    r -= p[i];
    if (r <= 0) return cand_[i].second;
  }
  return cand_[n - 1].second;
}

}  // namespace moeflow

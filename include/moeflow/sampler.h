// moeflow public API: sampling.
//
// Picks the next token from logits: greedy (temperature 0), or temperature sampling
// restricted by top-k then top-p (nucleus), from a seeded generator so a run with the
// same seed repeats exactly.
//
// Thread safety: a Sampler is used by one thread at a time; distinct Samplers are
// independent (one per sequence).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace moeflow {

struct SamplerOptions {
  float temperature = 0.0f;  // 0: greedy (argmax, ties to the lower id)
  int32_t top_k = 40;        // 0: no limit
  float top_p = 0.95f;       // 1: no limit
  uint64_t seed = 42;
};

class Sampler {
 public:
  explicit Sampler(const SamplerOptions& opt) : opt_(opt), rng_(opt.seed) {}
  int32_t sample(const float* logits, int64_t n_vocab);

 private:
  SamplerOptions opt_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
};

int32_t argmax(const float* logits, int64_t n);

}  // namespace moeflow

// moeflow public API: sampling.
//
// Picks the next token from logits: greedy (temperature 0, or below
// kGreedyTemperature), or temperature sampling restricted by top-k then top-p
// (nucleus), from a seeded generator so a run with the same seed repeats exactly.
// Logits that hold NaN or an infinity mean the model (its weights or metadata) is
// broken: sample() throws InputError saying so rather than pick a token from garbage.
//
// Thread safety: a Sampler is used by one thread at a time; distinct Samplers are
// independent (one per sequence).
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace moeflow {

// Below this temperature sampling is greedy: probabilities exp((l - max) / T) are then
// 0 for every logit that is not the maximum, and a tiny T such as 1e-45 only invites
// overflow.
constexpr float kGreedyTemperature = 1e-5f;

struct SamplerOptions {
  float temperature = 0.0f;  // 0: greedy (argmax, ties to the lower id)
  int32_t top_k = 40;        // 0: no limit
  float top_p = 0.95f;       // 1: no limit
  uint64_t seed = 42;
};

class Sampler {
 public:
  // Throws InputError for a temperature that is negative or not finite, a top_p
  // outside [0, 1] and a negative top_k (a typo such as top_p = 95 would otherwise pass).
  explicit Sampler(const SamplerOptions& opt);
  // Throws InputError for null logits, n_vocab < 1, or a logit that is NaN or infinite.
  int32_t sample(const float* logits, int64_t n_vocab);

 private:
  int64_t calls_ = 0;  // tokens sampled so far, for the error message
  SamplerOptions opt_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
};

int32_t argmax(const float* logits, int64_t n);
// Throws InputError naming the first non-finite logit and `where` (e.g. "sampled token 3").
void check_finite_logits(const float* logits, int64_t n, const std::string& where);

}  // namespace moeflow

// moeflow public API: sampling.
//
// Picks the next token from logits: greedy (temperature 0, or below
// kGreedyTemperature), or temperature sampling restricted by top-k then top-p
// (nucleus), from a seeded generator so a run with the same seed repeats exactly.
// Logits that hold NaN or an infinity mean the model (its weights or metadata) is
// broken: sample() throws InputError saying so rather than pick a token from garbage.
//
// Repetition penalties, before any of that (off by default):
// - presence and frequency (OpenAI's): a token generated c times so far has its logit
//   lowered by c * frequency_penalty + (c > 0) * presence_penalty;
// - repeat (llama.cpp's, after CTRL): a token among the last repeat_last_n of the prompt
//   and the generated text has a positive logit divided by repeat_penalty and a negative
//   one multiplied by it.
// The sampler counts the tokens it returns as generated; the prompt it is told of with
// add_prompt(). logit_bias (OpenAI's) is added to the named tokens' logits after the
// penalties: -100 bans a token in practice, +100 all but forces it.
//
// Thread safety: a Sampler is used by one thread at a time; distinct Samplers are
// independent (one per sequence).
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
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
  float presence_penalty = 0.0f;   // -2 to 2; 0: off
  float frequency_penalty = 0.0f;  // -2 to 2; 0: off
  float repeat_penalty = 1.0f;     // > 0; 1: off
  int32_t repeat_last_n = 64;      // tokens repeat_penalty looks back over; -1: all, 0: off
  std::vector<std::pair<int32_t, float>> logit_bias{};  // (token id, -100 to 100)
};

class Sampler {
 public:
  // Throws InputError for a temperature that is negative or not finite, a top_p
  // outside [0, 1] and a negative top_k (a typo such as top_p = 95 would otherwise pass),
  // a presence or frequency penalty outside [-2, 2], a repeat_penalty that is not a
  // positive finite number, a repeat_last_n below -1 and a logit_bias outside [-100, 100]
  // or for a negative id (an id past the vocabulary is refused by sample()).
  explicit Sampler(const SamplerOptions& opt);
  // The prompt's tokens, which repeat_penalty looks back over as well.
  void add_prompt(const std::vector<int32_t>& tokens);
  // Throws InputError for null logits, n_vocab < 1, or a logit that is NaN or infinite.
  int32_t sample(const float* logits, int64_t n_vocab);
  // The same among the tokens t with allowed[t] != 0 (a grammar's constraint, e.g. JSON
  // mode); InputError if the mask admits none or is not n_vocab long.
  int32_t sample(const float* logits, int64_t n_vocab, const std::vector<uint8_t>& allowed);

 private:
  int32_t sample(const float* logits, int64_t n_vocab, const std::vector<uint8_t>* allowed);  // null: all
  int32_t pick(const float* logits, int64_t n_vocab);  // top-k, top-p, temperature
  void remember(int32_t token, bool generated);
  // The logits with the penalties and biases applied, and what `allowed` refuses at
  // -infinity, in penalized_.
  const float* penalize(const float* logits, int64_t n_vocab, const std::vector<uint8_t>* allowed);

  int64_t calls_ = 0;  // tokens sampled so far, for the error message
  SamplerOptions opt_;
  // Which adjustments the options ask for, fixed at construction.
  bool counts_generated_ = false;  // presence or frequency penalty
  bool looks_back_ = false;        // repeat_penalty over a window
  bool adjusts_logits_ = false;    // either, or a logit_bias
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;
  std::unordered_map<int32_t, int32_t> generated_count_;  // presence and frequency
  std::unordered_map<int32_t, int32_t> window_count_;     // repeat: the last repeat_last_n tokens
  std::vector<int32_t> history_;                          // prompt then generated, while repeat looks back
  std::vector<float> penalized_;
};

int32_t argmax(const float* logits, int64_t n);
// Throws InputError naming the first non-finite logit and `where` (e.g. "sampled token 3").
void check_finite_logits(const float* logits, int64_t n, const std::string& where);

}  // namespace moeflow

#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"

namespace moeflow {

int32_t argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

namespace {

// One branch-free pass: x * 0 is 0 for a finite x and NaN for NaN or an infinity.
bool all_finite(const float* x, int64_t n) {
  float s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i] * 0.0f;
  return s == 0;
}

}  // namespace

void check_finite_logits(const float* logits, int64_t n, const std::string& where) {
  if (all_finite(logits, n)) return;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(logits[i]))
      throw InputError("the model produced non-finite logits at " + where + " (vocabulary id " + std::to_string(i) + " is " +
                       (std::isnan(logits[i]) ? "NaN" : "infinite") +
                       "): its weights, scales or metadata (rms epsilon, rope base) are broken");
}

Sampler::Sampler(const SamplerOptions& opt) : opt_(opt), rng_(opt.seed) {
  if (!std::isfinite(opt.temperature) || opt.temperature < 0)
    throw InputError("sampler: temperature " + std::to_string(opt.temperature) + " must be finite and >= 0");
  if (!(opt.top_p >= 0 && opt.top_p <= 1))
    throw InputError("sampler: top_p " + std::to_string(opt.top_p) + " must be in [0, 1]");
  if (opt.top_k < 0) throw InputError("sampler: top_k " + std::to_string(opt.top_k) + " must be >= 0 (0: no limit)");
  if (!(opt.presence_penalty >= -2 && opt.presence_penalty <= 2))
    throw InputError("sampler: presence_penalty " + std::to_string(opt.presence_penalty) + " must be in [-2, 2]");
  if (!(opt.frequency_penalty >= -2 && opt.frequency_penalty <= 2))
    throw InputError("sampler: frequency_penalty " + std::to_string(opt.frequency_penalty) + " must be in [-2, 2]");
  if (!std::isfinite(opt.repeat_penalty) || opt.repeat_penalty <= 0)
    throw InputError("sampler: repeat_penalty " + std::to_string(opt.repeat_penalty) + " must be finite and > 0 (1: off)");
  for (const auto& [id, bias] : opt.logit_bias)
    if (id < 0 || !(bias >= -100 && bias <= 100))
      throw InputError("sampler: logit_bias for token " + std::to_string(id) + ": " +
                       (id < 0 ? std::string("not a token id") : std::to_string(bias) + " must be in [-100, 100]"));
  if (opt.repeat_last_n < -1)
    throw InputError("sampler: repeat_last_n " + std::to_string(opt.repeat_last_n) + " must be >= -1 (-1: all, 0: off)");
  counts_generated_ = opt.presence_penalty != 0 || opt.frequency_penalty != 0;
  looks_back_ = opt.repeat_penalty != 1 && opt.repeat_last_n != 0;
  adjusts_logits_ = counts_generated_ || looks_back_ || !opt.logit_bias.empty();
}

void Sampler::remember(int32_t token, bool generated) {
  if (generated && counts_generated_) ++generated_count_[token];
  if (!looks_back_) return;
  ++window_count_[token];
  history_.push_back(token);
  if (opt_.repeat_last_n > 0 && history_.size() > static_cast<size_t>(opt_.repeat_last_n)) {
    // The token that left the window; the history is trimmed in halves, not per token.
    const int32_t gone = history_[history_.size() - 1 - static_cast<size_t>(opt_.repeat_last_n)];
    if (--window_count_[gone] == 0) window_count_.erase(gone);
    if (history_.size() >= 2 * static_cast<size_t>(opt_.repeat_last_n))
      history_.erase(history_.begin(), history_.end() - opt_.repeat_last_n);
  }
}

void Sampler::add_prompt(const std::vector<int32_t>& tokens) {
  for (int32_t t : tokens) remember(t, false);
}

const float* Sampler::penalize(const float* logits, int64_t n_vocab, const std::vector<uint8_t>* allowed) {
  penalized_.assign(logits, logits + n_vocab);
  for (const auto& [t, c] : window_count_)
    if (t >= 0 && t < n_vocab) {
      float& l = penalized_[static_cast<size_t>(t)];
      l = l > 0 ? l / opt_.repeat_penalty : l * opt_.repeat_penalty;
    }
  for (const auto& [t, c] : generated_count_)
    if (t >= 0 && t < n_vocab)
      penalized_[static_cast<size_t>(t)] -= static_cast<float>(c) * opt_.frequency_penalty + opt_.presence_penalty;
  for (const auto& [t, bias] : opt_.logit_bias) {
    if (t >= n_vocab)
      throw InputError("sampler: logit_bias names token " + std::to_string(t) + ", past the vocabulary of " +
                       std::to_string(n_vocab));
    penalized_[static_cast<size_t>(t)] += bias;
  }
  if (allowed) {
    int64_t n_allowed = 0;
    for (int64_t t = 0; t < n_vocab; ++t) {
      const bool ok = (*allowed)[static_cast<size_t>(t)] != 0;
      n_allowed += ok;
      if (!ok) penalized_[static_cast<size_t>(t)] = -INFINITY;
    }
    if (n_allowed == 0) throw InputError("sampler: no token of the vocabulary is allowed at sampled token " +
                                         std::to_string(calls_ - 1));
  }
  return penalized_.data();
}

int32_t Sampler::sample(const float* logits, int64_t n_vocab) { return sample(logits, n_vocab, nullptr); }

int32_t Sampler::sample(const float* logits, int64_t n_vocab, const std::vector<uint8_t>& allowed) {
  return sample(logits, n_vocab, &allowed);
}

int32_t Sampler::sample(const float* logits, int64_t n_vocab, const std::vector<uint8_t>* allowed) {
  if (!logits || n_vocab < 1)
    throw InputError("sampler: " + std::string(logits ? "" : "no logits, ") + "n_vocab " + std::to_string(n_vocab) +
                     (n_vocab < 1 ? " (must be >= 1)" : ""));
  if (allowed && allowed->size() != static_cast<size_t>(n_vocab))
    throw InputError("sampler: the allowed-token mask has " + std::to_string(allowed->size()) + " entries for a " +
                     std::to_string(n_vocab) + "-token vocabulary");
  if (!all_finite(logits, n_vocab)) check_finite_logits(logits, n_vocab, "sampled token " + std::to_string(calls_));
  ++calls_;
  if (adjusts_logits_ || allowed) logits = penalize(logits, n_vocab, allowed);
  const int32_t t = pick(logits, n_vocab);
  if (counts_generated_ || looks_back_) remember(t, true);
  return t;
}

int32_t Sampler::pick(const float* logits, int64_t n_vocab) {
  if (!(opt_.temperature >= kGreedyTemperature)) return argmax(logits, n_vocab);
  const double temp = opt_.temperature;
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t n;
  if (opt_.top_k > 0 && opt_.top_k < n_vocab) {
    // One pass keeping the k best in a heap whose top is the worst of them: most
    // logits lose to it in one comparison, so a 150k vocabulary costs a scan, not the
    // (logit, id) array and partial sort of the whole vocabulary (~20 us at 8k).
    // Ids arrive in increasing order, so a later logit equal to the worst kept one
    // loses its tie (by_logit) and strict > is the same order.
    // Candidates are ordered by raw logit (dividing by a positive temperature keeps the
    // order), so whole blocks are skipped on the raw logits first.
    const size_t k = static_cast<size_t>(opt_.top_k);
    cand_.clear();
    float worst_raw = -INFINITY;  // the raw logit of the worst kept candidate, once k are kept
    auto consider = [&](int64_t i) {
      const float v = logits[i];
      if (cand_.size() < k) {
        cand_.push_back({v, static_cast<int32_t>(i)});
        std::push_heap(cand_.begin(), cand_.end(), by_logit);
      } else if (v > cand_.front().first) {
        std::pop_heap(cand_.begin(), cand_.end(), by_logit);
        cand_.back() = {v, static_cast<int32_t>(i)};
        std::push_heap(cand_.begin(), cand_.end(), by_logit);
      } else {
        return;
      }
      if (cand_.size() == k) worst_raw = logits[cand_.front().second];
    };
    constexpr int64_t kBlock = 16;
    int64_t i = 0;
    for (; i + kBlock <= n_vocab; i += kBlock) {
      bool any = cand_.size() < k;
      for (int64_t j = 0; j < kBlock; ++j) any |= logits[i + j] > worst_raw;
      if (any)
        for (int64_t j = 0; j < kBlock; ++j)
          if (cand_.size() < k || logits[i + j] > worst_raw) consider(i + j);
    }
    for (; i < n_vocab; ++i)
      if (cand_.size() < k || logits[i] > worst_raw) consider(i);
    std::sort_heap(cand_.begin(), cand_.end(), by_logit);
    n = k;
  } else {
    cand_.resize(static_cast<size_t>(n_vocab));
    for (int64_t i = 0; i < n_vocab; ++i) cand_[i] = {logits[i], static_cast<int32_t>(i)};
    std::sort(cand_.begin(), cand_.end(), by_logit);
    n = cand_.size();
  }
  // Tokens a constraint refused (at -infinity, sorted last) are never candidates, not
  // even the last resort of rounding below.
  while (n > 1 && cand_[n - 1].first == -INFINITY) --n;
  // exp((l - max) / T) in double: every exponent is <= 0, so nothing overflows
  // however small T is (logits / T in float overflowed to Inf, then NaN, at T = 1e-45).
  const double mx = cand_[0].first;
  double sum = 0;
  std::vector<double> p(n);
  for (size_t i = 0; i < n; ++i) sum += (p[i] = std::exp((static_cast<double>(cand_[i].first) - mx) / temp));
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

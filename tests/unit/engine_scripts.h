// Scripts of sequences run through the public engine, together or alone, and the
// logits they received: what the engine tests (engine_test.cpp, each backend's)
// compare runs with.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "moeflow/engine.h"
#include "moeflow/sampler.h"
#include "test_paths.h"

namespace moeflow::testing {


// One sequence's script: a prompt fed in chunks of `chunk` tokens, then `n_gen`
// greedy decode steps; it joins at step `join`.
struct Script {
  std::vector<int32_t> prompt;
  int64_t chunk = 1, n_gen = 0, join = 0;
};

// Every logits vector a sequence received (the last token of each chunk, each decode
// token), in order, and the tokens it generated.
struct Transcript {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> generated;
};

inline std::vector<Script> make_scripts(int n, int64_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Script> s(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int64_t len = 2 + (7 * i + 3) % 13;
    for (int64_t t = 0; t < len; ++t) s[i].prompt.push_back(static_cast<int32_t>(rng() % n_vocab));
    s[i].chunk = 1 + (i * 5) % 6;  // 1 (token by token) to 6
    s[i].n_gen = 2 + i % 4;
    s[i].join = (i * 3) % 7;
  }
  return s;
}

// Runs the scripts together: at each step every active sequence contributes its next
// chunk or decode token; a sequence leaves (remove_sequence) once done, so later ones
// reuse its KV blocks. Batch order is shuffled so the engine's grouping is exercised.
inline std::vector<Transcript> run_together(Engine& e, const std::vector<Script>& scripts, uint32_t seed) {
  const size_t n = scripts.size();
  std::vector<Transcript> out(n);
  std::vector<SeqId> id(n, -1);
  std::vector<int64_t> fed(n, 0);  // prompt tokens fed
  std::vector<int32_t> next(n, -1);  // decode token to feed
  std::vector<bool> done(n, false);
  std::mt19937 rng(seed);
  for (int64_t step = 0; std::count(done.begin(), done.end(), true) < static_cast<long>(n); ++step) {
    std::vector<BatchToken> batch;
    std::vector<size_t> owner;
    for (size_t i = 0; i < n; ++i) {
      const Script& s = scripts[i];
      if (done[i] || step < s.join) continue;
      if (id[i] < 0) id[i] = e.add_sequence({s.prompt, ""});
      const int64_t len = e.sequence_length(id[i]);
      if (fed[i] < static_cast<int64_t>(s.prompt.size())) {
        const int64_t c = std::min<int64_t>(s.chunk, static_cast<int64_t>(s.prompt.size()) - fed[i]);
        for (int64_t t = 0; t < c; ++t) {
          batch.push_back({id[i], s.prompt[fed[i] + t], len + t, t == c - 1});
          owner.push_back(i);
        }
        fed[i] += c;
      } else {
        batch.push_back({id[i], next[i], len, true});
        owner.push_back(i);
      }
    }
    if (batch.empty()) continue;
    std::vector<size_t> perm(batch.size());
    for (size_t k = 0; k < perm.size(); ++k) perm[k] = k;
    // Shuffle whole sequences' runs, keeping each sequence's tokens in order.
    std::vector<BatchToken> shuffled;
    std::vector<size_t> shuffled_owner;
    std::vector<size_t> seqs;
    for (size_t k = 0; k < batch.size(); ++k)
      if (k == 0 || owner[k] != owner[k - 1]) seqs.push_back(owner[k]);
    std::shuffle(seqs.begin(), seqs.end(), rng);
    for (size_t i : seqs)
      for (size_t k = 0; k < batch.size(); ++k)
        if (owner[k] == i) {
          shuffled.push_back(batch[k]);
          shuffled_owner.push_back(i);
        }
    e.step(shuffled);
    for (size_t k = 0; k < shuffled.size(); ++k) {
      if (!shuffled[k].logits) continue;
      const size_t i = shuffled_owner[k];
      const float* l = e.logits(k);
      out[i].logits.emplace_back(l, l + e.n_vocab());
      if (fed[i] == static_cast<int64_t>(scripts[i].prompt.size())) {
        if (static_cast<int64_t>(out[i].generated.size()) == scripts[i].n_gen) {
          e.remove_sequence(id[i]);
          done[i] = true;
          continue;
        }
        next[i] = argmax(l, e.n_vocab());
        out[i].generated.push_back(next[i]);
      }
    }
  }
  return out;
}

inline Transcript run_alone(Engine& e, const Script& s) {
  return run_together(e, {Script{s.prompt, s.chunk, s.n_gen, 0}}, 1)[0];
}

inline EngineOptions options_for(const std::string& fixture, const std::string& policy = "all",
                          const std::string& budget = "") {
  EngineOptions o;
  o.model_path = fixture_path(fixture);
  o.threads = 2;
  o.ctx_size = 64;
  o.n_parallel = 16;
  o.policy = policy;
  o.expert_budget = budget;
  return o;
}

// A prompt fed a token at a time (each a mat-vec, as decoding runs it), no generation:
// runs that differ only in arithmetic see the same tokens, so their logits compare
// position by position.
inline Script prompt_token_by_token(int64_t n_vocab) {
  Script s = make_scripts(1, n_vocab, 7)[0];
  s.chunk = 1;
  s.n_gen = 0;
  return s;
}

// The relative (root-mean-square) difference between two runs' logits, position by
// position, against b's; and the largest of them.
inline std::vector<double> relative_differences(const Transcript& a, const Transcript& b) {
  std::vector<double> d;
  for (size_t k = 0; k < a.logits.size(); ++k) {
    double num = 0, den = 0;
    for (size_t v = 0; v < a.logits[k].size(); ++v) {
      const double e = static_cast<double>(a.logits[k][v]) - b.logits[k][v];
      num += e * e;
      den += static_cast<double>(b.logits[k][v]) * b.logits[k][v];
    }
    d.push_back(std::sqrt(num / std::max(den, 1e-30)));
  }
  return d;
}
inline double max_relative_difference(const Transcript& a, const Transcript& b) {
  const std::vector<double> d = relative_differences(a, b);
  return d.empty() ? 0.0 : *std::max_element(d.begin(), d.end());
}

// Every sequence's logits in `got` equal `ref`'s, bit for bit (callers wrap it in
// ASSERT_NO_FATAL_FAILURE).
inline void expect_same_logits(const std::vector<Transcript>& got, const std::vector<Transcript>& ref,
                               const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_EQ(got[i].logits.size(), ref[i].logits.size()) << what << ": sequence " << i;
    for (size_t k = 0; k < ref[i].logits.size(); ++k)
      ASSERT_TRUE(got[i].logits[k] == ref[i].logits[k]) << what << ": sequence " << i << ", logits " << k;
  }
}

inline void expect_same(const std::vector<Transcript>& together, Engine& e, const std::vector<Script>& scripts,
                 const std::string& what) {
  for (size_t i = 0; i < scripts.size(); ++i) {
    const Transcript alone = run_alone(e, scripts[i]);
    ASSERT_EQ(together[i].logits.size(), alone.logits.size()) << what << ", sequence " << i;
    for (size_t k = 0; k < alone.logits.size(); ++k)
      ASSERT_TRUE(together[i].logits[k] == alone.logits[k])
          << what << ": sequence " << i << " of " << scripts.size() << ", logits " << k << " differ from its run alone";
    EXPECT_EQ(together[i].generated, alone.generated) << what << ", sequence " << i;
  }
}

}  // namespace moeflow::testing

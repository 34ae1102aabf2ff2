// `moeflow perplexity`: compute_perplexity against exp(mean NLL) computed here from
// logits obtained independently (one token at a time through the KV cache, not one
// block per window), on a fixture model; window bookkeeping; flag and file errors.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/perplexity.h"
#include "engine/transformer.h"
#include "base/error.h"
#include "kernels/cpu/thread_pool.h"
#include "model/model_weights.h"
#include "test_paths.h"

namespace moeflow {
namespace {

std::vector<int32_t> text_tokens(int n, int vocab) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 37 + 11) % (vocab - 44));  // ids below the specials
  return t;
}

// NLL summed over the scored tokens, from decode-step logits and a float log-sum-exp.
double reference_nll(const Model& m, ThreadPool* pool, const std::vector<int32_t>& toks, int64_t ctx, int32_t bos,
                     int64_t* scored) {
  const int64_t V = m.config().n_vocab;
  const int64_t step = bos >= 0 ? ctx - 1 : ctx;
  double nll = 0;
  *scored = 0;
  for (size_t s = 0; s < toks.size(); s += static_cast<size_t>(step)) {
    std::vector<int32_t> win;
    if (bos >= 0) win.push_back(bos);
    for (size_t i = s; i < std::min(toks.size(), s + static_cast<size_t>(step)); ++i) win.push_back(toks[i]);
    if (win.size() < 2) continue;
    Transformer tf(m, pool, ctx);
    std::vector<float> logits;
    for (size_t i = 0; i + 1 < win.size(); ++i) {
      tf.eval(&win[i], 1, false, logits);
      float mx = logits[0];
      for (int64_t v = 1; v < V; ++v) mx = std::max(mx, logits[v]);
      double z = 0;
      for (int64_t v = 0; v < V; ++v) z += std::exp(static_cast<double>(logits[v] - mx));
      nll += -(static_cast<double>(logits[win[i + 1]] - mx) - std::log(z));
      ++*scored;
    }
  }
  return nll;
}

std::unique_ptr<Engine> fixture_engine(int threads) {
  EngineOptions o;
  o.model_path = testing::fixture_path("mixtral-f32.gguf");
  o.threads = threads;
  o.ctx_size = 64;
  return Engine::open(o);
}

// compute_perplexity runs windows on the engine (whole windows as one step); the
// reference decodes them token by token on a Transformer.
TEST(Perplexity, MatchesExpMeanNllFromIndependentLogits) {
  auto model = Model::load(testing::fixture_path("mixtral-f32.gguf"));
  ThreadPool pool(2);
  auto engine = fixture_engine(2);
  const int64_t V = model->config().n_vocab;
  const std::vector<int32_t> toks = text_tokens(50, static_cast<int>(V));
  for (int32_t bos : {256, -1}) {
    for (int64_t ctx : {16, 7, 64}) {
      const cli::PerplexityResult r = cli::compute_perplexity(*engine, toks, ctx, bos);
      int64_t scored = 0;
      const double nll = reference_nll(*model, &pool, toks, ctx, bos, &scored);
      EXPECT_EQ(r.n_scored, scored) << "bos " << bos << " ctx " << ctx;
      const double want = std::exp(nll / static_cast<double>(scored));
      EXPECT_NEAR(r.perplexity(), want, 1e-4 * want) << "bos " << bos << " ctx " << ctx;
      // With BOS every text token is scored; without, all but each window's first.
      // A last window of a single token has nothing to score without BOS and is skipped.
      const int64_t step = bos >= 0 ? ctx - 1 : ctx;
      int64_t n_win = 0, n_scored = 0;
      for (int64_t s = 0; s < 50; s += step) {
        const int64_t len = std::min<int64_t>(step, 50 - s);
        if (bos < 0 && len < 2) continue;
        ++n_win;
        n_scored += bos >= 0 ? len : len - 1;
      }
      EXPECT_EQ(static_cast<int64_t>(r.windows.size()), n_win) << "bos " << bos << " ctx " << ctx;
      EXPECT_EQ(r.n_scored, n_scored) << "bos " << bos << " ctx " << ctx;
      double sum = 0;
      for (const auto& w : r.windows) sum += w.nll;
      EXPECT_NEAR(sum, r.nll, 1e-9 * std::abs(r.nll));
      // A window in steps of 1 (decoding's arithmetic) or 5 tokens scores the same.
      for (int64_t batch : {1, 5}) {
        const cli::PerplexityResult rb = cli::compute_perplexity(*engine, toks, ctx, bos, 0, {}, batch);
        EXPECT_EQ(rb.n_scored, r.n_scored);
        EXPECT_NEAR(rb.perplexity(), want, 1e-4 * want) << "batch " << batch << " bos " << bos << " ctx " << ctx;
      }
    }
  }
  EXPECT_THROW(cli::compute_perplexity(*engine, toks, 16, 256, 0, {}, -1), InputError);
  // A model that predicted uniformly would score V; a trained one far less, but this
  // random-weight fixture must still be a finite, positive number.
  const cli::PerplexityResult r = cli::compute_perplexity(*engine, toks, 16, 256);
  EXPECT_GT(r.perplexity(), 1.0);
  EXPECT_TRUE(std::isfinite(r.perplexity()));
}

TEST(Perplexity, MaxWindowsAndCallback) {
  auto engine = fixture_engine(1);
  const std::vector<int32_t> toks = text_tokens(40, static_cast<int>(engine->n_vocab()));
  int calls = 0;
  const cli::PerplexityResult r = cli::compute_perplexity(
      *engine, toks, 11, 256, 2,
      [&](int64_t i, int64_t n, const cli::PerplexityWindow& w, const cli::PerplexityResult&) {
        EXPECT_EQ(i, calls);
        EXPECT_EQ(n, 2);
        EXPECT_EQ(w.scored, 10);
        ++calls;
      });
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(r.n_scored, 20);
}

TEST(Perplexity, RejectsTooLittleTextAndTinyContext) {
  auto engine = fixture_engine(1);
  EXPECT_THROW(cli::compute_perplexity(*engine, {5, 6, 7}, 65, 256), InputError);  // past the engine's context
  EXPECT_THROW(cli::compute_perplexity(*engine, {}, 16, 256), InputError);
  EXPECT_THROW(cli::compute_perplexity(*engine, {5}, 16, -1), InputError);  // nothing after the first
  EXPECT_THROW(cli::compute_perplexity(*engine, {5, 6, 7}, 1, 256), InputError);
  EXPECT_NO_THROW(cli::compute_perplexity(*engine, {5}, 16, 256));
}

using moeflow::testing::run_command;

TEST(PerplexityCli, JsonOutputAndErrors) {
  const std::string model = testing::fixture_path("mixtral-f32.gguf");
  const std::string text = testing::scratch_path("ppl") + ".txt";
  {
    std::ofstream f(text);
    f << "the cat sat on the mat and then the dog ran to the tree in the end";
  }
  int status = -1;
  const std::string bin = MOEFLOW_BINARY;
  std::string out = run_command(bin + " perplexity -m " + model + " -f " + text + " -c 8 -t 1 --json 2>/dev/null", &status);
  ASSERT_EQ(status, 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  EXPECT_EQ(j["ctx_size"], 8);
  EXPECT_EQ(j["tokens_scored"], j["tokens_in_file"]);
  EXPECT_GT(j["perplexity"].get<double>(), 1.0);
  EXPECT_NEAR(std::log(j["perplexity"].get<double>()), j["mean_nll"].get<double>(), 1e-9);

  run_command(bin + " perplexity -m " + model + " 2>&1", &status);  // no -f
  EXPECT_EQ(WEXITSTATUS(status), 2);
  out = run_command(bin + " perplexity -m " + model + " -f /nonexistent/file.txt 2>&1", &status);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_NE(out.find("no such file"), std::string::npos) << out;
  const std::string empty = testing::scratch_path("ppl_empty") + ".txt";
  std::ofstream{empty};
  out = run_command(bin + " perplexity -m " + model + " -f " + empty + " 2>&1", &status);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_NE(out.find("empty"), std::string::npos) << out;
  run_command(bin + " perplexity -m " + model + " -f " + text + " -c 1 2>&1", &status);
  EXPECT_NE(WEXITSTATUS(status), 0);
  run_command(bin + " perplexity -m " + model + " -f " + text + " --chunks -3 2>&1", &status);
  EXPECT_EQ(WEXITSTATUS(status), 2);
  std::remove(text.c_str());
  std::remove(empty.c_str());
}

}  // namespace
}  // namespace moeflow

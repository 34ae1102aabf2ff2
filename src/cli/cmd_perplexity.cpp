// moeflow perplexity: exp(mean negative log-likelihood) of a text file under a model.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "cli/perplexity.h"
#include "cli/offload_flags.h"
#include "engine/expert_offload.h"
#include "engine/generator.h"
#include "engine/tokenizer.h"
#include "moeflow/engine.h"
#include "engine/sampler.h"
#include "base/error.h"
#include "base/input_file.h"

namespace moeflow::cli {

PerplexityResult compute_perplexity(
    Engine& engine, const std::vector<int32_t>& tokens, int64_t n_ctx, int32_t bos, int64_t max_windows,
    const std::function<void(int64_t, int64_t, const PerplexityWindow&, const PerplexityResult&)>& on_window,
    int64_t batch) {
  if (batch < 0) throw InputError("perplexity: negative batch size " + std::to_string(batch));
  if (n_ctx < 2) throw InputError("perplexity: the context size must be at least 2 tokens");
  if (n_ctx > engine.ctx_size())
    throw InputError("perplexity: windows of " + std::to_string(n_ctx) + " tokens exceed the engine's context of " +
                     std::to_string(engine.ctx_size()));
  const int64_t V = engine.n_vocab();
  const int64_t n = static_cast<int64_t>(tokens.size());
  const bool with_bos = bos >= 0;
  const int64_t step = with_bos ? n_ctx - 1 : n_ctx;  // text tokens per window
  // A window with bos scores all its text tokens; without, all but the first.
  const int64_t min_text = with_bos ? 1 : 2;
  int64_t n_windows = 0;
  for (int64_t s = 0; s < n; s += step)
    if (std::min(step, n - s) >= min_text) ++n_windows;
  if (max_windows > 0) n_windows = std::min(n_windows, max_windows);
  if (n_windows == 0)
    throw InputError("perplexity: the text has " + std::to_string(n) + " tokens, too few to score");

  PerplexityResult res;
  res.n_ctx = n_ctx;
  std::vector<int32_t> win;
  std::vector<float> logits, part;
  for (int64_t w = 0, s = 0; w < n_windows; s += step) {
    const int64_t len = std::min(step, n - s);
    if (len < min_text) continue;
    win.clear();
    if (with_bos) win.push_back(bos);
    win.insert(win.end(), tokens.begin() + s, tokens.begin() + s + len);
    // Each window a sequence of its own, from an empty cache.
    const SeqId seq = engine.add_sequence({win, ""});
    EngineSequenceSink sink(engine, seq);
    const int64_t wn = static_cast<int64_t>(win.size()), b = batch > 0 ? batch : wn;
    logits.clear();
    for (int64_t i = 0; i < wn; i += b) {
      sink.eval(win.data() + i, std::min(b, wn - i), true, part);
      logits.insert(logits.end(), part.begin(), part.end());
    }
    engine.remove_sequence(seq);
    PerplexityWindow pw;
    for (size_t i = 0; i + 1 < win.size(); ++i) {  // logits row i predicts win[i+1]
      const float* row = logits.data() + static_cast<int64_t>(i) * V;
      check_finite_logits(row, V, "window " + std::to_string(w) + ", position " + std::to_string(i));
      double mx = row[0];
      for (int64_t v = 1; v < V; ++v) mx = std::max(mx, static_cast<double>(row[v]));
      double sum = 0;
      for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
      pw.nll += mx + std::log(sum) - static_cast<double>(row[win[i + 1]]);
      ++pw.scored;
    }
    res.nll += pw.nll;
    res.n_scored += pw.scored;
    res.windows.push_back(pw);
    ++w;
    if (on_window) on_window(w - 1, n_windows, pw, res);
  }
  return res;
}

int cmd_perplexity(int argc, char** argv) {
  Args a("perplexity");
  add_model_flags(a);
  a.flag("-f,--file",
         "UTF-8 text file to score (required). It is cut into consecutive, non-overlapping windows of\n"
         "                          --ctx-size tokens: BOS + ctx-1 text tokens, every text token scored (the\n"
         "                          first from BOS alone; not llama.cpp's second-half rule); the last window may\n"
         "                          be shorter; each window starts from an empty cache");
  a.flag("--chunks", "score at most this many windows (0: all)", true, "0");
  a.flag("-b,--batch-size", "tokens of a window evaluated per step (0: the whole window in one step; 1: one at a "
                            "time, as generation runs them)", true, "0");
  a.flag("--json", "print one JSON object instead of text", false);
  a.flag("-q,--quiet", "no per-window progress on stderr", false);
  add_offload_flags(a);
  a.parse(argc, argv, 2);
  if (!a.positionals().empty()) throw UsageError("moeflow perplexity: unexpected argument '" + a.positionals()[0] + "'");
  if (!a.has("--file")) throw UsageError("moeflow perplexity: -f/--file is required\n" + a.help());
  const int64_t max_windows = a.integer("--chunks", 0, INT64_MAX);
  const int64_t batch = a.integer("--batch-size", 0, 1 << 20);

  const std::string path = a.str("--file");
  std::ifstream in = open_input_file(path, "--file", true);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw InputError("error reading '" + path + "'");
  const std::string text = ss.str();
  if (text.empty()) throw InputError("'" + path + "' is empty: nothing to score");

  check_emoe_flags(a);
  check_policy_state_out(a, "perplexity", true);
  auto engine = Engine::open(engine_options_from_flags(a, a.str("--policy")));
  const int64_t n_ctx = engine->ctx_size();
  if (n_ctx < 2) throw UsageError("moeflow perplexity: --ctx-size must be at least 2");
  if (engine->lossy())
    std::fprintf(stderr, "note: --on-miss reroute is lossy: the perplexity measures the rerouted model\n");
  const int64_t trained = engine->model().config().n_ctx_train;
  if (trained > 0 && n_ctx > trained)
    std::fprintf(stderr, "note: windows of %lld tokens reach past the %lld positions the model was trained on\n",
                 static_cast<long long>(n_ctx), static_cast<long long>(trained));
  const std::vector<int32_t> tokens = engine->tokenize(text, false);
  const int32_t bos = engine->tokenizer().bos();
  const bool json = a.has("--json"), quiet = a.has("--quiet");
  if (!quiet)
    std::fprintf(stderr, "%s: %zu bytes, %zu tokens; windows of %lld tokens (%s)\n", path.c_str(), text.size(),
                 tokens.size(), static_cast<long long>(n_ctx),
                 bos >= 0 ? "BOS + text, every text token scored" : "no BOS: all but the first token scored");
  PerplexityResult r = compute_perplexity(
      *engine, tokens, n_ctx, bos, max_windows,
      [&](int64_t i, int64_t nw, const PerplexityWindow& w, const PerplexityResult& run) {
        if (quiet) return;
        std::fprintf(stderr, "[%lld/%lld] window ppl %.3f, running ppl %.4f over %lld tokens\n",
                     static_cast<long long>(i + 1), static_cast<long long>(nw), std::exp(w.nll / w.scored),
                     run.perplexity(), static_cast<long long>(run.n_scored));
      },
      batch);
  if (a.has("--policy-state-out")) engine->save_policy_state(a.str("--policy-state-out"));
  if (json) {
    nlohmann::json j;
    j["model"] = engine->model().file().path();
    j["cache"] = offload_counters_json(engine->offload());
    j["file"] = path;
    j["ctx_size"] = r.n_ctx;
    j["batch_size"] = batch;
    j["windows"] = r.windows.size();
    j["tokens_in_file"] = tokens.size();
    j["tokens_scored"] = r.n_scored;
    j["mean_nll"] = r.nll / static_cast<double>(r.n_scored);
    j["perplexity"] = r.perplexity();
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("perplexity: %.4f over %lld tokens (%zu windows of at most %lld, mean NLL %.4f nats)\n",
                r.perplexity(), static_cast<long long>(r.n_scored), r.windows.size(),
                static_cast<long long>(r.n_ctx), r.nll / static_cast<double>(r.n_scored));
  }
  return 0;
}

}  // namespace moeflow::cli

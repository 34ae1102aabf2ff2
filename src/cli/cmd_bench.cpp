#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>

#include "cli/commands.h"
#include "cli/model_flags.h"
#include "engine/transformer.h"
#include "kernels/cpu/roofline.h"

namespace moeflow::cli {

namespace {

// Bytes of weights one decode token must read: all dense matrices (attention,
// router, output; the embedding contributes one row) plus top-k experts per layer.
uint64_t weight_bytes_per_token(const Model& m) {
  const ModelConfig& c = m.config();
  const ModelWeights& w = m.weights();
  uint64_t b = w.output.bytes() + w.tok_embd.row_bytes();
  for (const auto& L : w.layers) {
    b += L.wq.bytes() + L.wk.bytes() + L.wv.bytes() + L.wo.bytes() + L.gate_inp.bytes();
    b += static_cast<uint64_t>(c.n_expert_used) *
         (L.gate_exps.first.bytes() + L.up_exps.first.bytes() + L.down_exps.first.bytes());
  }
  return b;
}

// Multiply-add FLOPs of the matrices for one token (2 per weight); attention's
// O(context) part is added separately.
double matrix_flops_per_token(const Model& m) {
  const ModelConfig& c = m.config();
  const ModelWeights& w = m.weights();
  double f = 2.0 * static_cast<double>(w.output.rows * w.output.cols);
  for (const auto& L : w.layers) {
    f += 2.0 * static_cast<double>(L.wq.rows * L.wq.cols + L.wk.rows * L.wk.cols + L.wv.rows * L.wv.cols +
                                   L.wo.rows * L.wo.cols + L.gate_inp.rows * L.gate_inp.cols);
    f += 2.0 * static_cast<double>(c.n_expert_used) * 3.0 * static_cast<double>(c.n_embd * c.n_ff_expert);
  }
  return f;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int cmd_bench(int argc, char** argv) {
  Args a("bench");
  add_model_flags(a);
  a.flag("-p,--n-prompt", "prompt tokens for the prefill test", true, "128");
  a.flag("-n,--n-gen", "tokens for the generation test", true, "32");
  a.flag("-r,--repetitions", "repetitions (the best is reported)", true, "3");
  a.flag("--json", "print one JSON object", false);
  a.parse(argc, argv, 2);
  LoadedModel lm = load_model_from_flags(a);
  const Model& m = *lm.model;
  const ModelConfig& c = m.config();
  const int64_t n_prompt = a.integer("--n-prompt", 1, 1 << 16);
  const int64_t n_gen = a.integer("--n-gen", 1, 1 << 16);
  const int64_t reps = a.integer("--repetitions", 1, 100);
  Transformer tf(m, lm.pool.get(), n_prompt + n_gen + 1);

  // Deterministic pseudo-random prompt: routing then spreads over many experts, as
  // real text does.
  std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
  uint64_t s = 12345;
  for (auto& t : prompt) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(c.n_vocab));
  }
  std::vector<float> logits;
  double best_pp = 1e30, best_tg = 1e30;
  for (int64_t r = 0; r < reps; ++r) {
    tf.reset();
    double t0 = now();
    tf.eval(prompt.data(), n_prompt, false, logits);
    best_pp = std::min(best_pp, now() - t0);
    t0 = now();
    int32_t tok = prompt.back();
    for (int64_t i = 0; i < n_gen; ++i) {
      tf.eval(&tok, 1, false, logits);
      tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    }
    best_tg = std::min(best_tg, now() - t0);
  }
  const double pp_tps = static_cast<double>(n_prompt) / best_pp;
  const double tg_tps = static_cast<double>(n_gen) / best_tg;

  const double bw_gbs = cpu::measure_triad_bandwidth_gbs(lm.pool.get(), 64ull << 20);
  const double peak_gflops = cpu::measure_peak_fma_gflops(lm.pool.get());
  const double bytes_tok = static_cast<double>(weight_bytes_per_token(m));
  const double tg_bound = bw_gbs * 1e9 / bytes_tok;
  // Prefill FLOPs: every prompt token goes through the matrices (top-k experts each)
  // plus causal attention (QK^T and AV: 4 * head_dim * n_head per key).
  const double attn = 4.0 * static_cast<double>(c.n_head * c.head_dim * c.n_layer) *
                      (static_cast<double>(n_prompt) * static_cast<double>(n_prompt + 1) / 2.0);
  const double pp_flops = matrix_flops_per_token(m) * static_cast<double>(n_prompt) + attn;
  const double pp_gflops = pp_flops / best_pp / 1e9;
  const double tg_gbs = bytes_tok * tg_tps / 1e9;

  if (a.has("--json")) {
    nlohmann::json j = {{"model", m.file().path()},
                        {"threads", lm.pool->size()},
                        {"n_prompt", n_prompt},
                        {"n_gen", n_gen},
                        {"pp_tokens_per_second", pp_tps},
                        {"tg_tokens_per_second", tg_tps},
                        {"weight_bytes_per_token", bytes_tok},
                        {"tg_effective_gbs", tg_gbs},
                        {"triad_bandwidth_gbs", bw_gbs},
                        {"tg_bound_tokens_per_second", tg_bound},
                        {"tg_fraction_of_bound", tg_tps / tg_bound},
                        {"pp_gflops", pp_gflops},
                        {"peak_gflops", peak_gflops},
                        {"pp_fraction_of_peak", pp_gflops / peak_gflops}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("model %s (%s, %lld layers, %lld experts top-%lld), %d threads\n", m.file().path().c_str(), c.arch_name.c_str(),
              static_cast<long long>(c.n_layer), static_cast<long long>(c.n_expert), static_cast<long long>(c.n_expert_used),
              lm.pool->size());
  std::printf("| test     | tokens/s | achieved          | bound                          | of bound |\n");
  std::printf("|----------|----------|-------------------|--------------------------------|----------|\n");
  std::printf("| pp%-6lld | %8.1f | %7.1f GFLOP/s   | %7.1f GFLOP/s peak FMA       | %6.1f%% |\n", static_cast<long long>(n_prompt),
              pp_tps, pp_gflops, peak_gflops, 100.0 * pp_gflops / peak_gflops);
  std::printf("| tg%-6lld | %8.1f | %7.2f GB/s      | %7.1f tok/s (%.2f GB/s triad) | %6.1f%% |\n", static_cast<long long>(n_gen),
              tg_tps, tg_gbs, tg_bound, bw_gbs, 100.0 * tg_tps / tg_bound);
  std::printf("weights read per generated token: %.2f MiB\n", bytes_tok / (1 << 20));
  return 0;
}

}  // namespace moeflow::cli

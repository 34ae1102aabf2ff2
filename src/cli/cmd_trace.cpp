// `moeflow trace stats FILE [--json]`: what a routing trace says about expert use.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "sim/trace_stats.h"

namespace moeflow::cli {

namespace {

void print_popularity_table(const char* title, const std::vector<std::vector<double>>& pop, int32_t n_expert) {
  std::printf("%s\n  layer", title);
  for (int32_t e = 0; e < n_expert && e < 64; ++e) std::printf(" %5d", e);
  std::printf("\n");
  for (size_t l = 0; l < pop.size(); ++l) {
    std::printf("  %5zu", l);
    for (int32_t e = 0; e < n_expert && e < 64; ++e) std::printf(" %5.1f", 100.0 * pop[l][static_cast<size_t>(e)]);
    std::printf("\n");
  }
}

int trace_stats(int argc, char** argv) {
  Args a("trace stats");
  a.positional("FILE", "routing trace (.jsonl, DESIGN.md interchange format)");
  a.flag("--json", "print one JSON object", false);
  a.flag("--by-task", "also print the popularity table of each task", false);
  a.parse(argc, argv, 3);
  if (a.positionals().empty()) throw UsageError("moeflow trace stats: give a trace file\n" + a.help());
  const Trace t = load_trace(a.positionals()[0]);
  const TraceStats s = compute_trace_stats(t);
  if (a.has("--json")) {
    nlohmann::json j;
    j["model"] = t.model;
    j["layers"] = s.n_layer;
    j["experts"] = s.n_expert;
    j["top_k"] = s.top_k;
    j["requests"] = s.requests;
    j["iterations"] = s.iterations;
    j["routed_tokens"] = s.routed_tokens;
    j["dropped_rows"] = s.dropped_rows;
    j["popularity"] = s.popularity;
    j["top_share"] = s.top_share;
    j["normalized_entropy"] = s.normalized_entropy;
    j["affinity_top1_hit"] = s.affinity_top1_hit;
    j["affinity_chance"] = s.affinity_chance;
    j["temporal_overlap"] = s.temporal_overlap;
    nlohmann::json ws = nlohmann::json::array();
    for (const auto& w : s.working_sets)
      ws.push_back({{"request", w.request}, {"task", w.task}, {"prefill_tokens", w.prefill_tokens},
                    {"decode_tokens", w.decode_tokens}, {"prefill_fraction", w.prefill_fraction},
                    {"decode_fraction", w.decode_fraction}});
    j["working_sets"] = ws;
    j["task_popularity"] = s.task_popularity;
    j["task_divergence"] = s.task_divergence;
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%s: %s, %d layers x %d experts, top-%d; %lld requests, %lld iterations, %lld routed tokens",
              t.path.c_str(), t.model.c_str(), s.n_layer, s.n_expert, s.top_k, static_cast<long long>(s.requests),
              static_cast<long long>(s.iterations), static_cast<long long>(s.routed_tokens));
  if (s.dropped_rows) std::printf(", %lld dropped rows skipped", static_cast<long long>(s.dropped_rows));
  std::printf("%s\n\n", t.has_probs ? "" : " (no gate probabilities recorded)");
  print_popularity_table("popularity (% of the layer's routed slots):", s.popularity, s.n_expert);
  std::printf("\n  layer  top-expert share  entropy/log(E)\n");
  for (size_t l = 0; l < s.top_share.size(); ++l)
    std::printf("  %5zu  %15.1f%%  %14.3f\n", l, 100.0 * s.top_share[l], s.normalized_entropy[l]);
  std::printf("\nper-request working set (distinct experts touched / all %d):\n", s.n_layer * s.n_expert);
  std::printf("  request  task            prefill tok  prefill set  decode tok  decode set\n");
  for (const auto& w : s.working_sets)
    std::printf("  %7lld  %-14s  %11lld  %10.1f%%  %10lld  %9.1f%%\n", static_cast<long long>(w.request),
                w.task.empty() ? "-" : w.task.c_str(), static_cast<long long>(w.prefill_tokens), 100.0 * w.prefill_fraction,
                static_cast<long long>(w.decode_tokens), 100.0 * w.decode_fraction);
  std::printf("\ninter-layer affinity: the strongest successor of layer l's experts is in layer l+1's top-%d "
              "%.1f%% of the time (chance %.1f%%; in-sample)\n",
              s.top_k, 100.0 * s.affinity_top1_hit, 100.0 * s.affinity_chance);
  std::printf("temporal locality: consecutive decode tokens share %.1f%% of a layer's top-%d (chance %.1f%%)\n",
              100.0 * s.temporal_overlap, s.top_k, 100.0 * s.affinity_chance);
  if (!s.task_divergence.empty()) {
    std::printf("\nspecialisation by task (mean total-variation distance of the task's popularity from the overall, "
                "0 = none, 1 = disjoint):\n");
    for (const auto& [task, d] : s.task_divergence) std::printf("  %-14s %.3f\n", task.c_str(), d);
    if (a.has("--by-task"))
      for (const auto& [task, pop] : s.task_popularity) {
        std::printf("\n");
        print_popularity_table(("task " + task + ":").c_str(), pop, s.n_expert);
      }
  }
  return 0;
}

}  // namespace

int cmd_trace(int argc, char** argv) {
  const std::string sub = argc > 2 ? argv[2] : "";
  if (sub == "stats") return trace_stats(argc, argv);
  throw UsageError("moeflow trace: expected a subcommand: stats\n  moeflow trace stats FILE [--json] [--by-task]");
}

}  // namespace moeflow::cli

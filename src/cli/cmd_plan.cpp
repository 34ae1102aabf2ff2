// `moeflow plan`: the serverless deployment planner (src/plan; serverless-moe). Learns
// the expert-popularity table on the first requests of a trace, predicts the loads of
// the held-out ones, plans a deployment for one batch of them (ODS, BO or the exact
// integer program), and serves the held-out batches under it beside the max-memory
// baseline. Exit code 4 when no deployment can meet the SLO.
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "format/trace.h"
#include "plan/bayes_opt.h"
#include "plan/exact_solver.h"
#include "plan/load_margin.h"
#include "plan/ods.h"
#include "plan/serving.h"
#include "sim/profiles.h"

namespace moeflow::cli {

namespace {

using namespace moeflow::plan;

nlohmann::json deployment_json(const Deployment& d) {
  nlohmann::json layers = nlohmann::json::array();
  for (size_t l = 0; l < d.method.size(); ++l) {
    nlohmann::json ex = nlohmann::json::array();
    for (const FunctionConfig& f : d.expert[l])
      ex.push_back({{"memory_mb", f.memory_mb}, {"replicas", f.replicas}, {"minibatch", f.minibatch}});
    layers.push_back({{"method", comm_name(d.method[l])}, {"experts", ex}});
  }
  return layers;
}

void print_deployment(const Deployment& d) {
  std::printf("deployment (per expert: memory MB x replicas[/minibatch]):\n");
  for (size_t l = 0; l < d.method.size(); ++l) {
    std::printf("  layer %2zu %-18s", l, comm_name(d.method[l]));
    for (const FunctionConfig& f : d.expert[l]) {
      if (f.minibatch > 0) std::printf(" %dx%d/%d", f.memory_mb, f.replicas, f.minibatch);
      else std::printf(" %dx%d", f.memory_mb, f.replicas);
    }
    std::printf("\n");
  }
}

}  // namespace

int cmd_plan(int argc, char** argv) {
  Args a("plan");
  a.flag("--trace", "routing trace (.jsonl): the first requests profile, the rest are served");
  a.flag("--model-profile", "model profile name or .json (profiles/models; default: from the trace, as simulate)");
  a.flag("--platform", "serverless platform profile name or .json (profiles/platforms)", true, "lambda");
  a.flag("--slo-ms", "latency SLO of one batch through all MoE layers (default: 1.2 x the max-memory deployment's)");
  a.flag("--method", "ods (Alg. 1), bo (Alg. 2) or exact (CBC)", true, "ods");
  a.flag("--learn", "requests that profile the popularity table, a:b (default: the first half)");
  a.flag("--batch-tokens", "tokens per served batch", true, "256");
  a.flag("--load-quantile", "plan each expert for this quantile of its per-batch load on the learning requests "
                            "(0: for the predicted mean, as the paper does)", true, "0.9");
  a.flag("--time-limit", "seconds per ODS sub-problem (the paper's 60 s), and for --method exact", true, "60");
  a.flag("--exact-time-limit", "seconds for the exact solve behind optimal_cost (0: skip it)", true, "60");
  a.flag("--bo-time-limit", "seconds per sub-problem of the ODS run inside each BO trial", true, "5");
  a.flag("--non-moe-ms", "time of the non-MoE layers, a constant inside the SLO", true, "0");
  a.flag("--bo-iterations", "most BO iterations", true, "12");
  a.flag("--seed", "BO's random seed", true, "1");
  a.flag("--baseline-memory-mb", "also report the baseline with every function at this memory (LambdaML ran at 3008)");
  a.flag("--json", "print one JSON object", false);
  a.parse(argc, argv, 2);
  if (!a.has("--trace")) throw UsageError("moeflow plan: --trace FILE is required\n" + a.help());
  const std::string method = a.str("--method");
  if (method != "ods" && method != "bo" && method != "exact")
    throw UsageError("--method '" + method + "': expected ods, bo or exact");
  const int64_t batch_tokens = a.integer("--batch-tokens", 1, 1 << 24);
  const double load_q = a.number("--load-quantile", 0, 1);
  const double time_limit = a.number("--time-limit", 0.01, 86400);
  const double exact_limit = a.number("--exact-time-limit", 0, 86400);
  const double non_moe_s = a.number("--non-moe-ms", 0, 1e9) / 1e3;

  const Trace trace = load_trace(a.str("--trace"));
  if (trace.requests.empty()) throw InputError(trace.path + ": the trace holds no requests");
  const std::string model_name =
      a.has("--model-profile") ? a.str("--model-profile") : model_profile_for_trace_model(trace.model);
  const ModelProfile model = load_model_profile(model_name);
  const PlatformProfile platform = load_platform_profile(a.str("--platform"));
  const size_t n = trace.requests.size();
  const auto learn = a.has("--learn") ? parse_request_range("--learn", a.str("--learn"), n)
                                      : std::pair<size_t, size_t>{0, (n + 1) / 2};
  if (learn.second <= learn.first) throw UsageError("--learn: the range holds no request");
  // Held out: every request outside the learning range; with none outside it (a
  // one-request trace, or --learn over all of them) the learned ones are scored too.
  std::vector<RoutedToken> learn_tok = routed_tokens(trace, learn.first, learn.second), held;
  for (auto [b, e] : {std::pair<size_t, size_t>{0, learn.first}, std::pair<size_t, size_t>{learn.second, n}}) {
    auto part = routed_tokens(trace, b, e);
    held.insert(held.end(), part.begin(), part.end());
  }
  const bool in_sample = held.empty();
  if (in_sample) held = learn_tok;

  // Popularity (Sec. III-B) and its accuracy on the held-out requests (Sec. V-B metric).
  PopularityTable table(trace.n_layer, trace.n_expert, trace.top_k);
  table.observe(learn_tok);
  const Load real = real_load(held, trace.n_layer, trace.n_expert);
  nlohmann::json prediction;
  for (Features f : {Features::token_and_position, Features::token_only, Features::frequency}) {
    const LoadError err = load_error(real, table.predicted_load(held, f));
    prediction[f == Features::token_and_position ? "paper" : f == Features::token_only ? "lina" : "frequency"] = {
        {"features", features_name(f)}, {"mean_abs_error_tokens", err.mean_abs}, {"relative_error", err.relative}};
  }
  const bool has_token_ids = !held.empty() && held.front().token_id >= 0;

  Instance in;
  in.platform = platform;
  in.shape = expert_shape(model);
  in.non_moe_s = non_moe_s;
  in.tokens = per_batch(table.predicted_load(held, Features::token_and_position), static_cast<int64_t>(held.size()), batch_tokens);
  const Deployment baseline = max_memory_deployment(in);
  in.slo_s = 1e30;
  const Evaluation base_mean = evaluate(in, baseline);  // at the predicted mean load, which sets the default SLO
  in.slo_s = a.has("--slo-ms") ? a.number("--slo-ms", 1e-3, 1e12) / 1e3 : 1.2 * base_mean.latency_s;
  // The margin for the batches to come: per-expert load quantiles of the learning
  // requests' own batches (plan/load_margin.h).
  const LoadFactors factors =
      load_q > 0 ? load_quantile_factors(batch_loads(learn_tok, batch_tokens, trace.n_layer, trace.n_expert), load_q)
                 : LoadFactors{};
  in.tokens = apply_load_factors(in.tokens, factors);
  const Evaluation base_plan = evaluate(in, baseline);  // the baseline on the planned loads

  SolveResult exact;
  if (method == "exact" || exact_limit > 0) exact = solve_exact(in, method == "exact" ? time_limit : exact_limit);
  const bool exact_run = method == "exact" || exact_limit > 0;
  bool feasible = false;
  Deployment dep;
  double solver_s = 0;
  nlohmann::json extra = nlohmann::json::object();
  if (method == "exact") {
    feasible = exact.has_deployment(), dep = exact.deployment, solver_s = exact.seconds;
  } else if (method == "ods") {
    const OdsResult r = optimal_deployment_selection(in, time_limit);
    feasible = r.feasible, dep = r.deployment, solver_s = r.seconds;
    extra["ods_rounds"] = r.rounds;
    extra["ods_subproblems_proven"] = r.all_proven;
  } else {
    BoOptions o;
    o.max_iterations = static_cast<int>(a.integer("--bo-iterations", 0, 10000));
    o.seed = static_cast<uint64_t>(a.integer("--seed", 0, INT64_MAX));
    o.time_limit_per_solve_s = a.number("--bo-time-limit", 0.01, 86400);
    o.load_factors = factors;
    const BoResult r = bayesian_optimisation(in, table, held, learn_tok, batch_tokens, Features::token_and_position, o);
    feasible = r.feasible, dep = r.deployment, solver_s = r.seconds;
    extra["bo_iterations"] = r.iterations;
    extra["bo_trial_costs"] = r.trial_costs;
    const LoadError err = load_error(real, r.table.predicted_load(held, Features::token_and_position));
    prediction["bo"] = {{"features", "token+position, BO-adjusted table"}, {"mean_abs_error_tokens", err.mean_abs},
                        {"relative_error", err.relative}};
  }

  nlohmann::json j;
  j["trace"] = trace.path;
  j["model_profile"] = model.name;
  j["platform"] = platform.name;
  j["method"] = method;
  j["slo_ms"] = in.slo_s * 1e3;
  j["batch_tokens"] = batch_tokens;
  j["load_quantile"] = load_q;
  j["learn_requests"] = {learn.first, learn.second};
  j["heldout_in_sample"] = in_sample;
  j["token_ids_recorded"] = has_token_ids;
  j["prediction"] = prediction;
  j["feasible"] = feasible;
  j["optimal_status"] = exact_run ? status_name(exact.status) : "not run";
  j["optimal_cost"] = exact.has_deployment() ? nlohmann::json(exact.cost) : nlohmann::json(nullptr);
  j["optimal_bound"] = exact.has_deployment() ? nlohmann::json(exact.bound) : nlohmann::json(nullptr);
  j["exact_seconds"] = exact.seconds;
  j["solver_seconds"] = solver_s;
  j["baseline_cost"] = base_plan.cost;
  j["baseline_latency_ms"] = base_plan.latency_s * 1e3;
  j.update(extra);
  const std::vector<Load> batches = batch_loads(held, batch_tokens, trace.n_layer, trace.n_expert);
  const ServingReport base_served = serve(in, baseline, batches, true);
  auto served_json = [](const ServingReport& r) {
    return nlohmann::json{{"batches", r.batches}, {"cost", r.cost}, {"mean_latency_ms", r.mean_latency_s * 1e3},
                          {"max_latency_ms", r.max_latency_s * 1e3}, {"slo_attainment", r.slo_attainment},
                          {"failed_runs", r.failed_runs}};
  };
  j["baseline_served"] = served_json(base_served);
  if (a.has("--baseline-memory-mb")) {
    const int32_t mem = static_cast<int32_t>(a.integer("--baseline-memory-mb", platform.memory_min_mb, platform.memory_max_mb));
    const Deployment other = max_memory_deployment(in, mem);
    const Evaluation ev = evaluate(in, other);
    j["baseline_at_memory"] = {{"memory_mb", mem}, {"cost", ev.cost}, {"latency_ms", ev.latency_s * 1e3},
                               {"meets_slo_on_plan", ev.feasible && ev.latency_s <= in.slo_s * (1 + 1e-9)},
                               {"served", served_json(serve(in, other, batches, true))}};
  }
  if (feasible) {
    const Evaluation ev = evaluate(in, dep);
    const ServingReport served = serve(in, dep, batches, true);
    j["cost"] = ev.cost;
    j["latency_ms"] = ev.latency_s * 1e3;
    j["meets_slo_on_plan"] = ev.feasible && ev.latency_s <= in.slo_s * (1 + 1e-9);
    j["served"] = served_json(served);
    j["slo_attainment"] = served.slo_attainment;
    j["deployment"] = deployment_json(dep);
  }
  if (a.has("--json")) {
    std::printf("%s\n", j.dump().c_str());
    return feasible ? 0 : 4;
  }
  std::printf("%s on %s (%s): %zu learning requests, %zu held-out tokens in batches of %lld%s\n", model.name.c_str(),
              platform.name.c_str(), trace.path.c_str(), learn.second - learn.first, held.size(),
              static_cast<long long>(batch_tokens), in_sample ? " (no request held out: the learned ones are scored, in-sample)" : "");
  std::printf("popularity prediction, mean |real - predicted| tokens per expert (relative):\n");
  for (const auto& [k, v] : prediction.items())
    std::printf("  %-40s %8.2f (%.3f)\n", v["features"].get<std::string>().c_str(), v["mean_abs_error_tokens"].get<double>(),
                v["relative_error"].get<double>());
  std::printf("SLO %.1f ms per batch of MoE layers\n", in.slo_s * 1e3);
  if (!feasible) {
    const bool proven = method == "exact" ? exact.status == SolveResult::infeasible
                                          : extra.value("ods_subproblems_proven", true);
    std::printf("%s: %s finds no deployment that meets the SLO (exact: %s)\n",
                proven ? "infeasible" : "no deployment found within the time limit (not proven infeasible)",
                method.c_str(), exact_run ? status_name(exact.status) : "not run");
    return 4;
  }
  print_deployment(dep);
  char optimal[64] = "n/a";
  if (exact.has_deployment()) std::snprintf(optimal, sizeof optimal, "$%.8f", exact.cost);
  std::printf("planned batch: cost $%.8f, latency %.1f ms; optimal_cost %s (%s, %.2f s); baseline_cost $%.8f (%.1f ms)\n",
              j["cost"].get<double>(), j["latency_ms"].get<double>(),
              optimal,
              exact_run ? status_name(exact.status) : "not run",
              exact.seconds, base_plan.cost, base_plan.latency_s * 1e3);
  const auto& s = j["served"];
  std::printf("served %lld held-out batches: cost $%.8f vs baseline $%.8f (%+.1f%%), mean latency %.1f ms (max %.1f), "
              "SLO attainment %.1f%% (baseline %.1f%%), failed runs %lld; %s took %.2f s\n",
              static_cast<long long>(s["batches"].get<int64_t>()), s["cost"].get<double>(), base_served.cost,
              100.0 * (s["cost"].get<double>() / base_served.cost - 1), s["mean_latency_ms"].get<double>(),
              s["max_latency_ms"].get<double>(), 100.0 * s["slo_attainment"].get<double>(), 100.0 * base_served.slo_attainment,
              static_cast<long long>(s["failed_runs"].get<int64_t>()), method.c_str(), solver_s);
  return 0;
}

}  // namespace moeflow::cli

// moeflow simulate-serve: FCFS against eMoE's scheduler on the serving model of
// serve/serving_sim.h, for a replayed arrival trace or a generated mixed workload.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/input_file.h"
#include "base/json_fields.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "serve/serving_sim.h"

namespace moeflow::cli {
namespace {

using serve::SimRequest;

// JSONL, one request per line: {"arrival_s", "prompt_tokens", "output_tokens",
// "slo_ms"?, "task"?}, arrivals in time order.
std::vector<SimRequest> load_arrivals(const std::string& path) {
  std::ifstream in = open_input_file(path, "--arrivals");
  std::vector<SimRequest> out;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const std::string at = path + ":" + std::to_string(n);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for 1e400
      throw InputError(at + ": not valid JSON: " + e.what());
    }
    if (!j.is_object()) throw InputError(at + ": expected a JSON object, not " + std::string(j.type_name()));
    auto number = [&](const char* key, double lo, double hi, bool required, bool whole = false) -> double {
      if (!j.contains(key)) {
        if (required) throw InputError(at + ": missing \"" + key + "\"");
        return 0;
      }
      if (!j[key].is_number()) throw InputError(at + ": \"" + key + "\" must be a number");
      const double v = j[key].get<double>();
      if (!(v >= lo && v <= hi))
        throw InputError(at + ": \"" + key + "\" = " + j[key].dump() + " is outside [" + json_short_number(lo) + ", " +
                         json_short_number(hi) + "]");
      if (whole && v != std::floor(v)) throw InputError(at + ": \"" + key + "\" = " + j[key].dump() + " must be a whole number");
      return v;
    };
    SimRequest r;
    r.arrival_s = number("arrival_s", 0, 1e9, true);
    r.prompt_tokens = static_cast<int>(number("prompt_tokens", 1, 1 << 24, true, true));
    r.output_tokens = static_cast<int>(number("output_tokens", 1, 1 << 24, true, true));
    r.slo_s = number("slo_ms", 0, 1e12, false) / 1e3;
    if (j.contains("task")) {
      if (!j["task"].is_string()) throw InputError(at + ": \"task\" must be a string");
      r.task = j["task"].get<std::string>();
    }
    if (!out.empty() && r.arrival_s < out.back().arrival_s)
      throw InputError(at + ": arrival_s goes back in time (" + std::to_string(r.arrival_s) + " after " +
                       std::to_string(out.back().arrival_s) + ")");
    out.push_back(r);
  }
  if (out.empty()) throw InputError(path + ": no requests");
  return out;
}

}  // namespace

int cmd_simulate_serve(int argc, char** argv) {
  Args a("simulate-serve");
  a.flag("--arrivals", "JSONL arrival trace: arrival_s, prompt_tokens, output_tokens, slo_ms, task per line");
  a.flag("--rate", "without --arrivals: Poisson request rates of the mixed workload, comma-separated", true, "0.8,1.2,1.6");
  a.flag("--requests", "without --arrivals: requests per workload", true, "300");
  a.flag("--interactive", "without --arrivals: share of short requests with a tight SLO", true, "0.6");
  a.flag("--seed", "without --arrivals: workload seed", true, "42");
  a.flag("--slots", "requests running at once", true, "4");
  a.flag("--step-ms", "fixed time of a step", true, "10");
  a.flag("--token-ms", "time one token adds to a step", true, "2");
  a.flag("--expert-load-ms", "expert loading an admission adds (eMoE's ΔE)", true, "0");
  a.flag("--json", "print one JSON object", false);
  a.parse(argc, argv, 2);
  serve::ServingSimOptions o;
  o.slots = static_cast<int>(a.integer("--slots", 1, 1 << 16));
  o.step_fixed_s = a.number("--step-ms", 0, 1e6) / 1e3;
  o.token_s = a.number("--token-ms", 0, 1e6) / 1e3;
  o.expert_load_s = a.number("--expert-load-ms", 0, 1e6) / 1e3;
  o.sched_options.task_output_tokens = {{"chat", 16}, {"summary", 160}};
  std::vector<std::pair<std::string, std::vector<SimRequest>>> workloads;
  if (a.has("--arrivals")) {
    // The synthetic workload's flags would be ignored beside a recorded one.
    for (const char* f : {"--rate", "--requests", "--interactive", "--seed"})
      if (a.has(f)) throw UsageError(std::string(f) + " shapes the synthetic workload; --arrivals replays a recorded one");
    workloads.emplace_back(a.str("--arrivals"), load_arrivals(a.str("--arrivals")));
  } else {
    const int n = static_cast<int>(a.integer("--requests", 1, 1 << 22));
    const double share = a.number("--interactive", 0, 1);
    const auto seed = static_cast<uint64_t>(a.integer("--seed", 0, INT64_MAX));
    for (const std::string& r : split_list(a.str("--rate"))) {
      double rate = 0;
      try {
        rate = std::stod(r);
      } catch (...) {
        throw UsageError("--rate '" + r + "': expected a number of requests per second");
      }
      if (!(rate > 0)) throw UsageError("--rate '" + r + "': expected a positive rate");
      workloads.emplace_back("rate " + r + "/s", serve::mixed_workload(n, rate, share, seed));
    }
  }
  nlohmann::json runs = nlohmann::json::array();
  if (!a.has("--json"))
    std::printf("| workload | scheduler | SLOs met | mean latency s | p90 s | p99 s | mean TTFT s |\n|---|---|---|---|---|---|---|\n");
  for (const auto& [name, w] : workloads)
    for (serve::SchedPolicy p : {serve::SchedPolicy::fcfs, serve::SchedPolicy::emoe}) {
      o.sched = p;
      const serve::ServingSimResult r = serve::simulate_serving(w, o);
      const char* pname = p == serve::SchedPolicy::fcfs ? "fcfs" : "emoe";
      runs.push_back({{"workload", name}, {"scheduler", pname}, {"requests", r.requests}, {"slo_met", r.slo_met},
                      {"with_slo", r.with_slo}, {"mean_latency_s", r.mean_latency_s}, {"p90_latency_s", r.p90_latency_s},
                      {"p99_latency_s", r.p99_latency_s}, {"mean_ttft_s", r.mean_ttft_s}});
      if (!a.has("--json"))
        std::printf("| %s | %s | %lld/%lld (%.1f%%) | %.2f | %.2f | %.2f | %.2f |\n", name.c_str(), pname,
                    static_cast<long long>(r.slo_met), static_cast<long long>(r.with_slo),
                    r.with_slo ? 100.0 * static_cast<double>(r.slo_met) / static_cast<double>(r.with_slo) : 0.0,
                    r.mean_latency_s, r.p90_latency_s, r.p99_latency_s, r.mean_ttft_s);
    }
  if (a.has("--json")) std::printf("%s\n", nlohmann::json{{"runs", runs}}.dump().c_str());
  return 0;
}

}  // namespace moeflow::cli

// `moeflow simulate`: replay a routing trace through the expert cache and a policy on
// a virtual clock (src/sim/simulator.h), or sweep every policy over cache sizes.
#include <cctype>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/offload_flags.h"
#include "experts/expert_cache.h"
#include "base/atomic_file.h"
#include "base/error.h"
#include "policy/belady.h"
#include "policy/policy_factory.h"
#include "sim/simulator.h"
#include "sim/sweep_report.h"

namespace moeflow::cli {

namespace {

// The model profile that matches a trace, by its model name.
std::string default_model_profile(const Trace& t) {
  try {
    return model_profile_for_trace_model(t.model);
  } catch (const InputError& e) {
    throw UsageError(e.what());
  }
}

double parse_cache(const std::string& s, uint64_t total, uint64_t* bytes) {
  *bytes = 0;
  try {
    if (!s.empty() && s.back() == '%') return static_cast<double>(parse_budget(s, 1000000000000ull, "--cache")) / 1e12;
    *bytes = parse_budget(s, total, "--cache");
  } catch (const InputError& e) {  // a flag's value: a usage error
    throw UsageError(e.what());
  }
  return static_cast<double>(*bytes) / static_cast<double>(total);
}

double rerouted_fraction(const SimResult& r) {
  return r.scored_slots ? static_cast<double>(r.rerouted_slots) / static_cast<double>(r.scored_slots) : 0;
}

// "NAME+reroute" runs NAME with --on-miss reroute (eMoE as the paper runs it: lossy),
// so one table can hold a policy both ways.
constexpr const char* kRerouteSuffix = "+reroute";

std::pair<std::string, bool> split_reroute(const std::string& p) {
  const std::string suf = kRerouteSuffix;
  if (p.size() > suf.size() && p.compare(p.size() - suf.size(), suf.size(), suf) == 0) return {p.substr(0, p.size() - suf.size()), true};
  return {p, false};
}

std::string lossy_note(const SimResult& r) {
  if (!r.rerouted_slots) return "";
  char b[64];
  std::snprintf(b, sizeof b, " lossy: %.1f%% of slots rerouted", 100 * rerouted_fraction(r));
  return b;
}

nlohmann::json result_json(const SimResult& r) {
  return {{"policy", r.policy},
          {"cache_fraction", r.cache_fraction},
          {"cache_bytes", r.cache_bytes},
          {"hit_rate", r.hit_rate},
          {"prefetch_accuracy", r.prefetch_accuracy},
          {"coverage", r.coverage},
          {"late_prefetches", r.counters.late_prefetches},
          {"stall_seconds", r.stall_seconds},
          {"ttft_seconds", r.ttft_seconds},
          {"tpot_seconds", r.tpot_seconds},
          {"total_seconds", r.total_seconds},
          {"bytes_moved", r.bytes_moved},
          {"peak_bytes", r.peak_bytes},
          {"hits", r.counters.hits},
          {"misses", r.counters.misses},
          {"prefetches_issued", r.counters.prefetches_issued},
          {"prefetch_hits", r.counters.prefetch_hits},
          {"wasted_prefetches", r.counters.wasted_prefetches},
          {"rerouted_slots", r.rerouted_slots},
          {"rerouted_fraction", rerouted_fraction(r)},
          {"lossy", r.rerouted_slots > 0},
          {"scored_requests", r.scored_requests},
          {"scored_decode_tokens", r.scored_decode_tokens},
          // DuoServe's two-slot prefill pipeline (all zero for other policies).
          {"pipeline",
           {{"layers", r.pipeline.layers},
            {"streamed_experts", r.pipeline.streamed},
            {"next_layer_heads", r.pipeline.heads},
            {"next_layer_head_hits", r.pipeline.head_hits},
            {"overlapped_loads", r.pipeline.overlapped},
            {"peak_slots", r.pipeline.peak_slots}}},
          {"notes", r.notes}};
}

}  // namespace

int cmd_simulate(int argc, char** argv) {
  Args a("simulate");
  a.flag("--trace", "routing trace (.jsonl, DESIGN.md interchange format)");
  std::string names = "belady (bound), belady-min, belady-prefetch, belady-eager";
  for (const std::string& n : policy_names()) names += ", " + n;
  a.flag("--policy", "policy (or comma-separated list; NAME+reroute runs NAME with --on-miss reroute): " + names, true, "lru");
  a.flag("--cache", "fast-tier size: share of all experts (25%) or bytes (40GiB)", true, "25%");
  a.flag("--hw", "hardware profile name or .json file (profiles/hw: pcie4, pcie5, nvme)", true, "pcie4");
  a.flag("--model-profile", "model profile name or .json file (profiles/models; default: from the trace)");
  a.flag("--learn", "requests replayed first to learn and warm, unscored (range a:b)");
  a.flag("--measure", "requests scored, replayed after --learn (range a:b, not overlapping --learn; default: every request not learned from)");
  a.flag("--learn-fraction", "learn on this leading share of the requests instead of --learn", true, "0");
  a.flag("--score-prefill", "count prefill accesses in the hit rate (default: decode only)", false);
  a.flag("--batch", "requests in flight at once: each step carries the next iteration of each (continuous "
                    "batching, the serving setting); 1 replays them one after the other", true, "1");
  a.flag("--on-miss", "load (lossless) or reroute (eMoE, lossy)", true, "load");
  a.flag("--policy-state", "learned state to load first: FILE (one policy) or NAME=FILE[,NAME=FILE] (per policy)");
  a.flag("--tasks", "eMoE task profiles: keywords, per-layer sensitivity (default: profiles/tasks.json)");
  a.flag("--emoe-variant", "eMoE expert predictor: all-layer or layer-by-layer", true, "all-layer");
  a.flag("--emoe-top-l", "eMoE: experts held per layer (0: derived from --cache, weighted by sensitivity)", true, "0");
  a.flag("--eamc-capacity", "moe-infinity: EAM collection capacity (0: 120, the largest of the paper's Fig. 9)", true, "0");
  a.flag("--sweep", "every policy (or those of --policy) over cache sizes 12.5/25/50/75% (Markdown, CSV and SVG)", false);
  a.flag("--out-dir", "where --sweep writes sweep.md, sweep.csv, sweep.svg", true, ".");
  a.flag("--json", "print one JSON object", false);
  a.parse(argc, argv, 2);
  if (!a.has("--trace")) throw UsageError("moeflow simulate: --trace FILE is required\n" + a.help());
  if (a.str("--on-miss") != "load" && a.str("--on-miss") != "reroute")
    throw UsageError("--on-miss '" + a.str("--on-miss") + "': expected load or reroute");
  check_emoe_flags(a);  // a bad value or file is named before the replay

  const Trace full = load_trace(a.str("--trace"));
  if (full.requests.empty()) throw InputError(full.path + ": the trace holds no requests");
  const ModelProfile model = load_model_profile(a.has("--model-profile") ? a.str("--model-profile") : default_model_profile(full));
  const HardwareProfile hw = load_hardware_profile(a.str("--hw"));

  // Reorder: learning requests first, then the measured ones.
  const size_t n = full.requests.size();
  std::pair<size_t, size_t> learn{0, 0}, measure{0, n};
  const double lf = a.number("--learn-fraction", 0, 1);
  if (a.has("--learn") && lf > 0) throw UsageError("--learn and --learn-fraction both choose the learning requests: give one");
  if (a.has("--learn")) learn = parse_request_range("--learn", a.str("--learn"), n);
  else if (lf > 0) learn = {0, static_cast<size_t>(std::floor(lf * static_cast<double>(n)))};
  // By default every request not learned from is measured, on both sides of --learn.
  if (a.has("--measure")) {
    measure = parse_request_range("--measure", a.str("--measure"), n);
    check_learn_measure_disjoint(learn, measure);
  }
  Trace trace = full;
  trace.requests.clear();
  for (size_t i = learn.first; i < learn.second; ++i) trace.requests.push_back(full.requests[i]);
  for (size_t i = measure.first; i < measure.second; ++i)
    if (i < learn.first || i >= learn.second) trace.requests.push_back(full.requests[i]);
  SimOptions opt;
  opt.warmup_requests = learn.second - learn.first;
  if (opt.warmup_requests >= trace.requests.size()) throw UsageError("no requests left to measure after --learn");
  opt.score_prefill = a.has("--score-prefill");
  bool any_decode = false;
  for (size_t i = opt.warmup_requests; i < trace.requests.size() && !any_decode; ++i)
    for (const TraceIteration& it : trace.requests[i].iterations) any_decode = any_decode || !it.prefill;
  if (!any_decode && !opt.score_prefill)
    throw InputError(trace.path + ": the measured requests hold no decode iteration, so nothing would be scored "
                     "(--score-prefill scores their prefill)");
  opt.batch = static_cast<size_t>(a.integer("--batch", 1, 4096));
  opt.reroute = a.str("--on-miss") == "reroute";
  if (a.has("--tasks")) opt.tasks_path = a.str("--tasks");
  opt.emoe_variant = a.str("--emoe-variant");
  opt.emoe_top_l = static_cast<int32_t>(a.integer("--emoe-top-l", 0, 1 << 20));
  opt.eamc_capacity = static_cast<size_t>(a.integer("--eamc-capacity", 0, 1 << 20));
  // Policy states: "FILE" for a single policy, or "name=FILE,..." per policy.
  std::map<std::string, std::string> states;
  if (a.has("--policy-state")) {
    const std::string v = a.str("--policy-state");
    if (v.find('=') == std::string::npos) {
      states["*"] = v;
    } else {
      for (size_t b = 0; b <= v.size();) {
        const size_t e = std::min(v.find(',', b), v.size());
        const std::string item = v.substr(b, e - b);
        const size_t eq = item.find('=');
        if (eq == std::string::npos || eq == 0) throw UsageError("--policy-state '" + v + "': expected FILE or NAME=FILE,...");
        if (eq + 1 == item.size()) throw UsageError("--policy-state '" + v + "': no file after '" + item + "'");
        states[item.substr(0, eq)] = item.substr(eq + 1);
        b = e + 1;
      }
    }
  }
  const ExpertGeometry g = sim_geometry(trace, model);

  std::vector<std::string> policies;
  if (a.has("--sweep") && !a.has("--policy")) {
    policies = policy_names();
    policies.push_back("belady");
  } else {
    policies = split_list(a.str("--policy"));
    if (policies.empty()) throw UsageError("--policy '" + a.str("--policy") + "': names no policy");
  }
  // Every name is checked before the first replay (a typo in the last of several
  // policies would otherwise fail after the others ran), and the message lists the
  // simulator's own bounds too, which the engine's policy list does not hold.
  const auto known = policy_names();
  for (const std::string& p : policies) {
    const std::string base = split_reroute(p).first;
    const bool bound = base == "belady" || std::find(std::begin(BeladyPolicy::kNames), std::end(BeladyPolicy::kNames),
                                                     base) != std::end(BeladyPolicy::kNames);
    const bool ablation = base.rfind("adaptive-", 0) == 0;  // its parts are checked where it is made
    if (!bound && !ablation && std::find(known.begin(), known.end(), base) == known.end())
      throw UsageError("--policy: unknown policy '" + base + "' (known: " + names + ")");
  }
  // A state for a policy that is not run, or one file for several policies, would be
  // silently ignored.
  for (const auto& entry : states) {
    const std::string& name = entry.first;
    if (name == "*" && policies.size() != 1)
      throw UsageError("--policy-state '" + entry.second + "': give NAME=FILE when several policies run");
    if (name != "*" && std::find_if(policies.begin(), policies.end(), [&](const std::string& p) {
                         return split_reroute(p).first == name;
                       }) == policies.end())
      throw UsageError("--policy-state names policy '" + name + "', which --policy does not run");
  }
  std::vector<double> fractions;
  uint64_t cache_bytes = 0;
  if (a.has("--sweep") && a.has("--cache"))
    throw UsageError("--cache: --sweep runs its own cache sizes (12.5, 25, 50 and 75%)");
  if (a.has("--sweep")) fractions = {0.125, 0.25, 0.5, 0.75};
  else fractions = {parse_cache(a.str("--cache"), g.total_bytes(), &cache_bytes)};
  if (!a.has("--sweep")) {
    const double want = cache_bytes ? static_cast<double>(cache_bytes) : fractions[0] * static_cast<double>(g.total_bytes());
    if (want < static_cast<double>(g.min_budget()))
      throw UsageError("--cache " + a.str("--cache") + ": below the smallest cache that can run (" +
                       std::to_string(g.min_budget()) + " bytes = " +
                       std::to_string(100.0 * static_cast<double>(g.min_budget()) / static_cast<double>(g.total_bytes())) +
                       "% of the experts: one layer's top-k experts)");
  }
  // The sweep's folder is checked before the replay, not after it; only its last
  // component is created (a mistyped parent is an error, not a new tree).
  std::filesystem::path sweep_dir;
  if (a.has("--sweep")) {
    sweep_dir = a.str("--out-dir");
    if (sweep_dir.empty()) throw UsageError("--out-dir: empty path");
    std::error_code ec;
    if (!std::filesystem::is_directory(sweep_dir, ec)) {
      const std::filesystem::path parent = sweep_dir.parent_path().empty() ? "." : sweep_dir.parent_path();
      if (!std::filesystem::is_directory(parent, ec))
        throw InputError("--out-dir '" + sweep_dir.string() + "': folder '" + parent.string() + "' does not exist");
      if (!std::filesystem::create_directory(sweep_dir, ec) && ec)
        throw InputError("--out-dir '" + sweep_dir.string() + "': cannot create it: " + ec.message());
    }
    for (const char* name : {"sweep.md", "sweep.csv", "sweep.svg"}) check_output_path((sweep_dir / name).string(), "--out-dir");
  }

  SweepTable table;
  table.title = "hit rate vs cache size: " + trace.model + " (" + std::to_string(trace.requests.size() - opt.warmup_requests) +
                " measured requests, " + hw.name + ")";
  table.fractions = fractions;
  table.policies = policies;
  for (const std::string& p : policies) {
    table.cell.emplace_back();
    const auto [base, reroute] = split_reroute(p);
    for (double f : fractions) {
      SimOptions o = opt;
      o.policy = base;
      o.reroute = opt.reroute || reroute;
      if (auto it = states.find(base); it != states.end()) o.policy_state = it->second;
      else if (auto all = states.find("*"); all != states.end() && policies.size() == 1) o.policy_state = all->second;
      o.cache_fraction = f;
      o.cache_bytes = cache_bytes;
      table.cell.back().push_back(simulate(trace, model, hw, o));
      table.cell.back().back().policy = p;
    }
  }

  if (a.has("--sweep")) {
    const std::pair<const char*, std::string> files[] = {
        {"sweep.md", sweep_markdown(table)}, {"sweep.csv", sweep_csv(table)}, {"sweep.svg", sweep_svg(table)}};
    for (const auto& [name, text] : files) write_file_atomic((sweep_dir / name).string(), text);
  }
  if (a.has("--json")) {
    nlohmann::json j;
    j["trace"] = trace.path;
    j["model_profile"] = model.name;
    j["hw"] = hw.name;
    j["learn_requests"] = opt.warmup_requests;
    j["batch"] = opt.batch;
    j["measured_requests"] = trace.requests.size() - opt.warmup_requests;
    if (table.cell.size() == 1 && fractions.size() == 1) {
      j.update(result_json(table.cell[0][0]));
    } else {
      j["results"] = nlohmann::json::array();
      for (const auto& row : table.cell)
        for (const SimResult& r : row) j["results"].push_back(result_json(r));
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("trace %s: %s, %d layers x %d experts top-%d; learn %zu requests, measure %zu, %zu at a time; %s, %s\n",
              trace.path.c_str(), trace.model.c_str(), g.n_layer, g.n_expert, g.top_k, opt.warmup_requests,
              trace.requests.size() - opt.warmup_requests, opt.batch, model.name.c_str(), hw.name.c_str());
  // Every run's notes once (most are the trace's; some are one policy's).
  std::vector<std::string> notes;
  for (const auto& row : table.cell)
    for (const SimResult& r : row)
      for (const std::string& note : r.notes)
        if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(note);
  for (const std::string& note : notes) std::printf("note: %s\n", note.c_str());
  std::printf("| policy       | cache  | hit rate | coverage | prefetch acc | stall s  | TTFT ms  | TPOT ms  | GB moved |\n");
  std::printf("|--------------|--------|----------|----------|--------------|----------|----------|----------|----------|\n");
  for (size_t p = 0; p < policies.size(); ++p)
    for (const SimResult& r : table.cell[p])
      std::printf("| %-12s | %5.1f%% | %7.1f%% | %7.1f%% | %11.1f%% | %8.3f | %8.2f | %8.2f | %8.2f |%s\n", r.policy.c_str(),
                  100 * r.cache_fraction, 100 * r.hit_rate, 100 * r.coverage, 100 * r.prefetch_accuracy, r.stall_seconds,
                  1e3 * r.ttft_seconds, 1e3 * r.tpot_seconds, static_cast<double>(r.bytes_moved) / 1e9,
                  lossy_note(r).c_str());
  if (a.has("--sweep")) std::printf("wrote sweep.md, sweep.csv, sweep.svg to %s\n", a.str("--out-dir").c_str());
  return 0;
}

}  // namespace moeflow::cli

#include "policy/policy_factory.h"

#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "base/input_file.h"
#include "policy/adaptive.h"
#include "policy/baseline_policies.h"
#include "policy/duoserve.h"
#include "policy/emoe.h"
#include "policy/moe_infinity.h"
#include "policy/fmoe.h"

namespace moeflow {

namespace {

using Maker = std::unique_ptr<ExpertPolicy> (*)(const ExpertGeometry&, const PolicyOptions&);

std::unique_ptr<ExpertPolicy> baseline(const char* name, const ExpertGeometry& g) { return make_baseline_policy(name, g); }

std::unique_ptr<ExpertPolicy> fmoe(const ExpertGeometry& g, const PolicyOptions& o, const std::string& name) {
  FmoeOptions fo;
  fo.async = o.async_matching;
  fo.iteration_embedding = name != "fmoe-prompt";
  if (name == "fmoe-async" && o.clock) {
    fo.clock = o.clock;
    fo.match_seconds = {o.fmoe_semantic_seconds, o.fmoe_trajectory_seconds, o.fmoe_insert_seconds};
  }
  return std::make_unique<FmoePolicy>(g, fo, name);
}

struct Registered {
  const char* name;
  Maker make;
  bool keeps_state = false;  // save/load carry learned state
};

// Every policy the engine and the simulator can run, one line each. (`belady` needs
// the future and is built by the simulator itself.)
const Registered kPolicies[] = {
    {"lru", [](const ExpertGeometry& g, const PolicyOptions&) { return baseline("lru", g); }},
    {"lfu", [](const ExpertGeometry& g, const PolicyOptions&) { return baseline("lfu", g); }},
    {"on-demand", [](const ExpertGeometry& g, const PolicyOptions&) { return baseline("on-demand", g); }},
    {"next-layer", [](const ExpertGeometry& g, const PolicyOptions&) { return baseline("next-layer", g); }},
    {"duoserve", [](const ExpertGeometry& g, const PolicyOptions& o) {
       DuoserveOptions d;
       d.prediction_seconds = o.prediction_seconds;
       return make_duoserve_policy(g, d);
     }, true},
    {"duoserve-k", [](const ExpertGeometry& g, const PolicyOptions& o) {
       DuoserveOptions d;
       d.k_cache = true;
       d.prediction_seconds = o.prediction_seconds;
       return make_duoserve_policy(g, d);
     }, true},
    {"moe-infinity", [](const ExpertGeometry& g, const PolicyOptions& o) -> std::unique_ptr<ExpertPolicy> {
       MoeInfinityOptions mo;
       if (o.eamc_capacity > 0) mo.capacity = o.eamc_capacity;
       return std::make_unique<MoeInfinityPolicy>(g, mo);
     }, true},
    {"emoe", [](const ExpertGeometry& g, const PolicyOptions& o) { return make_emoe_policy(g, o); }, true},
    {"fmoe", [](const ExpertGeometry& g, const PolicyOptions& o) { return fmoe(g, o, "fmoe"); }, true},
    // The engine's fmoe matches asynchronously always; in the simulator fmoe matches
    // at once and fmoe-async on the simulated clock.
    {"fmoe-async", [](const ExpertGeometry& g, const PolicyOptions& o) { return fmoe(g, o, "fmoe-async"); }, true},
    // The ablation: the prompt's key for every iteration (no per-iteration embedding).
    {"fmoe-prompt", [](const ExpertGeometry& g, const PolicyOptions& o) { return fmoe(g, o, "fmoe-prompt"); }, true},
    {"adaptive", [](const ExpertGeometry& g, const PolicyOptions&) -> std::unique_ptr<ExpertPolicy> { return std::make_unique<AdaptivePolicy>(g); }, true},
};

// adaptive-<ablation>[-...] (adaptive.h): the same policy with signals switched off,
// for the ablation table; not listed among the policy names.
bool is_adaptive_ablation(const std::string& name) { return name.rfind("adaptive-", 0) == 0; }

}  // namespace

std::vector<std::string> policy_names() {
  std::vector<std::string> out;
  for (const Registered& r : kPolicies) out.emplace_back(r.name);
  return out;
}

bool policy_keeps_state(const std::string& name) {
  if (is_adaptive_ablation(name)) return true;
  for (const Registered& r : kPolicies)
    if (name == r.name) return r.keeps_state;
  return false;
}

std::unique_ptr<ExpertPolicy> make_policy(const std::string& name, const ExpertGeometry& g, const PolicyOptions& opt) {
  std::unique_ptr<ExpertPolicy> p;
  for (const Registered& r : kPolicies)
    if (name == r.name) p = r.make(g, opt);
  if (!p && is_adaptive_ablation(name)) p = std::make_unique<AdaptivePolicy>(g, adaptive_options_from_name(name), name);
  if (!p) {
    std::string known;
    for (const std::string& n : policy_names()) known += (known.empty() ? "" : ", ") + n;
    throw InputError("unknown policy '" + name + "' (known: all, " + known + ")");
  }
  if (!opt.state_path.empty()) {
    if (!policy_keeps_state(name))
      throw InputError("policy '" + name + "' keeps no learned state: the policy state '" + opt.state_path +
                       "' would be ignored (states belong to adaptive, duoserve, duoserve-k, emoe, fmoe and moe-infinity)");
    std::ifstream in = open_input_file(opt.state_path, "policy state", true);
    try {
      p->load(in);
    } catch (const InputError& e) {  // the policies' readers know the format, not the file
      throw InputError(opt.state_path + ": " + e.what());
    }
  }
  return p;
}

}  // namespace moeflow

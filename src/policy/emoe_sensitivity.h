// eMoE's per-(task, layer) sensitivity to routing accuracy (emoe.txt §2.2.3, §3.4),
// derived from a routing trace whose requests carry task labels.
//
// The paper profiles it offline: route a task's tokens at random from some layer on
// and measure the accuracy drop. A trace has no model to rerun, so this measures the
// same thing to first order from what the router recorded:
// - "gate-mass" (traces with full gate probabilities): the share of gate mass that
//   random routing would lose, (Σ_{top-k} p − k/E) / (1 − k/E), averaged over the
//   task's tokens at the layer. A confident router (mass on its choice) makes the
//   layer's output depend on exactly those experts: sensitive; a flat gate means any
//   expert serves nearly as well: insensitive (what random routing does not hurt).
// - "concentration" (traces with top-k ids only): 1 − H(f)/log E of the task's
//   routing distribution f at the layer. A task that leans on a few experts there
//   loses them under random routing; one spread evenly over all experts does not
//   depend on any one of them.
// Both are in [0, 1]; `moeflow trace sensitivity` writes them into a task profile
// file (profiles/tasks.json) as each task's "sensitivity" row, which EmoePolicy uses as
// s in Eq. 2.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "policy/emoe.h"

namespace moeflow {

struct Trace;

struct SensitivityTable {
  std::string method;  // "gate-mass" or "concentration"
  int32_t n_layer = 0;
  std::map<std::string, std::vector<double>> by_task;  // task -> s per layer, in [0, 1]
  std::map<std::string, int64_t> tokens;               // task -> (token, layer) rows measured
  int64_t unlabelled_requests = 0;                     // requests without a task, skipped
};

// Over every request of `t` (slice it first to keep measured requests out). A layer
// where a task routed nothing gets s = 1 (no evidence: sensitive, as the paper's default).
// Requests without a task label count as `unlabelled_task` when it is given (a trace of
// one workload, e.g. HumanEval, is one task), else they are skipped.
SensitivityTable routing_sensitivity(const Trace& t, const std::string& unlabelled_task = "");

// Puts each task's row into `profiles` (adding tasks the profiles lack, with no
// keywords). With `insensitive_below` > 0, layers under it are also listed as
// insensitive_layers (the paper's binary marking, s = 0).
void merge_sensitivity(std::vector<TaskProfile>& profiles, const SensitivityTable& s, double insensitive_below = 0);

// Writes a profile file load_task_profiles reads back (one task per line), with
// `source` (where the table came from) kept as "sensitivity_source".
void save_task_profiles(const std::string& path, const std::vector<TaskProfile>& profiles, const std::string& comment,
                        const std::string& source_json);

}  // namespace moeflow

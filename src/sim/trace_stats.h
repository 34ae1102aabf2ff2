// What a routing trace says about expert use (`moeflow trace stats`): per-layer
// popularity, per-request working sets, inter-layer affinity, and, when requests are
// labelled with a task, popularity per task (do experts specialise by domain?).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "format/trace.h"

namespace moeflow {

struct TraceStats {
  int32_t n_layer = 0, n_expert = 0, top_k = 0;
  int64_t requests = 0, iterations = 0, routed_tokens = 0, dropped_rows = 0;
  // [layer][expert]: share of the layer's routed (token, slot) pairs, in [0, 1].
  std::vector<std::vector<double>> popularity;
  // Per layer: the share of the most popular expert, and the entropy of the
  // distribution as a fraction of log(n_expert) (1 = perfectly uniform).
  std::vector<double> top_share, normalized_entropy;
  struct WorkingSet {
    int64_t request = 0;
    std::string task;
    int64_t prefill_tokens = 0, decode_tokens = 0;
    double prefill_fraction = 0, decode_fraction = 0;  // distinct (layer, expert) touched / all experts
  };
  std::vector<WorkingSet> working_sets;
  // Inter-layer affinity, P(expert j at l+1 | expert i at l) averaged over layers:
  // how often the most likely successor is right, against chance (top_k / n_expert).
  double affinity_top1_hit = 0, affinity_chance = 0;
  // Same layer, consecutive decode tokens: overlap of the top-k sets.
  double temporal_overlap = 0;
  // Lookahead routing (when recorded), per distance h = 1..: the share of layer l+h's
  // routed experts that layer l's lookahead named ("recall"; chance top_k / n_expert),
  // decode tokens only.
  std::vector<double> lookahead_recall;
  // task -> [layer][expert] popularity (only when tasks are present).
  std::map<std::string, std::vector<std::vector<double>>> task_popularity;
  // Mean over layers of the total-variation distance between each task's popularity
  // and the overall popularity (0: no specialisation).
  std::map<std::string, double> task_divergence;
};

TraceStats compute_trace_stats(const Trace& t);

}  // namespace moeflow

// What DuoServe-MoE's preprocess stage extracts from traces (duoserve-moe.txt §4.1):
// expert popularity per layer (Eq. 2) and inter-layer affinity between consecutive
// layers (Eq. 3), counted over activation paths, and the predictor's state vector
// s_l = [h_l, p_l, a_{l-1,l}] (§4.2, Eq. 5) built from them.
#pragma once
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "format/trace.h"

namespace moeflow {

// One token's "expert activation path" (Eq. 1): the experts it chose at each layer,
// best first. An empty entry is a layer whose row was dropped by the recorder (or not
// routed yet).
using ActivationPath = std::vector<std::vector<int32_t>>;

class DuoserveStats {
 public:
  DuoserveStats() = default;
  DuoserveStats(int32_t n_layer, int32_t n_expert);
  int32_t n_layer() const { return n_layer_; }
  int32_t n_expert() const { return n_expert_; }
  int64_t paths() const { return paths_; }

  // Counts one episode (a token's path) into Eq. 2's and Eq. 3's numerators.
  void add(const ActivationPath& path);
  // P_l (Eq. 2): the layer's selection counts normalised to a distribution; uniform
  // while nothing was counted.
  std::vector<float> popularity(int32_t layer) const;
  // The affinity row of §4.2/§5.3 for a token that chose `from` at `layer`: the mean of
  // the rows A_{l,l+1}(i, ·) (Eq. 3, each summing to 1) over i in `from`; a row with
  // no counts is uniform. A distribution over layer+1's experts.
  std::vector<float> affinity(int32_t layer, const std::vector<int32_t>& from) const;

  void save(std::ostream& out) const;
  // Reads a state saved for n_layer x n_expert; throws InputError (naming `what`) for a
  // different shape before allocating anything, and for a truncated stream.
  void load(std::istream& in, const std::string& what, int32_t n_layer, int32_t n_expert);
  // Throws InputError when the tables for this shape would exceed kMaxBytes (the
  // inter-layer affinity is n_layer x n_expert^2 doubles).
  static void check_shape(int32_t n_layer, int32_t n_expert, const std::string& what);
  static constexpr uint64_t kMaxBytes = 1ull << 30;

 private:
  int32_t n_layer_ = 0, n_expert_ = 0;
  int64_t paths_ = 0;
  std::vector<double> pop_;  // [layer][expert] selections
  std::vector<double> aff_;  // [layer][i][j]: i at layer and j at layer+1 in one path
};

// Length of the state vector: h_l as a multi-hot of (layer, expert) over every layer
// (layers >= the target stay zero: the paper's "zero-padding to a fixed length"),
// then p_l and a_{l-1,l}, n_expert each.
int64_t state_size(int32_t n_layer, int32_t n_expert);
// s_target (Eq. 5) for a token whose path is known for layers < target (target >= 1).
void build_state(const DuoserveStats& s, const ActivationPath& path, int32_t target, float* out);

// Every token's activation path in a trace, of prefill and/or decode iterations; the
// n-th row of each layer's record is the n-th token (dropped rows leave gaps).
std::vector<ActivationPath> activation_paths(const Trace& t, bool prefill, bool decode);

}  // namespace moeflow

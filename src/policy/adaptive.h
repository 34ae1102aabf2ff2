// `adaptive`: moeflow's own expert policy, built from what the trace measurements say
// (docs/policies.md). Decode visits the layers in a fixed cycle, so the time until an
// expert can next be used is known exactly (the distance, in layer steps, to its
// layer's next visit); only whether it will be used there is uncertain. The policy
// keeps the experts with the most expected hits per step of cache they hold:
//
//   value(l, e) = P(e is routed at layer l's next visit) / distance(l)
//
// and evicts the least valuable (a hit-density rule, as LHD does for key-value caches;
// with equal probabilities it is MRU over the layer cycle, the optimum of a loop).
//
// The probability is learned, not assumed: a table of reuse rates indexed by four
// features of the expert at a layer visit -- visits since it was last routed, its
// short-term routing rate (recent visits), its long-term rate (the model's
// popularity), and the running requests' own rate (the share of each running
// request's tokens, prefill included, routed to it; combined over the batch as the
// chance that any of them routes it) -- counted from every decode visit the policy
// observes, the outcome being whether the expert is routed at that visit. In
// the simulator the learning requests fill it before any measured one runs; in the
// engine it keeps learning as it serves.
//
// Prefetch (optional), only when it pays: while the link is idle (no copy queued or
// running once the layer's demand loads are issued), and for an expert more likely
// routed than not (a wrong guess costs a whole copy, a right one saves one). The
// most probable experts of the next `prefetch_depth` layers are asked for; the cache
// admits one only if the resident expert it would evict is worth less (victim()
// declines otherwise), so a prefetch never trades a better expert for a worse guess.
//
// Lookahead routing (optional; LayerRouting::lookahead, the next layers' routers
// applied to this layer's MoE input): for a layer h steps ahead that the current
// step's lookahead covers, the probability is re-learned conditioned on what the
// lookahead says -- a second table indexed by (h, share of the step's tokens whose
// lookahead names the expert, the first table's probability), filled from the same
// decode visits. The sharpened probability feeds both the values (eviction) and the
// prefetch; prefetches are ranked by distance, the nearest layer first.
//
// Similar requests (optional; MoE-Infinity's EAM matching, moe-infinity.txt §4.3-4.5):
// every finished request leaves its expert activation matrix (tokens routed to each
// (layer, expert), prefill and decode together) in a bounded collection. At each step
// every running request's EAM so far is matched (cosine) against the collection; the
// `similarity_matches` closest give it a predicted share of tokens per (layer,
// expert) -- every layer, the ones ahead included -- combined over the batch as the
// chance that any request routes it. Like the lookahead, the prediction is not
// trusted as is: a third table, indexed by (predicted share, the first table's
// probability), learns from the same decode visits how far it corrects the first
// table (the ratio of hits to the hits p expected, so the first table's ranking within
// a cell survives), and the result is what the lookahead then sharpens. Matching
// chooses only when the collection holds more requests than it takes: with fewer
// (Mixtral's one learning request) there is no prediction and the first table's
// probability stands.
//
// Similar tokens (optional; fMoE's expert maps, fmoe.txt §4.2, and MoE-Infinity's
// iteration-level EAM): every decode token's path through the layers (its experts at
// each layer) is kept, the most recent `trajectory_capacity` of them. Within a decode
// step, once a running request's token has routed layers 0..l, the stored paths are
// scored by how many of its (layer, expert) pairs they share, and the
// `trajectory_matches` best predict the layers ahead in this step: the share of them
// that routed e at layer l + h. Over the batch: the chance that any token routes it
// (no prediction if one of the step's tokens has no match). A fourth table, indexed by
// (h, that share, the probability before it), learns its correction ratio the same
// way; it sharpens the layers 1..kMaxTrajectory ahead, and the lookahead comes after.
// As for the requests, matching generalises only from several earlier requests:
// no prediction until more than `similarity_matches` requests have finished
// (Mixtral's single learning request again).
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "experts/expert_policy.h"

namespace moeflow {

struct AdaptiveOptions {
  bool distance = true;   // divide by the distance to the layer's next visit (off: probability only)
  bool learned = true;    // the learned reuse table (off: the long-term rate alone)
  bool request = true;    // the running requests' own routing rate as a feature
  bool prefetch = true;   // fetch the next layers' likely experts when worth more than the victim
  bool lookahead = true;  // read the lookahead routing (asks the engine for prefetch_depth layers of it)
  int32_t prefetch_depth = 2;  // layers ahead that prefetch considers
  int32_t prefetch_per_layer = 2;  // most experts asked for per layer ahead
  double prefetch_min_probability = 0.5;  // below it a guess costs more link time than it saves
  bool prefetch_only_idle = true;  // no prefetch while copies are queued or running
  bool similarity = true;  // match the running requests' EAMs against earlier requests'
  int32_t similarity_matches = 3;  // closest EAMs summed (MoE-Infinity's n_match)
  size_t similarity_capacity = 120;  // EAMs kept (MoE-Infinity's EAMC, Fig. 9's largest)
  bool trajectory = true;  // match the step's tokens' paths so far against earlier tokens'
  int32_t trajectory_matches = 16;  // closest stored paths that predict the layers ahead
  size_t trajectory_capacity = 4096;  // decode tokens' paths kept (the most recent)
};

// Parses "adaptive" or "adaptive-<ablation>[-<ablation>...]" with ablations
// nodistance, nolearned, norequest, noprefetch, nolookahead, nosimilarity,
// notrajectory. Throws InputError for another name.
AdaptiveOptions adaptive_options_from_name(const std::string& name);

class AdaptivePolicy final : public ExpertPolicy {
 public:
  AdaptivePolicy(const ExpertGeometry& g, AdaptiveOptions opt = {}, std::string name = "adaptive");

  std::string name() const override { return name_; }
  bool prefetches() const override { return opt_.prefetch; }
  void begin_iteration(Phase phase, int64_t) override;
  void begin_request(const RequestInfo& info) override;
  void end_request(int64_t id) override;
  void routed(const LayerRouting& r) override;
  void end_iteration() override;
  int32_t lookahead_depth() const override { return opt_.lookahead ? std::min(opt_.prefetch_depth, kMaxLookahead) : 0; }
  void link_state(size_t copies_in_flight, size_t) override { link_busy_ = copies_in_flight > 0; }
  void plan_prefetch(int32_t layer_now, PrefetchPlan& plan) override;
  size_t victim(const CacheView& view, const ExpertKey& incoming) override;
  // The learned table and each expert's counts (what the engine would otherwise have to
  // learn again on every start); a state for another shape is an InputError.
  void save(std::ostream& out) const override;
  void load(std::istream& in) override;

  // The learned probability that `key` is routed at its layer's next visit (with the
  // current step's lookahead, when it covers the layer).
  double reuse_probability(const ExpertKey& key) const;
  // The same from the first table alone (no similarity, no lookahead).
  double table_probability(const ExpertKey& key) const;
  // The first table's probability corrected by the similar requests' prediction
  // (the table's own when there is no prediction this step).
  double base_probability(const ExpertKey& key) const;
  // The step's predicted chance, from the matched earlier requests, that a running
  // request routes `key`; -1 when there is no prediction (no match, or no more
  // stored requests than matches).
  double similarity_share(const ExpertKey& key) const;
  size_t stored_requests() const { return store_.size(); }
  // base_probability corrected by the similar tokens' prediction for a layer ahead in
  // this step (the base when there is none).
  double step_probability(const ExpertKey& key) const;
  // The similar tokens' predicted chance that the step routes `key` (made `h` layers
  // before it, the freshest), or -1 when there is none; h is set to the distance.
  double trajectory_share(const ExpertKey& key, int32_t* h = nullptr) const;
  size_t stored_paths() const { return paths_.size(); }
  // Layers between the freshest lookahead that covers `layer` in this step and it
  // (1..kMaxLookahead), 0 when none does.
  int32_t lookahead_distance(int32_t layer) const;
  // Expected hits per layer step of cache held, seen from `layer_now`.
  double value(const ExpertKey& key, int32_t layer_now) const;
  // Layer steps from `layer_now` to `layer`'s next visit (1..n_layer).
  int32_t distance(int32_t layer, int32_t layer_now) const;
  uint64_t observations() const { return observations_; }

  // The running requests' chance of routing `key` (1 - prod over requests of
  // (1 - share of its tokens routed to key)); 0 when none has routed a token yet.
  double request_rate(const ExpertKey& key) const;

  static constexpr int kRecencyBuckets = 7, kRateBuckets = 6, kRequestBuckets = 8;
  static constexpr int32_t kMaxLookahead = 3;
  static constexpr int kShareBuckets = 5, kPriorBuckets = 6;
  static constexpr int kSimilarBuckets = 8, kSimilarPriorBuckets = 8;
  static constexpr int32_t kMaxTrajectory = 4;

 private:
  struct ExpertState {
    int64_t last_visit = -1;  // visit index of the layer when last routed (-1: never)
    double recent = 0;        // exponential average of "routed at this visit"
    int64_t routed = 0;       // visits that routed it
  };
  struct Cell {
    double hits = 0, n = 0;
  };
  struct RequestCounts {
    std::vector<int64_t> tokens;  // per layer
    std::vector<int32_t> routed;  // per expert index: tokens routed to it
  };
  using Features = std::array<int, 4>;
  Features features(const ExpertKey& key) const;
  static size_t cell_index(const Features& f) {
    return static_cast<size_t>(((f[0] * kRateBuckets + f[1]) * kRateBuckets + f[2]) * kRequestBuckets + f[3]);
  }
  Cell& cell(const Features& f) { return table_[cell_index(f)]; }
  const Cell& cell(const Features& f) const { return table_[cell_index(f)]; }
  RequestCounts& counts_of(int64_t id);
  // The lookahead table's cell for distance h, the share of tokens naming the expert
  // and the first table's probability p.
  static size_t lookahead_cell(int32_t h, double share, double p);
  void learn_lookahead(int32_t layer, const std::vector<char>& used);
  // The similarity table's cell for predicted share s and the first table's p.
  static size_t similarity_cell(double s, double p);
  void learn_similarity(int32_t layer, const std::vector<char>& used);
  // Matches every running request's EAM and fills similar_ (begin_iteration).
  void refresh_similarity();
  void remember_request(const RequestCounts& c);
  static size_t trajectory_cell(int32_t h, double s, double p);
  int32_t trajectory_distance(int32_t layer) const;
  void learn_trajectory(int32_t layer, const std::vector<char>& used);
  // Scores the stored paths with the step's tokens' layer-l experts and predicts the
  // layers ahead.
  void follow_tokens(const LayerRouting& r);
  void remember_lookahead(const LayerRouting& r);
  const ExpertState& state(const ExpertKey& k) const { return experts_[static_cast<size_t>(g_.index(k))]; }

  const ExpertGeometry& g_;
  AdaptiveOptions opt_;
  std::string name_;
  Phase phase_ = Phase::Decode;
  bool link_busy_ = false;
  std::vector<ExpertState> experts_;
  std::vector<int64_t> visits_;  // per layer
  std::unordered_map<int64_t, RequestCounts> running_;
  int64_t last_request_ = 0;  // the request of routings that name none (one request at a time)
  std::vector<Cell> table_;
  double hits_ = 0, n_ = 0;  // every observation (the table's prior)
  // The step's lookahead: for distance h and layer, the share of the step's tokens
  // whose lookahead names each expert ([h-1][layer][expert]); valid until the layer's
  // own routing arrives in this step.
  std::vector<std::vector<std::vector<float>>> predicted_;
  std::vector<std::vector<char>> predicted_valid_;  // [h-1][layer]
  std::vector<Cell> lookahead_table_;               // [h-1][share bucket][probability bucket]
  // Finished requests' EAMs: tokens routed per expert index, tokens per layer.
  struct StoredEam {
    std::vector<int32_t> routed;
    std::vector<int64_t> tokens;
    double norm = 0;  // of routed, for the cosine
  };
  std::vector<StoredEam> store_;
  std::vector<float> similar_;  // the step's prediction per expert index (valid_ only)
  bool similar_valid_ = false;
  std::vector<Cell> similarity_table_;  // [share bucket][probability bucket]; n: the hits p expected
  // Decode tokens' paths (complete ones only): expert per (layer, slot); a ring.
  std::vector<std::vector<int32_t>> paths_;
  size_t next_path_ = 0;  // the slot the next path replaces once the ring is full
  // The step's token of each running request: its path so far and the stored paths'
  // scores (shared (layer, expert) pairs).
  struct StepToken {
    std::vector<int32_t> path;
    std::vector<float> score;
    bool several = false;  // the request has several tokens in this step (a prefill chunk)
  };
  std::map<int64_t, StepToken> step_tokens_;  // ordered: paths join the ring by request id
  std::vector<std::vector<std::vector<float>>> traj_predicted_;  // [h-1][layer][expert]
  std::vector<std::vector<char>> traj_valid_;                    // [h-1][layer]
  std::vector<Cell> trajectory_table_;  // [h-1][share bucket][probability bucket]; n: the hits p expected
  int64_t finished_requests_ = 0;  // requests that ended having routed something
  uint64_t observations_ = 0;
};

}  // namespace moeflow

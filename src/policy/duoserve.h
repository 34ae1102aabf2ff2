// DuoServe-MoE (duoserve-moe.txt): prefill and decode scheduled differently.
//   Decode (§5.3): after layer l's gate, the ExpertMLP predicts layer l+1's experts from
//   the token's activation path, l+1's popularity and the affinity row of l's experts,
//   and those top-k are fetched while layer l computes; a wrong guess is re-fetched by
//   the cache's demand path (layer_protocol.h step 3).
//   Prefill (§5.2): every prefill layer streams the experts it needs through the layer
//   protocol's two-slot pipeline (experts/layer_protocol.h), one loading while the
//   other computes; the policy only names the order (stream_order: the layer's experts
//   by tokens routed, then popularity) and the head of layer l+1, fetched while l's
//   last expert computes (by the affinity of l's routing).
// The predictor is learned from traces (§4): `moeflow train-predictor`, or in the
// simulator from its learning requests (finish_learning()).
#pragma once
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "policy/duoserve_stats.h"
#include "policy/expert_mlp.h"
#include "experts/expert_policy.h"

namespace moeflow {

struct DuoserveOptions {
  MlpConfig mlp;         // the paper's widths by default
  int32_t epochs = 15;   // §6.4: "only 15 to 20 epochs are needed for Mixtral 8x7B"
  size_t max_paths = 20000;  // training paths kept (the engine observes without end)
  // §5.1's GPU expert cache of k experts ("duoserve-k"): each computed expert frees its
  // slot for the next layer's predicted experts (ExpertPolicy::frees_computed_experts);
  // the simulator sizes the cache to k experts for it.
  bool k_cache = false;
  // Seconds its predictor takes on the prediction stream (§5.3; the paper measures
  // ~0.6 ms on its GPU): the simulator holds the plan's prefetches that long.
  double prediction_seconds = 0;
};

class DuoservePredictor {
 public:
  DuoservePredictor(int32_t n_layer, int32_t n_expert, int32_t top_k, DuoserveOptions opt = {});
  int32_t n_layer() const { return stats_.n_layer(); }
  int32_t n_expert() const { return stats_.n_expert(); }
  int32_t top_k() const { return top_k_; }
  const DuoserveStats& stats() const { return stats_; }
  bool trained() const { return trained_; }
  size_t observed() const { return paths_.size(); }

  // Preprocess (§4.1): counts the path into popularity and affinity and keeps it as
  // training data.
  void observe(const ActivationPath& path);
  // §4.2: fits a fresh ExpertMLP on every kept path (targets layers 1..L-1); returns
  // the last epoch's mean BCE. No-op without paths or with 0 epochs.
  double train();
  // Scores of layer `target`'s experts (target >= 1) for a token whose path is known
  // below it: the ExpertMLP's sigmoid outputs once trained, else the affinity row of
  // layer target-1's experts with popularity breaking ties.
  std::vector<float> scores(const ActivationPath& path, int32_t target) const;
  // scores() of many (path, target) queries, the ExpertMLP run on batches of them.
  std::vector<std::vector<float>> scores_many(const std::vector<std::pair<const ActivationPath*, int32_t>>& q) const;
  std::vector<float> fallback_scores(const ActivationPath& path, int32_t target) const;
  // The top_k experts of `scores` (ties to the lower id).
  std::vector<int32_t> top(const std::vector<float>& scores) const;

  // The policy state file: magic, shapes, statistics, and the ExpertMLP when trained.
  void save(std::ostream& out) const;
  // Throws InputError for another format, another model's shape, or a truncated file.
  void load(std::istream& in, const std::string& what);

 private:
  int32_t top_k_;
  DuoserveOptions opt_;
  DuoserveStats stats_;
  std::vector<ActivationPath> paths_;
  ExpertMlp mlp_;
  bool trained_ = false;
};

// Table 3 of the paper: of the (token, layer) predictions, the share where the whole
// top-k set was right ("Top-2 hit" for top-2 models) and where at least one was.
struct PredictorAccuracy {
  int64_t samples = 0, all_right = 0, at_least_one = 0;
  double all_rate() const { return samples ? static_cast<double>(all_right) / static_cast<double>(samples) : 0; }
  double one_rate() const { return samples ? static_cast<double>(at_least_one) / static_cast<double>(samples) : 0; }
};
// Over every decode token of `t` and every layer 1..L-1 whose row and the previous
// layer's row were recorded (the predictor serves decode only, §5.2-5.3).
PredictorAccuracy evaluate_predictor(const DuoservePredictor& p, const Trace& t);

std::unique_ptr<ExpertPolicy> make_duoserve_policy(const ExpertGeometry& g, DuoserveOptions opt = {});

}  // namespace moeflow

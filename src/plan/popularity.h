// Expert popularity prediction, serverless-moe Sec. III-B, Eqs. (1)-(2): a key-value
// count table learned from profiled requests, keys = (MoE layer, token feature, feature
// value, expert), values = how often that mapping occurred. For a new token with
// features x = (token id, position id[, attention id]) the posterior of expert e at
// layer l is taken, as Eq. (1) does, as the prior of e times the profiled likelihood of
// each known feature given e:
//   P(e | x) ~ P_D(e) * P_D(token | e) * P_D(position | e)
// with every P_D a count ratio from the table, add-alpha (Laplace) smoothed over the
// feature's seen values plus one unseen bucket so that a mapping absent from the
// profile keeps a small probability (the paper approximates the unknown probabilities
// by priors from the same dataset; smoothing is how we keep unseen keys finite). The
// prediction is the top-k of the posterior (Eq. (2) extended to top-k). Per-layer
// expert loads are the counts of predicted selections over a set of tokens.
//
// What our traces carry: position always (a request's running token index), token ids
// only where the recorder wrote "tokens" (models/traces yes; the shared Mixtral and
// FLAME traces no). The attention id (the token with the highest summed attention score
// before each MoE layer) is not recorded: the engine's trace recorder could add it per
// (token, layer) as an "attention_ids" row; until then the feature is absent.
#pragma once
#include <array>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "format/trace.h"

namespace moeflow::plan {

// One token of a request with its features and its recorded routing.
struct RoutedToken {
  int64_t request = 0;
  int32_t position = 0;
  int32_t token_id = -1;                      // -1: not recorded
  std::vector<std::vector<int32_t>> experts;  // per layer: top-k ids, empty when dropped
};
// Tokens of the requests [begin, end) of t, in file order.
std::vector<RoutedToken> routed_tokens(const Trace& t, size_t begin, size_t end);

// Which token features a predictor uses: the paper's (token id and position), Lina's
// (token id only; Sec. II-C), or none (the profiled frequency of each expert, as
// FlexMoE/Prophet use historical popularity).
enum class Features { token_and_position, token_only, frequency };
const char* features_name(Features f);

class PopularityTable {
 public:
  enum FeatureKind : uint32_t { kToken = 0, kPosition = 1 };
  struct Key {
    int32_t layer = 0;
    FeatureKind kind = kToken;
    int32_t value = 0;
    int32_t expert = 0;
    uint64_t packed() const;
    static Key unpack(uint64_t k);
  };

  PopularityTable(int32_t n_layer, int32_t n_expert, int32_t top_k, double alpha = 1.0);
  void observe(const RoutedToken& t);
  void observe(const std::vector<RoutedToken>& ts) { for (const auto& t : ts) observe(t); }

  // Top-k experts of layer l for token t by the smoothed posterior.
  std::vector<int32_t> predict(const RoutedToken& t, int32_t layer, Features f) const;
  // [layer][expert] predicted selections over `tokens` (a layer's row counted only when
  // the trace recorded that token's routing there, so both sides count the same slots).
  std::vector<std::vector<int64_t>> predicted_load(const std::vector<RoutedToken>& tokens, Features f) const;

  // The adjustable key-value pairs (Alg. 2 changes their values or adds new ones).
  double count(const Key& k) const;
  void set_count(const Key& k, double v);  // keeps the per-layer-expert totals in step
  std::vector<Key> keys() const;
  int32_t n_layer() const { return n_layer_; }
  int32_t n_expert() const { return n_expert_; }
  int32_t top_k() const { return top_k_; }

 private:
  int32_t n_layer_, n_expert_, top_k_;
  double alpha_;
  std::unordered_map<uint64_t, double> table_;
  std::vector<std::vector<std::array<double, 2>>> feature_total_;  // [l][e][kind]
  std::vector<std::vector<double>> prior_;                           // [l][e]
  std::vector<std::array<std::unordered_map<int32_t, int>, 2>> seen_;  // [l][kind] distinct values
};

// Real [layer][expert] selections over `tokens`.
std::vector<std::vector<int64_t>> real_load(const std::vector<RoutedToken>& tokens, int32_t n_layer, int32_t n_expert);

// The paper's accuracy metric (Sec. V-B): mean over (layer, expert) of |real - predicted|
// token counts; `relative` divides it by the mean real count per expert.
struct LoadError {
  double mean_abs = 0, relative = 0;
};
LoadError load_error(const std::vector<std::vector<int64_t>>& real, const std::vector<std::vector<int64_t>>& predicted);

}  // namespace moeflow::plan

#include "plan/popularity.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

namespace moeflow::plan {

std::vector<RoutedToken> routed_tokens(const Trace& t, size_t begin, size_t end) {
  std::vector<RoutedToken> out;
  for (size_t r = begin; r < end && r < t.requests.size(); ++r) {
    const TraceRequest& req = t.requests[r];
    int32_t pos = 0;
    for (const TraceIteration& it : req.iterations) {
      const int64_t n = it.n_tokens();
      for (int64_t i = 0; i < n; ++i, ++pos) {
        RoutedToken tok;
        tok.request = req.id;
        tok.position = pos;
        if (static_cast<int64_t>(it.tokens.size()) == n) tok.token_id = it.tokens[i];
        tok.experts.resize(t.n_layer);
        for (size_t l = 0; l < it.layers.size() && l < static_cast<size_t>(t.n_layer); ++l)
          if (i < static_cast<int64_t>(it.layers[l].experts.size())) tok.experts[l] = it.layers[l].experts[i];
        out.push_back(std::move(tok));
      }
    }
  }
  return out;
}

const char* features_name(Features f) {
  switch (f) {
    case Features::token_and_position: return "token+position (paper)";
    case Features::token_only: return "token id only (Lina)";
    case Features::frequency: return "profiled frequency";
  }
  return "?";
}

uint64_t PopularityTable::Key::packed() const {
  return (static_cast<uint64_t>(layer) << 50) | (static_cast<uint64_t>(kind) << 48) |
         (static_cast<uint64_t>(static_cast<uint32_t>(expert) & 0xffff) << 32) | static_cast<uint32_t>(value);
}
PopularityTable::Key PopularityTable::Key::unpack(uint64_t k) {
  Key key;
  key.layer = static_cast<int32_t>(k >> 50);
  key.kind = static_cast<FeatureKind>((k >> 48) & 3);
  key.expert = static_cast<int32_t>((k >> 32) & 0xffff);
  key.value = static_cast<int32_t>(static_cast<uint32_t>(k));
  return key;
}

PopularityTable::PopularityTable(int32_t n_layer, int32_t n_expert, int32_t top_k, double alpha)
    : n_layer_(n_layer), n_expert_(n_expert), top_k_(top_k), alpha_(alpha),
      feature_total_(n_layer, std::vector<std::array<double, 2>>(n_expert, {0, 0})),
      prior_(n_layer, std::vector<double>(n_expert, 0)), seen_(n_layer) {}

void PopularityTable::observe(const RoutedToken& t) {
  for (int32_t l = 0; l < n_layer_ && l < static_cast<int32_t>(t.experts.size()); ++l)
    for (int32_t e : t.experts[l]) {
      if (e < 0 || e >= n_expert_) continue;
      if (t.token_id >= 0) set_count({l, kToken, t.token_id, e}, count({l, kToken, t.token_id, e}) + 1);
      set_count({l, kPosition, t.position, e}, count({l, kPosition, t.position, e}) + 1);
      prior_[l][e] += 1;
    }
}

double PopularityTable::count(const Key& k) const {
  auto it = table_.find(k.packed());
  return it == table_.end() ? 0 : it->second;
}

void PopularityTable::set_count(const Key& k, double v) {
  double& slot = table_[k.packed()];
  feature_total_[k.layer][k.expert][k.kind] += v - slot;
  slot = v;
  seen_[k.layer][k.kind][k.value] = 1;
}

std::vector<PopularityTable::Key> PopularityTable::keys() const {
  std::vector<uint64_t> packed;
  packed.reserve(table_.size());
  for (const auto& [k, v] : table_) packed.push_back(k);
  std::sort(packed.begin(), packed.end());  // a deterministic order for Alg. 2's draws
  std::vector<Key> out;
  for (uint64_t k : packed) out.push_back(Key::unpack(k));
  return out;
}

std::vector<int32_t> PopularityTable::predict(const RoutedToken& t, int32_t layer, Features f) const {
  std::vector<std::pair<double, int32_t>> score(n_expert_);
  double all = 0;
  for (double p : prior_[layer]) all += p;
  for (int32_t e = 0; e < n_expert_; ++e) {
    // log P_D(e) (smoothed prior), then the log-likelihood of each known feature (Eq. (1)).
    double s = std::log((prior_[layer][e] + alpha_) / (all + alpha_ * n_expert_));
    auto likelihood = [&](FeatureKind kind, int32_t value) {
      const double vocab = static_cast<double>(seen_[layer][kind].size()) + 1;
      s += std::log((count({layer, kind, value, e}) + alpha_) / (feature_total_[layer][e][kind] + alpha_ * vocab));
    };
    if (f != Features::frequency && t.token_id >= 0) likelihood(kToken, t.token_id);
    if (f == Features::token_and_position) likelihood(kPosition, t.position);
    score[e] = {s, e};
  }
  const int32_t k = std::min(top_k_, n_expert_);
  std::partial_sort(score.begin(), score.begin() + k, score.end(),
                    [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  std::vector<int32_t> out(k);
  for (int32_t i = 0; i < k; ++i) out[i] = score[i].second;
  return out;
}

std::vector<std::vector<int64_t>> PopularityTable::predicted_load(const std::vector<RoutedToken>& tokens, Features f) const {
  std::vector<std::vector<int64_t>> load(n_layer_, std::vector<int64_t>(n_expert_, 0));
  for (const RoutedToken& t : tokens)
    for (int32_t l = 0; l < n_layer_ && l < static_cast<int32_t>(t.experts.size()); ++l) {
      if (t.experts[l].empty()) continue;
      for (int32_t e : predict(t, l, f)) ++load[l][e];
    }
  return load;
}

std::vector<std::vector<int64_t>> real_load(const std::vector<RoutedToken>& tokens, int32_t n_layer, int32_t n_expert) {
  std::vector<std::vector<int64_t>> load(n_layer, std::vector<int64_t>(n_expert, 0));
  for (const RoutedToken& t : tokens)
    for (int32_t l = 0; l < n_layer && l < static_cast<int32_t>(t.experts.size()); ++l)
      for (int32_t e : t.experts[l])
        if (e >= 0 && e < n_expert) ++load[l][e];
  return load;
}

LoadError load_error(const std::vector<std::vector<int64_t>>& real, const std::vector<std::vector<int64_t>>& predicted) {
  LoadError err;
  double n = 0, total = 0;
  for (size_t l = 0; l < real.size(); ++l)
    for (size_t e = 0; e < real[l].size(); ++e) {
      err.mean_abs += std::abs(static_cast<double>(real[l][e] - predicted[l][e]));
      total += static_cast<double>(real[l][e]);
      n += 1;
    }
  if (n > 0) err.mean_abs /= n;
  err.relative = total > 0 ? err.mean_abs / (total / n) : 0;
  return err;
}

}  // namespace moeflow::plan

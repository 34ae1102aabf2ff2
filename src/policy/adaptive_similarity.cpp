// adaptive's similarity signals (adaptive.h): the decode tokens' paths through the
// layers (fMoE's expert maps, per token) and the finished requests' EAMs (MoE-Infinity's
// matching), each correcting the first table's probability by a learned ratio.
#include <algorithm>
#include <cmath>

#include "policy/adaptive.h"
#include "policy/adaptive_detail.h"
#include "policy/similar_collection.h"

namespace moeflow {

using namespace adaptive_detail;

// The step's decode tokens that routed every layer join the stored paths.
void AdaptivePolicy::end_iteration() {
  if (opt_.trajectory && phase_ == Phase::Decode)
    for (const auto& [id, t] : step_tokens_) {
      if (t.several || std::find(t.path.begin(), t.path.end(), -1) != t.path.end()) continue;
      if (paths_.size() < opt_.trajectory_capacity) {
        paths_.push_back(t.path);
      } else {
        paths_[next_path_] = t.path;
        next_path_ = (next_path_ + 1) % paths_.size();
      }
    }
  step_tokens_.clear();
}

size_t AdaptivePolicy::trajectory_cell(int32_t h, double s, double p) {
  return static_cast<size_t>(((h - 1) * kSimilarBuckets + request_bucket(s)) * kSimilarPriorBuckets + request_bucket(p));
}

int32_t AdaptivePolicy::trajectory_distance(int32_t layer) const {
  if (!opt_.trajectory || phase_ != Phase::Decode) return 0;
  for (int32_t h = 1; h <= kMaxTrajectory; ++h)
    if (traj_valid_[static_cast<size_t>(h - 1)][static_cast<size_t>(layer)]) return h;
  return 0;
}

double AdaptivePolicy::trajectory_share(const ExpertKey& key, int32_t* h_out) const {
  const int32_t h = trajectory_distance(key.layer);
  if (h_out) *h_out = h;
  if (h == 0) return -1;
  return traj_predicted_[static_cast<size_t>(h - 1)][static_cast<size_t>(key.layer)][static_cast<size_t>(key.expert)];
}

double AdaptivePolicy::step_probability(const ExpertKey& key) const {
  const double p = base_probability(key);
  int32_t h = 0;
  const double s = trajectory_share(key, &h);
  if (h == 0) return p;
  const Cell& c = trajectory_table_[trajectory_cell(h, s, p)];
  return std::min(1.0, p * (c.hits + kRatioPrior) / (c.n + kRatioPrior));
}

// One observation per distance that predicted this visit, like the lookahead's.
void AdaptivePolicy::learn_trajectory(int32_t l, const std::vector<char>& used) {
  for (int32_t h = 1; h <= kMaxTrajectory; ++h) {
    if (!traj_valid_[static_cast<size_t>(h - 1)][static_cast<size_t>(l)]) continue;
    const std::vector<float>& share = traj_predicted_[static_cast<size_t>(h - 1)][static_cast<size_t>(l)];
    for (int32_t e = 0; e < g_.n_expert; ++e) {
      const double p = base_probability({l, e});
      Cell& c = trajectory_table_[trajectory_cell(h, share[static_cast<size_t>(e)], p)];
      c.n += p;  // the hits p expected
      c.hits += used[static_cast<size_t>(e)];
    }
  }
}

void AdaptivePolicy::follow_tokens(const LayerRouting& r) {
  const int32_t l = static_cast<int32_t>(r.layer);
  const size_t K = static_cast<size_t>(g_.top_k), L = static_cast<size_t>(g_.n_layer);
  // This layer's experts of each request's token.
  std::vector<int64_t> seen;
  for (int64_t t = 0; t < r.n_tok; ++t) {
    const int64_t id = r.requests.empty() ? last_request_ : r.requests[static_cast<size_t>(t)];
    auto [it, fresh] = step_tokens_.try_emplace(id);
    StepToken& st = it->second;
    if (fresh) {
      st.path.assign(L * K, -1);
      st.score.assign(paths_.size(), 0);
    }
    if (std::find(seen.begin(), seen.end(), id) != seen.end()) st.several = true;
    seen.push_back(id);
    if (st.several) continue;
    for (size_t k = 0; k < K && k < static_cast<size_t>(r.top_k); ++k) {
      const size_t slot = static_cast<size_t>(t * r.top_k) + k;
      if (slot < r.experts.size() && r.experts[slot] >= 0 && r.experts[slot] < g_.n_expert)
        st.path[static_cast<size_t>(l) * K + k] = r.experts[slot];
    }
  }
  const int32_t ahead = std::min<int32_t>(kMaxTrajectory, g_.n_layer - 1 - l);
  if (ahead <= 0 || paths_.empty() || finished_requests_ <= opt_.similarity_matches) return;
  // Score the stored paths and gather the matches' layers ahead, per token.
  std::vector<std::vector<double>> none(static_cast<size_t>(ahead), std::vector<double>(static_cast<size_t>(g_.n_expert), 1.0));
  std::vector<char> mine(static_cast<size_t>(g_.n_expert));
  std::vector<std::pair<float, size_t>> ranked;
  bool all = !seen.empty();
  for (int64_t id : seen) {
    StepToken& st = step_tokens_[id];
    if (st.several) {
      all = false;
      continue;
    }
    std::fill(mine.begin(), mine.end(), 0);
    for (size_t k = 0; k < K; ++k)
      if (st.path[static_cast<size_t>(l) * K + k] >= 0) mine[static_cast<size_t>(st.path[static_cast<size_t>(l) * K + k])] = 1;
    ranked.clear();
    for (size_t j = 0; j < paths_.size(); ++j) {
      const int32_t* theirs = &paths_[j][static_cast<size_t>(l) * K];
      for (size_t k = 0; k < K; ++k)
        if (theirs[k] >= 0 && mine[static_cast<size_t>(theirs[k])]) st.score[j] += 1;
      // Newest first among equals: the ring's age order from next_path_.
      const size_t age = (j + paths_.size() - next_path_) % paths_.size();
      if (st.score[j] > 0) ranked.emplace_back(-st.score[j], paths_.size() - age);
    }
    if (ranked.empty()) {
      all = false;
      continue;
    }
    const size_t n = std::min(ranked.size(), static_cast<size_t>(opt_.trajectory_matches));
    std::partial_sort(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(n), ranked.end());
    for (int32_t h = 1; h <= ahead; ++h) {
      std::vector<double> count(static_cast<size_t>(g_.n_expert), 0);
      for (size_t m = 0; m < n; ++m) {
        const size_t j = (paths_.size() - ranked[m].second + next_path_) % paths_.size();
        for (size_t k = 0; k < K; ++k) {
          const int32_t e = paths_[j][static_cast<size_t>(l + h) * K + k];
          if (e >= 0) count[static_cast<size_t>(e)] += 1;
        }
      }
      for (size_t e = 0; e < count.size(); ++e) none[static_cast<size_t>(h - 1)][e] *= 1 - count[e] / static_cast<double>(n);
    }
  }
  if (!all) return;  // a token without a prediction: the step's is incomplete
  for (int32_t h = 1; h <= ahead; ++h) {
    std::vector<float>& share = traj_predicted_[static_cast<size_t>(h - 1)][static_cast<size_t>(l + h)];
    for (size_t e = 0; e < share.size(); ++e) share[e] = static_cast<float>(1 - none[static_cast<size_t>(h - 1)][e]);
    traj_valid_[static_cast<size_t>(h - 1)][static_cast<size_t>(l + h)] = 1;
  }
}

// Fine at the low end, like the request feature's buckets (most shares are small).
size_t AdaptivePolicy::similarity_cell(double s, double p) {
  return static_cast<size_t>(request_bucket(s) * kSimilarPriorBuckets + request_bucket(p));
}

// Each running request's EAM so far (what it routed up to the previous step) against
// the stored ones: the closest `similarity_matches` (positive cosine) are summed, and
// the request's predicted share of (l, e) is their tokens routed to e at l over their
// tokens at l. Over the batch: the chance that any request routes it.
void AdaptivePolicy::refresh_similarity() {
  similar_valid_ = false;
  if (!opt_.similarity || store_.size() <= static_cast<size_t>(opt_.similarity_matches)) return;
  std::vector<double> none(similar_.size(), 1.0);
  std::vector<double> routed(similar_.size());
  std::vector<int64_t> tokens(static_cast<size_t>(g_.n_layer));
  std::vector<std::pair<double, size_t>> sims;
  for (const auto& entry : running_) {
    const RequestCounts& c = entry.second;
    sims.clear();
    for (size_t i = 0; i < store_.size(); ++i) {
      const double s = cosine(c.routed, store_[i].routed, store_[i].norm);
      if (s > 0) sims.emplace_back(-s, i);  // most similar first, ties by age
    }
    if (sims.empty()) continue;
    const size_t n = std::min(sims.size(), static_cast<size_t>(opt_.similarity_matches));
    std::partial_sort(sims.begin(), sims.begin() + static_cast<std::ptrdiff_t>(n), sims.end());
    std::fill(routed.begin(), routed.end(), 0.0);
    std::fill(tokens.begin(), tokens.end(), 0);
    for (size_t m = 0; m < n; ++m) {
      const StoredEam& e = store_[sims[m].second];
      for (size_t i = 0; i < routed.size(); ++i) routed[i] += e.routed[i];
      for (size_t l = 0; l < tokens.size(); ++l) tokens[l] += e.tokens[l];
    }
    for (size_t i = 0; i < routed.size(); ++i) {
      const int64_t t = tokens[i / static_cast<size_t>(g_.n_expert)];
      if (t > 0) none[i] *= 1 - std::min(1.0, routed[i] / static_cast<double>(t));
    }
    similar_valid_ = true;
  }
  for (size_t i = 0; i < similar_.size(); ++i) similar_[i] = static_cast<float>(1 - none[i]);
}

double AdaptivePolicy::similarity_share(const ExpertKey& key) const {
  return similar_valid_ ? similar_[static_cast<size_t>(g_.index(key))] : -1.0;
}

void AdaptivePolicy::learn_similarity(int32_t l, const std::vector<char>& used) {
  for (int32_t e = 0; e < g_.n_expert; ++e) {
    const double p = table_probability({l, e});
    Cell& c = similarity_table_[similarity_cell(similar_[static_cast<size_t>(g_.index({l, e}))], p)];
    c.n += p;  // the hits p expected
    c.hits += used[static_cast<size_t>(e)];
  }
}

double AdaptivePolicy::base_probability(const ExpertKey& key) const {
  const double p = table_probability(key);
  if (!similar_valid_) return p;
  const Cell& c = similarity_table_[similarity_cell(similar_[static_cast<size_t>(g_.index(key))], p)];
  return std::min(1.0, p * (c.hits + kRatioPrior) / (c.n + kRatioPrior));
}

// A finished request's EAM joins the collection; when it is full, the entry most
// similar to the newcomer gives way (MoE-Infinity App. B.1: the newest pattern stays,
// and so does the collection's diversity).
void AdaptivePolicy::remember_request(const RequestCounts& c) {
  StoredEam e{std::vector<int32_t>(c.routed), std::vector<int64_t>(c.tokens), norm_of(c.routed)};
  if (e.norm <= 0) return;
  insert_replacing_most_similar(store_, opt_.similarity_capacity, std::move(e),
                                [](const StoredEam& s, const StoredEam& n) { return cosine(n.routed, s.routed, s.norm); });
}

}  // namespace moeflow

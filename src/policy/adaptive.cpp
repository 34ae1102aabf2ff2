#include "policy/adaptive.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "policy/adaptive_detail.h"
#include "policy/binary_io.h"

namespace moeflow {

namespace {

using namespace adaptive_detail;

// Version 2 adds the lookahead table, version 3 the similarity table and the stored
// requests' EAMs; older states load with what they lack empty.
constexpr char kMagic[8] = {'m', 'f', 'a', 'd', 'a', 'p', 't', '3'};
constexpr char kMagicV2[8] = {'m', 'f', 'a', 'd', 'a', 'p', 't', '2'};
constexpr char kMagicV1[8] = {'m', 'f', 'a', 'd', 'a', 'p', 't', '1'};

// Weight of one visit in the short-term rate: about the last eight visits count.
constexpr double kRecentWeight = 1.0 / 8.0;
// Pseudo-observations of the prior in each table cell (a cell seen rarely falls back
// to the mean reuse rate instead of 0 or 1).
constexpr double kPriorWeight = 2.0;

int recency_bucket(int64_t visits_since) {
  if (visits_since < 0) return AdaptivePolicy::kRecencyBuckets - 1;  // never routed
  if (visits_since <= 3) return static_cast<int>(visits_since) - 1;  // 1, 2, 3
  if (visits_since <= 5) return 3;
  if (visits_since <= 9) return 4;
  return 5;
}

int rate_bucket(double rate) {
  return std::clamp(static_cast<int>(rate * AdaptivePolicy::kRateBuckets), 0, AdaptivePolicy::kRateBuckets - 1);
}

}  // namespace

AdaptiveOptions adaptive_options_from_name(const std::string& name) {
  const std::string base = "adaptive";
  if (name.compare(0, base.size(), base) != 0) throw InputError("not an adaptive policy name: '" + name + "'");
  AdaptiveOptions o;
  for (size_t b = base.size(); b < name.size();) {
    if (name[b] != '-') throw InputError("policy '" + name + "': expected adaptive[-nodistance][-nolearned][-norequest][-noprefetch][-nolookahead][-nosimilarity][-notrajectory]");
    const size_t e = std::min(name.find('-', b + 1), name.size());
    const std::string part = name.substr(b + 1, e - b - 1);
    if (part == "nodistance") o.distance = false;
    else if (part == "nolearned") o.learned = false;
    else if (part == "noprefetch") o.prefetch = false;
    else if (part == "norequest") o.request = false;
    else if (part == "nolookahead") o.lookahead = false;
    else if (part == "nosimilarity") o.similarity = false;
    else if (part == "notrajectory") o.trajectory = false;
    else throw InputError("policy '" + name + "': unknown ablation '" + part +
                          "' (nodistance, nolearned, norequest, noprefetch, nolookahead, nosimilarity, notrajectory)");
    b = e;
  }
  return o;
}

AdaptivePolicy::AdaptivePolicy(const ExpertGeometry& g, AdaptiveOptions opt, std::string name)
    : g_(g), opt_(opt), name_(std::move(name)), experts_(g.bytes.size()), visits_(static_cast<size_t>(g.n_layer), 0),
      table_(static_cast<size_t>(kRecencyBuckets * kRateBuckets * kRateBuckets * kRequestBuckets)),
      predicted_(kMaxLookahead, std::vector<std::vector<float>>(static_cast<size_t>(g.n_layer),
                                                                std::vector<float>(static_cast<size_t>(g.n_expert), 0))),
      predicted_valid_(kMaxLookahead, std::vector<char>(static_cast<size_t>(g.n_layer), 0)),
      lookahead_table_(static_cast<size_t>(kMaxLookahead * kShareBuckets * kPriorBuckets)),
      similar_(g.bytes.size(), 0), similarity_table_(static_cast<size_t>(kSimilarBuckets * kSimilarPriorBuckets)),
      traj_predicted_(kMaxTrajectory, std::vector<std::vector<float>>(static_cast<size_t>(g.n_layer),
                                                                     std::vector<float>(static_cast<size_t>(g.n_expert), 0))),
      traj_valid_(kMaxTrajectory, std::vector<char>(static_cast<size_t>(g.n_layer), 0)),
      trajectory_table_(static_cast<size_t>(kMaxTrajectory * kSimilarBuckets * kSimilarPriorBuckets)) {
  if (opt_.prefetch_depth < 0 || opt_.prefetch_per_layer < 0) throw InputError("adaptive: negative prefetch depth or count");
  opt_.similarity_matches = std::max(opt_.similarity_matches, 1);
  opt_.similarity_capacity = std::max<size_t>(opt_.similarity_capacity, 1);
  opt_.trajectory_matches = std::max(opt_.trajectory_matches, 1);
  opt_.trajectory_capacity = std::max<size_t>(opt_.trajectory_capacity, 1);
}

void AdaptivePolicy::begin_iteration(Phase phase, int64_t) {
  phase_ = phase;
  // A lookahead never reaches into the next step (its tokens are not known yet).
  for (auto& v : predicted_valid_) std::fill(v.begin(), v.end(), 0);
  for (auto& v : traj_valid_) std::fill(v.begin(), v.end(), 0);
  step_tokens_.clear();
  refresh_similarity();
}

void AdaptivePolicy::end_request(int64_t id) {
  auto it = running_.find(id);
  if (it == running_.end()) return;
  if (std::any_of(it->second.tokens.begin(), it->second.tokens.end(), [](int64_t n) { return n > 0; })) ++finished_requests_;
  if (opt_.similarity) remember_request(it->second);
  running_.erase(it);
}

size_t AdaptivePolicy::lookahead_cell(int32_t h, double share, double p) {
  // share 0 (no token's lookahead names it), then quarters of the step's tokens.
  const int s = share <= 0 ? 0 : std::clamp(1 + static_cast<int>(share * 4), 1, kShareBuckets - 1);
  const int b = std::clamp(static_cast<int>(p * kPriorBuckets), 0, kPriorBuckets - 1);
  return static_cast<size_t>(((h - 1) * kShareBuckets + s) * kPriorBuckets + b);
}

int32_t AdaptivePolicy::lookahead_distance(int32_t layer) const {
  if (!opt_.lookahead || phase_ != Phase::Decode) return 0;
  for (int32_t h = 1; h <= kMaxLookahead; ++h)
    if (predicted_valid_[static_cast<size_t>(h - 1)][static_cast<size_t>(layer)]) return h;
  return 0;
}

// One observation per distance that predicted this visit: (h, share, the
// probability before the visit without the lookahead) -> routed or not.
void AdaptivePolicy::learn_lookahead(int32_t l, const std::vector<char>& used) {
  for (int32_t h = 1; h <= kMaxLookahead; ++h) {
    if (!predicted_valid_[static_cast<size_t>(h - 1)][static_cast<size_t>(l)]) continue;
    const std::vector<float>& share = predicted_[static_cast<size_t>(h - 1)][static_cast<size_t>(l)];
    for (int32_t e = 0; e < g_.n_expert; ++e) {
      Cell& c = lookahead_table_[lookahead_cell(h, share[static_cast<size_t>(e)], step_probability({l, e}))];
      c.n += 1;
      c.hits += used[static_cast<size_t>(e)];
    }
  }
}

// The shares of this step's tokens whose lookahead names each expert of the layers ahead.
void AdaptivePolicy::remember_lookahead(const LayerRouting& r) {
  const int64_t depth = std::min<int64_t>(r.lookahead_depth, kMaxLookahead);
  if (r.n_tok <= 0 || static_cast<int64_t>(r.lookahead.size()) != r.n_tok * r.lookahead_depth * r.top_k) return;
  for (int64_t h = 1; h <= depth; ++h) {
    const int64_t target = r.layer + h;
    if (target >= g_.n_layer) break;
    std::vector<float>& share = predicted_[static_cast<size_t>(h - 1)][static_cast<size_t>(target)];
    std::fill(share.begin(), share.end(), 0.0f);
    for (int64_t t = 0; t < r.n_tok; ++t)
      for (int64_t k = 0; k < r.top_k; ++k) {
        const int32_t e = r.lookahead_of(t, h)[k];
        if (e >= 0 && e < g_.n_expert) share[static_cast<size_t>(e)] += 1.0f / static_cast<float>(r.n_tok);
      }
    predicted_valid_[static_cast<size_t>(h - 1)][static_cast<size_t>(target)] = 1;
  }
}

AdaptivePolicy::Features AdaptivePolicy::features(const ExpertKey& key) const {
  const ExpertState& s = state(key);
  const int64_t visits = visits_[static_cast<size_t>(key.layer)];
  const int64_t since = s.last_visit < 0 ? -1 : visits - s.last_visit;
  const double long_rate = visits > 0 ? static_cast<double>(s.routed) / static_cast<double>(visits) : 0.0;
  return {recency_bucket(since), rate_bucket(s.recent), rate_bucket(long_rate),
          opt_.request ? request_bucket(request_rate(key)) : 0};
}

void AdaptivePolicy::begin_request(const RequestInfo& info) {
  running_[info.id] = RequestCounts{std::vector<int64_t>(static_cast<size_t>(g_.n_layer), 0),
                                    std::vector<int32_t>(g_.bytes.size(), 0)};
  last_request_ = info.id;
}

AdaptivePolicy::RequestCounts& AdaptivePolicy::counts_of(int64_t id) {
  auto it = running_.find(id);
  if (it == running_.end())  // a routing of a request never announced: start counting it now
    it = running_.emplace(id, RequestCounts{std::vector<int64_t>(static_cast<size_t>(g_.n_layer), 0),
                                            std::vector<int32_t>(g_.bytes.size(), 0)}).first;
  return it->second;
}

double AdaptivePolicy::request_rate(const ExpertKey& key) const {
  double none = 1;
  for (const auto& entry : running_) {
    const RequestCounts& c = entry.second;
    const int64_t n = c.tokens[static_cast<size_t>(key.layer)];
    if (n > 0) none *= 1 - static_cast<double>(c.routed[static_cast<size_t>(g_.index(key))]) / static_cast<double>(n);
  }
  return 1 - none;
}

void AdaptivePolicy::routed(const LayerRouting& r) {
  const int32_t l = static_cast<int32_t>(r.layer);
  if (l < 0 || l >= g_.n_layer) return;
  std::vector<char> used(static_cast<size_t>(g_.n_expert), 0);
  for (int32_t e : r.experts)
    if (e >= 0 && e < g_.n_expert) used[static_cast<size_t>(e)] = 1;
  // Learn first, from the features as they stood before this visit (the ones a
  // prediction for this visit would have used). Prefill visits route most experts of
  // a layer at once and say little about decode: they update the state only.
  if (phase_ == Phase::Decode) {
    if (opt_.lookahead) learn_lookahead(l, used);
    if (opt_.trajectory) learn_trajectory(l, used);
    if (similar_valid_) learn_similarity(l, used);
    for (int32_t e = 0; e < g_.n_expert; ++e) {
      Cell& c = cell(features({l, e}));
      c.n += 1;
      c.hits += used[static_cast<size_t>(e)];
      n_ += 1;
      hits_ += used[static_cast<size_t>(e)];
      ++observations_;
    }
  }
  // The requests' own counts, token by token (a token names its request, or the one
  // request running).
  for (int64_t t = 0; t < r.n_tok; ++t) {
    RequestCounts& c = counts_of(r.requests.empty() ? last_request_ : r.requests[static_cast<size_t>(t)]);
    ++c.tokens[static_cast<size_t>(l)];
    for (int64_t k = 0; k < r.top_k; ++k) {
      const size_t slot = static_cast<size_t>(t * r.top_k + k);
      if (slot < r.experts.size() && r.experts[slot] >= 0 && r.experts[slot] < g_.n_expert)
        ++c.routed[static_cast<size_t>(g_.index({l, r.experts[slot]}))];
    }
  }
  for (auto& v : predicted_valid_) v[static_cast<size_t>(l)] = 0;  // the layer's predictions are spent
  for (auto& v : traj_valid_) v[static_cast<size_t>(l)] = 0;
  if (opt_.lookahead) remember_lookahead(r);
  if (opt_.trajectory && phase_ == Phase::Decode) follow_tokens(r);
  const int64_t visit = visits_[static_cast<size_t>(l)]++;
  for (int32_t e = 0; e < g_.n_expert; ++e) {
    ExpertState& s = experts_[static_cast<size_t>(g_.index({l, e}))];
    const double u = used[static_cast<size_t>(e)];
    s.recent += kRecentWeight * (u - s.recent);
    if (u > 0) {
      s.last_visit = visit;
      ++s.routed;
    }
  }
}

double AdaptivePolicy::reuse_probability(const ExpertKey& key) const {
  const double p = step_probability(key);
  const int32_t h = lookahead_distance(key.layer);
  if (h == 0) return p;
  const float share = predicted_[static_cast<size_t>(h - 1)][static_cast<size_t>(key.layer)][static_cast<size_t>(key.expert)];
  const Cell& c = lookahead_table_[lookahead_cell(h, share, p)];
  return (c.hits + kPriorWeight * p) / (c.n + kPriorWeight);  // a cell seen rarely keeps the first table's p
}

double AdaptivePolicy::table_probability(const ExpertKey& key) const {
  const Features f = features(key);
  if (!opt_.learned) {
    const int64_t visits = visits_[static_cast<size_t>(key.layer)];
    return visits > 0 ? static_cast<double>(state(key).routed) / static_cast<double>(visits) : 0.0;
  }
  const double prior = n_ > 0 ? hits_ / n_ : static_cast<double>(g_.top_k) / static_cast<double>(g_.n_expert);
  const Cell& c = cell(f);
  return (c.hits + kPriorWeight * prior) / (c.n + kPriorWeight);
}

int32_t AdaptivePolicy::distance(int32_t layer, int32_t layer_now) const {
  const int32_t d = ((layer - layer_now) % g_.n_layer + g_.n_layer) % g_.n_layer;
  return d == 0 ? g_.n_layer : d;
}

double AdaptivePolicy::value(const ExpertKey& key, int32_t layer_now) const {
  const double p_next = reuse_probability(key);
  if (!opt_.distance) return p_next;
  // Held until its next use: d steps to the next visit (routed there with p_next,
  // which the lookahead and the similar tokens may sharpen), then, if not, 1/p more
  // whole cycles (the later visits' chance p is the one before this step's predictions:
  // they say nothing about later steps).
  // Expected hits per step held = 1 / (d + (1 - p_next) L / p).
  const double p = base_probability(key);  // p_next without this step's predictions
  const double d = static_cast<double>(distance(key.layer, layer_now));
  return p / (p * d + static_cast<double>(g_.n_layer) * (1 - p_next));
}

void AdaptivePolicy::plan_prefetch(int32_t layer_now, PrefetchPlan& plan) {
  if (opt_.prefetch_only_idle && link_busy_) return;
  for (int32_t h = 1; h <= opt_.prefetch_depth && h < g_.n_layer; ++h) {
    const int32_t l = (layer_now + h) % g_.n_layer;
    // A layer the lookahead covers ranks by distance first (the nearest is needed
    // first), then by probability; the others by value, which also falls with distance.
    const bool ahead = lookahead_distance(l) > 0;
    std::vector<std::pair<double, int32_t>> ranked;
    for (int32_t e = 0; e < g_.n_expert; ++e) {
      const double p = reuse_probability({l, e});
      if (p > opt_.prefetch_min_probability)
        ranked.push_back({ahead ? static_cast<double>(opt_.prefetch_depth + 1 - h) + p : value({l, e}, layer_now), e});
    }
    std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    const size_t n = std::min(ranked.size(), static_cast<size_t>(opt_.prefetch_per_layer));
    for (size_t i = 0; i < n; ++i) plan.push_back({{l, ranked[i].second}, ranked[i].first});
  }
}

size_t AdaptivePolicy::victim(const CacheView& view, const ExpertKey& incoming) {
  const auto& c = *view.candidates;
  size_t best = 0;
  double best_value = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    const double v = value(c[i].key, view.layer_now);
    const bool better = i == 0 || v < best_value ||
                        (v == best_value && (c[i].last_use != c[best].last_use ? c[i].last_use < c[best].last_use
                                                                               : c[i].key < c[best].key));
    if (better) {
      best = i;
      best_value = v;
    }
  }
  // A prefetch is admitted only in place of something worth less than itself.
  if (view.for_prefetch && best_value >= value(incoming, view.layer_now)) return kDecline;
  return best;
}

// Layout: magic, n_layer, n_expert, table cells, then the cells (hits, n), the
// totals, the visits per layer, each expert's (last visit, recent, routed), then the
// lookahead table's cell count and cells (hits, n) (version 2), then the similarity
// table's cell count and cells, and the stored requests: their count, then each one's
// tokens routed per expert (int32) and tokens per layer (int64), then the
// trajectory table's cell count and cells, and the stored paths: their count, the
// ring's next slot, then each path's experts per (layer, slot) (int32), then the
// number of finished requests (version 3).
void AdaptivePolicy::save(std::ostream& out) const {
  using binio::put;
  out.write(kMagic, sizeof kMagic);
  put<int32_t>(out, g_.n_layer);
  put<int32_t>(out, g_.n_expert);
  auto put_table = [&](const std::vector<Cell>& cells) {
    put<uint64_t>(out, cells.size());
    for (const Cell& c : cells) put(out, c.hits), put(out, c.n);
  };
  put_table(table_);
  put(out, hits_), put(out, n_), put(out, observations_);
  for (int64_t v : visits_) put(out, v);
  for (const ExpertState& e : experts_) put(out, e.last_visit), put(out, e.recent), put(out, e.routed);
  put_table(lookahead_table_);
  put_table(similarity_table_);
  put<uint64_t>(out, store_.size());
  for (const StoredEam& e : store_) {
    for (int32_t x : e.routed) put(out, x);
    for (int64_t t : e.tokens) put(out, t);
  }
  put_table(trajectory_table_);
  put<uint64_t>(out, paths_.size());
  put<uint64_t>(out, next_path_);
  for (const auto& path : paths_)
    for (int32_t e : path) put(out, e);
  put<int64_t>(out, finished_requests_);
}

void AdaptivePolicy::load(std::istream& in) {
  using binio::get;
  const std::string what = "adaptive policy state";
  char magic[sizeof kMagic];
  if (!in.read(magic, sizeof magic)) throw InputError(what + ": not an adaptive state (bad magic)");
  const int version = std::equal(magic, magic + sizeof magic, kMagicV1)   ? 1
                      : std::equal(magic, magic + sizeof magic, kMagicV2) ? 2
                      : std::equal(magic, magic + sizeof magic, kMagic)   ? 3
                                                                          : 0;
  if (version == 0) throw InputError(what + ": not an adaptive state (bad magic)");
  const int32_t n_layer = get<int32_t>(in, what), n_expert = get<int32_t>(in, what);
  const uint64_t cells = get<uint64_t>(in, what);
  if (n_layer != g_.n_layer || n_expert != g_.n_expert || cells != table_.size())
    throw InputError(what + ": saved for " + std::to_string(n_layer) + " layers x " + std::to_string(n_expert) +
                     " experts (" + std::to_string(cells) + " cells), the model has " + std::to_string(g_.n_layer) +
                     " x " + std::to_string(g_.n_expert) + " (" + std::to_string(table_.size()) + ")");
  binio::need(in, cells * 16 + 24 + visits_.size() * 8 + experts_.size() * 24, what);
  auto count = [&](double x, const char* field) {
    if (!std::isfinite(x) || x < 0) throw InputError(what + ": bad " + field + " " + std::to_string(x));
    return x;
  };
  // A correcting table (lookahead, similarity, trajectory): its size, which must match,
  // then hits and n per cell. n counts observations (hits <= n) or, for the ratio
  // tables, the hits p expected (`n_field` names it). `after`: bytes of the fields that
  // follow, checked with the cells.
  auto read_table = [&](std::vector<Cell>& cells, const std::string& name, const std::string& n_field,
                        bool observations, uint64_t after) {
    const uint64_t size = get<uint64_t>(in, what);
    if (size != cells.size())
      throw InputError(what + ": " + std::to_string(size) + " " + name + " cells, expected " + std::to_string(cells.size()));
    binio::need(in, size * 16 + after, what);
    const std::string hits_name = name + " cell hits", n_name = name + " cell " + n_field;
    for (Cell& c : cells) {
      c.hits = count(get<double>(in, what), hits_name.c_str());
      c.n = count(get<double>(in, what), n_name.c_str());
      if (observations && c.hits > c.n) throw InputError(what + ": a " + name + " cell with more hits than observations");
    }
  };
  std::vector<Cell> table(table_.size());
  for (Cell& c : table) {
    c.hits = count(get<double>(in, what), "cell hits");
    c.n = count(get<double>(in, what), "cell count");
    if (c.hits > c.n) throw InputError(what + ": a cell with more hits than observations");
  }
  const double hits = count(get<double>(in, what), "hits"), n = count(get<double>(in, what), "observations");
  const uint64_t observations = get<uint64_t>(in, what);
  if (hits > n) throw InputError(what + ": more hits than observations");
  std::vector<int64_t> visits(visits_.size());
  for (int64_t& v : visits)
    if ((v = get<int64_t>(in, what)) < 0) throw InputError(what + ": negative visit count");
  std::vector<ExpertState> experts(experts_.size());
  for (size_t i = 0; i < experts.size(); ++i) {
    ExpertState& e = experts[i];
    e.last_visit = get<int64_t>(in, what);
    e.recent = count(get<double>(in, what), "short-term rate");
    e.routed = get<int64_t>(in, what);
    const int64_t layer_visits = visits[i / static_cast<size_t>(g_.n_expert)];
    if (e.recent > 1 || e.routed < 0 || e.routed > layer_visits || e.last_visit < -1 || e.last_visit >= layer_visits)
      throw InputError(what + ": expert " + std::to_string(i) + " has counts its layer's visits cannot hold");
  }
  std::vector<Cell> lookahead(lookahead_table_.size());
  if (version >= 2) read_table(lookahead, "lookahead", "count", true, 0);
  std::vector<Cell> similarity(similarity_table_.size());
  std::vector<StoredEam> store;
  if (version >= 3) {
    read_table(similarity, "similarity", "expected hits", false, 8);
    const uint64_t n_store = get<uint64_t>(in, what);
    if (n_store > opt_.similarity_capacity)
      throw InputError(what + ": " + std::to_string(n_store) + " stored requests exceed the capacity " +
                       std::to_string(opt_.similarity_capacity));
    const uint64_t entry_bytes = experts_.size() * 4 + visits_.size() * 8;
    binio::need(in, n_store * entry_bytes, what);
    store.resize(n_store);
    for (size_t k = 0; k < store.size(); ++k) {
      StoredEam& e = store[k];
      e.routed.resize(experts_.size());
      e.tokens.resize(visits_.size());
      for (int32_t& x : e.routed) x = get<int32_t>(in, what);
      for (int64_t& t : e.tokens) t = get<int64_t>(in, what);
      for (size_t i = 0; i < e.routed.size(); ++i)
        if (e.routed[i] < 0 || e.routed[i] > e.tokens[i / static_cast<size_t>(g_.n_expert)])
          throw InputError(what + ": stored request " + std::to_string(k) + " routes more tokens to expert " +
                           std::to_string(i) + " than its layer saw");
      e.norm = norm_of(e.routed);
      if (e.norm <= 0) throw InputError(what + ": stored request " + std::to_string(k) + " routed nothing");
    }
  }
  std::vector<Cell> trajectory(trajectory_table_.size());
  std::vector<std::vector<int32_t>> paths;
  uint64_t next_path = 0;
  int64_t finished = 0;
  if (version >= 3) {
    read_table(trajectory, "trajectory", "expected hits", false, 16);
    const uint64_t n_paths = get<uint64_t>(in, what);
    next_path = get<uint64_t>(in, what);
    if (n_paths > opt_.trajectory_capacity || (n_paths > 0 && next_path >= n_paths) || (n_paths == 0 && next_path != 0))
      throw InputError(what + ": " + std::to_string(n_paths) + " stored paths (next " + std::to_string(next_path) +
                       ") do not fit the capacity " + std::to_string(opt_.trajectory_capacity));
    const size_t width = static_cast<size_t>(g_.n_layer) * static_cast<size_t>(g_.top_k);
    binio::need(in, n_paths * width * 4, what);
    paths.assign(n_paths, std::vector<int32_t>(width));
    for (size_t k = 0; k < paths.size(); ++k)
      for (int32_t& e : paths[k])
        if ((e = get<int32_t>(in, what)) < 0 || e >= g_.n_expert)
          throw InputError(what + ": stored path " + std::to_string(k) + " names expert " + std::to_string(e));
    if ((finished = get<int64_t>(in, what)) < 0) throw InputError(what + ": negative count of finished requests");
  }
  char extra;
  if (in.read(&extra, 1)) throw InputError(what + ": unexpected data after the state");
  lookahead_table_ = std::move(lookahead);
  similarity_table_ = std::move(similarity);
  store_ = std::move(store);
  similar_valid_ = false;
  trajectory_table_ = std::move(trajectory);
  paths_ = std::move(paths);
  next_path_ = static_cast<size_t>(next_path);
  finished_requests_ = finished;
  step_tokens_.clear();
  for (auto& v : traj_valid_) std::fill(v.begin(), v.end(), 0);
  table_ = std::move(table);
  hits_ = hits, n_ = n, observations_ = observations;
  visits_ = std::move(visits);
  experts_ = std::move(experts);
}

}  // namespace moeflow

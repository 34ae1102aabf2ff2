#include "policy/moe_infinity.h"

#include <algorithm>
#include <cmath>
#include <istream>
#include <numeric>
#include <ostream>
#include <string>

#include "base/error.h"
#include "policy/similar_collection.h"

namespace moeflow {

namespace {

constexpr const char* kMagic = "moeflow-moe-infinity-eamc";
constexpr double kEpsilon = 1e-6;  // Algorithm 1's ϵ: unpredicted experts still rank by layer

template <class A, class B>
double cosine(const std::vector<A>& a, const std::vector<B>& b) {
  double dot = 0, na = 0, nb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += static_cast<double>(a[i]) * static_cast<double>(b[i]);
    na += static_cast<double>(a[i]) * static_cast<double>(a[i]);
    nb += static_cast<double>(b[i]) * static_cast<double>(b[i]);
  }
  return na > 0 && nb > 0 ? dot / std::sqrt(na * nb) : 0;
}

bool all_zero(const std::vector<uint32_t>& v) {
  return std::all_of(v.begin(), v.end(), [](uint32_t x) { return x == 0; });
}

// Similarity of two stored requests (App. B.1): the cosine of their EAMs flattened
// into one vector, prefill and decode end to end.
double entry_similarity(const MoeInfinityPolicy::Entry& a, const MoeInfinityPolicy::Entry& b) {
  double dot = 0, na = 0, nb = 0;
  for (const auto& [x, y] : {std::pair{&a.prefill, &b.prefill}, std::pair{&a.decode, &b.decode}})
    for (size_t i = 0; i < x->size(); ++i) {
      dot += static_cast<double>((*x)[i]) * static_cast<double>((*y)[i]);
      na += static_cast<double>((*x)[i]) * static_cast<double>((*x)[i]);
      nb += static_cast<double>((*y)[i]) * static_cast<double>((*y)[i]);
    }
  return na > 0 && nb > 0 ? dot / std::sqrt(na * nb) : 0;
}

}  // namespace

MoeInfinityPolicy::MoeInfinityPolicy(const ExpertGeometry& g, MoeInfinityOptions opt)
    : n_layer_(g.n_layer), n_expert_(g.n_expert), opt_(opt) {
  opt_.capacity = std::max<size_t>(opt_.capacity, 1);
  opt_.n_match = std::max<size_t>(opt_.n_match, 1);
  const size_t n = static_cast<size_t>(n_layer_) * static_cast<size_t>(n_expert_);
  agg_.assign(n, 0);
  peam_.assign(n, 0);
}

MoeInfinityPolicy::Running& MoeInfinityPolicy::running(int64_t id) {
  auto [it, fresh] = running_.try_emplace(id);
  if (fresh) {
    const size_t n = static_cast<size_t>(n_layer_) * static_cast<size_t>(n_expert_);
    it->second.ieam.assign(n, 0);
    it->second.ream[0].assign(n, 0);
    it->second.ream[1].assign(n, 0);
  }
  return it->second;
}

Phase MoeInfinityPolicy::phase_of(const Running& r) const {
  if (phase_ == Phase::Decode) return Phase::Decode;
  return r.iterations == 0 || r.tokens > 1 ? Phase::Prefill : Phase::Decode;
}

void MoeInfinityPolicy::begin_request(const RequestInfo& info) {
  running_.erase(info.id);
  running(info.id);
  last_request_ = info.id;
  dirty_ = true;
}

void MoeInfinityPolicy::begin_iteration(Phase phase, int64_t) {
  phase_ = phase;
  step_layer_ = -1;
  for (auto& [id, r] : running_) {
    std::fill(r.ieam.begin(), r.ieam.end(), 0);
    r.tokens = 0;
    r.in_step = false;
  }
  dirty_ = true;
}

void MoeInfinityPolicy::routed(const LayerRouting& r) {
  if (r.layer < 0 || r.layer >= n_layer_) return;
  const size_t row = static_cast<size_t>(r.layer) * static_cast<size_t>(n_expert_);
  const bool first_layer_seen = step_layer_ < 0 || step_layer_ == r.layer;
  if (step_layer_ < 0) step_layer_ = static_cast<int32_t>(r.layer);
  const int64_t K = r.top_k;
  for (int64_t t = 0; t < r.n_tok; ++t) {
    Running& run = running(r.requests.empty() ? last_request_ : r.requests[static_cast<size_t>(t)]);
    run.in_step = true;
    if (first_layer_seen) ++run.tokens;
    // An EAM counts tokens per expert (§4.3); ids out of range (dropped rows) are skipped.
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = r.experts[static_cast<size_t>(t * K + k)];
      if (e >= 0 && e < n_expert_) ++run.ieam[row + static_cast<size_t>(e)];
    }
  }
  dirty_ = true;
}

void MoeInfinityPolicy::end_iteration_of(Running& r) {
  if (!r.in_step) return;
  // "At the end of each iteration, the iteration-level EAM is added to an accumulated
  // request-level EAM" (§4.3), per phase.
  auto& acc = r.ream[phase_of(r) == Phase::Prefill ? 0 : 1];
  for (size_t i = 0; i < acc.size(); ++i) acc[i] += r.ieam[i];
  std::fill(r.ieam.begin(), r.ieam.end(), 0);
  ++r.iterations;
  r.tokens = 0;
  r.in_step = false;
}

void MoeInfinityPolicy::end_iteration() {
  for (auto& [id, r] : running_) end_iteration_of(r);
  dirty_ = true;
}

void MoeInfinityPolicy::end_request(int64_t id) {
  auto it = running_.find(id);
  if (it == running_.end()) return;
  end_iteration_of(it->second);  // an iteration left open still belongs to the request
  Entry e{it->second.ream[0], it->second.ream[1]};
  if (!(all_zero(e.prefill) && all_zero(e.decode))) insert(std::move(e));
  running_.erase(it);
  dirty_ = true;
}

// App. B.1: when full, the entry most similar to the incoming one (shortest cosine
// distance) is replaced, keeping the newest pattern and the collection's diversity.
void MoeInfinityPolicy::insert(Entry e) {
  insert_replacing_most_similar(eamc_, opt_.capacity, std::move(e), entry_similarity);
}

// PredictEAM (§4.5, Fig. 5 steps 1-2): the running phase's partial rEAM (accumulated
// iterations plus this one) is matched against the same phase of every stored request;
// the n_match closest are summed and each row normalised.
void MoeInfinityPolicy::refresh() {
  if (!dirty_) return;
  dirty_ = false;
  std::fill(agg_.begin(), agg_.end(), 0);
  // The requests of this step (all running ones before any of its routing is known).
  bool any = false;
  for (const auto& [id, r] : running_) any = any || r.in_step;
  for (const auto& [id, r] : running_)
    if (r.in_step || !any) add_prediction(r);
  for (int32_t l = 0; l < n_layer_; ++l) {
    const size_t row = static_cast<size_t>(l) * static_cast<size_t>(n_expert_);
    const double sum = std::accumulate(agg_.begin() + static_cast<std::ptrdiff_t>(row),
                                       agg_.begin() + static_cast<std::ptrdiff_t>(row + static_cast<size_t>(n_expert_)), 0.0);
    for (int32_t e = 0; e < n_expert_; ++e) peam_[row + static_cast<size_t>(e)] = sum > 0 ? agg_[row + static_cast<size_t>(e)] / sum : 0;
  }
}

void MoeInfinityPolicy::add_prediction(const Running& r) {
  const int ph = phase_of(r) == Phase::Prefill ? 0 : 1;
  // Algorithm 1 line 8, PredictEAM(eamc, curEAM): the current iteration's EAM is the
  // query. Before its first routing (nothing to match yet) the request's own EAM of
  // this phase stands in, and before the first decode iteration its prompt's.
  std::vector<uint32_t> query = r.ieam;
  int match_ph = ph;
  if (all_zero(query)) query = r.ream[ph];
  if (all_zero(query) && ph == 1) query = r.ream[0], match_ph = 0;

  std::vector<std::pair<double, size_t>> sims;
  if (!all_zero(query))
    for (size_t i = 0; i < eamc_.size(); ++i) {
      const auto& stored = match_ph == 0 ? eamc_[i].prefill : eamc_[i].decode;
      const double s = cosine(query, stored);
      if (s > 0) sims.emplace_back(-s, i);  // ascending: most similar first, ties by age
    }
  std::sort(sims.begin(), sims.end());
  if (sims.empty()) {
    // Nothing matches (empty collection, first layer of a first request): the running
    // request's own counts are the best guess of its reuse (§4.2, request-level reuse).
    for (size_t i = 0; i < agg_.size(); ++i) agg_[i] += static_cast<double>(query[i]);
    return;
  }
  for (size_t m = 0; m < std::min(sims.size(), opt_.n_match); ++m) {
    const Entry& e = eamc_[sims[m].second];
    // The prediction is for the phase that runs: a stored request without that phase
    // (traces may lack prefill) lends the other one.
    const auto& src = ph == 0 ? (all_zero(e.prefill) ? e.decode : e.prefill) : (all_zero(e.decode) ? e.prefill : e.decode);
    for (size_t i = 0; i < agg_.size(); ++i) agg_[i] += static_cast<double>(src[i]);
  }
}

// Fig. 5 step 3: future layer i gets weight 1 - (i - l)/L, so nearer layers come first.
// Layers at or before l belong to the next iteration: their distance wraps (i + L - l).
void MoeInfinityPolicy::plan_prefetch(int32_t layer_now, PrefetchPlan& plan) {
  refresh();
  const size_t first = plan.size();
  const int32_t reach = opt_.prefetch_distance > 0 ? opt_.prefetch_distance : n_layer_ - 1;
  for (int32_t d = 1; d < n_layer_ && d <= reach; ++d) {
    const int32_t layer = (layer_now + d) % n_layer_;
    const double w = 1.0 - static_cast<double>(d) / static_cast<double>(n_layer_);
    for (int32_t e = 0; e < n_expert_; ++e) {
      const double p = peam_[static_cast<size_t>(layer) * static_cast<size_t>(n_expert_) + static_cast<size_t>(e)];
      if (p > 0) plan.push_back({{layer, e}, p * w});
    }
  }
  // The cache takes the plan in order: the most likely and nearest first.
  std::stable_sort(plan.begin() + static_cast<std::ptrdiff_t>(first), plan.end(),
                   [](const PrefetchRequest& a, const PrefetchRequest& b) { return a.priority > b.priority; });
}

// Algorithm 1, lines 8-16: p = (peam[l][e] + ϵ)·(1 − l/L) / Σ_j peam[l][j], lowest p goes;
// the (1 − l/L) factor keeps early layers, which prefetching serves worst (§4.6).
// peam here is the matches' summed counts (agg_), which the division normalises.
size_t MoeInfinityPolicy::victim(const CacheView& view, const ExpertKey& incoming) {
  refresh();
  // Algorithm 1's priority: predicted activation, discounted for later layers.
  auto priority = [&](const ExpertKey& k) {
    if (k.layer < 0 || k.layer >= n_layer_ || k.expert < 0 || k.expert >= n_expert_) return 0.0;
    const size_t row = static_cast<size_t>(k.layer) * static_cast<size_t>(n_expert_);
    double ntoken = 0;
    for (int32_t e = 0; e < n_expert_; ++e) ntoken += agg_[row + static_cast<size_t>(e)];
    const double decay = 1.0 - static_cast<double>(k.layer) / static_cast<double>(n_layer_);
    return (agg_[row + static_cast<size_t>(k.expert)] + kEpsilon) * decay / (ntoken > 0 ? ntoken : 1.0);
  };
  const auto& c = *view.candidates;
  size_t best = 0;
  double best_p = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    const ExpertKey& k = c[i].key;
    const double p = priority(k);
    // Ties (e.g. nothing predicted yet) fall back to LRU, then the lower key.
    const bool better = i == 0 || p < best_p ||
                        (p == best_p && (c[i].last_use != c[best].last_use ? c[i].last_use < c[best].last_use : k < c[best].key));
    if (better) best = i, best_p = p;
  }
  // A prefetch only replaces an expert of lower priority than itself: the same
  // ordering decides admission and eviction (otherwise speculative copies would
  // push out experts the predicted EAM values more).
  if (view.for_prefetch && best_p >= priority(incoming)) return kDecline;
  return best;
}

// Text: a header line, then per entry one line of prefill counts and one of decode
// counts. Integers only, so a save of a load is byte-identical.
void MoeInfinityPolicy::save(std::ostream& out) const {
  out << kMagic << " 1\n" << n_layer_ << ' ' << n_expert_ << ' ' << eamc_.size() << '\n';
  for (const Entry& e : eamc_)
    for (const auto* v : {&e.prefill, &e.decode}) {
      for (size_t i = 0; i < v->size(); ++i) out << (i ? " " : "") << (*v)[i];
      out << '\n';
    }
}

void MoeInfinityPolicy::load(std::istream& in) {
  const std::string what = "moe-infinity state: ";
  std::string magic;
  int version = 0;
  int64_t n_layer = 0, n_expert = 0, count = -1;
  if (!(in >> magic >> version) || magic != kMagic) throw InputError(what + "not an EAM collection (expected '" + kMagic + "')");
  if (version != 1) throw InputError(what + "unsupported version " + std::to_string(version));
  if (!(in >> n_layer >> n_expert >> count) || count < 0) throw InputError(what + "bad header");
  if (n_layer != n_layer_ || n_expert != n_expert_)
    throw InputError(what + "saved for " + std::to_string(n_layer) + " layers x " + std::to_string(n_expert) +
                     " experts, the model has " + std::to_string(n_layer_) + " x " + std::to_string(n_expert_));
  if (static_cast<uint64_t>(count) > opt_.capacity)
    throw InputError(what + std::to_string(count) + " entries exceed the capacity " + std::to_string(opt_.capacity));
  const size_t n = static_cast<size_t>(n_layer_) * static_cast<size_t>(n_expert_);
  std::vector<Entry> eamc(static_cast<size_t>(count));
  for (size_t k = 0; k < eamc.size(); ++k)
    for (auto* v : {&eamc[k].prefill, &eamc[k].decode}) {
      v->resize(n);
      for (size_t i = 0; i < n; ++i) {
        int64_t x = -1;
        if (!(in >> x) || x < 0 || x > UINT32_MAX)
          throw InputError(what + "entry " + std::to_string(k) + ": bad or missing count " + std::to_string(i));
        (*v)[i] = static_cast<uint32_t>(x);
      }
    }
  std::string extra;
  if (in >> extra) throw InputError(what + "unexpected data after " + std::to_string(count) + " entries");
  eamc_ = std::move(eamc);
  dirty_ = true;
}

}  // namespace moeflow

#include "policy/fmoe.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <numeric>
#include <thread>
#include <tuple>

namespace moeflow {

namespace {

// Work for the Expert Map Matcher, in the order the inference process published it.
struct Job {
  enum Type { Insert, Semantic, Trajectory } type = Insert;
  ExpertMap map;              // Insert
  std::vector<float> query;   // Semantic: embedding; Trajectory: partial map
  int32_t layers = 0;         // Trajectory: layers observed
  uint64_t gen = 0;           // request (Semantic) or iteration (Trajectory) it is for
};

uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool nonzero_row(const std::vector<float>& probs, size_t at, int32_t n) {
  for (int32_t j = 0; j < n; ++j)
    if (probs[at + static_cast<size_t>(j)] > 0) return true;
  return false;
}

}  // namespace

// §4.3 "Asynchronous expert map matching": the store is the broker; the inference
// process publishes contexts (posts jobs) and reads whatever match is ready, the
// matcher thread owns the store while running and publishes its results.
struct FmoePolicy::Matcher {
  explicit Matcher(ExpertMapStore& s) : store(s), thread([this] { run(); }) {}
  ~Matcher() {
    {
      std::lock_guard<std::mutex> lk(mu);
      stop = true;
    }
    cv.notify_all();
    thread.join();
  }
  void post(Job j) {
    std::lock_guard<std::mutex> lk(mu);
    // Only the newest search of a kind matters; inserts all count.
    if (j.type != Job::Insert && !jobs.empty() && jobs.back().type == j.type)
      jobs.back() = std::move(j);
    else
      jobs.push_back(std::move(j));
    cv.notify_one();
  }
  void wait_idle() {
    std::unique_lock<std::mutex> lk(mu);
    idle.wait(lk, [&] { return jobs.empty() && !busy; });
  }
  void run() {
    std::unique_lock<std::mutex> lk(mu);
    for (;;) {
      cv.wait(lk, [&] { return stop || !jobs.empty(); });
      if (jobs.empty()) return;
      std::deque<Job> batch;
      batch.swap(jobs);
      busy = true;
      const std::function<void()> h = hook;
      lk.unlock();
      if (h) h();
      for (Job& j : batch) {
        Result r;
        if (!execute(store, j, r)) continue;
        std::lock_guard<std::mutex> rl(result_mu);
        r.seq = ++published;
        (j.type == Job::Semantic ? sem : traj) = std::move(r);
      }
      lk.lock();
      busy = false;
      idle.notify_all();
    }
  }
  // Runs one job on the store; true when it produced a search result.
  static bool execute(ExpertMapStore& store, Job& j, Result& r) {
    switch (j.type) {
      case Job::Insert: store.add(std::move(j.map)); return false;
      case Job::Semantic: r.match = store.search_semantic(j.query); break;
      case Job::Trajectory: r.match = store.search_trajectory(j.query, j.layers); break;
    }
    r.gen = j.gen;
    return true;
  }

  ExpertMapStore& store;
  std::mutex mu;
  std::condition_variable cv, idle;
  std::deque<Job> jobs;
  bool busy = false, stop = false;
  std::function<void()> hook;
  std::mutex result_mu;
  Result sem, traj;
  uint64_t published = 0;
  std::thread thread;  // last: started once everything above exists
};

FmoePolicy::FmoePolicy(const ExpertGeometry& g, FmoeOptions opt)
    : n_layer_(g.n_layer),
      n_expert_(g.n_expert),
      top_k_(g.top_k),
      opt_(opt),
      store_(g.n_layer, g.n_expert, opt.capacity, std::clamp(opt.distance, 1, std::max(1, g.n_layer))) {
  opt_.distance = std::clamp(opt.distance, 1, std::max(1, g.n_layer));
  cur_.probs.assign(static_cast<size_t>(n_layer_) * static_cast<size_t>(n_expert_), 0.0f);
  if (opt_.async) matcher_ = std::make_unique<Matcher>(store_);
}

FmoePolicy::~FmoePolicy() = default;

double FmoePolicy::threshold(double score) { return std::clamp(1.0 - score, 0.0, 1.0); }

std::vector<int32_t> FmoePolicy::select(const float* p, int32_t n_expert, double delta, int32_t top_k) {
  std::vector<int32_t> order(static_cast<size_t>(n_expert));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return p[a] > p[b]; });
  std::vector<int32_t> out;
  double sum = 0;
  // Eq. 7 asks for a sum ≥ δ; the tolerance keeps rounding from adding zero-probability
  // experts when δ = 1. Eq. 8: never fewer than top-k.
  for (int32_t e : order) {
    if (static_cast<int32_t>(out.size()) >= top_k && sum >= delta - 1e-6) break;
    out.push_back(e);
    sum += p[e];
  }
  return out;
}

void FmoePolicy::begin_request(const RequestInfo& info) {
  ++request_gen_;
  // §4.2 matches on the mean input embedding of the prompt. Traces carry none: then a
  // bag of the prompt's token ids hashed into token_dim counts stands in for it (same
  // prompt → same vector, shared tokens → similar), and with no tokens either the
  // semantic search is skipped (the first d layers get no prefetch).
  if (!info.prompt_embedding.empty()) {
    sem_ = info.prompt_embedding;
  } else if (!info.prompt.empty()) {
    sem_.assign(static_cast<size_t>(opt_.token_dim), 0.0f);
    for (int32_t t : info.prompt) sem_[mix(static_cast<uint64_t>(static_cast<uint32_t>(t))) % sem_.size()] += 1.0f;
  } else {
    sem_.clear();
  }
  post_search(Kind::Semantic);
}

void FmoePolicy::begin_iteration(Phase, int64_t) {
  ++iter_gen_;
  std::fill(cur_.probs.begin(), cur_.probs.end(), 0.0f);
  layers_seen_ = 0;
  any_seen_ = false;
}

void FmoePolicy::routed(const LayerRouting& r) {
  if (r.layer < 0 || r.layer >= n_layer_ || r.n_tok <= 0) return;
  float* row = cur_.probs.data() + static_cast<size_t>(r.layer) * static_cast<size_t>(n_expert_);
  std::fill(row, row + n_expert_, 0.0f);
  const double inv_tok = 1.0 / static_cast<double>(r.n_tok);
  // §4.1: the gate distribution of the layer; for a block of tokens, their mean.
  if (r.n_expert == n_expert_ && r.probs.size() == static_cast<size_t>(r.n_tok * r.n_expert)) {
    for (int64_t t = 0; t < r.n_tok; ++t)
      for (int32_t j = 0; j < n_expert_; ++j) row[j] += static_cast<float>(r.probs[static_cast<size_t>(t * r.n_expert + j)] * inv_tok);
  } else {
    // No full distribution: each token's top-k weights (renormalised; 1/k when absent)
    // as a sparse one.
    sparse_fallback_ = true;
    const bool w = r.weights.size() == r.experts.size();
    for (int64_t t = 0; t < r.n_tok; ++t) {
      const size_t at = static_cast<size_t>(t * r.top_k);
      if (at + static_cast<size_t>(r.top_k) > r.experts.size()) break;
      double sum = 0;
      for (int64_t k = 0; k < r.top_k && w; ++k) sum += std::max(0.0f, r.weights[at + static_cast<size_t>(k)]);
      for (int64_t k = 0; k < r.top_k; ++k) {
        const int32_t e = r.experts[at + static_cast<size_t>(k)];
        if (e < 0 || e >= n_expert_) continue;
        const double share = sum > 0 ? std::max(0.0f, r.weights[at + static_cast<size_t>(k)]) / sum : 1.0 / static_cast<double>(r.top_k);
        row[e] += static_cast<float>(share * inv_tok);
      }
    }
  }
  layers_seen_ = std::max(layers_seen_, static_cast<int32_t>(r.layer) + 1);
  any_seen_ = true;
  post_search(Kind::Trajectory);
}

void FmoePolicy::end_iteration() {
  // Step 5 (§3.2): the finished iteration's map goes into the store, and the semantic
  // match for the next iteration's first layers is made against the updated store.
  if (any_seen_) post_insert(ExpertMap{sem_, cur_.probs});
  any_seen_ = false;
  post_search(Kind::Semantic);
}

void FmoePolicy::post_search(Kind kind) {
  Job j;
  if (kind == Kind::Semantic) {
    j.type = Job::Semantic, j.query = sem_, j.gen = request_gen_;
  } else {
    j.type = Job::Trajectory, j.layers = layers_seen_, j.gen = iter_gen_;
    j.query.assign(cur_.probs.begin(), cur_.probs.begin() + static_cast<std::ptrdiff_t>(layers_seen_) * n_expert_);
  }
  if (matcher_) return matcher_->post(std::move(j));
  Result r;
  Matcher::execute(store_, j, r);
  (kind == Kind::Semantic ? sem_result_ : traj_result_) = std::move(r);
}

void FmoePolicy::post_insert(ExpertMap m) {
  Job j;
  j.map = std::move(m);
  if (matcher_) return matcher_->post(std::move(j));
  Result unused;
  Matcher::execute(store_, j, unused);
}

void FmoePolicy::refresh_results() const {
  if (!matcher_) return;
  std::lock_guard<std::mutex> lk(matcher_->result_mu);  // held only to copy, never during a search
  if (matcher_->sem.seq != sem_result_.seq) sem_result_ = matcher_->sem;
  if (matcher_->traj.seq != traj_result_.seq) traj_result_ = matcher_->traj;
}

// §4.2: the trajectory match guides layers ≥ d of this iteration, the semantic match the
// first d (and, for the next iteration, `next`, all it can: its trajectory is unseen).
// When one is missing the other stands in; rows a trace never filled predict nothing.
const float* FmoePolicy::predicted(int32_t layer, bool next, double* score) const {
  const size_t at = static_cast<size_t>(layer) * static_cast<size_t>(n_expert_);
  auto usable = [&](const Result& r, uint64_t gen) {
    return r.gen == gen && r.match.found && nonzero_row(r.match.probs, at, n_expert_);
  };
  const bool traj = !next && usable(traj_result_, iter_gen_);
  const bool sem = usable(sem_result_, request_gen_);
  const Result* r = nullptr;
  if (traj && (layer >= opt_.distance || !sem))
    r = &traj_result_;
  else if (sem)
    r = &sem_result_;
  if (!r) return nullptr;
  if (score) *score = r->match.score;
  return r->match.probs.data() + at;
}

void FmoePolicy::plan_prefetch(int32_t layer_now, PrefetchPlan& plan) {
  refresh_results();
  const size_t first = plan.size();
  // §4.2: at layer l the matched map's P_{l+d} guides the prefetch of layer l+d alone
  // (layers l+1..l+d-1 were targets of the layers before; the first d layers of an
  // iteration are the targets of the previous iteration's last d, by the semantic map).
  for (int32_t t = layer_now + opt_.distance; t <= layer_now + opt_.distance; ++t) {
    const bool next = t >= n_layer_;  // a layer of the next iteration
    const int32_t layer = next ? t - n_layer_ : t;
    if (layer < 0 || layer >= n_layer_) continue;
    double score = 0;
    const float* p = predicted(layer, next, &score);
    if (!p) continue;
    // §4.5: PRI_prefetch = p / (l − l_now), l counted on past the last layer.
    for (int32_t e : select(p, n_expert_, threshold(score), top_k_))
      plan.push_back({{layer, e}, static_cast<double>(p[e]) / static_cast<double>(t - layer_now)});
  }
  std::stable_sort(plan.begin() + static_cast<std::ptrdiff_t>(first), plan.end(),
                   [](const PrefetchRequest& a, const PrefetchRequest& b) { return a.priority > b.priority; });
}

size_t FmoePolicy::victim(const CacheView& view, const ExpertKey& incoming) {
  refresh_results();
  const auto& c = *view.candidates;
  // §4.5: PRI_evict = 1/(p·freq); the highest goes first, i.e. the smallest p·freq.
  // p is the current prediction for the expert's next use (this iteration for layers
  // ahead, the next one for layers passed); 1/J when nothing predicts its layer (plain
  // LFU, which §4.5 builds on). freq counts the load as a visit (uses + 1): with the
  // cache's bare use count every expert prefetched and not yet used would score 0 and
  // the prefetches would evict one another. Ties: smaller p, fewer uses, older last
  // use, lower key.
  auto p_of = [&](const ExpertKey& k) {
    const float* p = predicted(k.layer, k.layer <= view.layer_now, nullptr);
    return p ? static_cast<double>(p[k.expert]) : 1.0 / static_cast<double>(n_expert_);
  };
  auto rank = [&](const CacheEntryView& e) {
    const double p = p_of(e.key);
    return std::make_tuple(p * static_cast<double>(e.uses + 1), p, e.uses, e.last_use, e.key.layer, e.key.expert);
  };
  size_t best = 0;
  auto best_rank = rank(c[0]);
  for (size_t i = 1; i < c.size(); ++i)
    if (auto r = rank(c[i]); r < best_rank) best = i, best_rank = r;
  // A prefetch does not displace an expert whose eviction priority is lower (p·freq
  // higher) than the incoming expert would have on arrival.
  if (view.for_prefetch && std::get<0>(best_rank) >= p_of(incoming)) return kDecline;
  return best;
}

void FmoePolicy::wait_idle() const {
  if (matcher_) matcher_->wait_idle();
}

const ExpertMapStore& FmoePolicy::store() const {
  wait_idle();
  return store_;
}

void FmoePolicy::set_matcher_hook(std::function<void()> hook) {
  if (!matcher_) return;
  std::lock_guard<std::mutex> lk(matcher_->mu);
  matcher_->hook = std::move(hook);
}

void FmoePolicy::save(std::ostream& out) const { store().save(out); }

void FmoePolicy::load(std::istream& in) {
  wait_idle();
  store_.load(in);
  // Matches made against the old store no longer name its maps.
  sem_result_ = traj_result_ = Result{};
  if (matcher_) {
    std::lock_guard<std::mutex> lk(matcher_->result_mu);
    matcher_->sem = matcher_->traj = Result{};
  }
}

}  // namespace moeflow

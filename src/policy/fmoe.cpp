#include "policy/fmoe.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
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
  int64_t request = 0;        // Semantic, Trajectory: whose search
  uint64_t gen = 0;           // the embedding (Semantic) or iteration (Trajectory) it is for
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
    // Only a request's newest search of a kind matters; inserts all count.
    auto same = std::find_if(jobs.begin(), jobs.end(), [&](const Job& q) {
      return q.type == j.type && q.type != Job::Insert && q.request == j.request;
    });
    if (same != jobs.end())
      *same = std::move(j);
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
        (j.type == Job::Semantic ? sem : traj)[j.request] = std::move(r);
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
  std::map<int64_t, Result> sem, traj;  // the latest result per request
  uint64_t published = 0;
  std::thread thread;  // last: started once everything above exists
};

// The matcher on the simulator's clock: one worker that takes each job's time,
// in the order the jobs were posted, a request's queued search of a kind replaced by
// its newer one (as Matcher::post does). Jobs run lazily when the clock is read: a job
// that started by `now` runs then (the store changes only through the queue's
// inserts, so running it later reads the same store), and its result is published
// once its time is over.
struct FmoePolicy::TimedMatcher {
  TimedMatcher(ExpertMapStore& s, FmoeOptions::MatchSeconds c, int32_t n_layer) : store(s), cost(c), n_layer(n_layer) {}
  double seconds(const Job& j) const {
    switch (j.type) {
      case Job::Insert: return store.size() < store.capacity() ? 0.0 : cost.insert;
      case Job::Semantic: return cost.semantic;
      case Job::Trajectory: return cost.trajectory * j.layers / std::max(1, n_layer);
    }
    return 0;
  }
  void post(Job j, double now) {
    advance(now);
    auto same = std::find_if(queue.begin(), queue.end(), [&](const Queued& q) {
      return q.job.type == j.type && q.job.type != Job::Insert && q.job.request == j.request;
    });
    if (same != queue.end())
      same->job = std::move(j);  // keeps its place (and post time) in the queue
    else
      queue.push_back({std::move(j), now});
    advance(now);  // a free worker starts it at once (and with no cost, finishes it)
  }
  void advance(double now) {
    for (;;) {
      if (running && done_at <= now) {
        running = false;
        if (has_result) {
          r.seq = ++published;
          (type == Job::Semantic ? sem : traj)[request] = std::move(r);
        }
      }
      if (running || queue.empty()) return;
      const double start = std::max(free_at, queue.front().posted);
      if (start > now) return;
      Job j = std::move(queue.front().job);
      queue.pop_front();
      const double took = std::max(0.0, seconds(j));  // before an insert changes the store
      r = Result{};
      has_result = Matcher::execute(store, j, r);
      type = j.type;
      request = j.request;
      done_at = free_at = start + took;
      running = true;
    }
  }
  void forget(int64_t id) {
    sem.erase(id);
    traj.erase(id);
    queue.erase(std::remove_if(queue.begin(), queue.end(),
                               [&](const Queued& q) { return q.job.type != Job::Insert && q.job.request == id; }),
                queue.end());
    if (running && request == id) has_result = false;
  }

  struct Queued {
    Job job;
    double posted;
  };
  ExpertMapStore& store;
  FmoeOptions::MatchSeconds cost;
  int32_t n_layer;
  std::deque<Queued> queue;
  double free_at = 0, done_at = 0;
  bool running = false, has_result = false;
  Job::Type type = Job::Insert;
  int64_t request = 0;
  Result r;                             // of the running job
  std::map<int64_t, Result> sem, traj;  // the latest result per request
  uint64_t published = 0;
};

FmoePolicy::FmoePolicy(const ExpertGeometry& g, FmoeOptions opt, std::string name)
    : n_layer_(g.n_layer),
      n_expert_(g.n_expert),
      top_k_(g.top_k),
      opt_(opt),
      name_(std::move(name)),
      store_(g.n_layer, g.n_expert, opt.capacity, std::clamp(opt.distance, 1, std::max(1, g.n_layer))) {
  opt_.distance = std::clamp(opt.distance, 1, std::max(1, g.n_layer));
  if (opt_.clock)
    timed_ = std::make_unique<TimedMatcher>(store_, opt_.match_seconds, n_layer_);
  else if (opt_.async)
    matcher_ = std::make_unique<Matcher>(store_);
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

FmoePolicy::Request& FmoePolicy::request(int64_t id) {
  auto [it, fresh] = requests_.try_emplace(id);
  if (fresh) it->second.cur.probs.assign(static_cast<size_t>(n_layer_) * static_cast<size_t>(n_expert_), 0.0f);
  return it->second;
}

void FmoePolicy::begin_request(const RequestInfo& info) {
  requests_.erase(info.id);
  Request& q = request(info.id);
  last_request_ = info.id;
  q.sem_gen = ++gen_;
  // §4.2 matches on the mean input embedding of the prompt. Traces carry none: then a
  // bag of the prompt's token ids hashed into token_dim counts stands in for it (same
  // prompt → same vector, shared tokens → similar), and with no tokens either the
  // semantic search is skipped (the first d layers get no prefetch).
  // Each iteration's own embedding replaces it when the routing brings one (routed).
  if (!info.prompt_embedding.empty()) {
    q.sem = info.prompt_embedding;
    q.key = Key::Prompt;
  } else if (!info.prompt.empty()) {
    q.sem.assign(static_cast<size_t>(opt_.token_dim), 0.0f);
    for (int32_t t : info.prompt) q.sem[mix(static_cast<uint64_t>(static_cast<uint32_t>(t))) % q.sem.size()] += 1.0f;
    q.key = Key::TokenBag;
  }
  post_search(info.id, q, Kind::Semantic);
}

void FmoePolicy::begin_iteration(Phase, int64_t) {
  for (auto& entry : requests_) {
    Request& q = entry.second;
    q.iter_gen = ++gen_;
    std::fill(q.cur.probs.begin(), q.cur.probs.end(), 0.0f);
    q.layers_seen = 0;
    q.any_seen = false;
  }
}

void FmoePolicy::step_embeddings(const std::vector<LayerRouting::StepEmbedding>& embeddings) {
  if (!opt_.iteration_embedding) return;
  // Eq. 4 on this iteration's input: its embedding is known before any gate, so its
  // search goes first.
  for (const LayerRouting::StepEmbedding& e : embeddings) {
    if (e.values.empty()) continue;
    Request& q = request(e.request);
    if (q.key == Key::Embedding && q.key_iter == q.iter_gen) continue;  // taken at the step's start
    q.sem = e.values;
    q.key = Key::Embedding;
    q.key_iter = q.iter_gen;
    q.sem_gen = ++gen_;
    post_search(e.request, q, Kind::Semantic);
  }
}

void FmoePolicy::routed(const LayerRouting& r) {
  if (r.layer < 0 || r.layer >= n_layer_ || r.n_tok <= 0) return;
  step_embeddings(r.embeddings);  // a caller that gave none at the step's start
  const bool by_request = r.requests.size() == static_cast<size_t>(r.n_tok);
  auto request_of = [&](int64_t t) { return by_request ? r.requests[static_cast<size_t>(t)] : last_request_; };
  auto row_of = [&](int64_t id) {
    return request(id).cur.probs.data() + static_cast<size_t>(r.layer) * static_cast<size_t>(n_expert_);
  };
  // §4.1: the gate distribution of the layer; for a block of one request's tokens,
  // their mean.
  std::map<int64_t, int64_t> tokens;
  for (int64_t t = 0; t < r.n_tok; ++t) ++tokens[request_of(t)];
  for (const auto& entry : tokens) std::fill(row_of(entry.first), row_of(entry.first) + n_expert_, 0.0f);
  const bool full = r.n_expert == n_expert_ && r.probs.size() == static_cast<size_t>(r.n_tok * r.n_expert);
  if (!full) sparse_fallback_ = true;
  const bool w = r.weights.size() == r.experts.size();
  for (int64_t t = 0; t < r.n_tok; ++t) {
    const int64_t id = request_of(t);
    float* row = row_of(id);
    const double inv_tok = 1.0 / static_cast<double>(tokens[id]);
    if (full) {
      for (int32_t j = 0; j < n_expert_; ++j)
        row[j] += static_cast<float>(r.probs[static_cast<size_t>(t * r.n_expert + j)] * inv_tok);
      continue;
    }
    // No full distribution: each token's top-k weights (renormalised; 1/k when
    // absent) as a sparse one.
    const size_t at = static_cast<size_t>(t * r.top_k);
    if (at + static_cast<size_t>(r.top_k) > r.experts.size()) break;
    double sum = 0;
    for (int64_t k = 0; k < r.top_k && w; ++k) sum += std::max(0.0f, r.weights[at + static_cast<size_t>(k)]);
    for (int64_t k = 0; k < r.top_k; ++k) {
      const int32_t e = r.experts[at + static_cast<size_t>(k)];
      if (e < 0 || e >= n_expert_) continue;
      const double share =
          sum > 0 ? std::max(0.0f, r.weights[at + static_cast<size_t>(k)]) / sum : 1.0 / static_cast<double>(r.top_k);
      row[e] += static_cast<float>(share * inv_tok);
    }
  }
  for (const auto& entry : tokens) {
    Request& q = request(entry.first);
    q.layers_seen = std::max(q.layers_seen, static_cast<int32_t>(r.layer) + 1);
    q.any_seen = true;
    post_search(entry.first, q, Kind::Trajectory);
  }
}

void FmoePolicy::end_iteration() {
  // Step 5 (§3.2): each request's finished iteration map goes into the store, and its
  // semantic match for the next iteration's first layers is made against the updated
  // store.
  for (auto& entry : requests_) {
    Request& q = entry.second;
    if (!q.any_seen) continue;
    ++(q.key == Key::Embedding ? keys_.embedding
       : q.key == Key::TokenBag ? keys_.token_bag
       : q.key == Key::Prompt   ? keys_.prompt
                                : keys_.none);
    post_insert(ExpertMap{q.sem, q.cur.probs});
    q.any_seen = false;
    post_search(entry.first, q, Kind::Semantic);
  }
}

void FmoePolicy::end_request(int64_t id) {
  requests_.erase(id);
  if (timed_) timed_->forget(id);
  if (!matcher_) return;
  std::lock_guard<std::mutex> lk(matcher_->result_mu);
  matcher_->sem.erase(id);
  matcher_->traj.erase(id);
}

void FmoePolicy::post_search(int64_t id, Request& q, Kind kind) {
  Job j;
  j.request = id;
  if (kind == Kind::Semantic) {
    j.type = Job::Semantic, j.query = q.sem, j.gen = q.sem_gen;
  } else {
    j.type = Job::Trajectory, j.layers = q.layers_seen, j.gen = q.iter_gen;
    j.query.assign(q.cur.probs.begin(), q.cur.probs.begin() + static_cast<std::ptrdiff_t>(q.layers_seen) * n_expert_);
  }
  if (timed_) return timed_->post(std::move(j), opt_.clock());
  if (matcher_) return matcher_->post(std::move(j));
  Result r;
  Matcher::execute(store_, j, r);
  (kind == Kind::Semantic ? q.sem_result : q.traj_result) = std::move(r);
}

void FmoePolicy::post_insert(ExpertMap m) {
  Job j;
  j.map = std::move(m);
  if (timed_) return timed_->post(std::move(j), opt_.clock());
  if (matcher_) return matcher_->post(std::move(j));
  Result unused;
  Matcher::execute(store_, j, unused);
}

void FmoePolicy::refresh_results() {
  auto copy_new = [&](const std::map<int64_t, Result>& sem, const std::map<int64_t, Result>& traj) {
    for (auto& entry : requests_) {
      Request& q = entry.second;
      const auto s = sem.find(entry.first);
      if (s != sem.end() && s->second.seq != q.sem_result.seq) q.sem_result = s->second;
      const auto t = traj.find(entry.first);
      if (t != traj.end() && t->second.seq != q.traj_result.seq) q.traj_result = t->second;
    }
  };
  if (timed_) {
    timed_->advance(opt_.clock());
    copy_new(timed_->sem, timed_->traj);
  }
  if (!matcher_) return;
  std::lock_guard<std::mutex> lk(matcher_->result_mu);  // held only to copy, never during a search
  copy_new(matcher_->sem, matcher_->traj);
}

std::vector<const FmoePolicy::Request*> FmoePolicy::step_requests() const {
  std::vector<const Request*> out;
  for (const auto& entry : requests_)
    if (entry.second.any_seen) out.push_back(&entry.second);
  if (out.empty())
    for (const auto& entry : requests_) out.push_back(&entry.second);
  return out;
}

// §4.2: the trajectory match guides layers ≥ d of this iteration, the semantic match the
// first d (and, for the next iteration, `next`, all it can: its trajectory is unseen).
// When one is missing the other stands in; rows a trace never filled predict nothing.
// When neither search of this iteration (or embedding) is done yet (asynchronous
// matching), the matches of the previous one stand in, in the same order (§4.3).
const float* FmoePolicy::predicted(const Request& q, int32_t layer, bool next, double* score, bool* late) const {
  const size_t at = static_cast<size_t>(layer) * static_cast<size_t>(n_expert_);
  auto found = [&](const Result& r) { return r.match.found && nonzero_row(r.match.probs, at, n_expert_); };
  auto pick = [&](bool traj, bool sem) -> const Result* {
    if (traj && (layer >= opt_.distance || !sem)) return &q.traj_result;
    return sem ? &q.sem_result : nullptr;
  };
  const Result* r = pick(!next && q.traj_result.gen == q.iter_gen && found(q.traj_result),
                         q.sem_result.gen == q.sem_gen && found(q.sem_result));
  if (late) *late = false;
  if (!r) {
    r = pick(!next && found(q.traj_result), found(q.sem_result));
    if (r && late) *late = true;
  }
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
  // Each request of the step plans from its own match; an expert two requests want
  // keeps the higher priority.
  // Target `layer` (of the next iteration when `next`), `ahead` layers from layer_now.
  auto plan_layer = [&](const Request& q, int32_t layer, bool next, int32_t ahead, bool fresh_only) {
    double score = 0;
    bool late = false;
    const float* p = predicted(q, layer, next, &score, &late);
    if (!p || (late && fresh_only)) return;
    ++matched_plans_;
    late_plans_ += late ? 1 : 0;
    // §4.5: PRI_prefetch = p / (l − l_now), l counted on past the last layer.
    for (int32_t e : select(p, n_expert_, threshold(score), top_k_)) {
      const double pri = static_cast<double>(p[e]) / static_cast<double>(ahead);
      auto same = std::find_if(plan.begin() + static_cast<std::ptrdiff_t>(first), plan.end(),
                               [&](const PrefetchRequest& x) { return x.key.layer == layer && x.key.expert == e; });
      if (same == plan.end())
        plan.push_back({{layer, e}, pri});
      else
        same->priority = std::max(same->priority, pri);
    }
  };
  // The step's start (§3.2 step 1, §4.2): its first d layers from the match of its own
  // embedding, if that is ready (they were planned from the previous key before).
  if (layer_now < 0) {
    for (const Request* q : step_requests())
      if (q->key == Key::Embedding && q->key_iter == q->iter_gen)
        for (int32_t h = 0; h < std::min(opt_.distance, n_layer_); ++h) plan_layer(*q, h, false, h + 1, true);
    std::stable_sort(plan.begin() + static_cast<std::ptrdiff_t>(first), plan.end(),
                     [](const PrefetchRequest& a, const PrefetchRequest& b) { return a.priority > b.priority; });
    return;
  }
  const int32_t t = layer_now + opt_.distance;
  const bool next = t >= n_layer_;  // a layer of the next iteration
  const int32_t layer = next ? t - n_layer_ : t;
  for (const Request* q : step_requests()) {
    if (layer >= 0 && layer < n_layer_) plan_layer(*q, layer, next, t - layer_now, false);
    // §4.2's semantic search guides layers 1..d of the iteration whose embedding it
    // matched; the layers before the first one with a gate, the earliest point a
    // plan is made, were planned from the previous iteration's key: once this
    // iteration's own match is ready at its first layer, they are planned again from
    // it (layer d is the target above).
    if (opt_.replan_first_layers && layer_now == 0 && q->key == Key::Embedding && q->key_iter == q->iter_gen)
      for (int32_t h = 1; h < std::min(opt_.distance, n_layer_); ++h) plan_layer(*q, h, false, h, true);
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
  // With several requests in the step, an expert is worth what the request that most
  // expects it predicts.
  const std::vector<const Request*> reqs = step_requests();
  auto p_of = [&](const ExpertKey& k) {
    double best = -1;
    for (const Request* q : reqs)
      if (const float* p = predicted(*q, k.layer, k.layer <= view.layer_now, nullptr))
        best = std::max(best, static_cast<double>(p[k.expert]));
    return best >= 0 ? best : 1.0 / static_cast<double>(n_expert_);
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
  // higher) than the incoming expert would have on arrival with a single visit. (Its
  // own visits so far counted as the residents' are admit far more prefetches: up to
  // 15 points of hit rate lost, docs/results/policies.md.)
  if (view.for_prefetch && std::get<0>(best_rank) >= p_of(incoming)) return kDecline;
  return best;
}

std::vector<std::string> FmoePolicy::notes() const {
  std::vector<std::string> out;
  const uint64_t n = keys_.embedding + keys_.token_bag + keys_.prompt + keys_.none;
  auto pct = [&](uint64_t k) { return std::to_string(n ? (100 * k + n / 2) / n : 0) + "%"; };
  if (keys_.embedding > 0)
    out.push_back(name_ + ": semantic key = each iteration's embedding-layer output for " + pct(keys_.embedding) +
                  " of the stored maps (Eq. 4)");
  if (keys_.token_bag > 0)
    out.push_back(name_ + ": semantic key = hashed bag of the prompt's tokens for " + pct(keys_.token_bag) +
                  " of the stored maps (no embedding in the routing)");
  if (keys_.prompt > 0)
    out.push_back(name_ + ": semantic key = the prompt's mean embedding for " + pct(keys_.prompt) + " of the stored maps");
  if (keys_.none > 0)
    out.push_back(name_ + ": no semantic key for " + pct(keys_.none) +
                  " of the stored maps (neither embeddings nor prompt tokens): an iteration's first d layers "
                  "are not prefetched");
  if (sparse_fallback_) out.push_back(name_ + ": expert maps from top-k weights (no full gate probabilities)");
  if (timed_) {
    char b[160];
    std::snprintf(b, sizeof b,
                  "%s: matcher searches take %.0f us (semantic) / %.0f us (whole trajectory); %.1f%% of %llu matched "
                  "plans used a late match",
                  name_.c_str(), 1e6 * opt_.match_seconds.semantic, 1e6 * opt_.match_seconds.trajectory,
                  matched_plans_ ? 100.0 * static_cast<double>(late_plans_) / static_cast<double>(matched_plans_) : 0.0,
                  static_cast<unsigned long long>(matched_plans_));
    out.emplace_back(b);
  }
  return out;
}

void FmoePolicy::wait_idle() const {
  if (matcher_) matcher_->wait_idle();
  if (timed_) timed_->advance(opt_.clock());  // what is done by now
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
  if (timed_) timed_ = std::make_unique<TimedMatcher>(store_, opt_.match_seconds, n_layer_);
  store_.load(in);
  // Matches made against the old store no longer name its maps.
  for (auto& entry : requests_) entry.second.sem_result = entry.second.traj_result = Result{};
  if (matcher_) {
    std::lock_guard<std::mutex> lk(matcher_->result_mu);
    matcher_->sem.clear();
    matcher_->traj.clear();
  }
}

}  // namespace moeflow

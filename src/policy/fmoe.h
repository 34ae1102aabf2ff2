// fMoE (fmoe.txt §3.2, §4): fine-grained expert offloading guided by expert maps.
// Every iteration's gate distributions are recorded as an expert map (§4.1); the map
// matching the request's semantic embedding guides the first d layers of an iteration
// and the map matching the trajectory seen so far guides the rest (§4.2); after layer
// l's gate, the experts of layer l+d alone (P_{l+d} of the matched map) are prefetched until their probability reaches δ = clip(1 −
// score, 0, 1), at least top-k (§4.3), in the order p/(l − l_now), and the cache evicts
// the expert with the smallest p·freq, i.e. the highest eviction priority 1/(p·freq)
// (§4.5); a prefetch whose expert is worth less than that victim is declined.
//
// Semantic key (Eq. 4). Each iteration's own: the embedding-layer output of the
// iteration's tokens, pooled per request (step_embeddings, before the step's first
// layer; LayerRouting::embeddings with it otherwise: a decode step's new token's row, a
// prefill chunk's mean). It keys the iteration's map in the store and is searched as
// soon as it arrives: its match plans the iteration's first d layers at once (when it
// is ready then, as a synchronous search is), guides their eviction, and plans the
// next iteration's first layers from its last ones. A routing without one (traces of
// real models hold no hidden states) leaves the request's key as it was: the engine's
// mean prompt embedding, or a hashed bag of the prompt's tokens (begin_request).
// notes() says which the run used.
//
// Asynchronous matching (§4.3). The engine runs the matcher on a worker thread; the
// simulator runs it on its clock (each job's measured time on one worker, newest
// search per request and kind only, as the thread does). Either way a plan uses whatever
// match is ready: this iteration's when its search is done, else (a late match) the
// previous iteration's.
//
// Requests. Matching is per request (§4.2 matches a request's own embedding and its
// own trajectory): each running request keeps its embedding, its iteration map and
// its matches, keyed by the request id the routing carries, and puts its own map into
// the shared store. With several requests in a step the prefetch plan is the union of
// the requests' plans (an expert two of them want keeps the higher priority), and an
// expert's p for eviction is the largest any running request predicts for it. One
// request alone takes exactly the decisions of the single-request policy.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "policy/expert_map_store.h"
#include "experts/expert_policy.h"

namespace moeflow {

struct FmoeOptions {
  int32_t distance = 3;     // prefetch distance d in layers (§4.2)
  size_t capacity = 1024;   // Expert Map Store capacity C (§3.2 uses 1K maps as its example)
  bool async = false;       // match on a worker thread, never waiting for it (§4.3)
  int32_t token_dim = 256;  // size of the hashed bag-of-tokens embedding (see begin_request)
  // Match on each iteration's embedding when the routing carries one (false: the
  // prompt's key for every iteration, the behaviour before per-iteration keys).
  bool iteration_embedding = true;
  // At an iteration's first layer, plan its layers 1..d-1 again from the match of its
  // own embedding once that is ready (they were planned from the previous key).
  bool replan_first_layers = true;
  // The simulator's matcher (when clock is set, async is ignored): jobs run one at a
  // time on one worker and take, on `clock`, a semantic search `semantic`, a
  // trajectory search `trajectory` x layers seen / n_layer, an insert into a full
  // store `insert` (a free slot: nothing).
  struct MatchSeconds {
    double semantic = 0, trajectory = 0, insert = 0;
  } match_seconds = {};
  std::function<double()> clock = {};
};

class FmoePolicy : public ExpertPolicy {
 public:
  FmoePolicy(const ExpertGeometry& g, FmoeOptions opt = {}, std::string name = "fmoe");
  ~FmoePolicy() override;
  std::string name() const override { return name_; }
  bool prefetches() const override { return true; }
  bool wants_embedding() const override { return opt_.iteration_embedding; }
  std::vector<std::string> notes() const override;

  void begin_request(const RequestInfo& info) override;
  void begin_iteration(Phase, int64_t iter) override;
  void step_embeddings(const std::vector<LayerRouting::StepEmbedding>& embeddings) override;
  void routed(const LayerRouting& r) override;
  void plan_prefetch(int32_t layer_now, PrefetchPlan& plan) override;
  size_t victim(const CacheView& view, const ExpertKey& incoming) override;
  void end_iteration() override;
  void end_request(int64_t id) override;
  void save(std::ostream& out) const override;
  void load(std::istream& in) override;

  // Some routing came without full gate probabilities (traces): its expert map was
  // built from the top-k weights (or 1/k each) as a sparse distribution.
  bool used_sparse_fallback() const { return sparse_fallback_; }
  // Maps stored so far by the key they were stored under: an iteration's embedding,
  // the hashed bag of prompt tokens, the prompt embedding of RequestInfo, none.
  struct KeyCounts {
    uint64_t embedding = 0, token_bag = 0, prompt = 0, none = 0;
  };
  const KeyCounts& key_counts() const { return keys_; }
  // Prefetch plans that used a late (previous iteration's) match, and all plans made
  // from a match.
  uint64_t late_plans() const { return late_plans_; }
  uint64_t matched_plans() const { return matched_plans_; }

  // δ of §4.3 for a similarity score.
  static double threshold(double score);
  // Eq. 6–8: experts by falling probability until their sum reaches δ, at least top_k.
  static std::vector<int32_t> select(const float* p, int32_t n_expert, double delta, int32_t top_k);

  // For tests and tools (never on the forward path): waits until the matcher thread
  // has nothing left to do (no-op when synchronous), and reads the store after that.
  void wait_idle() const;
  const ExpertMapStore& store() const;
  // Runs on the matcher thread before each batch of work (tests stall it with this).
  void set_matcher_hook(std::function<void()> hook);
  // The requests whose state the policy holds (tests).
  size_t running_requests() const { return requests_.size(); }

 private:
  struct Matcher;
  struct TimedMatcher;
  enum class Kind { Semantic, Trajectory };
  enum class Key { None, Embedding, TokenBag, Prompt };
  // A search result, tagged with the request embedding / iteration (gen) it was made for.
  struct Result {
    MapMatch match;
    uint64_t gen = 0;
    uint64_t seq = 0;  // async: publication number, to copy only what is new
  };
  // One running request.
  struct Request {
    std::vector<float> sem;  // semantic embedding (§4.2)
    Key key = Key::None;     // where sem came from
    uint64_t key_iter = 0;   // the iteration (iter_gen) whose embedding sem is
    ExpertMap cur;           // expert map of the iteration under way
    int32_t layers_seen = 0;
    bool any_seen = false;   // routed in this iteration
    uint64_t sem_gen = 0, iter_gen = 0;
    Result sem_result, traj_result;
  };
  Request& request(int64_t id);
  void post_search(int64_t id, Request& q, Kind kind);
  void post_insert(ExpertMap m);
  // The predicted distribution of `layer` for request q in this iteration, or in the
  // next one when `next` (null: none), and the similarity score of its match.
  // `late` (may be null) is set when the match is the previous iteration's.
  const float* predicted(const Request& q, int32_t layer, bool next, double* score, bool* late = nullptr) const;
  // The requests of this step: those routed in this iteration, else every running one.
  std::vector<const Request*> step_requests() const;
  void refresh_results();

  int32_t n_layer_, n_expert_, top_k_;
  FmoeOptions opt_;
  std::string name_;
  ExpertMapStore store_;
  std::map<int64_t, Request> requests_;
  int64_t last_request_ = 0;  // the request of routing that names none
  uint64_t gen_ = 0;          // gens, unique across requests and iterations
  bool sparse_fallback_ = false;
  KeyCounts keys_;
  uint64_t late_plans_ = 0, matched_plans_ = 0;
  std::unique_ptr<Matcher> matcher_;     // only when async (a thread)
  std::unique_ptr<TimedMatcher> timed_;  // only when simulated (opt_.clock)
};

}  // namespace moeflow

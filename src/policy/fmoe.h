// fMoE (fmoe.txt §3.2, §4): fine-grained expert offloading guided by expert maps.
// Every iteration's gate distributions are recorded as an expert map (§4.1); the map
// matching the request's semantic embedding guides the first d layers of an iteration
// and the map matching the trajectory seen so far guides the rest (§4.2); after layer
// l's gate, the experts of layer l+d alone (P_{l+d} of the matched map) are prefetched until their probability reaches δ = clip(1 −
// score, 0, 1), at least top-k (§4.3), in the order p/(l − l_now), and the cache evicts
// the expert with the smallest p·freq, i.e. the highest eviction priority 1/(p·freq)
// (§4.5); a prefetch whose expert is worth less than that victim is declined.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "policy/expert_map_store.h"
#include "experts/expert_policy.h"

namespace moeflow {

struct FmoeOptions {
  int32_t distance = 3;     // prefetch distance d in layers (§4.2)
  size_t capacity = 1024;   // Expert Map Store capacity C (§3.2 uses 1K maps as its example)
  bool async = false;       // match on a worker thread, never waiting for it (§4.3)
  int32_t token_dim = 256;  // size of the hashed bag-of-tokens embedding (see begin_request)
};

class FmoePolicy : public ExpertPolicy {
 public:
  FmoePolicy(const ExpertGeometry& g, FmoeOptions opt = {});
  ~FmoePolicy() override;
  std::string name() const override { return "fmoe"; }
  bool prefetches() const override { return true; }

  void begin_request(const RequestInfo& info) override;
  void begin_iteration(Phase, int64_t iter) override;
  void routed(const LayerRouting& r) override;
  void plan_prefetch(int32_t layer_now, PrefetchPlan& plan) override;
  size_t victim(const CacheView& view, const ExpertKey& incoming) override;
  void end_iteration() override;
  void save(std::ostream& out) const override;
  void load(std::istream& in) override;

  // Some routing came without full gate probabilities (traces): its expert map was
  // built from the top-k weights (or 1/k each) as a sparse distribution.
  bool used_sparse_fallback() const { return sparse_fallback_; }

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

 private:
  struct Matcher;
  enum class Kind { Semantic, Trajectory };
  void post_search(Kind kind);
  void post_insert(ExpertMap m);
  // The predicted distribution of `layer` in this iteration, or in the next one when
  // `next` (null: none), and the similarity score of the match it comes from.
  const float* predicted(int32_t layer, bool next, double* score) const;
  void refresh_results() const;

  int32_t n_layer_, n_expert_, top_k_;
  FmoeOptions opt_;
  ExpertMapStore store_;
  std::vector<float> sem_;  // semantic embedding of the current request
  ExpertMap cur_;           // expert map of the iteration under way
  int32_t layers_seen_ = 0;
  bool any_seen_ = false;
  uint64_t request_gen_ = 0, iter_gen_ = 0;
  bool sparse_fallback_ = false;

  // Latest search results, tagged with the request / iteration they were made for.
  struct Result {
    MapMatch match;
    uint64_t gen = 0;
    uint64_t seq = 0;  // async: publication number, to copy only what is new
  };
  mutable Result sem_result_, traj_result_;
  std::unique_ptr<Matcher> matcher_;  // only when async
};

}  // namespace moeflow

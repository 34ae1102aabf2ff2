// MoE-Infinity's sparsity-aware expert cache (moe-infinity.txt §4.3-4.7, App. B.1):
// request-level Expert Activation Matrices (EAM: [layer][expert] token counts) kept in a
// fixed-capacity collection (EAMC), matched by cosine distance against the running
// request's current iteration-level EAM (Algorithm 1's curEAM, §4.5 "This iEAM is
// matched with prior EAMs"); the matches' aggregate predicts activation (pEAM), which
// drives prefetching of every future layer weighted by layer proximity, and eviction
// (Algorithm 1). EAMC replacement compares entries as one flattened vector (App. B.1),
// the prefill and decode rEAMs (traced separately, §4.3) laid end to end. Each running
// request keeps its own EAMs; with several in one step, the prediction is the sum of
// theirs (the step needs every one's experts).
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "experts/expert_policy.h"

namespace moeflow {

struct MoeInfinityOptions {
  // EAMC capacity. §5.2/Fig. 9 shows latency flat from ~100 entries (x axis 20-120);
  // App. B.1 calls "hundreds to thousands" modest. 120 is the largest value of Fig. 9.
  size_t capacity = 120;
  // How many closest EAMs are aggregated (§4.5 "several matched EAMs might be returned";
  // the paper gives no number).
  size_t n_match = 3;
  // Layers ahead to prefetch (0: every future layer). Fig. 5 step 3 weighs each
  // future layer i by its proximity 1 - (i - l)/L, which only ranks anything when
  // several layers are asked for; the cache admits a far guess only in place of an
  // expert of lower priority (victim() declines otherwise), and with chunked copies a
  // demand no longer waits behind one.
  int32_t prefetch_distance = 0;
};

class MoeInfinityPolicy : public ExpertPolicy {
 public:
  MoeInfinityPolicy(const ExpertGeometry& g, MoeInfinityOptions opt = {});
  std::string name() const override { return "moe-infinity"; }
  bool prefetches() const override { return true; }

  void begin_request(const RequestInfo&) override;
  void begin_iteration(Phase phase, int64_t iter) override;
  void routed(const LayerRouting& r) override;
  void plan_prefetch(int32_t layer_now, PrefetchPlan& plan) override;
  size_t victim(const CacheView& view, const ExpertKey& incoming) override;
  void end_iteration() override;
  void end_request(int64_t id) override;
  void save(std::ostream& out) const override;
  void load(std::istream& in) override;

  // One traced request: its prefill and decode rEAMs, traced separately (§4.3).
  struct Entry {
    std::vector<uint32_t> prefill, decode;  // [n_layer * n_expert]
  };
  const std::vector<Entry>& collection() const { return eamc_; }
  // The aggregated, row-normalised prediction for the running phase (§4.5 steps 1-2),
  // [n_layer * n_expert]; all zero when nothing is known yet.
  const std::vector<double>& predicted() { refresh(); return peam_; }

 private:
  void refresh();
  void insert(Entry e);

  // A running request's EAMs (§4.3).
  struct Running {
    std::vector<uint32_t> ieam;     // this iteration (§4.3 (1))
    std::vector<uint32_t> ream[2];  // this request, [prefill, decode] (§4.3 (2))
    int64_t iterations = 0;         // ended so far
    int64_t tokens = 0;             // routed in this step (first layer seen)
    bool in_step = false;
  };
  Running& running(int64_t id);
  // The phase a request's current iteration belongs to: prefill for its first and for
  // any chunk of several tokens (the step's phase says only that some request prefills).
  Phase phase_of(const Running& r) const;
  void end_iteration_of(Running& r);
  // Adds request r's matched prediction (§4.5 steps 1-2, unnormalised) to agg_.
  void add_prediction(const Running& r);

  int32_t n_layer_, n_expert_;
  MoeInfinityOptions opt_;
  std::vector<Entry> eamc_;
  Phase phase_ = Phase::Prefill;          // the step's
  std::map<int64_t, Running> running_;
  int64_t last_request_ = 0;              // tokens of a routing without request ids belong to it
  int32_t step_layer_ = -1;               // the layer whose tokens were counted per request
  std::vector<double> agg_, peam_;        // summed matches, and row-normalised
  bool dirty_ = true;
};

}  // namespace moeflow

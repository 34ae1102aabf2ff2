// MoE-Infinity's sparsity-aware expert cache (moe-infinity.txt §4.3-4.7, App. B.1):
// request-level Expert Activation Matrices (EAM: [layer][expert] token counts) kept in a
// fixed-capacity collection (EAMC), matched by cosine distance against the running
// request's partial EAM; the matches' aggregate predicts activation (pEAM), which drives
// prefetching (weighted by layer proximity) and eviction (Algorithm 1).
#pragma once
#include <cstdint>
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
  // Layers ahead to prefetch. §4.6 prefetches "the experts that are likely to be
  // activated for the next layer"; prefetching every future layer (Fig. 5's full pEAM)
  // floods a small cache with far-layer guesses that evict what is needed sooner.
  int32_t prefetch_distance = 1;
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
  void end_request() override;
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

  int32_t n_layer_, n_expert_;
  MoeInfinityOptions opt_;
  std::vector<Entry> eamc_;
  Phase phase_ = Phase::Prefill;
  std::vector<uint32_t> ieam_;             // this iteration (§4.3 (1))
  std::vector<uint32_t> ream_[2];          // this request, [prefill, decode] (§4.3 (2))
  std::vector<double> agg_, peam_;         // summed matches, and row-normalised
  bool dirty_ = true;
};

}  // namespace moeflow

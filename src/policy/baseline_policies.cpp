// The classic cache policies the papers compare against.
#include <algorithm>

#include "policy/baseline_policies.h"

namespace moeflow {

namespace {

template <class Less>
size_t argmin(const CacheView& v, Less less) {
  const auto& c = *v.candidates;
  size_t best = 0;
  for (size_t i = 1; i < c.size(); ++i)
    if (less(c[i], c[best])) best = i;
  return best;
}

// Ties go to the lower (layer, expert) so that runs are deterministic.
bool lower_key(const CacheEntryView& a, const CacheEntryView& b) { return a.key < b.key; }

class LruPolicy : public ExpertPolicy {
 public:
  std::string name() const override { return "lru"; }
  size_t victim(const CacheView& v, const ExpertKey&) override {
    return argmin(v, [](const CacheEntryView& a, const CacheEntryView& b) {
      return a.last_use != b.last_use ? a.last_use < b.last_use : lower_key(a, b);
    });
  }
};

class LfuPolicy : public ExpertPolicy {
 public:
  std::string name() const override { return "lfu"; }
  size_t victim(const CacheView& v, const ExpertKey&) override {
    return argmin(v, [](const CacheEntryView& a, const CacheEntryView& b) {
      if (a.uses != b.uses) return a.uses < b.uses;
      return a.last_use != b.last_use ? a.last_use < b.last_use : lower_key(a, b);
    });
  }
};

// Loads only what is asked for and evicts the expert that arrived first.
class OnDemandPolicy : public ExpertPolicy {
 public:
  std::string name() const override { return "on-demand"; }
  size_t victim(const CacheView& v, const ExpertKey&) override {
    return argmin(v, [](const CacheEntryView& a, const CacheEntryView& b) {
      return a.loaded_at != b.loaded_at ? a.loaded_at < b.loaded_at : lower_key(a, b);
    });
  }
};

// Speculative next-layer prefetch (mixtral-offloading): the experts layer l chose are
// fetched for layer l+1 (and the last layer's for layer 0 of the next iteration).
class NextLayerPolicy : public LruPolicy {
 public:
  explicit NextLayerPolicy(const ExpertGeometry& g) : n_layer_(g.n_layer) {}
  std::string name() const override { return "next-layer"; }
  bool prefetches() const override { return true; }
  void routed(const LayerRouting& r) override {
    chosen_.clear();
    for (int32_t e : r.experts)
      if (std::find(chosen_.begin(), chosen_.end(), e) == chosen_.end()) chosen_.push_back(e);
  }
  void plan_prefetch(int32_t layer_now, PrefetchPlan& plan) override {
    const int32_t next = (layer_now + 1) % n_layer_;
    for (size_t i = 0; i < chosen_.size(); ++i)
      plan.push_back({{next, chosen_[i]}, 1.0 / static_cast<double>(i + 1)});
  }

 private:
  int32_t n_layer_;
  std::vector<int32_t> chosen_;
};

}  // namespace

std::unique_ptr<ExpertPolicy> make_baseline_policy(const std::string& name, const ExpertGeometry& g) {
  if (name == "lru") return std::make_unique<LruPolicy>();
  if (name == "lfu") return std::make_unique<LfuPolicy>();
  if (name == "on-demand") return std::make_unique<OnDemandPolicy>();
  if (name == "next-layer") return std::make_unique<NextLayerPolicy>(g);
  return nullptr;
}

}  // namespace moeflow

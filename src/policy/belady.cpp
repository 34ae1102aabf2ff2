#include "policy/belady.h"

#include <algorithm>

namespace moeflow {

BeladyPolicy::BeladyPolicy(const ExpertGeometry& g, std::vector<LayerStep> steps, int64_t capacity, bool prefetch)
    : g_(g), steps_(std::move(steps)), capacity_(capacity), prefetch_(prefetch), uses_(g.bytes.size()) {
  for (size_t s = 0; s < steps_.size(); ++s)
    for (int32_t e : steps_[s].needed) uses_[static_cast<size_t>(g_.index({steps_[s].layer, e}))].push_back(static_cast<uint32_t>(s));
}

size_t BeladyPolicy::next_use(const ExpertKey& key, size_t from) const {
  const auto& u = uses_[static_cast<size_t>(g_.index(key))];
  auto it = std::lower_bound(u.begin(), u.end(), static_cast<uint32_t>(from));
  return it == u.end() ? steps_.size() : *it;
}

void BeladyPolicy::plan_prefetch(int32_t, PrefetchPlan& plan) {
  // The experts of the coming steps in order of first use, until the cache is full;
  // the protocol starts the first that is missing (prefetch_limit), the cache admits
  // it only past victim()'s do-no-harm test.
  if (link_busy_) return;
  const size_t now = static_cast<size_t>(std::max<int64_t>(pos_, 0));
  std::vector<ExpertKey> upcoming;
  for (size_t s = now + 1; s < steps_.size() && static_cast<int64_t>(upcoming.size()) < capacity_; ++s)
    for (int32_t e : steps_[s].needed) {
      const ExpertKey k{steps_[s].layer, e};
      if (std::find(upcoming.begin(), upcoming.end(), k) == upcoming.end() &&
          static_cast<int64_t>(upcoming.size()) < capacity_) {
        upcoming.push_back(k);
        plan.push_back({k, 1.0 / static_cast<double>(s - now)});
      }
    }
}

size_t BeladyPolicy::victim(const CacheView& view, const ExpertKey& incoming) {
  const size_t now = static_cast<size_t>(std::max<int64_t>(pos_, 0));
  const auto& c = *view.candidates;
  size_t best = 0, best_next = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    const size_t n = next_use(c[i].key, now);
    if (i == 0 || n > best_next || (n == best_next && c[i].key < c[best].key)) {
      best = i;
      best_next = n;
    }
  }
  // Do no harm: a prefetch never evicts an expert needed before the incoming one.
  if (view.for_prefetch && best_next <= next_use(incoming, now + 1)) return kDecline;
  return best;
}

}  // namespace moeflow

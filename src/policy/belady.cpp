#include "policy/belady.h"

#include <algorithm>
#include <iterator>

namespace moeflow {

bool BeladyPolicy::mode_of(const std::string& name, Mode& mode) {
  for (size_t m = 0; m < std::size(kNames); ++m)
    if (name == kNames[m]) {
      mode = static_cast<Mode>(m);
      return true;
    }
  return false;
}

BeladyPolicy::BeladyPolicy(const ExpertGeometry& g, std::vector<LayerStep> steps, int64_t capacity, Mode mode)
    : g_(g), steps_(std::move(steps)), capacity_(capacity), mode_(mode), uses_(g.bytes.size()) {
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
  // Demand: MIN evicts the resident expert needed furthest away (ties: the smaller key).
  // A prefetch makes the replacement MIN will make when the incoming expert is first
  // needed, at step u, only earlier (Cao et al.'s conservative prefetching): the victim
  // is the one needed furthest away after u.
  const bool conservative = view.for_prefetch && mode_ == Mode::conservative;
  const size_t incoming_next = next_use(incoming, now + 1);  // u
  const size_t from = conservative ? incoming_next : now;
  if (view.for_prefetch && from >= steps_.size()) return kDecline;  // never needed again
  size_t best = 0, best_next = 0;
  for (size_t i = 0; i < c.size(); ++i) {
    const size_t n = next_use(c[i].key, from);
    if (i == 0 || n > best_next || (n == best_next && c[i].key < c[best].key)) {
      best = i;
      best_next = n;
    }
  }
  if (!view.for_prefetch) return best;
  // Eager: never evict an expert needed before the incoming one; otherwise at once.
  if (!conservative) return best_next <= incoming_next ? kDecline : best;
  // While a step plans its prefetches its own experts are in use (pinned, so not
  // candidates); if one of them is needed later than every candidate, it is MIN's
  // victim: wait until the step has released it (a later plan) rather than evict an
  // expert MIN keeps. (A tie is no reason to wait: MIN is optimal whichever of the
  // experts needed furthest away it evicts.)
  if (now < steps_.size())
    for (int32_t e : steps_[now].needed) {
      const ExpertKey k{steps_[now].layer, e};
      if (!(k == incoming) && next_use(k, from) > best_next) return kDecline;
    }
  // Do no harm: evicting it now is MIN's replacement only if it is not needed before
  // (or at) step u; else wait until its last use before u has passed.
  if (next_use(c[best].key, now + 1) <= from) return kDecline;
  return best;
}

}  // namespace moeflow

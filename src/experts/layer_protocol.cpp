#include "experts/layer_protocol.h"

#include <algorithm>

namespace moeflow {

void LayerProtocol::run(int32_t layer, const std::vector<int32_t>& needed, const Compute& compute) {
  std::vector<int32_t> order;
  if (cache_.policy().stream_order(layer, order)) {
    run_pipelined(layer, needed, order, compute);
    return;
  }
  // A head still in flight is an ordinary prefetch from here on.
  loading_.clear();
  head_ = {-1, -1};
  run_on_demand(layer, needed, compute);
}

void LayerProtocol::run_on_demand(int32_t layer, const std::vector<int32_t>& needed, const Compute& compute) {
  ExpertPolicy& policy = cache_.policy();
  cache_.begin_layer(layer, needed);
  std::vector<int32_t> pinned, missing;
  std::vector<const uint8_t*> bufs;
  for (int32_t e : needed) {
    if (const uint8_t* b = cache_.try_acquire({layer, e})) {
      pinned.push_back(e);
      bufs.push_back(b);
    } else {
      missing.push_back(e);
    }
  }
  for (int32_t e : missing)
    if (cache_.room_for_demand({layer, e})) cache_.request({layer, e});
  plan_.clear();
  if (policy.prefetches()) plan(layer);
  // A k-slot cache: the computed expert's slot goes to the plan (DuoServe §5.3, "after
  // the first expert ... completes its computation, the communication stream
  // immediately starts prefetching the experts for the next layer").
  const bool frees = policy.frees_computed_experts();
  auto done = [&](int32_t e) {
    cache_.release({layer, e});
    if (!frees) return;
    cache_.retire({layer, e});
    issue();
  };
  for (size_t i = 0; i < pinned.size(); ++i) {
    compute(pinned[i], bufs[i]);
    done(pinned[i]);
  }
  for (int32_t e : missing) {
    const uint8_t* b = cache_.acquire({layer, e});
    compute(e, b);
    done(e);
  }
}

void LayerProtocol::begin_step(const std::vector<LayerRouting::StepEmbedding>& embeddings) {
  ExpertPolicy& policy = cache_.policy();
  if (embeddings.empty() || !policy.wants_embedding()) return;
  policy.step_embeddings(embeddings);
  plan_.clear();
  if (policy.prefetches()) plan(-1);
}

void LayerProtocol::plan(int32_t layer_now) {
  ExpertPolicy& policy = cache_.policy();
  policy.link_state(cache_.copies_in_flight(), cache_.prefetches_in_flight());
  policy.plan_prefetch(layer_now, plan_);
  if (const double s = policy.prediction_seconds(); s > 0)
    cache_.transport().hold_prefetches(cache_.transport().now() + s);
  issue();
}

void LayerProtocol::issue() {
  const size_t limit = cache_.policy().prefetch_limit();
  size_t started = 0;
  for (const PrefetchRequest& p : plan_) {
    if (started >= limit) break;
    const bool known = cache_.resident(p.key) || cache_.in_flight(p.key);
    cache_.prefetch(p.key, p.priority);
    if (!known && cache_.in_flight(p.key)) ++started;
  }
}

void LayerProtocol::run_pipelined(int32_t layer, const std::vector<int32_t>& needed, const std::vector<int32_t>& order,
                                  const Compute& compute) {
  cache_.begin_layer(layer, needed);
  ++pipe_.layers;
  settle(2);
  cache_.cancel_prefetches(loading_);  // the link is the pipeline's (a head may be queued)
  std::vector<int32_t> hits, missing;
  std::vector<const uint8_t*> bufs;
  for (int32_t e : needed) {
    const ExpertKey k{layer, e};
    if (k == head_) ++pipe_.head_hits;
    if (const uint8_t* b = cache_.try_acquire(k)) {
      hits.push_back(e);
      bufs.push_back(b);
    } else {
      missing.push_back(e);
    }
  }
  const ExpertKey head = head_;
  head_ = {-1, -1};
  // Copies already under way (the head) stream first, then the policy's order; ids it
  // does not name go last.
  auto rank = [&](int32_t e) -> size_t {
    if (cache_.in_flight({layer, e})) return 0;
    return 1 + static_cast<size_t>(std::find(order.begin(), order.end(), e) - order.begin());
  };
  std::stable_sort(missing.begin(), missing.end(), [&](int32_t a, int32_t b) { return rank(a) < rank(b); });

  // The loading slot is busy from here to the end: with the first missing expert
  // while the hits compute, or, with nothing missing, with the next layer's head.
  if (missing.empty()) {
    fetch_head(layer + 1);
  } else {
    const ExpertKey first{layer, missing[0]};
    if (cache_.in_flight(first) || cache_.room_for_demand(first)) load(first, true);
  }
  for (size_t i = 0; i < hits.size(); ++i) {
    compute(hits[i], bufs[i]);
    cache_.release({layer, hits[i]});
    // A head that landed in time was a pipeline slot, not cache content.
    cache_.retire({layer, hits[i]}, ExpertKey{layer, hits[i]} == head);
  }
  for (size_t i = 0; i < missing.size(); ++i) {
    const ExpertKey k{layer, missing[i]};
    // The computing slot: either this expert's own load, or one freed for it.
    if (std::find(loading_.begin(), loading_.end(), k) == loading_.end()) settle(1);
    const uint8_t* b = cache_.acquire(k);
    loading_.erase(std::remove(loading_.begin(), loading_.end(), k), loading_.end());
    computing_ = true;
    ++pipe_.streamed;
    note_slots();
    if (i + 1 < missing.size()) {
      // Without room (a budget of fewer than two experts beyond what the layer pins)
      // the next expert loads when its turn comes: slower, never over budget.
      const ExpertKey next{layer, missing[i + 1]};
      if (cache_.in_flight(next) || cache_.room_for_demand(next)) {
        load(next, true);
        ++pipe_.overlapped;
      }
    } else {
      fetch_head(layer + 1);
    }
    compute(missing[i], b);
    cache_.release(k);
    cache_.retire(k, true);
    computing_ = false;
  }
}

void LayerProtocol::load(const ExpertKey& key, bool demand) {
  if (std::find(loading_.begin(), loading_.end(), key) == loading_.end()) settle(computing_ ? 0 : 1);
  if (demand) cache_.request(key);
  else cache_.prefetch(key, 1.0);
  if (cache_.in_flight(key) && std::find(loading_.begin(), loading_.end(), key) == loading_.end()) loading_.push_back(key);
  note_slots();
}

void LayerProtocol::fetch_head(int32_t next_layer) {
  if (next_layer >= cache_.geometry().n_layer) return;  // the next iteration's layer 0 loads after its gate
  std::vector<int32_t> order;
  if (!cache_.policy().stream_order(next_layer, order)) return;
  for (int32_t e : order) {
    const ExpertKey k{next_layer, e};
    if (cache_.resident(k) || cache_.in_flight(k)) continue;
    load(k, false);
    if (cache_.in_flight(k)) {  // else dropped: no room without evicting this layer's experts
      head_ = k;
      ++pipe_.heads;
    }
    return;
  }
}

void LayerProtocol::settle(size_t max_loading) {
  cache_.poll();
  loading_.erase(std::remove_if(loading_.begin(), loading_.end(), [&](const ExpertKey& k) { return !cache_.in_flight(k); }),
                 loading_.end());
  while (loading_.size() > max_loading) {
    cache_.wait_for(loading_.front());
    loading_.erase(loading_.begin());
  }
}

void LayerProtocol::note_slots() {
  pipe_.peak_slots = std::max(pipe_.peak_slots, static_cast<int32_t>(loading_.size() + (computing_ ? 1 : 0)));
}

}  // namespace moeflow

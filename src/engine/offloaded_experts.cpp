#include "engine/offloaded_experts.h"

#include <algorithm>

#include "engine/moe_layer.h"
#include "experts/reroute.h"
#include "base/error.h"

namespace moeflow {

OnMiss parse_on_miss(const std::string& s) {
  if (s == "load") return OnMiss::Load;
  if (s == "reroute") return OnMiss::Reroute;
  if (s == "host-compute") return OnMiss::HostCompute;
  throw InputError("--on-miss '" + s + "': expected load (lossless), reroute (lossy) or host-compute (lossless; a GPU backend)");
}

const char* on_miss_name(OnMiss m) {
  switch (m) {
    case OnMiss::Reroute: return "reroute";
    case OnMiss::HostCompute: return "host-compute";
    default: return "load";
  }
}

std::vector<float> prompt_embedding(const Model& model, const std::vector<int32_t>& tokens) {
  const MatrixRef& emb = model.weights().tok_embd;
  const int64_t D = emb.cols;
  std::vector<float> sum(static_cast<size_t>(D), 0.0f), row(static_cast<size_t>(D));
  int64_t n = 0;
  for (int32_t t : tokens) {
    if (t < 0 || t >= emb.rows) continue;
    dequantize_row(emb.dtype, emb.data + emb.row_bytes() * static_cast<size_t>(t), row.data(), D);
    for (int64_t i = 0; i < D; ++i) sum[static_cast<size_t>(i)] += row[static_cast<size_t>(i)];
    ++n;
  }
  if (n > 0)
    for (float& v : sum) v /= static_cast<float>(n);
  return sum;
}

OffloadedExperts::OffloadedExperts(const ModelConfig& config, const ExpertStore& store, ExpertCache& cache,
                                   OnMiss on_miss, const Transport* transport)
    : config_(config), store_(store), cache_(cache), policy_(cache.policy()), protocol_(cache), on_miss_(on_miss),
      transport_(transport) {}

void OffloadedExperts::begin_request(const RequestInfo& info) {
  if (running_.count(info.id)) end_request(info.id);
  running_.insert(info.id);
  policy_.begin_request(info);
}

void OffloadedExperts::end_request(int64_t id) {
  if (running_.erase(id)) policy_.end_request(id);
}

void OffloadedExperts::end_request() {
  while (!running_.empty()) end_request(*running_.begin());
}

void OffloadedExperts::begin_step(const StepTokens& step) {
  // A request the caller did not announce starts with the step that first carries it.
  for (int64_t t = 0; t < step.size(); ++t)
    if (!running_.count(step.requests[t])) {
      int64_t e = t;
      while (e < step.size() && step.requests[e] == step.requests[t]) ++e;
      begin_request(RequestInfo{step.requests[t], std::vector<int32_t>(step.tokens.begin() + t, step.tokens.begin() + e), {}, {}});
    }
  // A step with a chunk of several tokens of one sequence, or a first position, is
  // prompt processing.
  bool prefill = step.n_single < step.size();
  for (int64_t p : step.pos) prefill = prefill || p == 0;
  policy_.begin_iteration(prefill ? Phase::Prefill : Phase::Decode, iter_);
}

void OffloadedExperts::end_step() {
  policy_.end_iteration();
  ++iter_;
}

void OffloadedExperts::routed(const LayerRouting& r) { policy_.routed(r); }

void OffloadedExperts::reroute(LayerRouting& r) {
  const std::vector<int32_t> res = cache_.resident_experts(static_cast<int32_t>(r.layer));
  // The engine's routing always carries probabilities; the fallback is never asked.
  for (int64_t t : reroute_to_resident(r, res, [](int32_t) { return 0.0; }, &rerouted_)) reweight_token(config_, r, t);
}

void OffloadedExperts::prepare_layer(LayerRouting& r) {
  cache_.poll();
  if (on_miss_ == OnMiss::Reroute) reroute(r);
}

void OffloadedExperts::run_experts(int32_t layer, const std::vector<int32_t>& needed, const ExpertCompute& compute) {
  if (on_miss_ == OnMiss::HostCompute) {
    // Resident experts through the protocol (hits, the policy's prefetches); then each
    // missing one is counted as a miss, starts loading in the background (ahead of every
    // prefetch, behind demands: the cache keeps up with what tokens use, and no later
    // demand waits behind it) and computes on the CPU from the host copy meanwhile.
    constexpr double kLoadBehindHostCompute = 1e200;
    resident_.clear();
    missing_.clear();
    for (int32_t e : needed) (cache_.resident({layer, e}) ? resident_ : missing_).push_back(e);
    protocol_.run(layer, resident_, [&](int32_t e, const uint8_t* buf) { compute(e, store_.matrices({layer, e}, buf)); });
    for (int32_t e : missing_) {
      cache_.note_served_elsewhere({layer, e});
      cache_.prefetch({layer, e}, kLoadBehindHostCompute);
    }
    for (int32_t e : missing_) {
      compute(e, store_.matrices({layer, e}, transport_->host_copy({layer, e})));
      ++host_computed_;
    }
    return;
  }
  protocol_.run(layer, needed, [&](int32_t e, const uint8_t* buf) { compute(e, store_.matrices({layer, e}, buf)); });
}

}  // namespace moeflow

#include "sim/simulator.h"

#include <algorithm>
#include <functional>
#include <filesystem>
#include <map>

#include "experts/layer_protocol.h"
#include "experts/reroute.h"
#include "base/error.h"
#include "policy/belady.h"
#include "policy/policy_factory.h"

namespace moeflow {

namespace {

// The router output of one traced layer as the engine would have produced it:
// dropped rows are skipped, missing weights become uniform, probabilities stay empty
// unless the trace has them, and so does the lookahead routing (the reader checked it
// has a row exactly where experts has one).
LayerRouting to_routing(const TraceRecord& r, int32_t layer, int32_t n_expert, int32_t top_k) {
  LayerRouting out;
  out.layer = layer;
  out.n_expert = n_expert;
  out.top_k = top_k;
  out.lookahead_depth = r.has_lookahead ? r.lookahead_depth : 0;
  bool all_probs = r.has_probs;
  for (size_t t = 0; t < r.experts.size(); ++t) {
    if (r.experts[t].empty()) continue;
    out.experts.insert(out.experts.end(), r.experts[t].begin(), r.experts[t].end());
    if (r.has_weights && t < r.weights.size() && r.weights[t].size() == r.experts[t].size())
      out.weights.insert(out.weights.end(), r.weights[t].begin(), r.weights[t].end());
    else
      out.weights.insert(out.weights.end(), r.experts[t].size(), 1.0f / static_cast<float>(top_k));
    if (all_probs && t < r.probs.size() && r.probs[t].size() == static_cast<size_t>(n_expert))
      out.probs.insert(out.probs.end(), r.probs[t].begin(), r.probs[t].end());
    else
      all_probs = false;
    for (int32_t h = 0; h < out.lookahead_depth; ++h)
      out.lookahead.insert(out.lookahead.end(), r.lookahead[t][static_cast<size_t>(h)].begin(),
                           r.lookahead[t][static_cast<size_t>(h)].end());
    ++out.n_tok;
  }
  if (!all_probs) out.probs.clear();
  if (out.n_tok == 0) out.lookahead_depth = 0;
  return out;
}

// Keeps the first `depth` layers of each token's lookahead.
void cut_lookahead(LayerRouting& r, int64_t depth) {
  if (depth >= r.lookahead_depth) return;
  std::vector<int32_t> cut;
  for (int64_t t = 0; t < r.n_tok; ++t)
    for (int64_t h = 1; h <= depth; ++h) cut.insert(cut.end(), r.lookahead_of(t, h), r.lookahead_of(t, h) + r.top_k);
  r.lookahead = std::move(cut);
  r.lookahead_depth = depth;
}

std::vector<int32_t> distinct(const std::vector<int32_t>& ids) {
  std::vector<int32_t> d(ids);
  std::sort(d.begin(), d.end());
  d.erase(std::unique(d.begin(), d.end()), d.end());
  return d;
}

// One step of the replay: the next iteration of each request in the batch (request
// index, iteration index), in the order the requests joined.
using SimStep = std::vector<std::pair<size_t, size_t>>;

// The replay's steps with `batch` requests in flight (continuous batching: a request
// that finishes leaves after its last step and the next one joins the step after).
// The learning requests [0, warmup) run before any scored one, so a policy learns
// from them alone. batch 1: the requests one after the other, as they were traced.
std::vector<SimStep> schedule(const Trace& t, size_t batch, size_t warmup) {
  std::vector<SimStep> steps;
  const size_t n = t.requests.size();
  for (const auto& [begin, end] : {std::pair<size_t, size_t>{0, std::min(warmup, n)}, {std::min(warmup, n), n}}) {
    std::vector<std::pair<size_t, size_t>> slots;  // (request, next iteration)
    size_t next = begin;
    while (true) {
      while (slots.size() < batch && next < end) {
        if (!t.requests[next].iterations.empty()) slots.push_back({next, 0});
        ++next;
      }
      if (slots.empty()) break;
      steps.push_back(slots);
      for (auto& s : slots) ++s.second;
      slots.erase(std::remove_if(slots.begin(), slots.end(),
                                 [&](const auto& s) { return s.second >= t.requests[s.first].iterations.size(); }),
                  slots.end());
    }
  }
  return steps;
}

// A step's routing of one layer: its requests' token rows one after the other, each
// token tagged with its request.
LayerRouting merged_routing(const Trace& t, const SimStep& step, int32_t layer) {
  LayerRouting out;
  out.layer = layer;
  out.n_expert = t.n_expert;
  out.top_k = t.top_k;
  bool probs = true;
  // The step's lookahead reaches as far as that of every request in it (none if one
  // request's record has none).
  std::vector<LayerRouting> parts;
  int64_t depth = -1;
  for (const auto& [ri, ii] : step) {
    parts.push_back(to_routing(t.requests[ri].iterations[ii].layers[static_cast<size_t>(layer)], layer, t.n_expert, t.top_k));
    if (parts.back().n_tok > 0) depth = depth < 0 ? parts.back().lookahead_depth : std::min(depth, parts.back().lookahead_depth);
  }
  out.lookahead_depth = std::max<int64_t>(depth, 0);
  size_t part = 0;
  for (const auto& [ri, ii] : step) {
    const TraceRequest& rq = t.requests[ri];
    LayerRouting& r = parts[part++];
    cut_lookahead(r, out.lookahead_depth);
    out.lookahead.insert(out.lookahead.end(), r.lookahead.begin(), r.lookahead.end());
    out.experts.insert(out.experts.end(), r.experts.begin(), r.experts.end());
    out.weights.insert(out.weights.end(), r.weights.begin(), r.weights.end());
    probs = probs && (r.n_tok == 0 || !r.probs.empty());
    out.probs.insert(out.probs.end(), r.probs.begin(), r.probs.end());
    out.requests.insert(out.requests.end(), static_cast<size_t>(r.n_tok), rq.id);
    out.n_tok += r.n_tok;
  }
  if (!probs) out.probs.clear();
  return out;
}

// Every layer step of the replay, in order (what Belady needs to know).
std::vector<LayerStep> replay_steps(const Trace& t, const std::vector<SimStep>& plan) {
  std::vector<LayerStep> steps;
  for (const SimStep& step : plan)
    for (int32_t l = 0; l < t.n_layer; ++l) {
      const LayerRouting r = merged_routing(t, step, l);
      if (r.n_tok > 0) steps.push_back({l, distinct(r.experts)});
    }
  return steps;
}

}  // namespace

ExpertGeometry sim_geometry(const Trace& trace, const ModelProfile& model) {
  if (model.n_expert != trace.n_expert || model.top_k != trace.top_k)
    throw InputError("model profile " + model.name + " has " + std::to_string(model.n_expert) + " experts top-" +
                     std::to_string(model.top_k) + " but the trace " + trace.path + " has " +
                     std::to_string(trace.n_expert) + " top-" + std::to_string(trace.top_k));
  if (trace.n_layer > model.n_layer)
    throw InputError("the trace " + trace.path + " has " + std::to_string(trace.n_layer) + " layers, the model profile " +
                     model.name + " only " + std::to_string(model.n_layer));
  return ExpertGeometry::uniform(trace.n_layer, trace.n_expert, trace.top_k, model.expert_bytes);
}

SimResult simulate(const Trace& trace, const ModelProfile& model, const HardwareProfile& hw, const SimOptions& opt,
                   std::unique_ptr<ExpertPolicy> policy) {
  const ExpertGeometry g = sim_geometry(trace, model);
  if (opt.policy == "belady" && !policy) {
    // The bound is the best of the oracles: demand-only MIN, MIN with conservative
    // oracle prefetching (never below MIN; better when prefetches land in time), and
    // the eager variant (belady.h).
    SimOptions o = opt;
    std::vector<SimResult> runs;
    std::string note = "belady = the best of";
    for (const char* name : BeladyPolicy::kNames) {
      o.policy = name;
      runs.push_back(simulate(trace, model, hw, o));
      note += std::string(runs.size() > 1 ? "," : "") + " " + name + " (" +
              std::to_string(100 * runs.back().hit_rate).substr(0, 5) + "%)";
    }
    // The most hits; among equal hit rates, the shortest TPOT (prefetches that land).
    SimResult best = *std::max_element(runs.begin(), runs.end(), [](const SimResult& a, const SimResult& b) {
      return a.hit_rate != b.hit_rate ? a.hit_rate < b.hit_rate : a.tpot_seconds > b.tpot_seconds;
    });
    best.notes.push_back(note);
    best.policy = "belady";
    return best;
  }
  if (opt.batch < 1) throw InputError("simulate: a batch of " + std::to_string(opt.batch) + " requests (at least 1)");
  const std::vector<SimStep> plan = schedule(trace, opt.batch, opt.warmup_requests);
  SimResult res;
  res.policy = opt.policy;
  const uint64_t total = g.total_bytes();
  uint64_t budget = opt.cache_bytes ? opt.cache_bytes
                                    : static_cast<uint64_t>(opt.cache_fraction * static_cast<double>(total) + 0.5);
  budget = std::max(budget - budget % model.expert_bytes, g.min_budget());  // whole experts
  // DuoServe's k-slot mode (§5.1): the cache holds the k experts in use, whatever --cache says.
  if (opt.policy == "duoserve-k") {
    budget = g.min_budget();
    res.notes.push_back("duoserve-k: the cache holds top-k = " + std::to_string(g.top_k) + " experts (§5.1), not --cache");
  }
  res.cache_bytes = budget;
  res.cache_fraction = static_cast<double>(budget) / static_cast<double>(total);
  std::function<double()> clock_of;  // the simulated time, once the link exists
  if (!policy) {
    if (BeladyPolicy::Mode mode; BeladyPolicy::mode_of(opt.policy, mode)) {
      policy = std::make_unique<BeladyPolicy>(g, replay_steps(trace, plan), static_cast<int64_t>(budget / model.expert_bytes),
                                              mode);
    } else {
      PolicyOptions po;
      po.state_path = opt.policy_state;
      po.tasks_path = opt.tasks_path;
      // eMoE's sensitivity is per model: profiles/tasks/<model profile>.json when there
      // is one (written by `moeflow trace sensitivity --task`), else profiles/tasks.json.
      if (po.tasks_path.empty()) {
        const std::string own = profiles_dir() + "/tasks/" + model.name + ".json";
        std::error_code ec;
        if (std::filesystem::is_regular_file(own, ec)) po.tasks_path = own;
      }
      po.emoe_variant = opt.emoe_variant;
      po.emoe_top_l = opt.emoe_top_l;
      po.eamc_capacity = opt.eamc_capacity;
      po.budget_bytes = budget;  // eMoE derives its top-L per layer from it
      po.prediction_seconds = model.predictor_seconds;
      // fmoe-async: its matcher runs on the link's clock (the link is made below).
      po.clock = [&clock_of] { return clock_of ? clock_of() : 0.0; };
      po.fmoe_semantic_seconds = model.fmoe_semantic_seconds;
      po.fmoe_trajectory_seconds = model.fmoe_trajectory_seconds;
      po.fmoe_insert_seconds = model.fmoe_insert_seconds;
      policy = make_policy(opt.policy, g, po);
    }
  }
  if (policy->prediction_seconds() > 0)
    res.notes.push_back(policy->name() + ": its predictor's " + std::to_string(policy->prediction_seconds() * 1e3).substr(0, 5) +
                        " ms on the prediction stream hold each plan's prefetches (model profile predictor_seconds)");
  if (!trace.has_probs) res.notes.push_back("no gate probabilities in the trace: policies saw top-k weights only");
  if (const int32_t want = policy->lookahead_depth(); want > trace.lookahead_depth)
    res.notes.push_back(policy->name() + " reads " + std::to_string(want) + " layers of lookahead routing, the trace carries " +
                        (trace.lookahead_depth ? std::to_string(trace.lookahead_depth) : std::string("none")) +
                        " (record it with `moeflow trace record --lookahead D`)");
  if (trace.dropped_rows) res.notes.push_back(std::to_string(trace.dropped_rows) + " dropped (token, layer) rows skipped");

  if (policy->wants_embedding() && trace.embedding_dim == 0)
    res.notes.push_back(policy->name() + " matches on each iteration's embedding; the trace carries none "
                        "(record it with `moeflow trace record --embedding-dim N`)");

  SimulatedTransport link(g, hw.link);
  clock_of = [&link] { return link.now(); };
  ExpertCache cache(g, budget, link, *policy);
  LayerProtocol protocol(cache);
  std::vector<int64_t> popularity(g.bytes.size(), 0);  // for rerouting without probabilities
  double ttft_sum = 0, tpot_sum = 0;
  int64_t ttft_n = 0, tpot_n = 0;

  std::vector<double> t_request(trace.requests.size(), 0), prefill_end(trace.requests.size(), -1);
  bool learned = false;
  for (const SimStep& step : plan) {
    // Requests join: the first scored one ends the learning.
    for (const auto& [ri, ii] : step) {
      if (ii != 0) continue;
      if (opt.warmup_requests > 0 && ri >= opt.warmup_requests && !learned) {
        policy->finish_learning();
        learned = true;
      }
      const TraceRequest& rq = trace.requests[ri];
      RequestInfo info;
      info.id = rq.id;
      info.task = rq.task;
      if (rq.iterations[0].prefill) info.prompt = rq.iterations[0].tokens;
      policy->begin_request(info);
      t_request[ri] = link.now();
    }
    // The step is a prefill step when any of its requests prefills; it is scored when
    // it serves a scored request's decode (or any scored request, with score_prefill).
    bool prefill = false, scored_step = false;
    int64_t n_tokens = 0;
    for (const auto& [ri, ii] : step) {
      const TraceIteration& it = trace.requests[ri].iterations[ii];
      prefill = prefill || it.prefill;
      if (ri >= opt.warmup_requests && (!it.prefill || opt.score_prefill)) scored_step = true;
      n_tokens += std::max<int64_t>(it.n_tokens(), 1);
    }
    const Phase phase = prefill ? Phase::Prefill : Phase::Decode;
    policy->begin_iteration(phase, trace.requests[step[0].first].iterations[step[0].second].iter);
    const CacheCounters before = cache.counters();
    const double t0 = link.now();
    // The step's embeddings, known before its first layer (the engine's order too).
    std::vector<LayerRouting::StepEmbedding> embeddings;
    if (policy->wants_embedding())
      for (const auto& [ri, ii] : step)
        if (const TraceIteration& it = trace.requests[ri].iterations[ii]; !it.embedding.empty())
          embeddings.push_back({trace.requests[ri].id, it.embedding});
    protocol.begin_step(embeddings);
    bool first_layer = true;
    for (int32_t l = 0; l < trace.n_layer; ++l) {
      LayerRouting r = merged_routing(trace, step, l);
      link.advance(model.dense_seconds(n_tokens));
      if (r.n_tok == 0) continue;
      // The step's embeddings go with its first routed layer too, as in the engine.
      if (first_layer) r.embeddings = embeddings;
      first_layer = false;
      policy->routed(r);
      if (scored_step) {
        // The (token, slot) pairs of the scored requests' scored phases.
        for (const auto& [ri, ii] : step) {
          const TraceIteration& it = trace.requests[ri].iterations[ii];
          if (ri >= opt.warmup_requests && (!it.prefill || opt.score_prefill))
            res.scored_slots += static_cast<uint64_t>(
                to_routing(it.layers[static_cast<size_t>(l)], l, g.n_expert, g.top_k).n_tok * g.top_k);
        }
      }
      if (opt.reroute) {
        // Traces without probabilities rank resident experts by their popularity so far.
        uint64_t n = 0;
        reroute_to_resident(r, cache.resident_experts(l),
                            [&](int32_t x) { return static_cast<double>(popularity[static_cast<size_t>(g.index({l, x}))]); },
                            &n);
        if (scored_step) res.rerouted_slots += n;
      }
      std::map<int32_t, int64_t> tokens_of;
      for (int32_t e : r.experts) {
        ++tokens_of[e];
        ++popularity[static_cast<size_t>(g.index({l, e}))];
      }
      std::vector<int32_t> needed;
      for (const auto& [e, n] : tokens_of) needed.push_back(e);
      protocol.run(l, needed, [&](int32_t e, const uint8_t*) { link.advance(model.expert_compute_seconds(tokens_of[e])); });
    }
    policy->end_iteration();
    const double dt = link.now() - t0;
    if (scored_step) res.counters += cache.counters() - before;
    for (const auto& [ri, ii] : step) {
      const TraceRequest& rq = trace.requests[ri];
      const bool scored_request = ri >= opt.warmup_requests;
      if (rq.iterations[ii].prefill) {
        prefill_end[ri] = link.now();
      } else if (scored_request) {
        tpot_sum += dt;  // the request's token waited for the whole step
        ++tpot_n;
        ++res.scored_decode_tokens;
      }
      if (ii + 1 < rq.iterations.size()) continue;
      policy->end_request(rq.id);  // its last iteration: it leaves
      if (!scored_request) continue;
      ++res.scored_requests;
      if (prefill_end[ri] >= 0) {
        ttft_sum += prefill_end[ri] - t_request[ri];
        ++ttft_n;
      }
    }
  }
  if (opt.warmup_requests >= trace.requests.size() && opt.warmup_requests > 0) policy->finish_learning();
  for (std::string& n : policy->notes()) res.notes.push_back(std::move(n));
  clock_of = nullptr;  // the link goes out of scope; a policy kept by the caller reads 0
  res.hit_rate = res.counters.hit_rate();
  res.prefetch_accuracy = res.counters.prefetch_hit_rate();
  const uint64_t accesses = res.counters.hits + res.counters.misses;
  res.coverage = accesses ? static_cast<double>(res.counters.hits + res.counters.late_prefetches) / static_cast<double>(accesses) : 0;
  res.stall_seconds = res.counters.stall_seconds;
  res.ttft_seconds = ttft_n ? ttft_sum / static_cast<double>(ttft_n) : 0;
  res.tpot_seconds = tpot_n ? tpot_sum / static_cast<double>(tpot_n) : 0;
  res.total_seconds = link.now();
  res.bytes_moved = res.counters.bytes_read;
  res.peak_bytes = cache.counters().peak_bytes;
  res.pipeline = protocol.pipeline();
  return res;
}

}  // namespace moeflow

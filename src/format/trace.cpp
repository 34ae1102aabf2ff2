#include "format/trace.h"

#include <algorithm>
#include <map>

#include "base/error.h"

namespace moeflow {

int64_t TraceIteration::n_tokens() const {
  size_t n = 0;
  for (const TraceRecord& r : layers) n = std::max(n, r.experts.size());
  return static_cast<int64_t>(n);
}

Trace group_trace(const std::vector<TraceRecord>& records, const std::string& path) {
  Trace t;
  t.path = path;
  std::map<int64_t, size_t> req_index;                    // request id -> position
  std::vector<std::map<int64_t, TraceIteration>> iters;  // per request, by iter
  for (const TraceRecord& r : records) {
    const std::string where = path + ": record of request " + std::to_string(r.request) + ", iter " +
                              std::to_string(r.iter) + ", layer " + std::to_string(r.layer);
    if (t.n_expert == 0) {
      t.n_expert = r.num_experts;
      t.top_k = r.top_k;
      t.model = r.model;
    } else if (r.num_experts != t.n_expert || r.top_k != t.top_k) {
      throw InputError(where + ": num_experts/top_k " + std::to_string(r.num_experts) + "/" + std::to_string(r.top_k) +
                       " differ from the first record's " + std::to_string(t.n_expert) + "/" + std::to_string(t.top_k));
    } else if (r.model != t.model) {
      throw InputError(where + ": model '" + r.model + "' differs from the first record's '" + t.model +
                       "' (one trace holds one model's routing)");
    }
    t.n_layer = std::max(t.n_layer, r.layer + 1);
    t.has_weights |= r.has_weights;
    t.has_probs |= r.has_probs;
    t.lookahead_depth = std::max(t.lookahead_depth, r.lookahead_depth);
    if (!r.embedding.empty()) {
      const auto dim = static_cast<int64_t>(r.embedding.size());
      if (t.embedding_dim == 0) t.embedding_dim = dim;
      if (dim != t.embedding_dim)
        throw InputError(where + ": an embedding of " + std::to_string(dim) + " numbers, the first record's has " +
                         std::to_string(t.embedding_dim));
    }
    auto [it, fresh] = req_index.emplace(r.request, t.requests.size());
    if (fresh) {
      t.requests.push_back({r.request, r.task, {}});
      iters.emplace_back();
    }
    auto [iter_it, new_iter] = iters[it->second].try_emplace(r.iter);
    TraceIteration& ti = iter_it->second;
    if (!new_iter && ti.prefill != r.prefill)
      throw InputError(where + ": phase " + (r.prefill ? "prefill" : "decode") + ", but the iteration's earlier records say " +
                       (ti.prefill ? "prefill" : "decode"));
    for (const TraceRecord& earlier : ti.layers)
      if (earlier.layer == r.layer) throw InputError(where + ": appears twice (one record per request, iter and layer)");
    ti.iter = r.iter;
    ti.prefill = r.prefill;
    if (ti.tokens.empty()) ti.tokens = r.tokens;
    if (ti.embedding.empty()) ti.embedding = r.embedding;
    ti.layers.push_back(r);  // in file order; placed by layer below, once the layer count is checked
    ++t.n_records;
    for (const auto& row : r.experts) t.dropped_rows += row.empty() ? 1 : 0;
  }
  // Every iteration gets a slot per layer; a trace whose slots are mostly empty (one
  // record at layer 1000 beside single-layer iterations) would make every consumer
  // allocate tables for layers that do not exist. Real recorders write every layer of
  // an iteration, so more empty slots than records means the layers are misnumbered.
  uint64_t n_iterations = 0;
  for (const auto& m : iters) n_iterations += m.size();
  const uint64_t slots = n_iterations * static_cast<uint64_t>(t.n_layer);
  if (slots > 2 * static_cast<uint64_t>(t.n_records))
    throw InputError(path + ": " + std::to_string(t.n_records) + " records for " + std::to_string(n_iterations) +
                     " iterations x " + std::to_string(t.n_layer) +
                     " layers (the highest layer + 1): more than half the (iteration, layer) records are missing; "
                     "layers must be numbered 0..n_layer-1 and each iteration should record every layer");
  for (const auto& m : iters)
    for (const auto& [k, ti] : m)
      for (const TraceRecord& r : ti.layers)
        if (r.layer + r.lookahead_depth >= t.n_layer)
          throw InputError(path + ": record of request " + std::to_string(r.request) + ", iter " +
                           std::to_string(r.iter) + ", layer " + std::to_string(r.layer) + ": its lookahead covers " +
                           std::to_string(r.lookahead_depth) + " layers ahead, past the trace's last layer " +
                           std::to_string(t.n_layer - 1));
  for (size_t i = 0; i < t.requests.size(); ++i)
    for (auto& [k, ti] : iters[i]) {
      std::vector<TraceRecord> by_layer(static_cast<size_t>(t.n_layer));
      for (TraceRecord& r : ti.layers) by_layer[static_cast<size_t>(r.layer)] = std::move(r);
      ti.layers = std::move(by_layer);
      t.requests[i].iterations.push_back(std::move(ti));
    }
  return t;
}

Trace load_trace(const std::string& path) {
  Trace t = group_trace(read_trace_file(path), path);
  if (t.n_records == 0) throw InputError(path + ": the trace holds no records (empty file)");
  return t;
}

Trace slice_requests(const Trace& t, size_t begin, size_t end) {
  Trace s = t;
  s.requests.assign(t.requests.begin() + static_cast<int64_t>(std::min(begin, t.requests.size())),
                    t.requests.begin() + static_cast<int64_t>(std::min(end, t.requests.size())));
  return s;
}

}  // namespace moeflow

// A routing trace in memory, grouped the way policies and the simulator replay it:
// requests in file order, each with its iterations in order, each with one record
// per layer. Built from the interchange format (format/routing_trace.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "format/routing_trace.h"

namespace moeflow {

struct TraceIteration {
  int64_t iter = 0;
  bool prefill = false;
  std::vector<int32_t> tokens;
  std::vector<float> embedding;     // the iteration's semantic embedding, when a record carries one
  std::vector<TraceRecord> layers;  // index = layer; a layer with no record has no token rows
  int64_t n_tokens() const;         // most token rows of any layer
};

struct TraceRequest {
  int64_t id = 0;
  std::string task;
  std::vector<TraceIteration> iterations;
};

struct Trace {
  std::string model, path;
  int32_t n_layer = 0, n_expert = 0, top_k = 0;
  bool has_weights = false, has_probs = false;
  int32_t lookahead_depth = 0;  // most layers of lookahead any record carries (0: none)
  int64_t embedding_dim = 0;    // numbers in every record's embedding (0: none recorded)
  std::vector<TraceRequest> requests;
  int64_t n_records = 0, dropped_rows = 0;
};

// Reads and groups a trace. Throws InputError for malformed lines, for records that
// disagree on num_experts or top_k, for a trace with no records, and for one whose
// layer numbers leave more than half of the (iteration, layer) slots empty, for a
// lookahead that reaches past the trace's last layer, and for embeddings of different
// lengths.
Trace load_trace(const std::string& path);
Trace group_trace(const std::vector<TraceRecord>& records, const std::string& path);

// The requests of `t` whose index is in [begin, end) (for learn/measure splits).
Trace slice_requests(const Trace& t, size_t begin, size_t end);

}  // namespace moeflow

// Routing traces in the interchange format of DESIGN.md ("Traces"): JSON Lines, one
// object per (request, iteration, layer):
//   {"model","source","request","iter","phase":"prefill|decode","layer","num_experts",
//    "top_k","experts":[[ids per token]],"weights":[[...]]|null,"probs":[[...]]|null,
//    "tokens":[ids]?, "task":"..."?, "lookahead":[[[ids at layer+1],[ids at layer+2],...] per token]?,
//    "embedding_dim":N?, "embedding":[N numbers]?}
// "lookahead" (optional, written by `moeflow trace record --lookahead D`): per token,
// the top_k ids the routers of the next layers pick when applied to this layer's MoE
// input (engine/lookahead_routing.h), nearest layer first; every non-null row has the
// same number of layers (D, fewer near the last layer), and a row is null exactly when
// the token's experts row is.
// "embedding" (optional, written by `moeflow trace record --embedding-dim N` on each
// iteration's first layer): fMoE's semantic key (Eq. 4), the iteration's embedding-
// layer output averaged over its tokens, as N numbers (a fixed random projection of
// the model's width, engine/embedding_projection.h, or the row itself when N is the
// width); "embedding_dim" declares N, every embedding of a trace has the same N.
// Readers must accept what real recorders produce: a per-token row of experts or
// weights may be null (that (token, layer) record was dropped: kept as an empty row,
// never invented), a request may lack iteration 0, probs may be null.
#pragma once
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace moeflow {

struct TraceRecord {
  std::string model, source, task;
  int64_t request = 0;
  int64_t iter = 0;
  bool prefill = false;
  int32_t layer = 0;
  int32_t num_experts = 0;
  int32_t top_k = 0;
  // Per token: top_k ids best first, or empty when the recorder dropped the row.
  std::vector<std::vector<int32_t>> experts;
  // Per token: the weights of those ids, or empty (dropped row, or no weights at all).
  std::vector<std::vector<float>> weights;
  // Per token: the full gate distribution, or empty (most traces have none).
  std::vector<std::vector<float>> probs;
  std::vector<int32_t> tokens;  // token ids of the iteration, when recorded
  // Per token, per layer ahead (layer+1 first): top_k distinct ids; empty rows where
  // the experts row is empty. Empty when not recorded.
  std::vector<std::vector<std::vector<int32_t>>> lookahead;
  int32_t lookahead_depth = 0;  // layers ahead in every non-empty row (0: no lookahead)
  bool has_weights = false, has_probs = false, has_lookahead = false;
  // The iteration's semantic embedding (empty: not recorded on this record).
  std::vector<float> embedding;
};

// Bounds on a record's layer and num_experts: the layer cap is the model's
// (model/model_config.h kMaxLayers); 4096 experts is far above any released model and
// keeps the tables of trace consumers (layers x experts) small.
constexpr int64_t kMaxTraceLayers = 1024;
constexpr int64_t kMaxTraceExperts = 4096;
// Layers of lookahead a record may carry (the recorder offers 1..3).
constexpr int64_t kMaxTraceLookahead = 8;
// Numbers in a record's embedding (the widest released models are ~16K wide).
constexpr int64_t kMaxTraceEmbedding = 65536;

// Parses one line; `where` (file:line) prefixes every error. Throws InputError naming
// the field that is missing, mistyped or out of range.
TraceRecord parse_trace_line(const std::string& line, const std::string& where);
std::string format_trace_line(const TraceRecord& r);

// Calls `fn` for each record of a .jsonl file in order (blank lines skipped).
void read_trace_file(const std::string& path, const std::function<void(const TraceRecord&)>& fn);
std::vector<TraceRecord> read_trace_file(const std::string& path);

}  // namespace moeflow

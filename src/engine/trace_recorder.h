// Records routing while the engine runs (`--trace out.jsonl`): one interchange-format
// line per (request, iteration, layer) with the top-k ids, their weights, the full gate
// probabilities and the iteration's token ids. A step that carries several requests'
// tokens gives each of them its own line per layer; each request counts its own
// iterations. With set_lookahead(D) each line also carries the lookahead routing of the
// next D layers (engine/lookahead_routing.h), D router products more per layer while
// recording. With set_embedding_dim(N) each iteration's first line carries its
// semantic embedding (fMoE's Eq. 4) in N numbers. Weights and probabilities are rounded
// to `decimals` (5 by default), which keeps traces small and is far below any
// policy's sensitivity.
#pragma once
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/atomic_file.h"
#include "engine/expert_source.h"
#include "format/routing_trace.h"

namespace moeflow {

class TraceRecorder final : public ForwardListener {
 public:
  // Throws InputError if the file cannot be created. A new trace is written to a
  // temporary beside `path` and replaces it only at finish() (or when the recorder is
  // destroyed other than by an exception): a run that fails or is killed leaves the
  // previous file as it was (base/atomic_file.h). With append, lines go straight to the
  // end of `path`, which must be a regular file (or absent), never a link.
  TraceRecorder(const std::string& path, std::string model_name, int decimals = 5, bool append = false);
  ~TraceRecorder() override;
  // Makes the trace durable under its name; throws InputError if that fails.
  void finish();

  // Labels a request's iterations with its task; its iterations restart at 0. The
  // trace names it `trace_id` (default: its id in the steps).
  void begin_request(int64_t request, const std::string& task, int64_t trace_id = -1);
  // Forgets a finished request.
  void end_request(int64_t request);

  // Records the next `depth` layers' lookahead routing on each line (0: none).
  // REQUIRES: 0 <= depth <= kMaxTraceLookahead.
  void set_lookahead(int32_t depth) { lookahead_ = depth; }
  int32_t lookahead_depth() const override { return lookahead_; }
  // Records each iteration's semantic embedding (LayerRouting::embeddings) on its first
  // layer's line, projected to `dim` numbers (engine/embedding_projection.h; the row
  // itself when dim >= the model's width); 0: none.
  void set_embedding_dim(int64_t dim) { embedding_dim_ = dim; }
  bool wants_embedding() const override { return embedding_dim_ > 0; }

  void begin_step(const StepTokens& step) override;
  void routed(const LayerRouting& r) override;
  void end_step() override;

  int64_t lines_written() const { return lines_; }

 private:
  void write_line(const std::string& line);

  std::unique_ptr<AtomicFile> whole_;  // a new trace
  std::FILE* f_ = nullptr;             // appending
  int uncaught_ = 0;                   // std::uncaught_exceptions() at construction
  std::string path_;
  TraceRecord rec_;
  struct RequestState {
    std::string task;
    int64_t iter = 0;
    int64_t trace_id = -1;
  };
  std::map<int64_t, RequestState> requests_;
  // The step's requests: [begin, end) token ranges (a request's tokens are contiguous).
  struct Span {
    int64_t request, begin, end;
    bool prefill;
  };
  std::vector<Span> spans_;
  const StepTokens* step_ = nullptr;
  int64_t lines_ = 0;
  double scale_ = 1e5;
  int32_t lookahead_ = 0;
  int64_t embedding_dim_ = 0;
};

}  // namespace moeflow

// Records routing while the engine runs (`--trace out.jsonl`): one interchange-format
// line per (request, iteration, layer) with the top-k ids, their weights, the full gate
// probabilities and the iteration's token ids. Weights and probabilities are rounded
// to `decimals` (5 by default), which keeps traces small and is far below any
// policy's sensitivity.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "engine/expert_source.h"
#include "format/routing_trace.h"

namespace moeflow {

class TraceRecorder final : public ForwardListener {
 public:
  // Throws InputError if the file cannot be created.
  TraceRecorder(const std::string& path, std::string model_name, int decimals = 5, bool append = false);
  ~TraceRecorder() override;

  // Labels the following iterations; iterations restart at 0.
  void begin_request(int64_t request, const std::string& task);

  void begin_iteration(const int32_t* tokens, int64_t n, int64_t pos) override;
  void routed(const LayerRouting& r) override;
  void end_iteration() override;

  int64_t lines_written() const { return lines_; }

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
  TraceRecord rec_;
  int64_t iter_ = 0;
  int64_t lines_ = 0;
  double scale_ = 1e5;
};

}  // namespace moeflow

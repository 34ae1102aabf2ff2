#include "engine/trace_recorder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>

#include "base/error.h"
#include "engine/embedding_projection.h"

namespace moeflow {

TraceRecorder::TraceRecorder(const std::string& path, std::string model_name, int decimals, bool append)
    : path_(path), scale_(std::pow(10.0, std::clamp(decimals, 1, 8))) {
  uncaught_ = std::uncaught_exceptions();
  if (append) {
    check_output_path(path, "trace");
    const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd >= 0) f_ = ::fdopen(fd, "a");
    if (!f_) {
      if (fd >= 0) ::close(fd);
      throw InputError(path + ": cannot append to the trace file: " + std::strerror(errno));
    }
  } else {
    whole_ = std::make_unique<AtomicFile>(path);
  }
  rec_.model = std::move(model_name);
  rec_.source = "moeflow";
  rec_.has_weights = true;
  rec_.has_probs = true;
}

TraceRecorder::~TraceRecorder() {
  if (f_) std::fclose(f_);
  if (!whole_) return;
  // Unwinding from an error: drop the temporary, keep whatever `path` held before.
  if (std::uncaught_exceptions() > uncaught_) return;
  try {
    whole_->commit();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moeflow: error: %s\n", e.what());
  }
}

void TraceRecorder::finish() {
  if (whole_) whole_->commit();
  if (f_ && std::fflush(f_) != 0) throw InputError(path_ + ": write failed: " + std::strerror(errno));
}

void TraceRecorder::begin_request(int64_t request, const std::string& task, int64_t trace_id) {
  requests_[request] = {task, 0, trace_id < 0 ? request : trace_id};
}

void TraceRecorder::end_request(int64_t request) { requests_.erase(request); }

void TraceRecorder::begin_step(const StepTokens& step) {
  step_ = &step;
  spans_.clear();
  for (int64_t t = 0; t < step.size();) {
    int64_t e = t + 1;
    while (e < step.size() && step.requests[e] == step.requests[t]) ++e;
    spans_.push_back({step.requests[t], t, e, e - t > 1 || step.pos[t] == 0});
    t = e;
  }
}

void TraceRecorder::write_line(const std::string& line) {
  if (whole_) {
    if (!whole_->stream().write(line.data(), static_cast<std::streamsize>(line.size())))
      throw InputError(path_ + ": write failed");
  } else if (std::fwrite(line.data(), 1, line.size(), f_) != line.size()) {
    throw InputError(path_ + ": write failed: " + std::strerror(errno));
  }
  ++lines_;
}

void TraceRecorder::routed(const LayerRouting& r) {
  const int64_t K = r.top_k, E = r.n_expert;
  auto round = [this](float v) { return static_cast<float>(std::round(static_cast<double>(v) * scale_) / scale_); };
  rec_.layer = static_cast<int32_t>(r.layer);
  rec_.num_experts = static_cast<int32_t>(E);
  rec_.top_k = static_cast<int32_t>(K);
  rec_.has_probs = !r.probs.empty();
  // The forward pass computes the most any listener asks for: keep this recorder's.
  const int64_t depth = std::min<int64_t>(r.lookahead_depth, lookahead_);
  rec_.has_lookahead = depth > 0;
  rec_.lookahead_depth = static_cast<int32_t>(depth);
  for (const Span& sp : spans_) {
    auto [it, fresh] = requests_.try_emplace(sp.request, RequestState{"", 0, sp.request});
    const RequestState& st = it->second;
    rec_.request = st.trace_id;
    rec_.task = st.task;
    rec_.iter = st.iter;
    rec_.prefill = sp.prefill;
    rec_.tokens.assign(step_->tokens.begin() + sp.begin, step_->tokens.begin() + sp.end);
    const size_t n = static_cast<size_t>(sp.end - sp.begin);
    rec_.experts.assign(n, {});
    rec_.weights.assign(n, {});
    rec_.probs.assign(n, {});
    rec_.lookahead.assign(depth > 0 ? n : 0, {});
    for (int64_t t = sp.begin; t < sp.end; ++t) {
      const size_t i = static_cast<size_t>(t - sp.begin);
      rec_.experts[i].assign(r.experts.begin() + t * K, r.experts.begin() + (t + 1) * K);
      for (int64_t k = 0; k < K; ++k) rec_.weights[i].push_back(round(r.weights[static_cast<size_t>(t * K + k)]));
      if (rec_.has_probs)
        for (int64_t e = 0; e < E; ++e) rec_.probs[i].push_back(round(r.probs[static_cast<size_t>(t * E + e)]));
      for (int64_t h = 1; h <= depth; ++h)
        rec_.lookahead[i].emplace_back(r.lookahead_of(t, h), r.lookahead_of(t, h) + K);
    }
    rec_.embedding.clear();
    if (embedding_dim_ > 0)
      for (const LayerRouting::StepEmbedding& e : r.embeddings)
        if (e.request == sp.request) {
          rec_.embedding = project_embedding(e.values, embedding_dim_);
          for (float& v : rec_.embedding) v = round(v);
        }
    write_line(format_trace_line(rec_) + "\n");
  }
}

void TraceRecorder::end_step() {
  for (const Span& sp : spans_) ++requests_[sp.request].iter;
  step_ = nullptr;
  if (f_) std::fflush(f_);
}

}  // namespace moeflow

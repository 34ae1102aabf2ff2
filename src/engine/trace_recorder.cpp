#include "engine/trace_recorder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>

#include "base/error.h"

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

void TraceRecorder::begin_request(int64_t request, const std::string& task) {
  rec_.request = request;
  rec_.task = task;
  iter_ = 0;
}

void TraceRecorder::begin_iteration(const int32_t* tokens, int64_t n, int64_t pos) {
  rec_.iter = iter_;
  rec_.prefill = n > 1 || pos == 0;
  rec_.tokens.assign(tokens, tokens + n);
}

void TraceRecorder::routed(const LayerRouting& r) {
  const int64_t K = r.top_k, E = r.n_expert;
  auto round = [this](float v) { return static_cast<float>(std::round(static_cast<double>(v) * scale_) / scale_); };
  rec_.layer = static_cast<int32_t>(r.layer);
  rec_.num_experts = static_cast<int32_t>(E);
  rec_.top_k = static_cast<int32_t>(K);
  rec_.experts.assign(static_cast<size_t>(r.n_tok), {});
  rec_.weights.assign(static_cast<size_t>(r.n_tok), {});
  rec_.probs.assign(static_cast<size_t>(r.n_tok), {});
  for (int64_t t = 0; t < r.n_tok; ++t) {
    auto& ids = rec_.experts[static_cast<size_t>(t)];
    auto& w = rec_.weights[static_cast<size_t>(t)];
    auto& p = rec_.probs[static_cast<size_t>(t)];
    ids.assign(r.experts.begin() + t * K, r.experts.begin() + (t + 1) * K);
    for (int64_t k = 0; k < K; ++k) w.push_back(round(r.weights[static_cast<size_t>(t * K + k)]));
    if (!r.probs.empty())
      for (int64_t e = 0; e < E; ++e) p.push_back(round(r.probs[static_cast<size_t>(t * E + e)]));
  }
  rec_.has_probs = !r.probs.empty();
  const std::string line = format_trace_line(rec_) + "\n";
  if (whole_) {
    if (!whole_->stream().write(line.data(), static_cast<std::streamsize>(line.size())))
      throw InputError(path_ + ": write failed");
  } else if (std::fwrite(line.data(), 1, line.size(), f_) != line.size()) {
    throw InputError(path_ + ": write failed: " + std::strerror(errno));
  }
  ++lines_;
}

void TraceRecorder::end_iteration() {
  ++iter_;
  if (f_) std::fflush(f_);
}

}  // namespace moeflow

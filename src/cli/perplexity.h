// Perplexity of a model over a token stream (`moeflow perplexity`) and GGUF
// requantisation (`moeflow quantize`), as library functions so tests can call them.
#pragma once
#include "format/gguf.h"
#include <utility>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "model/model_weights.h"
#include "moeflow/engine.h"
#include "tensor/dtype.h"

namespace moeflow::cli {

struct PerplexityWindow {
  int64_t scored = 0;    // tokens scored in this window
  double nll = 0;        // their summed negative log-likelihood (nats)
};

struct PerplexityResult {
  int64_t n_ctx = 0;
  int64_t n_scored = 0;  // tokens scored in all
  double nll = 0;        // summed NLL (nats)
  double perplexity() const { return n_scored ? std::exp(nll / static_cast<double>(n_scored)) : 0.0; }
  std::vector<PerplexityWindow> windows;
};

// Splits `tokens` (the text, without BOS) into consecutive, non-overlapping windows.
// With bos >= 0 each window is [bos] + the next n_ctx-1 text tokens and every text
// token is scored (the first one from BOS alone); with bos < 0 a window is n_ctx text
// tokens and all but its first are scored. The last window may be shorter. Every
// window starts from an empty KV cache. `max_windows` > 0 stops after that many.
// `on_window(i, n_windows, window, running)` is called after each window.
// REQUIRES n_ctx >= 2. Throws InputError if there is nothing to score.
// Windows run on `engine` one sequence at a time (REQUIRES n_ctx <= its ctx_size),
// `batch` tokens a step (0: a whole window in one step; 1: a token a step, as decoding
// runs them, with its mat-vec arithmetic).
PerplexityResult compute_perplexity(
    Engine& engine, const std::vector<int32_t>& tokens, int64_t n_ctx, int32_t bos, int64_t max_windows = 0,
    const std::function<void(int64_t, int64_t, const PerplexityWindow&, const PerplexityResult&)>& on_window = {},
    int64_t batch = 0);

struct QuantizeStats {
  int64_t n_tensors = 0, n_converted = 0;
  uint64_t bytes_in = 0, bytes_out = 0;
};

// Rewrites every weight tensor of 2+ dimensions of `in` as `type` and writes `out`
// with all metadata copied (general.file_type updated). Kept as they are: 1-D
// tensors (norms), router weights (ffn_gate_inp, as llama.cpp does), and tensors
// whose row length is not a multiple of the target block size. Throws InputError on
// a bad input file or when in and out are the same file.
// `overrides` replace (or add) metadata keys after the copy, e.g. to fix a key a
// converter wrote wrongly without touching a tensor.
QuantizeStats quantize_model(const std::string& in, const std::string& out, DType type,
                             const std::function<void(const std::string&)>& log = {},
                             const std::vector<std::pair<std::string, gguf::Value>>& overrides = {});

// Parses llama.cpp's --override-kv syntax KEY=TYPE:VALUE, TYPE one of str, int
// (i32), float (f32), bool (true/false). Throws UsageError naming what is wrong.
std::pair<std::string, gguf::Value> parse_override_kv(const std::string& spec);

}  // namespace moeflow::cli

// Greedy generation with a listener attached (a trace recorder): how the recorder tests
// produce what they then read back.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/generator.h"
#include "engine/transformer.h"
#include "kernels/cpu/thread_pool.h"

namespace moeflow::testing {

// n_predict greedy tokens after `prompt` on `model` (a 64-position cache, `threads`
// workers) as request `request`, `listener` seeing every step. The listener's own
// begin_request, if it has one, is the caller's.
inline void generate_greedy(const Model& model, ForwardListener& listener, int64_t request,
                            const std::vector<int32_t>& prompt, int n_predict, int threads = 1) {
  ThreadPool pool(threads);
  Transformer tf(model, &pool, 64);
  tf.set_request(request);
  tf.add_listener(&listener);
  GenerateOptions opt;
  opt.n_predict = n_predict;
  opt.stop_at_eog = false;
  opt.sampler.temperature = 0;
  generate(tf, prompt, opt, nullptr, nullptr);
}

}  // namespace moeflow::testing

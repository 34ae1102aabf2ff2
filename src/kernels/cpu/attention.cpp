#include "kernels/cpu/attention.h"

#include <cmath>
#include <vector>

#include "kernels/cpu/ops.h"

namespace moeflow::cpu {

void attention(const AttentionShape& s, const float* q, int64_t n_tok, int64_t pos0,
               const float* k_cache, const float* v_cache, float* out, ThreadPool* pool) {
  const int64_t group = s.n_head / s.n_head_kv;
  const int64_t q_stride = s.n_head * s.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const int64_t n_ctx = pos0 + n_tok;
  auto work = [&](int64_t begin, int64_t end, int) {
    std::vector<float> scores(static_cast<size_t>(n_ctx));
    for (int64_t job = begin; job < end; ++job) {
      const int64_t t = job / s.n_head, h = job % s.n_head;
      const int64_t kvh = h / group;
      const float* qh = q + t * q_stride + h * s.head_dim;
      const int64_t n_keys = pos0 + t + 1;
      for (int64_t p = 0; p < n_keys; ++p) {
        const float* k = k_cache + p * s.kv_stride + kvh * s.head_dim;
        float dot = 0;
        for (int64_t d = 0; d < s.head_dim; ++d) dot += qh[d] * k[d];
        scores[p] = dot * scale;
      }
      softmax(scores.data(), n_keys);
      float* o = out + t * q_stride + h * s.head_dim;
      for (int64_t d = 0; d < s.head_dim; ++d) o[d] = 0;
      for (int64_t p = 0; p < n_keys; ++p) {
        const float* v = v_cache + p * s.kv_stride + kvh * s.head_dim;
        const float w = scores[p];
        for (int64_t d = 0; d < s.head_dim; ++d) o[d] += w * v[d];
      }
    }
  };
  const int64_t jobs = n_tok * s.n_head;
  if (pool) pool->parallel_for(jobs, work);
  else work(0, jobs, 0);
}

}  // namespace moeflow::cpu

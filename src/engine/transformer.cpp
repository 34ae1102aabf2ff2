#include "engine/transformer.h"

#include <string>

#include "base/error.h"

namespace moeflow {

Transformer::Transformer(const Model& model, ThreadPool* pool, int64_t n_ctx)
    : Transformer(model, pool, n_ctx, default_kv_type(model)) {}

Transformer::Transformer(const Model& model, ThreadPool* pool, int64_t n_ctx, DType kv_type)
    : n_ctx_(n_ctx),
      backend_(pool),
      kv_(make_kv_pool(model, backend_, (n_ctx + KvBlockPool::kDefaultBlockLen - 1) / KvBlockPool::kDefaultBlockLen,
                       kv_type)),
      fwd_(model, backend_, kv_) {}

void Transformer::eval(const int32_t* tokens, int64_t n, bool all_logits, std::vector<float>& logits) {
  if (n <= 0) throw InputError("eval: no tokens to evaluate");
  if (pos_ + n > n_ctx_)
    throw InputError("context overflow: " + std::to_string(pos_ + n) + " positions needed, context size is " +
                     std::to_string(n_ctx_) + " (raise --ctx-size)");
  if (!kv_.reserve(blocks_, pos_ + n)) throw InputError("eval: KV cache exhausted");
  step_.clear();
  for (int64_t t = 0; t < n; ++t) {
    step_.tokens.push_back(tokens[t]);
    step_.pos.push_back(pos_ + t);
    step_.requests.push_back(request_);
    step_.blocks.push_back(blocks_.data());
    if (all_logits || t == n - 1) step_.logits_rows.push_back(t);
  }
  step_.n_single = n == 1 ? 1 : 0;
  fwd_.run(step_, logits);
  pos_ += n;
}

}  // namespace moeflow

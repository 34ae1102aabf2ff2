#include "engine/generator.h"

#include <algorithm>

#include "base/error.h"

namespace moeflow {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

void EngineSequenceSink::eval(const int32_t* tokens, int64_t n, bool all_logits, std::vector<float>& logits) {
  const int64_t p0 = pos(), V = n_vocab();
  batch_.clear();
  for (int64_t t = 0; t < n; ++t) batch_.push_back({seq_, tokens[t], p0 + t, all_logits || t == n - 1});
  e_.step(batch_);
  logits.clear();
  for (int64_t t = all_logits ? 0 : n - 1; t < n; ++t) {
    const float* l = e_.logits(static_cast<size_t>(t));
    logits.insert(logits.end(), l, l + V);
  }
}

GenerateResult generate(Transformer& tf, const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                        const std::function<bool(int32_t)>& is_eog,
                        const std::function<void(int32_t)>& on_token) {
  TransformerSink sink(tf);
  return generate(sink, prompt, opt, is_eog, on_token);
}

GenerateResult generate(TokenSink& tf, const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                        const std::function<bool(int32_t)>& is_eog,
                        const std::function<void(int32_t)>& on_token) {
  if (prompt.empty()) throw InputError("the prompt is empty: give at least one token");
  const int64_t V = tf.n_vocab();
  GenerateResult r;
  Sampler sampler(opt.sampler);
  sampler.add_prompt(prompt);
  std::vector<float> logits;
  auto keep = [&](const int32_t* toks, int64_t n) {
    r.fed_tokens.insert(r.fed_tokens.end(), toks, toks + n);
    if (opt.record_logits) r.logits.insert(r.logits.end(), logits.begin(), logits.end());
  };

  auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < prompt.size(); i += static_cast<size_t>(opt.prefill_chunk)) {
    const int64_t n = std::min<int64_t>(opt.prefill_chunk, static_cast<int64_t>(prompt.size() - i));
    tf.eval(prompt.data() + i, n, opt.record_logits, logits);
    keep(prompt.data() + i, n);
  }
  r.prompt_seconds = seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  const float* last = logits.data() + logits.size() - static_cast<size_t>(V);
  std::vector<float> cur(last, last + V);
  for (int64_t i = 0; i < opt.n_predict; ++i) {
    const int32_t tok = sampler.sample(cur.data(), V);
    r.generated.push_back(tok);
    if (on_token) on_token(tok);
    const bool stop = opt.stop_at_eog && is_eog && is_eog(tok);
    const bool more = i + 1 < opt.n_predict && !stop;
    if (!more && !opt.feed_last) break;
    if (tf.pos() >= tf.n_ctx()) break;
    tf.eval(&tok, 1, false, logits);
    ++r.gen_evals;
    keep(&tok, 1);
    cur.assign(logits.begin(), logits.end());
    if (!more) break;
  }
  r.gen_seconds = seconds_since(t0);
  return r;
}

}  // namespace moeflow

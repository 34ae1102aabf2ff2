// Prompt processing and token generation for one sequence: the loop the CLI, the
// benchmarks and the tests share, over a Transformer or a sequence of an Engine.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <vector>

#include "engine/sampler.h"
#include "engine/transformer.h"
#include "moeflow/engine.h"

namespace moeflow {

struct GenerateOptions {
  int64_t n_predict = 64;
  int64_t prefill_chunk = 512;  // prompt tokens per forward call
  bool stop_at_eog = true;
  bool record_logits = false;   // keep the logits of every position
  bool feed_last = false;       // also evaluate the last generated token (for --logits-out)
  SamplerOptions sampler;
};

struct GenerateResult {
  std::vector<int32_t> generated;
  std::vector<int32_t> fed_tokens;  // every token evaluated, in order
  std::vector<float> logits;        // [fed_tokens.size()][n_vocab] when record_logits
  double prompt_seconds = 0, gen_seconds = 0;
  int64_t gen_evals = 0;            // decode forward passes (for tokens/s)
};

// One sequence that takes tokens at its next positions.
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  // Evaluates n tokens at positions pos()..pos()+n-1; logits of the last token
  // (all_logits false) or of every one ([n][n_vocab]).
  virtual void eval(const int32_t* tokens, int64_t n, bool all_logits, std::vector<float>& logits) = 0;
  virtual int64_t pos() const = 0;
  virtual int64_t n_ctx() const = 0;
  virtual int64_t n_vocab() const = 0;
};

// A Transformer as a TokenSink.
class TransformerSink final : public TokenSink {
 public:
  explicit TransformerSink(Transformer& tf) : tf_(tf) {}
  void eval(const int32_t* t, int64_t n, bool all, std::vector<float>& l) override { tf_.eval(t, n, all, l); }
  int64_t pos() const override { return tf_.pos(); }
  int64_t n_ctx() const override { return tf_.n_ctx(); }
  int64_t n_vocab() const override { return tf_.model().config().n_vocab; }

 private:
  Transformer& tf_;
};

// A sequence of an Engine as a TokenSink (each eval one step of its own).
class EngineSequenceSink final : public TokenSink {
 public:
  EngineSequenceSink(Engine& engine, SeqId seq) : e_(engine), seq_(seq) {}
  void eval(const int32_t* tokens, int64_t n, bool all_logits, std::vector<float>& logits) override;
  int64_t pos() const override { return e_.sequence_length(seq_); }
  int64_t n_ctx() const override { return e_.ctx_size(); }
  int64_t n_vocab() const override { return e_.n_vocab(); }

 private:
  Engine& e_;
  SeqId seq_;
  std::vector<BatchToken> batch_;
};

// on_token is called with each generated id as soon as it is sampled.
GenerateResult generate(TokenSink& seq, const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                        const std::function<bool(int32_t)>& is_eog,
                        const std::function<void(int32_t)>& on_token);
GenerateResult generate(Transformer& tf, const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                        const std::function<bool(int32_t)>& is_eog,
                        const std::function<void(int32_t)>& on_token);

}  // namespace moeflow

// One sequence over the forward pass on the CPU backend: the convenience the tests use (generate, perplexity, the reference comparisons). It owns a KV block pool
// just large enough for n_ctx positions; the engine (include/moeflow/engine.h) runs
// many sequences over one shared pool through the same ForwardPass.
//
// Thread safety: eval calls are serial.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "engine/forward_pass.h"

namespace moeflow {

class Transformer {
 public:
  // REQUIRES: n_ctx >= 1. The KV cache holds n_ctx positions of default_kv_type(model)
  // or kv_type (F32, F16 or Q8_0) elements.
  Transformer(const Model& model, ThreadPool* pool, int64_t n_ctx);
  Transformer(const Model& model, ThreadPool* pool, int64_t n_ctx, DType kv_type);

  // Evaluates `n` tokens at positions pos()..pos()+n-1. Writes the logits of the last
  // token (all_logits=false) or of every token ([n][n_vocab]) into `logits`.
  // Throws InputError if a token id is out of range or the context would overflow.
  void eval(const int32_t* tokens, int64_t n, bool all_logits, std::vector<float>& logits);

  int64_t pos() const { return pos_; }
  int64_t n_ctx() const { return n_ctx_; }
  void reset() { pos_ = 0; }
  // The request id the sequence's tokens carry to listeners and policies (default 0).
  void set_request(int64_t id) { request_ = id; }
  void add_listener(ForwardListener* l) { fwd_.add_listener(l); }
  void set_expert_source(ExpertSource* s) { fwd_.set_expert_source(s); }
  uint64_t kv_bytes() const { return kv_.bytes(); }
  DType kv_type() const { return kv_.type(); }
  const Model& model() const { return fwd_.model(); }

 private:
  int64_t n_ctx_;
  CpuBackend backend_;
  KvBlockPool kv_;
  ForwardPass fwd_;
  std::vector<int32_t> blocks_;
  StepTokens step_;
  int64_t pos_ = 0;
  int64_t request_ = 0;
};

}  // namespace moeflow

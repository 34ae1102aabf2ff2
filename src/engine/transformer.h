// The forward pass of a MoE transformer over a KV cache: one call evaluates a block
// of tokens (a prefill chunk or one decode step) at the next positions.
//
// Thread safety: one Transformer per sequence; eval calls are serial.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/expert_source.h"
#include "engine/kv_cache.h"
#include "engine/moe_layer.h"
#include "kernels/cpu/thread_pool.h"
#include "model/model_weights.h"

namespace moeflow {

// The KV cache's element type when none is asked for: f16 when the model's key and
// value projections are quantised (their weights' rounding, ~1e-3 relative for q8_0,
// already exceeds f16's 2^-12, and decode streams half the cache bytes), else f32
// (f32 / f16 / bf16 models keep full precision).
DType default_kv_type(const Model& model);

class Transformer {
 public:
  // REQUIRES: n_ctx >= 1. The KV cache is allocated for n_ctx positions, of
  // default_kv_type(model) or kv_type (F32 or F16) elements.
  Transformer(const Model& model, ThreadPool* pool, int64_t n_ctx);
  Transformer(const Model& model, ThreadPool* pool, int64_t n_ctx, DType kv_type);

  // Evaluates `n` tokens at positions pos()..pos()+n-1. Writes the logits of the last
  // token (all_logits=false) or of every token ([n][n_vocab]) into `logits`.
  // Throws InputError if a token id is out of range or the context would overflow.
  void eval(const int32_t* tokens, int64_t n, bool all_logits, std::vector<float>& logits);

  int64_t pos() const { return pos_; }
  int64_t n_ctx() const { return kv_.capacity(); }
  void reset() { pos_ = 0; }
  // Listeners see every eval call and layer routing (not owned; must outlive evals).
  void add_listener(ForwardListener* l) { listeners_.push_back(l); }
  // Where experts come from (not owned; null: the mapped weights).
  void set_expert_source(ExpertSource* s) { source_ = s; }
  uint64_t kv_bytes() const { return kv_.bytes(); }
  DType kv_type() const { return kv_.type(); }
  const Model& model() const { return model_; }

 private:
  void attention_block(int64_t layer, int64_t n, std::vector<float>& x);
  void moe_block(int64_t layer, int64_t n, std::vector<float>& x);

  const Model& model_;
  ThreadPool* pool_;
  KvCache kv_;
  int64_t pos_ = 0;
  std::vector<ForwardListener*> listeners_;
  ExpertSource* source_ = nullptr;
  // Scratch reused across calls (sized for the largest block seen).
  std::vector<float> xn_, q_, k_, v_, attn_, proj_, router_;
  // cos, sin of the rotary angles of each position being evaluated (rot_dim floats per
  // position): computed once per eval, not once per layer (pow, cos and sin in double
  // for 32-64 angles cost ~2 us, 16 us of a 1.5 ms decode step on 8 layers).
  std::vector<float> rope_cs_;
  LayerRouting routing_;
};

}  // namespace moeflow

// The forward pass of a MoE transformer over a paged KV cache: one call evaluates a
// step, the tokens of any number of sequences (prefill chunks and decode tokens mixed,
// engine/step_tokens.h), and writes the logits of the tokens that want them.
//
// A sequence's results depend only on its own tokens and on how its own tokens were
// split into steps, never on the other sequences of a step: every dense and expert
// product runs a token alone in its sequence as a mat-vec and the others as a mat-mul
// (moe_layer.h), attention reads only the token's own sequence, and the step's
// tokens of all sequences share each weight read.
//
// Thread safety: one run at a time.
#pragma once
#include <cstdint>
#include <vector>

#include "engine/expert_source.h"
#include "engine/kv_block_pool.h"
#include "engine/lookahead_routing.h"
#include "engine/moe_layer.h"
#include "engine/step_products.h"
#include "engine/step_tokens.h"
#include "backend/backend.h"
#include "model/model_weights.h"

namespace moeflow {

// The KV cache's element type when none is asked for: f16 when the model's key and
// value projections are quantised (their weights' rounding, ~1e-3 relative for q8_0,
// already exceeds f16's 2^-12, and decode streams half the cache bytes), else f32
// (f32 / f16 / bf16 models keep full precision).
DType default_kv_type(const Model& model);

// What the KV cache holds per position and layer: `heads` rows of `k_width` key and
// `v_width` value elements (deepseek2: one latent row with its rope key, and the
// latent as the value; the others n_head_kv heads of head_dim each).
struct KvShape {
  int64_t heads = 0, k_width = 0, v_width = 0;
};
KvShape kv_shape(const ModelConfig& c);

// The layers one KV pool holds: every layer, or, where a model's sliding-window layers
// (gpt-oss's even ones) keep their rows in a pool of their own, the layers that attend
// to every position or the sliding ones.
enum class KvLayers { All, Full, Sliding };
// Layers `which` holds, and layer l's index among them (REQUIRES l is one of them).
int64_t kv_pool_layers(const ModelConfig& c, KvLayers which);
int64_t kv_pool_index(const ModelConfig& c, KvLayers which, int64_t l);

// A KV block pool shaped for `model` (kv_shape), holding the layers `which` names.
KvBlockPool make_kv_pool(const Model& model, Backend& backend, int64_t n_blocks, DType kv_type,
                         int64_t block_len = KvBlockPool::kDefaultBlockLen, KvLayers which = KvLayers::All);

class ForwardPass {
 public:
  // kv holds every layer, or, with a pool for the sliding-window layers (`sliding`,
  // KvLayers::Sliding; kv then KvLayers::Full), the others; a step's tokens then carry
  // a second block table (StepTokens::sliding_blocks).
  ForwardPass(const Model& model, Backend& backend, KvBlockPool& kv, KvBlockPool* sliding = nullptr);

  // Evaluates `step` and writes the logits of step.logits_rows into `logits`
  // ([rows][n_vocab]). Throws InputError for a token id outside the vocabulary or a
  // step that breaks StepTokens' layout.
  void run(const StepTokens& step, std::vector<float>& logits);

  // Listeners see every step and layer routing (not owned; must outlive runs).
  void add_listener(ForwardListener* l) { listeners_.push_back(l); }
  // Where experts come from (not owned; null: the mapped weights).
  void set_expert_source(ExpertSource* s) { source_ = s; }
  const Model& model() const { return model_; }
  KvBlockPool& kv() { return *kv_; }
  // Runs on other pools from now on (not owned; no step may hold blocks of the old).
  void set_kv(KvBlockPool& kv, KvBlockPool* sliding = nullptr);

 private:
  void check(const StepTokens& step) const;
  void attention_block(int64_t layer, const StepTokens& step, std::vector<float>& x);
  // Fills embeddings_ from x_ (the embedding layer's output) when wanted.
  void pool_embeddings(bool wanted, const StepTokens& step);
  void moe_block(int64_t layer, const StepTokens& step, std::vector<float>& x);
  // x += the layer's shared expert (gated when the model gates it) of the normalised
  // input in xn_.
  void shared_expert(const LayerWeights& L, const StepTokens& step, std::vector<float>& x);
  // deepseek2 (engine/forward_pass_mla.cpp): multi-head latent attention, and the
  // dense FFN of the layers before the first MoE one.
  void mla_attention_block(int64_t layer, const StepTokens& step, std::vector<float>& x);
  void dense_ffn_block(int64_t layer, const StepTokens& step, std::vector<float>& x);
  // x += a block's output proj_ (n rows), times the model's residual scale (Granite's;
  // 1 elsewhere, which leaves the sum as it was).
  void join_residual(int64_t n, std::vector<float>& x) const;
  // Where layer l's keys and values are: its pool, its index there, and which of a
  // token's block tables (and queries_) address them.
  struct LayerKv {
    KvBlockPool* pool;
    int64_t index;
    bool sliding;
  };
  LayerKv layer_kv(int64_t l) const;

  const Model& model_;
  Backend& backend_;
  KvBlockPool* kv_;
  KvBlockPool* sliding_ = nullptr;
  std::vector<ForwardListener*> listeners_;
  ExpertSource* source_ = nullptr;
  // Scratch reused across calls (sized for the largest step seen).
  std::vector<float> x_, xn_, q_, k_, v_, attn_, proj_, router_;
  std::vector<int64_t> shexp_slots_;
  std::vector<float> mla_a_, mla_q_, mla_heads_in_, mla_heads_out_;  // deepseek2's attention intermediates
  // cos, sin of the rotary angles of each token (rot_dim floats per token): computed
  // once per step, not once per layer.
  std::vector<float> rope_cs_;
  // YaRN's rotary frequencies (model/rope_yarn.h); empty: plain RoPE.
  std::vector<double> yarn_inv_freq_;
  std::vector<AttentionQuery> queries_, sliding_queries_;
  std::vector<Product> jobs_;
  LayerRouting routing_;
  // The step's lookahead depth (the most any listener or the source wants; 0: none).
  int32_t lookahead_depth_ = 0;
  LookaheadRouter lookahead_;
  // The step's embedding-layer output pooled per request (LayerRouting::embeddings),
  // when any listener or the source wants it; handed over with the first MoE layer.
  std::vector<LayerRouting::StepEmbedding> embeddings_;
};

}  // namespace moeflow

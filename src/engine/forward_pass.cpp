#include "engine/forward_pass.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "base/error.h"
#include "model/rope_yarn.h"

namespace moeflow {

DType default_kv_type(const Model& model) {
  const ModelWeights& w = model.weights();
  if (w.layers.empty()) return DType::F32;
  // deepseek2 caches what attn_kv_a_mqa gives.
  const MatrixRef& kv_a = w.layers.front().mla.wkv_a;
  const DType k = kv_a.data ? kv_a.dtype : w.layers.front().wk.dtype;
  const DType v = kv_a.data ? kv_a.dtype : w.layers.front().wv.dtype;
  return dtype_is_quantized(k) && dtype_is_quantized(v) ? DType::F16 : DType::F32;
}

KvShape kv_shape(const ModelConfig& c) {
  if (c.arch == Arch::DeepSeek2)  // one row per position: the latent and the rope key (forward_pass_mla.cpp)
    return {1, c.mla.kv_lora_rank + c.rot_dim, c.mla.kv_lora_rank};
  return {c.n_head_kv, c.head_dim, c.head_dim};
}

namespace {
bool pool_holds(const ModelConfig& c, KvLayers which, int64_t l) {
  return which == KvLayers::All || layer_slides(c, l) == (which == KvLayers::Sliding);
}
}  // namespace

int64_t kv_pool_layers(const ModelConfig& c, KvLayers which) { return kv_pool_index(c, which, c.n_layer); }

int64_t kv_pool_index(const ModelConfig& c, KvLayers which, int64_t l) {
  int64_t i = 0;
  for (int64_t j = 0; j < l; ++j) i += pool_holds(c, which, j);
  return i;
}

KvBlockPool make_kv_pool(const Model& model, Backend& backend, int64_t n_blocks, DType kv_type, int64_t block_len,
                         KvLayers which) {
  const ModelConfig& c = model.config();
  const KvShape s = kv_shape(c);
  return KvBlockPool(backend, kv_pool_layers(c, which), s.heads, s.k_width, n_blocks, block_len, kv_type, s.v_width);
}

ForwardPass::ForwardPass(const Model& model, Backend& backend, KvBlockPool& kv, KvBlockPool* sliding)
    : model_(model), backend_(backend) {
  const ModelConfig& c = model.config();
  if (c.yarn.factor > 0) yarn_inv_freq_ = yarn_inv_freq(c.yarn, c.rope_base, c.rot_dim);
  set_kv(kv, sliding);
}

void ForwardPass::set_kv(KvBlockPool& kv, KvBlockPool* sliding) {
  if (sliding && (sliding->block_len() != kv.block_len() || kv_pool_layers(model_.config(), KvLayers::Sliding) == 0))
    throw std::invalid_argument("moeflow: ForwardPass: a sliding-layer pool for a model without sliding layers");
  kv_ = &kv;
  sliding_ = sliding;
}

ForwardPass::LayerKv ForwardPass::layer_kv(int64_t l) const {
  const ModelConfig& c = model_.config();
  if (!sliding_) return {kv_, l, false};
  const bool slides = layer_slides(c, l);
  return {slides ? sliding_ : kv_, kv_pool_index(c, slides ? KvLayers::Sliding : KvLayers::Full, l), slides};
}

void ForwardPass::check(const StepTokens& s) const {
  const int64_t n = s.size();
  if (n <= 0) throw InputError("step: no tokens to evaluate");
  if (static_cast<int64_t>(s.pos.size()) != n || static_cast<int64_t>(s.requests.size()) != n ||
      static_cast<int64_t>(s.blocks.size()) != n || s.n_single < 0 || s.n_single > n ||
      static_cast<int64_t>(s.sliding_blocks.size()) != (sliding_ ? n : 0))
    throw InputError("step: tokens, positions, requests and block tables differ in length");
  const int64_t V = model_.config().n_vocab;
  for (int64_t t = 0; t < n; ++t) {
    if (s.tokens[t] < 0 || s.tokens[t] >= V)
      throw InputError("token id " + std::to_string(s.tokens[t]) + " at step position " + std::to_string(t) +
                       " is outside the vocabulary [0, " + std::to_string(V) + ")");
    if (s.pos[t] < 0 || !s.blocks[t] || (sliding_ && !s.sliding_blocks[t]))
      throw InputError("step: token " + std::to_string(t) + " has no KV position");
    const bool same = t > 0 && s.requests[t] == s.requests[t - 1];
    if (t < s.n_single ? same : (same ? s.pos[t] != s.pos[t - 1] + 1
                                      : t + 1 >= n || s.requests[t + 1] != s.requests[t]))
      throw InputError("step: token " + std::to_string(t) +
                       " breaks the layout (single tokens first, each sequence's tokens contiguous in position order)");
  }
  for (size_t i = 0; i < s.logits_rows.size(); ++i)
    if (s.logits_rows[i] < 0 || s.logits_rows[i] >= n || (i > 0 && s.logits_rows[i] <= s.logits_rows[i - 1]))
      throw InputError("step: logits rows must be ascending token indices");
}

void ForwardPass::run(const StepTokens& step, std::vector<float>& logits) {
  check(step);
  const ModelConfig& c = model_.config();
  const ModelWeights& w = model_.weights();
  const int64_t n = step.size(), D = c.n_embd;
  x_.resize(static_cast<size_t>(n * D));
  const size_t emb_row = w.tok_embd.row_bytes();
  for (int64_t t = 0; t < n; ++t)
    dequantize_row(w.tok_embd.dtype, w.tok_embd.data + emb_row * static_cast<size_t>(step.tokens[t]),
                   x_.data() + t * D, D);
  if (c.embedding_scale != 1.0f)
    for (float& v : x_) v *= c.embedding_scale;
  const int64_t rd = c.rot_dim / 2 * 2;
  rope_cs_.resize(static_cast<size_t>(n * rd));
  for (int64_t t = 0; t < n; ++t) {
    if (!yarn_inv_freq_.empty()) yarn_angles(yarn_inv_freq_, c.yarn.attn_factor, step.pos[t], rope_cs_.data() + t * rd);
    else backend_.rope_angles(step.pos[t], c.rot_dim, c.rope_base, rope_cs_.data() + t * rd);
  }
  queries_.resize(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) queries_[t] = {step.pos[t], step.blocks[t]};
  sliding_queries_.resize(sliding_ ? static_cast<size_t>(n) : 0);
  for (int64_t t = 0; t < static_cast<int64_t>(sliding_queries_.size()); ++t)
    sliding_queries_[t] = {step.pos[t], step.sliding_blocks[t]};
  for (ForwardListener* li : listeners_) li->begin_step(step);
  if (source_) source_->begin_step(step);
  lookahead_depth_ = source_ ? source_->lookahead_depth() : 0;
  for (ForwardListener* li : listeners_) lookahead_depth_ = std::max(lookahead_depth_, li->lookahead_depth());
  bool want_embedding = source_ && source_->wants_embedding();
  for (ForwardListener* li : listeners_) want_embedding = want_embedding || li->wants_embedding();
  pool_embeddings(want_embedding, step);
  if (source_ && source_->wants_embedding() && !embeddings_.empty()) source_->step_embeddings(embeddings_);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    if (c.arch == Arch::DeepSeek2) mla_attention_block(l, step, x_);
    else attention_block(l, step, x_);
    if (l < c.n_dense_lead) dense_ffn_block(l, step, x_);
    else moe_block(l, step, x_);
  }
  for (ForwardListener* li : listeners_) li->end_step();
  if (source_) source_->end_step();

  // The output norm and head over the wanted rows only; a row is single when its
  // token was (a decode token's logits are those of a mat-vec).
  const int64_t n_out = static_cast<int64_t>(step.logits_rows.size());
  xn_.resize(static_cast<size_t>(n_out * D));
  int64_t out_single = 0;
  for (int64_t i = 0; i < n_out; ++i) {
    const int64_t t = step.logits_rows[i];
    backend_.rmsnorm_rows(x_.data() + t * D, w.output_norm.data(), xn_.data() + i * D, 1, D, c.rms_eps);
    if (t < step.n_single) ++out_single;
  }
  logits.resize(static_cast<size_t>(n_out * c.n_vocab));
  if (n_out == 0) return;
  // Rows of one multi-token sequence would be a mat-mul alone too only if the
  // sequence wanted several; a lone wanted row of a chunk is a mat-vec either way.
  jobs_.clear();
  const MatrixRef& o = w.output;
  for (int64_t i = 0; i < n_out; ++i) {
    const int64_t t = step.logits_rows[i];
    const bool several = i + 1 < n_out && t >= step.n_single && step.requests[step.logits_rows[i + 1]] == step.requests[t];
    if (!several) {
      jobs_.push_back({o.dtype, o.layout, o.data, o.rows, o.cols, xn_.data() + i * D, 1, logits.data() + i * c.n_vocab, true});
      continue;
    }
    int64_t j = i;
    while (j + 1 < n_out && step.requests[step.logits_rows[j + 1]] == step.requests[t]) ++j;
    jobs_.push_back({o.dtype, o.layout, o.data, o.rows, o.cols, xn_.data() + i * D, j - i + 1, logits.data() + i * c.n_vocab});
    i = j;
  }
  backend_.products(jobs_.data(), jobs_.size());
  if (c.logit_scale != 1.0f)
    for (float& v : logits) v /= c.logit_scale;
}

void ForwardPass::join_residual(int64_t n, std::vector<float>& x) const {
  const int64_t m = n * model_.config().n_embd;
  const float s = model_.config().residual_scale;  // 1 * p is p exactly: other models' sums unchanged
  for (int64_t i = 0; i < m; ++i) x[i] += s * proj_[i];
}

void ForwardPass::attention_block(int64_t l, const StepTokens& step, std::vector<float>& x) {
  const ModelConfig& c = model_.config();
  const LayerWeights& L = model_.weights().layers[static_cast<size_t>(l)];
  const int64_t n = step.size(), D = c.n_embd, hd = c.head_dim;
  const int64_t q_dim = c.n_head * hd, kv_dim = c.n_head_kv * hd;
  xn_.resize(static_cast<size_t>(n * D));
  q_.resize(static_cast<size_t>(n * q_dim));
  k_.resize(static_cast<size_t>(n * kv_dim));
  v_.resize(static_cast<size_t>(n * kv_dim));
  attn_.resize(static_cast<size_t>(n * q_dim));
  proj_.resize(static_cast<size_t>(n * D));

  backend_.rmsnorm_rows(x.data(), L.attn_norm.data(), xn_.data(), n, D, c.rms_eps);
  // The three projections share one fork/join (a mat-vec batch in a decode step).
  jobs_.clear();
  add_products(L.wq, xn_.data(), n, step.n_single, q_.data(), jobs_);
  add_products(L.wk, xn_.data(), n, step.n_single, k_.data(), jobs_);
  add_products(L.wv, xn_.data(), n, step.n_single, v_.data(), jobs_);
  backend_.products(jobs_.data(), jobs_.size());
  if (!L.bq.empty()) {
    add_bias(q_.data(), L.bq, n);
    add_bias(k_.data(), L.bk, n);
    add_bias(v_.data(), L.bv, n);
  }

  // Every token's query and key norms in one call each (a row per token, or per head
  // with per-head norms: rows of q_ and k_ either way), then each token's heads rotated
  // at its position's angles: the host ops per step and layer, not per head. (Hunyuan
  // normalises after the rotation.)
  const auto qk_norms = [&] {
    if (c.qk_norm == QkNorm::Full) {
      backend_.rmsnorm_rows(q_.data(), L.q_norm.data(), q_.data(), n, q_dim, c.rms_eps);
      backend_.rmsnorm_rows(k_.data(), L.k_norm.data(), k_.data(), n, kv_dim, c.rms_eps);
    } else if (c.qk_norm == QkNorm::PerHead) {
      backend_.rmsnorm_rows(q_.data(), L.q_norm.data(), q_.data(), n * c.n_head, hd, c.rms_eps);
      backend_.rmsnorm_rows(k_.data(), L.k_norm.data(), k_.data(), n * c.n_head_kv, hd, c.rms_eps);
    }
  };
  if (!c.qk_norm_after_rope) qk_norms();
  for (int64_t t = 0; t < n; ++t) {
    const float* cs = rope_cs_.data() + t * (c.rot_dim / 2 * 2);
    backend_.rope_heads(q_.data() + t * q_dim, c.n_head, hd, c.rot_dim, cs, c.rope_neox);
    backend_.rope_heads(k_.data() + t * kv_dim, c.n_head_kv, hd, c.rot_dim, cs, c.rope_neox);
  }
  if (c.qk_norm_after_rope) qk_norms();
  const LayerKv at = layer_kv(l);
  KvBlockPool& kv = *at.pool;
  const std::vector<const int32_t*>& tables = at.sliding ? step.sliding_blocks : step.blocks;
  for (int64_t t = 0; t < n; ++t)
    kv.store(at.index, tables[t], step.pos[t], k_.data() + t * kv_dim, v_.data() + t * kv_dim);
  AttentionShape shape{c.n_head, c.n_head_kv, hd, kv.block_len(), kv.block_stride(), kv.type()};
  shape.scale = c.attention_scale;
  if (layer_slides(c, l)) shape.window = c.sliding_window;
  if (!L.attn_sinks.empty()) shape.sinks = L.attn_sinks.data();
  backend_.attention(shape, q_.data(), n, (at.sliding ? sliding_queries_ : queries_).data(), kv.k(at.index),
                     kv.v(at.index), attn_.data());
  jobs_.clear();
  add_products(L.wo, attn_.data(), n, step.n_single, proj_.data(), jobs_);
  backend_.products(jobs_.data(), jobs_.size());
  if (!L.bo.empty()) add_bias(proj_.data(), L.bo, n);
  join_residual(n, x);
}

void ForwardPass::pool_embeddings(bool wanted, const StepTokens& step) {
  embeddings_.clear();
  if (!wanted) return;
  // x_ holds the embedding layer's output here (before layer 0). A step's requests
  // may interleave (single tokens first), so rows are summed per request id.
  const int64_t D = model_.config().n_embd;
  std::vector<int64_t> counts;
  for (int64_t t = 0; t < step.size(); ++t) {
    size_t i = 0;
    while (i < embeddings_.size() && embeddings_[i].request != step.requests[t]) ++i;
    if (i == embeddings_.size()) {
      embeddings_.push_back({step.requests[t], std::vector<float>(static_cast<size_t>(D), 0.0f)});
      counts.push_back(0);
    }
    const float* row = x_.data() + t * D;
    for (int64_t j = 0; j < D; ++j) embeddings_[i].values[static_cast<size_t>(j)] += row[j];
    ++counts[i];
  }
  for (size_t i = 0; i < embeddings_.size(); ++i)
    for (float& v : embeddings_[i].values) v /= static_cast<float>(counts[i]);
}

void ForwardPass::moe_block(int64_t l, const StepTokens& step, std::vector<float>& x) {
  const ModelConfig& c = model_.config();
  const LayerWeights& L = model_.weights().layers[static_cast<size_t>(l)];
  const int64_t n = step.size(), D = c.n_embd;
  proj_.resize(static_cast<size_t>(n * D));
  router_logits(c, L, x.data(), n, xn_, router_, jobs_, backend_);
  // The expert machinery numbers MoE layers only (model_config.h: n_dense_lead).
  route_tokens(c, L.choice_bias, router_.data(), n, l - c.n_dense_lead, routing_, backend_);
  routing_.requests = step.requests;
  // fMoE's semantic key goes with the step's first MoE layer only.
  if (l == c.n_dense_lead) routing_.embeddings = std::move(embeddings_);
  else routing_.embeddings.clear();
  // x is still the layer's MoE input (before its norm): what the next routers see.
  if (lookahead_depth_ > 0) {
    lookahead_.route(c, model_.weights(), lookahead_depth_, x.data(), step, routing_, backend_);
  } else {
    routing_.lookahead_depth = 0;
    routing_.lookahead.clear();
  }
  for (ForwardListener* li : listeners_) li->routed(routing_);
  if (source_) {
    source_->routed(routing_);
    source_->prepare_layer(routing_);
  }
  moe_forward(c, L, routing_, xn_.data(), proj_.data(), backend_, source_);
  join_residual(n, x);
  if (L.shexp.gate.data) shared_expert(L, step, x);
}

// The shared expert runs over every token of the step as one expert chosen by all of
// them (top-1), through the same expert FFN as the routed ones, so a token alone in
// its sequence takes the mat-vec arithmetic and a sequence's floats do not depend on
// what shares the step. xn_ still holds the block's normalised input.
void ForwardPass::shared_expert(const LayerWeights& L, const StepTokens& step, std::vector<float>& x) {
  const ModelConfig& c = model_.config();
  const int64_t n = step.size(), D = c.n_embd;
  shexp_slots_.resize(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) shexp_slots_[static_cast<size_t>(t)] = t;
  const std::vector<int64_t>* slots = &shexp_slots_;
  proj_.resize(static_cast<size_t>(n * D));
  backend_.expert_ffns(&L.shexp, &slots, 1, xn_.data(), step.requests.data(), 1, D, c.n_ff_shexp, proj_.data());
  for (int64_t t = 0; t < n; ++t) {
    float g = 1.0f;
    if (!L.gate_inp_shexp.empty()) {
      const float* xt = xn_.data() + t * D;
      double dot = 0;
      for (int64_t i = 0; i < D; ++i) dot += static_cast<double>(L.gate_inp_shexp[static_cast<size_t>(i)]) * xt[i];
      g = static_cast<float>(1.0 / (1.0 + std::exp(-dot)));
    }
    g *= c.residual_scale;
    for (int64_t i = 0; i < D; ++i) x[t * D + i] += g * proj_[t * D + i];
  }
}

}  // namespace moeflow

#include "engine/transformer.h"

#include <string>

#include "base/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/ops.h"

namespace moeflow {

namespace {

void apply(const MatrixRef& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  cpu::matmul(w.dtype, w.data, w.rows, w.cols, x, n, y, pool);  // n == 1: the mat-vec path
}

void rmsnorm_rows(const float* x, const std::vector<float>& w, float* y, int64_t n, int64_t d, float eps) {
  for (int64_t t = 0; t < n; ++t) cpu::rmsnorm(x + t * d, w.data(), y + t * d, d, eps);
}

}  // namespace

DType default_kv_type(const Model& model) {
  const ModelWeights& w = model.weights();
  if (w.layers.empty()) return DType::F32;
  const DType k = w.layers.front().wk.dtype, v = w.layers.front().wv.dtype;
  return dtype_is_quantized(k) && dtype_is_quantized(v) ? DType::F16 : DType::F32;
}

Transformer::Transformer(const Model& model, ThreadPool* pool, int64_t n_ctx)
    : Transformer(model, pool, n_ctx, default_kv_type(model)) {}

Transformer::Transformer(const Model& model, ThreadPool* pool, int64_t n_ctx, DType kv_type)
    : model_(model), pool_(pool),
      kv_(model.config().n_layer, n_ctx, model.config().n_head_kv, model.config().head_dim, kv_type) {}

void Transformer::eval(const int32_t* tokens, int64_t n, bool all_logits, std::vector<float>& logits) {
  const ModelConfig& c = model_.config();
  const ModelWeights& w = model_.weights();
  if (n <= 0) throw InputError("eval: no tokens to evaluate");
  if (pos_ + n > kv_.capacity())
    throw InputError("context overflow: " + std::to_string(pos_ + n) + " positions needed, context size is " +
                     std::to_string(kv_.capacity()) + " (raise --ctx-size)");
  const int64_t D = c.n_embd;
  std::vector<float> x(static_cast<size_t>(n * D));
  const size_t emb_row = w.tok_embd.row_bytes();
  for (int64_t t = 0; t < n; ++t) {
    if (tokens[t] < 0 || tokens[t] >= c.n_vocab)
      throw InputError("token id " + std::to_string(tokens[t]) + " at input position " + std::to_string(t) +
                       " is outside the vocabulary [0, " + std::to_string(c.n_vocab) + ")");
    dequantize_row(w.tok_embd.dtype, w.tok_embd.data + emb_row * static_cast<size_t>(tokens[t]), x.data() + t * D, D);
  }
  const int64_t rd = c.rot_dim / 2 * 2;
  rope_cs_.resize(static_cast<size_t>(n * rd));
  for (int64_t t = 0; t < n; ++t) cpu::rope_angles(pos_ + t, c.rot_dim, c.rope_base, rope_cs_.data() + t * rd);
  for (ForwardListener* li : listeners_) li->begin_iteration(tokens, n, pos_);
  if (source_) source_->begin_iteration(tokens, n, pos_);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    attention_block(l, n, x);
    moe_block(l, n, x);
  }
  for (ForwardListener* li : listeners_) li->end_iteration();
  if (source_) source_->end_iteration();
  const int64_t first = all_logits ? 0 : n - 1;
  const int64_t n_out = n - first;
  xn_.resize(static_cast<size_t>(n_out * D));
  rmsnorm_rows(x.data() + first * D, w.output_norm, xn_.data(), n_out, D, c.rms_eps);
  logits.resize(static_cast<size_t>(n_out * c.n_vocab));
  apply(w.output, xn_.data(), n_out, logits.data(), pool_);
  pos_ += n;
}

void Transformer::attention_block(int64_t l, int64_t n, std::vector<float>& x) {
  const ModelConfig& c = model_.config();
  const LayerWeights& L = model_.weights().layers[static_cast<size_t>(l)];
  const int64_t D = c.n_embd, hd = c.head_dim;
  const int64_t q_dim = c.n_head * hd, kv_dim = c.n_head_kv * hd;
  xn_.resize(static_cast<size_t>(n * D));
  q_.resize(static_cast<size_t>(n * q_dim));
  k_.resize(static_cast<size_t>(n * kv_dim));
  v_.resize(static_cast<size_t>(n * kv_dim));
  attn_.resize(static_cast<size_t>(n * q_dim));
  proj_.resize(static_cast<size_t>(n * D));

  rmsnorm_rows(x.data(), L.attn_norm, xn_.data(), n, D, c.rms_eps);
  // The three projections share one fork/join (a mat-vec batch when n == 1).
  const cpu::MatmulJob qkv[3] = {{L.wq.dtype, L.wq.data, L.wq.rows, L.wq.cols, xn_.data(), n, q_.data()},
                                 {L.wk.dtype, L.wk.data, L.wk.rows, L.wk.cols, xn_.data(), n, k_.data()},
                                 {L.wv.dtype, L.wv.data, L.wv.rows, L.wv.cols, xn_.data(), n, v_.data()}};
  cpu::matmul_batch(qkv, 3, pool_);

  for (int64_t t = 0; t < n; ++t) {
    float* qt = q_.data() + t * q_dim;
    float* kt = k_.data() + t * kv_dim;
    if (c.qk_norm == QkNorm::Full) {
      cpu::rmsnorm(qt, L.q_norm.data(), qt, q_dim, c.rms_eps);
      cpu::rmsnorm(kt, L.k_norm.data(), kt, kv_dim, c.rms_eps);
    }
    const int64_t p = pos_ + t;
    const float* cs = rope_cs_.data() + t * (c.rot_dim / 2 * 2);
    for (int64_t h = 0; h < c.n_head; ++h) {
      if (c.qk_norm == QkNorm::PerHead) cpu::rmsnorm(qt + h * hd, L.q_norm.data(), qt + h * hd, hd, c.rms_eps);
      cpu::rope_apply(qt + h * hd, c.rot_dim, cs, c.rope_neox);
    }
    for (int64_t h = 0; h < c.n_head_kv; ++h) {
      if (c.qk_norm == QkNorm::PerHead) cpu::rmsnorm(kt + h * hd, L.k_norm.data(), kt + h * hd, hd, c.rms_eps);
      cpu::rope_apply(kt + h * hd, c.rot_dim, cs, c.rope_neox);
    }
    kv_.store(l, p, kt, v_.data() + t * kv_dim);
  }
  cpu::AttentionShape shape{c.n_head, c.n_head_kv, hd, hd, kv_.head_stride(), kv_.type()};
  cpu::attention(shape, q_.data(), n, pos_, kv_.k(l), kv_.v(l), attn_.data(), pool_);
  apply(L.wo, attn_.data(), n, proj_.data(), pool_);
  for (int64_t i = 0; i < n * D; ++i) x[i] += proj_[i];
}

void Transformer::moe_block(int64_t l, int64_t n, std::vector<float>& x) {
  const ModelConfig& c = model_.config();
  const LayerWeights& L = model_.weights().layers[static_cast<size_t>(l)];
  const int64_t D = c.n_embd;
  xn_.resize(static_cast<size_t>(n * D));
  router_.resize(static_cast<size_t>(n * c.n_expert));
  proj_.resize(static_cast<size_t>(n * D));
  rmsnorm_rows(x.data(), L.ffn_norm, xn_.data(), n, D, c.rms_eps);
  apply(L.gate_inp, xn_.data(), n, router_.data(), pool_);
  route_tokens(c, router_.data(), n, l, routing_);
  for (ForwardListener* li : listeners_) li->routed(routing_);
  if (source_) {
    source_->routed(routing_);
    source_->prepare_layer(routing_);
  }
  moe_forward(c, L, routing_, xn_.data(), proj_.data(), pool_, source_);
  for (int64_t i = 0; i < n * D; ++i) x[i] += proj_[i];
}

}  // namespace moeflow

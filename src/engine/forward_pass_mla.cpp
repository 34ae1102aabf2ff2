// deepseek2's layers (model/deepseek2_weights.cpp names the tensors and derives the
// algebra): multi-head latent attention over a cache of the compressed kv, and the
// dense FFN of the leading layers. Same batching rules as the rest of the forward
// pass: every product runs a token alone in its sequence as a mat-vec, so a
// sequence's floats do not depend on what shares its step.
//
// The cache holds one row per position and layer, [latent | rope key]
// (kv_lora_rank + rope dims: V2 576 floats, where per-head keys and values would take
// 128 x 320), read by every head as one kv head. Each head's q is taken into the
// latent's space (k_b[h] q_nope) beside its rope part, attends with the latent as
// the value, and its output is expanded by v_b[h]. The latent is stored twice, as key
// and as value (the pool keeps values apart): 2 x 512 + 64 floats a position.
#include <algorithm>

#include "engine/forward_pass.h"

namespace moeflow {

void ForwardPass::mla_attention_block(int64_t l, const StepTokens& step, std::vector<float>& x) {
  const ModelConfig& c = model_.config();
  const MlaConfig& m = c.mla;
  const LayerWeights& L = model_.weights().layers[static_cast<size_t>(l)];
  const int64_t n = step.size(), D = c.n_embd, H = c.n_head, hk = c.head_dim, hv = c.v_head_dim();
  const int64_t nope = m.nope_dim, rd = c.rot_dim, R = m.kv_lora_rank, A = R + rd, Q = m.q_lora_rank;
  xn_.resize(static_cast<size_t>(n * D));
  q_.resize(static_cast<size_t>(n * H * hk));
  k_.resize(static_cast<size_t>(n * A));
  attn_.resize(static_cast<size_t>(n * H * hv));
  proj_.resize(static_cast<size_t>(n * D));
  mla_a_.resize(static_cast<size_t>(n * (A + Q)));
  mla_q_.resize(static_cast<size_t>(n * H * A));
  mla_heads_in_.resize(static_cast<size_t>(H * n * std::max(nope, R)));
  mla_heads_out_.resize(static_cast<size_t>(H * n * std::max(R, hv)));
  float* kv_a = mla_a_.data();  // [n][latent | rope key]
  float* q_a = kv_a + n * A;    // [n][q_lora_rank]

  backend_.rmsnorm_rows(x.data(), L.attn_norm.data(), xn_.data(), n, D, c.rms_eps);
  jobs_.clear();
  add_products(Q == 0 ? L.wq : L.mla.wq_a, xn_.data(), n, step.n_single, Q == 0 ? q_.data() : q_a, jobs_);
  add_products(L.mla.wkv_a, xn_.data(), n, step.n_single, kv_a, jobs_);
  backend_.products(jobs_.data(), jobs_.size());
  if (Q > 0) {
    backend_.rmsnorm_rows(q_a, L.mla.q_a_norm.data(), q_a, n, Q, c.rms_eps);
    jobs_.clear();
    add_products(L.mla.wq_b, q_a, n, step.n_single, q_.data(), jobs_);
    backend_.products(jobs_.data(), jobs_.size());
  }

  // The cached row [rmsnorm(latent) | rope(k_rope)]; RoPE on each head's q rope part;
  // each head's q part without RoPE gathered head-major for its k_b product.
  float* q_nope = mla_heads_in_.data();  // [H][n][nope]
  for (int64_t t = 0; t < n; ++t) {
    const float* cs = rope_cs_.data() + t * (rd / 2 * 2);
    float* kt = k_.data() + t * A;
    backend_.rmsnorm_rows(kv_a + t * A, L.mla.kv_a_norm.data(), kt, 1, R, c.rms_eps);
    std::copy_n(kv_a + t * A + R, rd, kt + R);
    backend_.rope_heads(kt + R, 1, rd, rd, cs, c.rope_neox);
    kv_->store(l, step.blocks[t], step.pos[t], kt, kt);  // the value is the latent, kt's first R
    float* qt = q_.data() + t * H * hk;
    backend_.rope_heads(qt + nope, H, hk, rd, cs, c.rope_neox);
    for (int64_t h = 0; h < H; ++h) std::copy_n(qt + h * hk, nope, q_nope + (h * n + t) * nope);
  }
  float* q_lat = mla_heads_out_.data();  // [H][n][R]
  jobs_.clear();
  for (int64_t h = 0; h < H; ++h)
    add_products(L.mla.k_b[static_cast<size_t>(h)], q_nope + h * n * nope, n, step.n_single, q_lat + h * n * R, jobs_);
  backend_.products(jobs_.data(), jobs_.size());
  float* qa = mla_q_.data();  // [n][H][latent | rope]: the queries the attention takes
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < H; ++h) {
      std::copy_n(q_lat + (h * n + t) * R, R, qa + (t * H + h) * A);
      std::copy_n(q_.data() + t * H * hk + h * hk + nope, rd, qa + (t * H + h) * A + R);
    }

  // Scores q_h . k_h as HF computes them, so HF's scale (MlaConfig::kq_scale).
  AttentionShape shape{H, 1, A, kv_->block_len(), kv_->block_stride(), kv_->type()};
  shape.v_head_dim = R;
  shape.v_block_stride = kv_->v_block_stride();
  shape.scale = m.kq_scale;
  float* o_lat = mla_heads_in_.data();  // [n][H][R] (q_nope is spent)
  backend_.attention(shape, qa, n, queries_.data(), kv_->k(l), kv_->v(l), o_lat);
  float* o_heads = mla_q_.data();  // [H][n][R] (the queries are spent), head-major for the v_b products
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < H; ++h) std::copy_n(o_lat + (t * H + h) * R, R, o_heads + (h * n + t) * R);
  float* v_heads = mla_heads_out_.data();  // [H][n][v]
  jobs_.clear();
  for (int64_t h = 0; h < H; ++h)
    add_products(L.mla.v_b[static_cast<size_t>(h)], o_heads + h * n * R, n, step.n_single, v_heads + h * n * hv, jobs_);
  backend_.products(jobs_.data(), jobs_.size());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < H; ++h) std::copy_n(v_heads + (h * n + t) * hv, hv, attn_.data() + (t * H + h) * hv);
  jobs_.clear();
  add_products(L.wo, attn_.data(), n, step.n_single, proj_.data(), jobs_);
  backend_.products(jobs_.data(), jobs_.size());
  join_residual(n, x);
}

// The dense FFN runs as one expert chosen by every token (as the shared expert does:
// forward_pass.cpp), through the backend's expert FFN.
void ForwardPass::dense_ffn_block(int64_t l, const StepTokens& step, std::vector<float>& x) {
  const ModelConfig& c = model_.config();
  const LayerWeights& L = model_.weights().layers[static_cast<size_t>(l)];
  const int64_t n = step.size(), D = c.n_embd;
  xn_.resize(static_cast<size_t>(n * D));
  proj_.resize(static_cast<size_t>(n * D));
  backend_.rmsnorm_rows(x.data(), L.ffn_norm.data(), xn_.data(), n, D, c.rms_eps);
  shexp_slots_.resize(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) shexp_slots_[static_cast<size_t>(t)] = t;
  const std::vector<int64_t>* slots = &shexp_slots_;
  backend_.expert_ffns(&L.ffn, &slots, 1, xn_.data(), step.requests.data(), 1, D, c.n_ff_dense, proj_.data());
  join_residual(n, x);
}

}  // namespace moeflow

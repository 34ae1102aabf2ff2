// deepseek2's layers (model/deepseek2_weights.cpp names the tensors): multi-head latent
// attention over a cache of the expanded per-head keys and values, and the dense FFN
// of the leading layers. Same batching rules as the rest of the forward pass: every
// product runs a token alone in its sequence as a mat-vec, so a sequence's floats do
// not depend on what shares its step.
#include <algorithm>

#include "engine/forward_pass.h"

namespace moeflow {

void ForwardPass::mla_attention_block(int64_t l, const StepTokens& step, std::vector<float>& x) {
  const ModelConfig& c = model_.config();
  const MlaConfig& m = c.mla;
  const LayerWeights& L = model_.weights().layers[static_cast<size_t>(l)];
  const int64_t n = step.size(), D = c.n_embd, H = c.n_head, hk = c.head_dim, hv = c.v_head_dim();
  const int64_t nope = m.nope_dim, rd = c.rot_dim, R = m.kv_lora_rank, A = R + rd, Q = m.q_lora_rank;
  const int64_t kv_w = nope + hv;  // one head's row of attn_kv_b's output: [k nope | v]
  xn_.resize(static_cast<size_t>(n * D));
  q_.resize(static_cast<size_t>(n * H * hk));
  k_.resize(static_cast<size_t>(n * H * hk));
  v_.resize(static_cast<size_t>(n * H * hv));
  attn_.resize(static_cast<size_t>(n * H * hv));
  proj_.resize(static_cast<size_t>(n * D));
  mla_a_.resize(static_cast<size_t>(n * (A + Q)));
  mla_latent_.resize(static_cast<size_t>(n * R));
  mla_kv_.resize(static_cast<size_t>(n * H * kv_w));
  float* kv_a = mla_a_.data();         // [n][latent | rope key]
  float* q_a = kv_a + n * A;           // [n][q_lora_rank]

  backend_.rmsnorm_rows(x.data(), L.attn_norm.data(), xn_.data(), n, D, c.rms_eps);
  jobs_.clear();
  add_products(Q == 0 ? L.wq : L.mla.wq_a, xn_.data(), n, step.n_single, Q == 0 ? q_.data() : q_a, jobs_);
  add_products(L.mla.wkv_a, xn_.data(), n, step.n_single, kv_a, jobs_);
  backend_.products(jobs_.data(), jobs_.size());

  // The latent (normalised, made contiguous for attn_kv_b) and the q low-rank's norm.
  for (int64_t t = 0; t < n; ++t)
    backend_.rmsnorm_rows(kv_a + t * A, L.mla.kv_a_norm.data(), mla_latent_.data() + t * R, 1, R, c.rms_eps);
  if (Q > 0) backend_.rmsnorm_rows(q_a, L.mla.q_a_norm.data(), q_a, n, Q, c.rms_eps);
  jobs_.clear();
  if (Q > 0) add_products(L.mla.wq_b, q_a, n, step.n_single, q_.data(), jobs_);
  add_products(L.mla.wkv_b, mla_latent_.data(), n, step.n_single, mla_kv_.data(), jobs_);
  backend_.products(jobs_.data(), jobs_.size());

  for (int64_t t = 0; t < n; ++t) {
    const float* cs = rope_cs_.data() + t * (rd / 2 * 2);
    float* k_rope = kv_a + t * A + R;  // one rotated key for every head
    backend_.rope_apply(k_rope, rd, cs, c.rope_neox);
    float* qt = q_.data() + t * H * hk;
    float* kt = k_.data() + t * H * hk;
    float* vt = v_.data() + t * H * hv;
    const float* kv = mla_kv_.data() + t * H * kv_w;
    for (int64_t h = 0; h < H; ++h) {
      backend_.rope_apply(qt + h * hk + nope, rd, cs, c.rope_neox);
      std::copy_n(kv + h * kv_w, nope, kt + h * hk);
      std::copy_n(k_rope, rd, kt + h * hk + nope);
      std::copy_n(kv + h * kv_w + nope, hv, vt + h * hv);
    }
    kv_->store(l, step.blocks[t], step.pos[t], kt, vt);
  }
  AttentionShape shape{H, H, hk, kv_->block_len(), kv_->block_stride(), kv_->type()};
  shape.v_head_dim = hv;
  shape.v_block_stride = kv_->v_block_stride();
  shape.scale = m.kq_scale;
  backend_.attention(shape, q_.data(), n, queries_.data(), kv_->k(l), kv_->v(l), attn_.data());
  jobs_.clear();
  add_products(L.wo, attn_.data(), n, step.n_single, proj_.data(), jobs_);
  backend_.products(jobs_.data(), jobs_.size());
  for (int64_t i = 0; i < n * D; ++i) x[i] += proj_[i];
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
  for (int64_t i = 0; i < n * D; ++i) x[i] += proj_[i];
}

}  // namespace moeflow

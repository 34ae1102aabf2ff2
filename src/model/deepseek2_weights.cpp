// The tensors of one deepseek2 layer, as llama.cpp's converter names them (attn_kv_b,
// or its split attn_k_b / attn_v_b). What the forward pass computes from them
// (engine/forward_pass_mla.cpp), HF's DeepseekV2Attention with attn_kv_b absorbed:
//   q      = attn_q x                                   (q_lora_rank 0: V2-Lite)
//          | attn_q_b rmsnorm(attn_q_a x, attn_q_a_norm) (V2)       [n_head][nope + rope]
//   kv_a   = attn_kv_a_mqa x = [latent | k_rope]; c = rmsnorm(latent, attn_kv_a_norm)
//   HF:      k_h = [K_h c | rope(k_rope)], v_h = V_h c, with attn_kv_b = per head [K_h; V_h]
//   here:    q_h . k_h = (K_h^T q_nope_h) . c + rope(q_rope_h) . rope(k_rope), and
//            sum_p a_p v_h(p) = V_h sum_p a_p c(p): the cache holds [c | rope(k_rope)]
//            per position, k_b[h] = K_h^T and v_b[h] = V_h.
//   out    = attn_output concat_h(V_h softmax(...) c)
#include <string>
#include <vector>

#include "model/weight_binding.h"

namespace moeflow {

namespace {

// k_b and v_b per head. The split form holds them as they are used: attn_k_b
// {nope, kv_lora_rank, n_head} is K_h^T, attn_v_b {kv_lora_rank, v, n_head} is V_h.
// attn_kv_b {kv_lora_rank, n_head * (nope + v)} holds [K_h; V_h] head by head: V_h is
// read in place, K_h^T is transposed here into f32 (owned by `k_b_f32`).
void bind_latent_heads(const gguf::GgufFile& f, const ModelConfig& c, const std::string& b, MlaWeights& m) {
  const int64_t H = c.n_head, R = c.mla.kv_lora_rank, nope = c.mla.nope_dim, hv = c.v_head_dim();
  const auto u = [](int64_t x) { return static_cast<uint64_t>(x); };
  m.k_b.resize(static_cast<size_t>(H));
  m.v_b.resize(static_cast<size_t>(H));
  if (c.mla.split_kv_b) {
    const gguf::TensorInfo& kb = f.tensor(b + "attn_k_b.weight");
    const gguf::TensorInfo& vb = f.tensor(b + "attn_v_b.weight");
    check_tensor_dims(f, kb, {u(nope), u(R), u(H)});
    check_tensor_dims(f, vb, {u(R), u(hv), u(H)});
    for (int64_t h = 0; h < H; ++h) {
      m.k_b[h] = MatrixRef{kb.dtype, RowLayout::gguf, kb.data + static_cast<size_t>(h * R) * row_bytes(kb.dtype, nope), R, nope};
      m.v_b[h] = MatrixRef{vb.dtype, RowLayout::gguf, vb.data + static_cast<size_t>(h * hv) * row_bytes(vb.dtype, R), hv, R};
    }
    return;
  }
  const int64_t w = nope + hv;
  const MatrixRef kv = bind_matrix(f, b + "attn_kv_b.weight", R, H * w);
  m.k_b_f32.assign(static_cast<size_t>(H * R * nope), 0.0f);
  std::vector<float> row(static_cast<size_t>(R));
  for (int64_t h = 0; h < H; ++h) {
    float* kt = m.k_b_f32.data() + h * R * nope;
    for (int64_t j = 0; j < nope; ++j) {  // row j of K_h is column j of K_h^T
      dequantize_row(kv.dtype, kv.data + static_cast<size_t>(h * w + j) * kv.row_bytes(), row.data(), R);
      for (int64_t r = 0; r < R; ++r) kt[r * nope + j] = row[static_cast<size_t>(r)];
    }
    m.k_b[h] = MatrixRef{DType::F32, RowLayout::gguf, reinterpret_cast<const uint8_t*>(kt), R, nope};
    m.v_b[h] = MatrixRef{kv.dtype, RowLayout::gguf, kv.data + static_cast<size_t>(h * w + nope) * kv.row_bytes(), hv, R};
  }
}

}  // namespace

LayerWeights bind_deepseek2_layer(const gguf::GgufFile& f, const ModelConfig& c, int64_t i) {
  const std::string b = "blk." + std::to_string(i) + ".";
  const MlaConfig& m = c.mla;
  const int64_t D = c.n_embd, H = c.n_head;
  LayerWeights L;
  L.attn_norm = bind_vector(f, b + "attn_norm.weight", D);
  if (m.q_lora_rank == 0) {
    L.wq = bind_matrix(f, b + "attn_q.weight", D, H * c.head_dim);
  } else {
    L.mla.wq_a = bind_matrix(f, b + "attn_q_a.weight", D, m.q_lora_rank);
    L.mla.q_a_norm = bind_vector(f, b + "attn_q_a_norm.weight", m.q_lora_rank);
    L.mla.wq_b = bind_matrix(f, b + "attn_q_b.weight", m.q_lora_rank, H * c.head_dim);
  }
  L.mla.wkv_a = bind_matrix(f, b + "attn_kv_a_mqa.weight", D, m.kv_lora_rank + c.rot_dim);
  L.mla.kv_a_norm = bind_vector(f, b + "attn_kv_a_norm.weight", m.kv_lora_rank);
  bind_latent_heads(f, c, b, L.mla);
  L.wo = bind_matrix(f, b + "attn_output.weight", H * c.v_head_dim(), D);

  L.ffn_norm = bind_vector(f, b + "ffn_norm.weight", D);
  if (i < c.n_dense_lead) {  // a dense FFN, no router, no experts
    L.ffn = bind_swiglu_ffn(f, b, "", D, c.n_ff_dense);
    return L;
  }
  L.gate_inp = bind_matrix(f, b + "ffn_gate_inp.weight", D, c.n_expert);
  L.choice_bias = bind_choice_bias(f, b, c.n_expert);  // DeepSeek-V3's e_score_correction_bias
  bind_expert_ffn(f, b, D, c.n_ff_expert, c.n_expert, L);
  if (c.n_ff_shexp > 0) {  // expert_shared_count experts fused into one FFN, ungated
    L.shexp = bind_swiglu_ffn(f, b, "_shexp", D, c.n_ff_shexp);
  }
  return L;
}

}  // namespace moeflow

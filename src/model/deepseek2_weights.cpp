// The tensors of one deepseek2 layer, as llama.cpp's converter names them (attn_kv_b,
// or its split attn_k_b / attn_v_b, rebuilt). What the forward pass computes from them
// (engine/forward_pass_mla.cpp):
//   q      = attn_q x                                   (q_lora_rank 0: V2-Lite)
//          | attn_q_b rmsnorm(attn_q_a x, attn_q_a_norm) (V2)       [n_head][nope + rope]
//   kv_a   = attn_kv_a_mqa x = [latent (kv_lora_rank) | k_rope (rope dims, one for all heads)]
//   kv     = attn_kv_b rmsnorm(latent, attn_kv_a_norm)             [n_head][nope + v]
//   k_h    = [kv_h nope part | rope(k_rope)],  v_h = kv_h's v part
//   out    = attn_output concat_h(softmax(q_h k_h^T * kq_scale) v_h)
#include <algorithm>
#include <string>
#include <vector>

#include "model/weight_binding.h"

namespace moeflow {

namespace {

// attn_kv_b's rows, head by head ([nope rows of k | v rows of v]), from the split form:
// attn_k_b {nope, kv_lora_rank, n_head} holds head h's k rows transposed
// (k_b[h][r][j] = kv_b[h's row j][r]), attn_v_b {kv_lora_rank, v, n_head} its v rows as
// they were. Dequantised into f32 (owned by `rows`), so a quantised file's attn_kv_b
// costs 4 bytes an element here.
MatrixRef rebuild_kv_b(const gguf::GgufFile& f, const ModelConfig& c, const std::string& b, std::vector<float>& rows) {
  const int64_t H = c.n_head, R = c.mla.kv_lora_rank, nope = c.mla.nope_dim, hv = c.v_head_dim(), w = nope + hv;
  const gguf::TensorInfo& kb = f.tensor(b + "attn_k_b.weight");
  const gguf::TensorInfo& vb = f.tensor(b + "attn_v_b.weight");
  const auto u = [](int64_t x) { return static_cast<uint64_t>(x); };
  check_tensor_dims(f, kb, {u(nope), u(R), u(H)});
  check_tensor_dims(f, vb, {u(R), u(hv), u(H)});
  rows.assign(static_cast<size_t>(H * w * R), 0.0f);
  std::vector<float> row(static_cast<size_t>(std::max(nope, R)));
  const size_t kb_row = row_bytes(kb.dtype, nope), vb_row = row_bytes(vb.dtype, R);
  for (int64_t h = 0; h < H; ++h) {
    float* head = rows.data() + h * w * R;
    for (int64_t r = 0; r < R; ++r) {  // k_b[h][r][:] is column r of head h's k rows
      dequantize_row(kb.dtype, kb.data + static_cast<size_t>(h * R + r) * kb_row, row.data(), nope);
      for (int64_t j = 0; j < nope; ++j) head[j * R + r] = row[static_cast<size_t>(j)];
    }
    for (int64_t i = 0; i < hv; ++i)
      dequantize_row(vb.dtype, vb.data + static_cast<size_t>(h * hv + i) * vb_row, head + (nope + i) * R, R);
  }
  return MatrixRef{DType::F32, RowLayout::gguf, reinterpret_cast<const uint8_t*>(rows.data()), H * w, R};
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
  if (m.split_kv_b) L.mla.wkv_b = rebuild_kv_b(f, c, b, L.mla.wkv_b_rebuilt);
  else L.mla.wkv_b = bind_matrix(f, b + "attn_kv_b.weight", m.kv_lora_rank, H * (m.nope_dim + c.v_head_dim()));
  L.wo = bind_matrix(f, b + "attn_output.weight", H * c.v_head_dim(), D);

  L.ffn_norm = bind_vector(f, b + "ffn_norm.weight", D);
  if (i < c.n_dense_lead) {  // a dense FFN, no router, no experts
    L.ffn.gate = bind_matrix(f, b + "ffn_gate.weight", D, c.n_ff_dense);
    L.ffn.up = bind_matrix(f, b + "ffn_up.weight", D, c.n_ff_dense);
    L.ffn.down = bind_matrix(f, b + "ffn_down.weight", c.n_ff_dense, D);
    return L;
  }
  L.gate_inp = bind_matrix(f, b + "ffn_gate_inp.weight", D, c.n_expert);
  L.gate_exps = bind_experts(f, b + "ffn_gate_exps.weight", D, c.n_ff_expert, c.n_expert);
  L.up_exps = bind_experts(f, b + "ffn_up_exps.weight", D, c.n_ff_expert, c.n_expert);
  L.down_exps = bind_experts(f, b + "ffn_down_exps.weight", c.n_ff_expert, D, c.n_expert);
  if (c.n_ff_shexp > 0) {  // expert_shared_count experts fused into one FFN, ungated
    L.shexp.gate = bind_matrix(f, b + "ffn_gate_shexp.weight", D, c.n_ff_shexp);
    L.shexp.up = bind_matrix(f, b + "ffn_up_shexp.weight", D, c.n_ff_shexp);
    L.shexp.down = bind_matrix(f, b + "ffn_down_shexp.weight", c.n_ff_shexp, D);
  }
  return L;
}

}  // namespace moeflow

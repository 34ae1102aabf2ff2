// Binds the tensors of a GGUF file to the blocks of a MoE transformer, checking each
// tensor's shape against the config. Weights stay in the file's mapping and dtype;
// only the small norm vectors are copied out as f32.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "format/gguf.h"
#include "model/model_config.h"
#include "tensor/device_buffer.h"
#include "tensor/dtype.h"
#include "tensor/row_layout.h"

namespace moeflow {

// A matrix [rows][cols] in `dtype`, applied as y = W x (ggml dims {cols, rows}), its
// rows in `layout` (the file's GGUF layout unless a WeightPlacer chose another).
struct MatrixRef {
  DType dtype = DType::F32;
  RowLayout layout = RowLayout::gguf;
  const uint8_t* data = nullptr;
  int64_t rows = 0, cols = 0;
  size_t row_bytes() const;
  size_t bytes() const { return row_bytes() * static_cast<size_t>(rows); }
};

// The stacked weights of all experts of one projection (ggml dims {cols, rows, n_expert}).
struct StackedExperts {
  MatrixRef first;  // expert 0; expert e starts at first.data + e * step()
  int64_t n_expert = 0;
  uint64_t file_offset = 0;  // absolute offset of expert 0 in the model file
  // Bytes from one expert's matrix to the next; 0: first.bytes() (packed). A fused
  // ffn_gate_up_exps tensor holds each expert's gate rows then its up rows, so its gate
  // and up stacks each step over both.
  uint64_t stride = 0;
  uint64_t step() const { return stride ? stride : first.bytes(); }
  MatrixRef expert(int64_t e) const {
    MatrixRef m = first;
    m.data = first.data + static_cast<size_t>(e) * step();
    return m;
  }
};

// One expert's three matrices, and what gpt-oss adds: a bias on each projection
// (null: none; F, F and D floats, kept with the resident weights while the matrices
// may be offloaded) and its activation.
struct ExpertMatrices {
  MatrixRef gate, up, down;
  const float* gate_bias = nullptr;
  const float* up_bias = nullptr;
  const float* down_bias = nullptr;
  ExpertGlu glu = ExpertGlu::Silu;
};

// DeepSeek-V2's multi-head latent attention (model/deepseek2_weights.cpp says what each
// computes); LayerWeights' wq is attn_q when q_lora_rank is 0, wo is attn_output.
struct MlaWeights {
  MatrixRef wq_a, wq_b;            // attn_q_a, attn_q_b (q_lora_rank > 0)
  std::vector<float> q_a_norm;     // attn_q_a_norm
  MatrixRef wkv_a;                 // attn_kv_a_mqa: [kv_lora_rank + rope dims][n_embd]
  std::vector<float> kv_a_norm;    // attn_kv_a_norm
  // attn_kv_b per head h, as the latent cache uses it: k_b[h] [kv_lora_rank][nope]
  // takes q's part without RoPE into the latent's space, v_b[h] [v][kv_lora_rank] the
  // attention's latent output to the head's value.
  std::vector<MatrixRef> k_b, v_b;
  std::vector<float> k_b_f32;      // k_b's rows, transposed from a file's attn_kv_b
};

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm, q_norm, k_norm;  // q/k norms empty when unused
  std::vector<float> bq, bk, bv;  // projection biases; empty when the model has none
  MatrixRef wq, wk, wv, wo;
  MatrixRef gate_inp;  // router: [n_expert][n_embd]
  StackedExperts gate_exps, up_exps, down_exps;
  // The shared expert (config n_ff_shexp > 0): dense, read by every token, so it stays
  // with the resident weights and is never offloaded. gate_inp_shexp: its sigmoid
  // gate's weights (n_embd), empty when ungated.
  ExpertMatrices shexp;
  std::vector<float> gate_inp_shexp;
  // The router's choice bias (n_expert; DeepSeek-V3's exp_probs_b), empty when none:
  // added to the scores that choose the experts, not to the weights they get.
  std::vector<float> choice_bias;
  MlaWeights mla;      // deepseek2 only
  ExpertMatrices ffn;  // a dense FFN layer without experts (deepseek2's leading layers)
  // gpt-oss (empty when the model has none): the output projection's bias (n_embd), the
  // sink logit of each head (n_head), the router's bias (n_expert), and the experts'
  // biases, expert e's at e * F (gate, up) or e * D (down).
  std::vector<float> bo, attn_sinks, gate_inp_b;
  std::vector<float> gate_exps_b, up_exps_b, down_exps_b;
};

struct ModelWeights {
  MatrixRef tok_embd;  // [n_vocab][n_embd]
  std::vector<float> output_norm;
  MatrixRef output;    // [n_vocab][n_embd]; equals tok_embd when tied
  std::vector<LayerWeights> layers;
  uint64_t dense_bytes = 0, expert_bytes = 0;
};

// Throws InputError naming the tensor if it holds NaN or an infinity (floats: any
// element; q8_0 / q4_0: a block scale).
void check_finite_weights(const gguf::GgufFile& f, const gguf::TensorInfo& t);
// The same for elements [first, first + n) of t (first a whole number of blocks).
void check_finite_weights(const gguf::GgufFile& f, const gguf::TensorInfo& t, int64_t first, int64_t n);

class Model {
 public:
  // Opens, validates and binds; throws InputError naming the file and tensor.
  static std::unique_ptr<Model> load(const std::string& path);
  // Copies the weights out of the file mapping into anonymous memory asking for huge
  // pages, and rebinds them there; with include_experts false only the dense tensors
  // move (offloading reads experts from the file itself). Why: the same q8_0 mat-vec
  // measured 26 GB/s reading the page cache's scattered 4 KiB pages against 44 GB/s
  // from anonymous memory (one thread, 2-vCPU EPYC): the hardware prefetcher stops
  // at every 4 KiB page boundary. The copy goes in pieces of about piece_bytes (whole
  // rows) on `threads` threads, and each piece's file pages are released as it is
  // copied, so the peak is one copy plus the pieces in flight. A placer (the backend)
  // gives the memory, chooses each matrix's row layout and writes it (the embedding
  // table, read row by row, keeps GGUF's; where it is also the output matrix and the
  // backend interleaves that, the output is copied interleaved and the lookup reads the
  // mapping); null: host memory, every matrix in GGUF's layout. The copy is the same
  // bytes however many threads make it.
  static constexpr size_t kResidentPieceBytes = size_t{4} << 20;
  void make_resident(bool include_experts, WeightPlacer* placer, int threads = 1,
                     size_t piece_bytes = kResidentPieceBytes);
  uint64_t resident_bytes() const { return resident_bytes_; }
  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const gguf::GgufFile& file() const { return *file_; }

 private:
  std::unique_ptr<gguf::GgufFile> file_;
  std::unique_ptr<DeviceBuffer> resident_;
  uint64_t resident_bytes_ = 0;
  ModelConfig config_;
  ModelWeights weights_;
};

}  // namespace moeflow

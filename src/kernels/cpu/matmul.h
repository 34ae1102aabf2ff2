// Weight-times-activation products for every weight dtype. Weights are row-major
// [rows][cols] in the dtype's layout (each row row_bytes(dtype, cols) bytes), as
// GGUF stores a ggml tensor with dims {cols, rows}. Activations are f32.
//
// Quantised weights are dequantised block by block in registers and multiplied with
// f32 activations, so results match the reference run on dequantised weights to f32
// rounding; except q8_0 mat-vecs (one token), and q4_0 ones on CPUs with AVX-512 VNNI
// (q4_vnni.h), which multiply the integer weights with the activation quantised to
// int16 per 32-element block (~2e-5 relative error, see matmul.cpp); and mat-vecs on
// int8 activations (MatvecJob::x_int8) of the types that have integer kernels for them
// (the VNNI ones; on other AVX2 CPUs q4_0, q8_0, the k-quants and IQ4 / MXFP4,
// int8_avx2.h). SIMD via Highway with runtime dispatch. Matrices with RowLayout::rows_x4 (rows interleaved in fours,
// tensor/rows_x4.h) take the VNNI kernels of rows_x4_vnni.h for mat-vecs and per-token
// products (the CPU backend gives every product on them per_token, a prompt's too) and
// are dequantised quad by quad for mat-muls (the f32 reference); their shapes must fit
// (rows % 4 == 0, cols % 128 == 0). Every other matrix is in GGUF's row layout.
#pragma once
#include <cstdint>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "tensor/dtype.h"
#include "tensor/row_layout.h"

namespace moeflow::cpu {

// y[r] = sum_c W[r][c] * x[c], r in [0, rows). pool may be null (single thread).
void matvec(DType wt, const void* W, int64_t rows, int64_t cols, const float* x, float* y,
            ThreadPool* pool, RowLayout layout = RowLayout::gguf);

// One mat-vec of a batch: y[r] = sum_c W[r][c] * x[c].
struct MatvecJob {
  DType dtype;
  RowLayout layout;
  const void* W;
  int64_t rows, cols;
  const float* x;
  float* y;
  // q4_0 / q8_0 rows interleaved in fours, and k-quants on the VNNI kernels: the
  // activation as int8 blocks, not int16 (rows_x4_vnni.h, kquant_vnni.h: half the
  // multiply-adds, ~2^-8 instead of ~2^-16 of a block's largest value as rounding);
  // without VNNI, q4_0, q8_0, the k-quants and IQ4 / MXFP4 then take the AVX2 int8 kernels
  // (int8_avx2.h). Ignored by every other matrix.
  bool x_int8 = false;
};

// Runs independent mat-vecs as one parallel job. A decode step is a chain of small
// products (q, k and v; the gate and up projections of every selected expert); one
// fork/join for all of them instead of one each saves the synchronisation that
// dominates on small models, and the threads' shares are balanced by bytes read over
// the whole batch rather than per matrix.
void matvec_batch(const MatvecJob* jobs, size_t n_jobs, ThreadPool* pool);

// A cache line of packed activation: the VNNI kernels load it aligned.
struct alignas(64) CacheLine {
  uint8_t bytes[64];
};

struct MvInput;  // matmul.cpp: a job's activation as the kernels read it

// Mat-vecs on one matrix whose rows several threads compute, each on its own, with no
// fork/join of their own: prepare() quantises and packs every job's x, on the calling
// thread, into the plan's buffers, as matvec_batch would; rows() then computes rows
// [r0, r1) of every job on the calling thread, from any thread (r0 a multiple of 4 for
// interleaved weights), several jobs reading the matrix once for all of them (the
// tokens of one expert in a batched decode step). The plan and the x's must outlive
// every rows() call; prepare() again only when no rows() call is running.
// (moe_forward's expert-per-thread decode: a thread that finished its own experts
// takes rows from the back of another's down projection.) Same kernels and inputs as
// matvec_batch, so the same floats.
class MatvecPlan {
 public:
  MatvecPlan();
  ~MatvecPlan();
  MatvecPlan(const MatvecPlan&) = delete;
  MatvecPlan& operator=(const MatvecPlan&) = delete;

  // jobs[0, n), n >= 1: one matrix (dtype, layout, W, rows, cols), each job its own x, y.
  void prepare(const MatvecJob* jobs, size_t n);
  void prepare(const MatvecJob& job) { prepare(&job, 1); }
  void rows(int64_t r0, int64_t r1) const;
  int64_t n_rows() const { return jobs_.empty() ? 0 : jobs_[0].rows; }

 private:
  struct Buffers {
    std::vector<int16_t> qx;
    std::vector<float> dx;
    std::vector<CacheLine> packed;
  };
  std::vector<MatvecJob> jobs_;
  std::vector<Buffers> buffers_;  // per job, kept between prepares
  std::vector<MvInput> inputs_;   // the kernels' view of each job's activation
};

// Y[t][r] = sum_c W[r][c] * X[t][c] for t in [0, n_tok). X is [n_tok][cols],
// Y is [n_tok][rows]. Blocked so each weight block is read once per group of tokens.
void matmul(DType wt, const void* W, int64_t rows, int64_t cols, const float* X,
            int64_t n_tok, float* Y, ThreadPool* pool, RowLayout layout = RowLayout::gguf);

// One mat-mul of a batch: Y[t][r] = sum_c W[r][c] * X[t][c], t < n_tok.
struct MatmulJob {
  DType dtype;
  RowLayout layout;
  const void* W;
  int64_t rows, cols;
  const float* X;
  int64_t n_tok;
  float* Y;
  // Each token as its own mat-vec (the decode arithmetic: a one-token job's floats,
  // token by token) with the matrix read once for all of them; else a mat-mul.
  bool per_token = false;
  bool x_int8 = false;  // as MatvecJob's, for the one-token and per-token products
};

// Independent mat-muls as one parallel job, split by FLOPs (prefill runs every
// selected expert's gate and up products, then their down products: two fork/joins
// per layer instead of three per expert). Every job takes the kernels matmul would
// (one-token jobs the mat-vec), so results equal separate matmul calls bit for bit;
// a batch of one-token jobs only is run as matvec_batch.
void matmul_batch(const MatmulJob* jobs, size_t n_jobs, ThreadPool* pool);

// The SIMD target Highway picked at run time for these kernels ("AVX3", "AVX2", ...).
const char* simd_target_name();

// Plain scalar reference (dequantise each row, then dot in double). Kept for tests.
void matvec_reference(DType wt, const void* W, int64_t rows, int64_t cols, const float* x,
                      float* y, RowLayout layout = RowLayout::gguf);

}  // namespace moeflow::cpu

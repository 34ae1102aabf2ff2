#include "backend/cpu/cpu_backend.h"

#include <algorithm>
#include <cstring>

#include "backend/cpu/expert_activation.h"
#include "backend/cpu/experts_per_thread.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/kquant_matvec.h"
#include "kernels/cpu/int8_avx2.h"
#include "kernels/cpu/nl4_vnni.h"
#include "kernels/cpu/q4_vnni.h"
#include "kernels/cpu/roofline.h"
#include "kernels/cpu/rows_x4_vnni.h"
#include "tensor/rows_x4.h"
#include "tensor/device_buffer.h"

namespace moeflow {

namespace {

// A product's tokens as per-token integer mat-vecs where its weights take those kernels
// (integer_kernels_for): the matrix is read once for a group of them (matmul_batch's
// per-token jobs), on AVX-512 VNNI 2-3x the f32 tiles' speed for prefill of q4_0 and
// the k-quants (int8 activations, four multiply-adds per byte lane), 1.3-1.7x for q8_0
// (int16, two passes), 1.7-1.9x for Q2_K / Q3_K rows in GGUF's layout (int8, up to
// four tokens a pass), more for IQ4_NL / IQ4_XS / MXFP4, whose f32 mat-mul
// dequantises block by block in scalar code; and a token gets the same floats
// prefilled in a chunk as decoded alone.
bool integer_per_token(const Product& p) { return p.per_token || integer_kernels_for(p.dtype, p.layout, p.x_int8); }

// The SwiGLU FFN of experts mats[0, n), each over the (token, slot) pairs slots[i]
// that chose it, on the pool (null: the calling thread alone); row s of per_slot gets
// slot s's output. Every expert's gate and up products run as one batch and all down
// products as another (cpu::matmul_batch: two fork/joins per call instead of three
// per expert, the threads' shares balanced by FLOPs across experts with very
// different numbers of tokens). The resident experts of a layer come here together,
// an offloaded one as soon as it is in memory: the same kernels either way, so
// offloading is lossless bit for bit.
//
// Which kernel a token takes depends on its own sequence only: a token that is the
// only one of its sequence (requests, per token) in an expert's group runs as a
// mat-vec (a decode token; every token of a group of one), the others of its
// sequence as a mat-mul. So a sequence gets the same floats batched with any others
// as alone. Each expert's rows are laid out mat-vec tokens first ("lone"), then the
// mat-mul ones.
void split_expert_ffns(const ExpertMatrices* mats, const std::vector<int64_t>* const* slots, size_t n, const float* x,
                       const int64_t* requests, int64_t K, int64_t D, int64_t F, float* per_slot, ThreadPool* pool,
                       ActivationPrecision activations) {
  thread_local std::vector<int64_t> order;  // slots of every expert, lone first
  thread_local std::vector<size_t> first, lone;
  thread_local std::vector<float> xe, gate, up, down;
  thread_local std::vector<int64_t> slot_requests;  // an expert's slots' requests, sorted
  first.assign(n + 1, 0);
  lone.assign(n, 0);
  order.clear();
  for (size_t i = 0; i < n; ++i) {
    const std::vector<int64_t>& sl = *slots[i];
    first[i + 1] = first[i] + sl.size();
    // A slot's company looked up in its expert's sorted requests: a prompt of thousands
    // of tokens gives an expert as many slots, and counting each one's anew was
    // quadratic in them.
    slot_requests.clear();
    if (requests)
      for (int64_t slot : sl) slot_requests.push_back(requests[slot / K]);
    std::sort(slot_requests.begin(), slot_requests.end());
    auto alone = [&](int64_t slot) {
      if (!requests) return sl.size() == 1;
      const auto [lo, hi] = std::equal_range(slot_requests.begin(), slot_requests.end(), requests[slot / K]);
      return hi - lo == 1;
    };
    const size_t at = order.size();
    for (int64_t slot : sl)
      if (alone(slot)) order.push_back(slot);
    lone[i] = order.size() - at;
    for (int64_t slot : sl)
      if (!alone(slot)) order.push_back(slot);
  }
  const size_t rows = first[n];
  xe.resize(rows * static_cast<size_t>(D));
  gate.resize(rows * static_cast<size_t>(F));
  up.resize(rows * static_cast<size_t>(F));
  down.resize(rows * static_cast<size_t>(D));
  // A group of one token reads it in place (every expert of a decode step), so experts
  // that share the token share one pointer and the mat-vecs quantise and pack it once;
  // larger groups read their tokens gathered into xe.
  auto input = [&](size_t i, size_t r0, size_t nt) -> const float* {
    if (nt == 1) return x + (order[r0] / K) * D;
    for (size_t j = 0; j < nt; ++j) std::copy_n(x + (order[r0 + j] / K) * D, D, xe.data() + (r0 + j) * D);
    return xe.data() + r0 * D;
  };
  std::vector<cpu::MatmulJob> jobs;
  jobs.reserve(4 * n);
  // Up to two jobs per expert and matrix: its lone tokens, then the others.
  auto add = [&](const MatrixRef& w, size_t i, const float* const in[2], float* out, int64_t out_w, int64_t in_w) {
    const size_t parts[2][2] = {{first[i], lone[i]}, {first[i] + lone[i], first[i + 1] - first[i] - lone[i]}};
    for (int k = 0; k < 2; ++k) {
      const auto [r0, nt] = parts[k];
      if (nt == 0) continue;
      const float* xin = in ? in[k] : gate.data() + r0 * static_cast<size_t>(in_w);
      const bool int8 = int8_activations_for(activations, w.dtype);
      jobs.push_back({w.dtype, w.layout, w.data, w.rows, w.cols, xin, static_cast<int64_t>(nt), out + r0 * out_w,
                      k == 0 || integer_kernels_for(w.dtype, w.layout, int8), int8});
    }
  };
  for (size_t i = 0; i < n; ++i) {
    const float* in[2] = {lone[i] ? input(i, first[i], lone[i]) : nullptr,
                          first[i + 1] - first[i] > lone[i] ? input(i, first[i] + lone[i], first[i + 1] - first[i] - lone[i])
                                                            : nullptr};
    add(mats[i].gate, i, in, gate.data(), F, D);
    add(mats[i].up, i, in, up.data(), F, D);
  }
  cpu::matmul_batch(jobs.data(), jobs.size(), pool);
  // Plain SwiGLU experts (every model but gpt-oss) in one call over all rows.
  const bool plain = std::all_of(mats, mats + n, [](const ExpertMatrices& m) {
    return m.glu == ExpertGlu::Silu && !m.gate_bias && !m.up_bias;
  });
  if (plain) {
    cpu::swiglu(gate.data(), up.data(), gate.data(), static_cast<int64_t>(rows) * F);
  } else {
    for (size_t i = 0; i < n; ++i)
      expert_hidden(mats[i], gate.data() + first[i] * F, up.data() + first[i] * F,
                    static_cast<int64_t>(first[i + 1] - first[i]), F);
  }
  jobs.clear();
  for (size_t i = 0; i < n; ++i) add(mats[i].down, i, nullptr, down.data(), D, F);
  cpu::matmul_batch(jobs.data(), jobs.size(), pool);
  for (size_t i = 0; i < n; ++i)
    expert_down_bias(mats[i], down.data() + first[i] * D, static_cast<int64_t>(first[i + 1] - first[i]), D, 0, D);
  for (size_t r = 0; r < rows; ++r) std::copy_n(down.data() + r * D, D, per_slot + order[r] * D);
}

// Whether every one of the step's n_tok tokens is the only one of its sequence (a
// decode step); without requests the tokens are one sequence's.
bool tokens_alone_in_sequences(const int64_t* requests, int64_t n_tok) {
  if (!requests) return n_tok == 1;
  thread_local std::vector<int64_t> sorted;
  sorted.assign(requests, requests + n_tok);
  std::sort(sorted.begin(), sorted.end());
  return std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
}

}  // namespace

bool integer_kernels_for(DType t, RowLayout layout, bool x_int8) {
  return layout == RowLayout::rows_x4 || (x_int8 && (cpu::nl4_vnni_type(t) || cpu::kquant_vnni_type(t))) ||
         (x_int8 && dtype_is_lattice_iquant(t) && cpu::int8_avx2_type(t, layout));
}

CpuBackend::CpuBackend(int threads, bool interleave_rows, ActivationPrecision activations)
    : owned_(std::make_unique<ThreadPool>(threads)),
      pool_(owned_.get()),
      interleave_rows_(interleave_rows),
      activations_(activations) {}
CpuBackend::CpuBackend(ThreadPool* pool, bool interleave_rows, ActivationPrecision activations)
    : pool_(pool), interleave_rows_(interleave_rows), activations_(activations) {}

std::unique_ptr<DeviceBuffer> CpuBackend::allocate(size_t bytes) { return allocate_host_buffer(bytes); }

uint8_t* CpuBackend::allocate_expert_buffer(uint64_t bytes) { return host_expert_memory().allocate_expert_buffer(bytes); }

void CpuBackend::release_expert_buffer(uint8_t* p, uint64_t bytes) { host_expert_memory().release_expert_buffer(p, bytes); }

RowLayout CpuBackend::layout_for(DType t, int64_t rows, int64_t cols) const {
  // Interleaved k-quant rows have int8 kernels only (rows_x4_int8_only).
  const bool kernels = !rows_x4_int8_only(t) || int8_activations_for(activations_, t);
  return interleave_rows_ && cpu::q4_vnni_enabled() && rows_x4_supports(t) && kernels && rows_x4_fits(rows, cols)
             ? RowLayout::rows_x4
             : RowLayout::gguf;
}

void CpuBackend::place(RowLayout layout, DType t, const void* src, int64_t rows, int64_t cols, void* dst) const {
  if (layout == RowLayout::rows_x4) {
    cpu::rows_x4_repack(t, src, rows, cols, dst);
  } else {
    std::memcpy(dst, src, row_bytes(t, cols) * static_cast<size_t>(rows));
  }
}

double CpuBackend::measure_memory_bandwidth_gbs(uint64_t bytes) { return cpu::measure_triad_bandwidth_gbs(pool_, bytes); }
double CpuBackend::measure_peak_gflops() { return cpu::measure_peak_fma_gflops(pool_); }
Backend::Int8Peak CpuBackend::measure_peak_int8() {
  if (cpu::q4_vnni_enabled()) return {cpu::measure_peak_int8_gmacs(pool_), "AVX-512 VNNI vpdpbusd"};
  if (cpu::int8_avx2_enabled()) return {cpu::measure_peak_int8_avx2_gmacs(pool_), "AVX2 vpmaddubsw + vpmaddwd"};
  return {};
}
bool CpuBackend::products_per_token(DType t, RowLayout layout) const {
  return integer_kernels_for(t, layout, int8_activations_for(activations_, t));
}

bool CpuBackend::int8_peak_applies(DType t, RowLayout layout, bool x_int8) const {
  // VNNI: interleaved rows and the k-quants, on either activation; without it the AVX2
  // kernels, on int8 activations only (int16 ones take Highway's widening products).
  if (cpu::q4_vnni_enabled()) return layout == RowLayout::rows_x4 || dtype_is_kquant(t);
  return x_int8 && cpu::int8_avx2_type(t, layout);
}
std::string CpuBackend::kernel_target() const {
  // Highway's target for the f32 kernels, and which integer kernels run beside them.
  const std::string integer = cpu::q4_vnni_enabled()      ? " + AVX-512 VNNI"
                              : cpu::int8_avx2_enabled() ? " + int8"
                                                         : "";
  return cpu::simd_target_name() + integer;
}

void CpuBackend::products(const Product* jobs, size_t n) {
  const ScopedOpTime timing(timed(kProducts));
  thread_local std::vector<Product> marked;
  marked.assign(jobs, jobs + n);
  for (Product& j : marked) {
    j.x_int8 = int8_activations_for(activations_, j.dtype);
    j.per_token = integer_per_token(j);
  }
  cpu::matmul_batch(marked.data(), n, pool_);
}

void CpuBackend::attention(const AttentionShape& s, const float* q, int64_t n_tok, const AttentionQuery* tok,
                           const void* k_cache, const void* v_cache, float* out) {
  const ScopedOpTime timing(timed(kAttention));
  cpu::attention(s, q, n_tok, tok, k_cache, v_cache, out, pool_);
}

void CpuBackend::kv_store(DType kv_type, const float* src, int64_t rows, int64_t n, const KvSlot& at) {
  const ScopedOpTime timing(timed(kKvStore));
  cpu::kv_store_slot(kv_type, src, rows, n, at);
}

void CpuBackend::rmsnorm_rows(const float* x, const float* w, float* y, int64_t n_rows, int64_t d, float eps) {
  const ScopedOpTime timing(timed(kHost));
  for (int64_t t = 0; t < n_rows; ++t) cpu::rmsnorm(x + t * d, w, y + t * d, d, eps);
}

void CpuBackend::softmax_rows(float* x, int64_t rows, int64_t n) {
  const ScopedOpTime timing(timed(kHost));
  for (int64_t r = 0; r < rows; ++r) cpu::softmax(x + r * n, n);
}

void CpuBackend::rope_angles(int64_t pos, int64_t rot_dim, float freq_base, float* cs) {
  const ScopedOpTime timing(timed(kHost));
  cpu::rope_angles(pos, rot_dim, freq_base, cs);
}

void CpuBackend::rope_heads(float* heads, int64_t n_heads, int64_t stride, int64_t rot_dim, const float* cs,
                            bool neox) {
  const ScopedOpTime timing(timed(kHost));
  for (int64_t h = 0; h < n_heads; ++h) cpu::rope_apply(heads + h * stride, rot_dim, cs, neox);
}

void CpuBackend::expert_ffns(const ExpertMatrices* mats, const std::vector<int64_t>* const* slots, size_t n,
                             const float* x, const int64_t* requests, int64_t K, int64_t D, int64_t F,
                             float* per_slot) {
  const ScopedOpTime timing(timed(kExperts));
  // A decode step (every token alone in its sequence: one sequence's token, or one
  // token of each of several sequences) with at least as many experts as threads:
  // each thread runs whole experts, gate and up on all of an expert's tokens, SwiGLU,
  // the quantising of its output and down, in one parallel section, and the down rows
  // even out runs of unequal length (experts_per_thread.h; 3 experts on 2 threads: 2
  // sequences of a top-2 model, 60.0 -> 64.4% of the bound, 7 alternating rounds).
  // Same kernels on the same rows, so the same floats (MoeLayer tests). Tiny experts
  // (the test fixtures') are not worth a fork/join: matmul.cpp's threshold for one,
  // 2^15 multiply-adds, applies to all of them together.
  const int parts = pool_ ? pool_->size() : 1;
  const size_t threads = static_cast<size_t>(parts);
  int64_t n_slots = 0, n_tok = 0;
  for (size_t i = 0; i < n; ++i) {
    n_slots += static_cast<int64_t>(slots[i]->size());
    for (int64_t s : *slots[i]) n_tok = std::max(n_tok, s / K + 1);
  }
  const bool enough = parts > 1 && n >= threads && 3 * n_slots * D * F >= (int64_t{1} << 15);
  if (enough && tokens_alone_in_sequences(requests, n_tok)) {
    thread_local ExpertsPerThread ept;  // the caller's; its buffers are reused
    ept.run(mats, slots, n, x, K, D, F, per_slot, *pool_, activations_);
    return;
  }
  split_expert_ffns(mats, slots, n, x, requests, K, D, F, per_slot, pool_, activations_);
}

std::vector<Backend::OpTime> CpuBackend::op_times() const { return std::vector<OpTime>(times_, times_ + kOps); }

}  // namespace moeflow

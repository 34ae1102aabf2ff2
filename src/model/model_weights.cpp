#include "model/model_weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <string>

#include "base/error.h"
#include "base/parallel_for.h"
#include "model/weight_binding.h"
#include "tensor/finite_check.h"
#include "tensor/rows_x4.h"

namespace moeflow {

size_t MatrixRef::row_bytes() const { return moeflow::row_bytes(dtype, cols); }

namespace {

std::string dims_str(const std::vector<uint64_t>& d) {
  std::string s = "{";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "}";
}

void check_dims(const gguf::GgufFile& f, const gguf::TensorInfo& t, std::vector<uint64_t> want) {
  if (t.dims != want)
    throw InputError(f.path() + ": tensor '" + t.name + "' has dims " + dims_str(t.dims) + ", expected " +
                     dims_str(want) + " from the model's metadata");
}

MatrixRef matrix(const gguf::GgufFile& f, const std::string& name, int64_t cols, int64_t rows) {
  const gguf::TensorInfo& t = f.tensor(name);
  check_dims(f, t, {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)});
  return MatrixRef{t.dtype, RowLayout::gguf, t.data, rows, cols};
}

std::vector<float> vector_f32(const gguf::GgufFile& f, const std::string& name, int64_t n) {
  const gguf::TensorInfo& t = f.tensor(name);
  check_dims(f, t, {static_cast<uint64_t>(n)});
  std::vector<float> v(static_cast<size_t>(n));
  dequantize_row(t.dtype, t.data, v.data(), n);
  return v;
}

// A vector stored either as {n} or as a one-row matrix {n, 1} (a Linear(n, 1) weight
// as the converter writes it; llama.cpp accepts both).
std::vector<float> vector_or_row_f32(const gguf::GgufFile& f, const std::string& name, int64_t n) {
  const gguf::TensorInfo& t = f.tensor(name);
  if (t.dims.size() == 2 && t.dims[1] == 1) check_dims(f, t, {static_cast<uint64_t>(n), 1});
  else check_dims(f, t, {static_cast<uint64_t>(n)});
  std::vector<float> v(static_cast<size_t>(n));
  dequantize_row(t.dtype, t.data, v.data(), n);
  return v;
}

// A bias per expert, {n, n_expert} (f32 in the converter's files), copied out as f32.
// The name holds "_exps." so the load-time check skips it: checked here instead.
std::vector<float> expert_bias_f32(const gguf::GgufFile& f, const std::string& name, int64_t n, int64_t n_expert) {
  const gguf::TensorInfo& t = f.tensor(name);
  check_dims(f, t, {static_cast<uint64_t>(n), static_cast<uint64_t>(n_expert)});
  check_finite_weights(f, t);
  std::vector<float> v(static_cast<size_t>(n * n_expert));
  for (int64_t e = 0; e < n_expert; ++e)
    dequantize_row(t.dtype, t.data + static_cast<size_t>(e) * row_bytes(t.dtype, n), v.data() + e * n, n);
  return v;
}

StackedExperts experts(const gguf::GgufFile& f, const std::string& name, int64_t cols, int64_t rows,
                       int64_t n_expert) {
  const gguf::TensorInfo& t = f.tensor(name);
  check_dims(f, t, {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows), static_cast<uint64_t>(n_expert)});
  StackedExperts s;
  s.first = MatrixRef{t.dtype, RowLayout::gguf, t.data, rows, cols};
  s.n_expert = n_expert;
  s.file_offset = t.file_offset;
  return s;
}

bool is_expert_tensor(const std::string& name) { return name.find("_exps.") != std::string::npos; }

}  // namespace

void check_tensor_dims(const gguf::GgufFile& f, const gguf::TensorInfo& t, const std::vector<uint64_t>& want) {
  check_dims(f, t, want);
}
MatrixRef bind_matrix(const gguf::GgufFile& f, const std::string& name, int64_t cols, int64_t rows) {
  return matrix(f, name, cols, rows);
}
std::vector<float> bind_vector(const gguf::GgufFile& f, const std::string& name, int64_t n) {
  return vector_f32(f, name, n);
}
void bind_expert_ffn(const gguf::GgufFile& f, const std::string& b, int64_t n_embd, int64_t ff, int64_t n_expert,
                     LayerWeights& L) {
  const gguf::TensorInfo* fused = f.find_tensor(b + "ffn_gate_up_exps.weight");
  if (!fused) {
    L.gate_exps = experts(f, b + "ffn_gate_exps.weight", n_embd, ff, n_expert);
    L.up_exps = experts(f, b + "ffn_up_exps.weight", n_embd, ff, n_expert);
    L.down_exps = experts(f, b + "ffn_down_exps.weight", ff, n_embd, n_expert);
    return;
  }
  if (f.find_tensor(b + "ffn_gate_exps.weight") || f.find_tensor(b + "ffn_up_exps.weight"))
    throw InputError(f.path() + ": tensor '" + fused->name + "' is there beside '" + b +
                     "ffn_gate_exps.weight' or '" + b + "ffn_up_exps.weight': a layer's gate and up are fused or not");
  const StackedExperts both = experts(f, fused->name, n_embd, 2 * ff, n_expert);
  const uint64_t half = static_cast<uint64_t>(ff) * row_bytes(both.first.dtype, n_embd);
  for (StackedExperts* s : {&L.gate_exps, &L.up_exps}) {
    *s = both;
    s->first.rows = ff;
    s->stride = both.first.bytes();
  }
  L.up_exps.first.data += half;
  L.up_exps.file_offset += half;
  L.down_exps = experts(f, b + "ffn_down_exps.weight", ff, n_embd, n_expert);
}

void bind_expert_biases(const gguf::GgufFile& f, const std::string& b, int64_t n_embd, int64_t ff, int64_t n_expert,
                        LayerWeights& L) {
  L.down_exps_b = expert_bias_f32(f, b + "ffn_down_exps.bias", n_embd, n_expert);
  if (!f.find_tensor(b + "ffn_gate_up_exps.bias")) {
    L.gate_exps_b = expert_bias_f32(f, b + "ffn_gate_exps.bias", ff, n_expert);
    L.up_exps_b = expert_bias_f32(f, b + "ffn_up_exps.bias", ff, n_expert);
    return;
  }
  const std::vector<float> both = expert_bias_f32(f, b + "ffn_gate_up_exps.bias", 2 * ff, n_expert);
  L.gate_exps_b.resize(static_cast<size_t>(ff * n_expert));
  L.up_exps_b.resize(static_cast<size_t>(ff * n_expert));
  for (int64_t e = 0; e < n_expert; ++e) {
    const float* src = both.data() + e * 2 * ff;
    std::copy_n(src, ff, L.gate_exps_b.data() + e * ff);
    std::copy_n(src + ff, ff, L.up_exps_b.data() + e * ff);
  }
}

ExpertMatrices bind_swiglu_ffn(const gguf::GgufFile& f, const std::string& b, const std::string& suffix, int64_t n_embd,
                               int64_t ff) {
  ExpertMatrices m;
  m.gate = matrix(f, b + "ffn_gate" + suffix + ".weight", n_embd, ff);
  m.up = matrix(f, b + "ffn_up" + suffix + ".weight", n_embd, ff);
  m.down = matrix(f, b + "ffn_down" + suffix + ".weight", ff, n_embd);
  return m;
}
std::vector<float> bind_choice_bias(const gguf::GgufFile& f, const std::string& b, int64_t n_expert) {
  const std::string name = b + "exp_probs_b.bias";
  return f.find_tensor(name) ? vector_f32(f, name, n_expert) : std::vector<float>{};
}

void check_finite_weights(const gguf::GgufFile& f, const gguf::TensorInfo& t, int64_t first, int64_t n) {
  const DTypeInfo& d = dtype_info(t.dtype);
  const int64_t at = first_non_finite(t.dtype, t.data + first / d.block_size * d.type_size, n);
  if (at < 0) return;
  const int64_t bad = first + at;
  throw InputError(f.path() + ": tensor '" + t.name + "' holds NaN or an infinity at element " + std::to_string(bad) +
                   (dtype_is_quantized(t.dtype) ? " (its block's scale)" : "") + ", file offset " +
                   std::to_string(t.file_offset) + " + " + std::to_string(bad / d.block_size * d.type_size));
}

void check_finite_weights(const gguf::GgufFile& f, const gguf::TensorInfo& t) {
  check_finite_weights(f, t, 0, static_cast<int64_t>(t.n_elements()));
}

std::unique_ptr<Model> Model::load(const std::string& path) {
  auto m = std::unique_ptr<Model>(new Model());
  m->file_ = gguf::GgufFile::open(path);
  const gguf::GgufFile& f = *m->file_;
  ModelConfig& c = m->config_;
  try {
    c = read_model_config(f);
  } catch (const InputError& e) {  // a metadata key's error names the key; the file goes first
    const std::string what = e.what();
    if (what.rfind(f.path(), 0) == 0) throw;
    throw InputError(f.path() + ": " + what);
  }
  ModelWeights& w = m->weights_;

  const gguf::TensorInfo& emb = f.tensor("token_embd.weight");
  if (emb.dims.size() != 2 || emb.dims[0] != static_cast<uint64_t>(c.n_embd))
    throw InputError(f.path() + ": tensor 'token_embd.weight' has dims " + dims_str(emb.dims) +
                     ", expected {" + std::to_string(c.n_embd) + ", n_vocab}");
  c.n_vocab = static_cast<int64_t>(emb.dims[1]);
  w.tok_embd = matrix(f, "token_embd.weight", c.n_embd, c.n_vocab);
  w.output_norm = vector_f32(f, "output_norm.weight", c.n_embd);
  w.output = f.find_tensor("output.weight") ? matrix(f, "output.weight", c.n_embd, c.n_vocab) : w.tok_embd;

  const int64_t q_dim = c.n_head * c.head_dim, kv_dim = c.n_head_kv * c.head_dim;
  for (int64_t i = 0; i < c.n_layer; ++i) {
    if (c.arch == Arch::DeepSeek2) {
      w.layers.push_back(bind_deepseek2_layer(f, c, i));
      const LayerWeights& L = w.layers.back();
      w.expert_bytes += (L.gate_exps.first.bytes() + L.up_exps.first.bytes() + L.down_exps.first.bytes()) *
                        static_cast<uint64_t>(L.gate_exps.n_expert);
      continue;
    }
    const std::string b = "blk." + std::to_string(i) + ".";
    LayerWeights L;
    L.attn_norm = vector_f32(f, b + "attn_norm.weight", c.n_embd);
    L.wq = matrix(f, b + "attn_q.weight", c.n_embd, q_dim);
    L.wk = matrix(f, b + "attn_k.weight", c.n_embd, kv_dim);
    L.wv = matrix(f, b + "attn_v.weight", c.n_embd, kv_dim);
    L.wo = matrix(f, b + "attn_output.weight", q_dim, c.n_embd);
    if (c.attn_qkv_bias) {
      L.bq = vector_f32(f, b + "attn_q.bias", q_dim);
      L.bk = vector_f32(f, b + "attn_k.bias", kv_dim);
      L.bv = vector_f32(f, b + "attn_v.bias", kv_dim);
    }
    if (c.qk_norm == QkNorm::PerHead) {
      L.q_norm = vector_f32(f, b + "attn_q_norm.weight", c.head_dim);
      L.k_norm = vector_f32(f, b + "attn_k_norm.weight", c.head_dim);
    } else if (c.qk_norm == QkNorm::Full) {
      L.q_norm = vector_f32(f, b + "attn_q_norm.weight", q_dim);
      L.k_norm = vector_f32(f, b + "attn_k_norm.weight", kv_dim);
    }
    if (c.attn_out_bias) L.bo = vector_f32(f, b + "attn_output.bias", c.n_embd);
    if (c.attn_sinks) L.attn_sinks = vector_f32(f, b + "attn_sinks.weight", c.n_head);
    L.ffn_norm = vector_f32(f, b + c.ffn_norm_name + ".weight", c.n_embd);
    if (i < c.n_dense_lead) {  // a dense FFN, no router, no experts (glm4moe's first layers)
      L.ffn = bind_swiglu_ffn(f, b, "", c.n_embd, c.n_ff_dense);
      w.layers.push_back(std::move(L));
      continue;
    }
    L.gate_inp = matrix(f, b + "ffn_gate_inp.weight", c.n_embd, c.n_expert);
    L.choice_bias = bind_choice_bias(f, b, c.n_expert);  // glm4moe's
    bind_expert_ffn(f, b, c.n_embd, c.n_ff_expert, c.n_expert, L);
    if (c.router_bias) L.gate_inp_b = vector_f32(f, b + "ffn_gate_inp.bias", c.n_expert);
    if (c.expert_bias) bind_expert_biases(f, b, c.n_embd, c.n_ff_expert, c.n_expert, L);
    if (c.n_ff_shexp > 0) {
      L.shexp = bind_swiglu_ffn(f, b, "_shexp", c.n_embd, c.n_ff_shexp);
      if (c.shared_expert_gate) L.gate_inp_shexp = vector_or_row_f32(f, b + "ffn_gate_inp_shexp.weight", c.n_embd);
    }
    w.expert_bytes += (L.gate_exps.first.bytes() + L.up_exps.first.bytes() + L.down_exps.first.bytes()) *
                      static_cast<uint64_t>(c.n_expert);
    w.layers.push_back(std::move(L));
  }
  // Dense weights are read by every token: a NaN there is checked now. Expert tensors
  // are checked as make_resident copies them (an offloaded run streams them from the
  // file; a NaN there shows up as non-finite logits, which the sampler reports).
  for (const auto& t : f.tensors())
    if (!is_expert_tensor(t.name)) check_finite_weights(f, t);
  // The blocks past n_layer (multi-token prediction, deepseek_moe_config.cpp) are never
  // read: not in the weights a token reads.
  const auto in_run_block = [&](const std::string& name) {
    if (name.rfind("blk.", 0) != 0) return true;
    return std::strtoll(name.c_str() + 4, nullptr, 10) < c.n_layer;
  };
  uint64_t total = 0;
  for (const auto& t : f.tensors())
    if (in_run_block(t.name)) total += t.nbytes;
  w.dense_bytes = total - w.expert_bytes;
  return m;
}

void Model::make_resident(bool include_experts, WeightPlacer* placer, int threads, size_t piece_bytes) {
  if (resident_) return;
  // Every distinct byte range the forward pass reads (output may alias tok_embd).
  struct Range {
    const uint8_t* src;
    size_t bytes;                  // of the copy: the matrices end to end
    std::vector<MatrixRef*> refs;  // every matrix reading the range (data, and dtype when repacked)
    int64_t n_matrices;            // stacked experts: one matrix per expert
    size_t src_step;               // from one source matrix to the next (wider in a fused gate/up stack)
    bool rows_only;                // read row by row (the embedding lookup): keep GGUF's layout
    StackedExperts* stack;         // stacked experts (packed in the copy), else null
    // Set once the copy is allocated: the range's place in it, its row layout, and for
    // stacked experts the file tensor it lies in (checked as it is copied; a fused
    // gate/up stack's up half lies inside the fused tensor).
    uint8_t* dst = nullptr;
    RowLayout layout = RowLayout::gguf;
    const gguf::TensorInfo* checked = nullptr;
  };
  std::vector<Range> ranges;
  auto add = [&](MatrixRef& m, int64_t n_matrices, bool rows_only, StackedExperts* stack = nullptr) {
    if (!m.data) return;  // a matrix this architecture does not have
    for (Range& r : ranges)
      if (r.src == m.data) {
        r.refs.push_back(&m);
        r.rows_only = r.rows_only || rows_only;
        return;
      }
    ranges.push_back({m.data, m.bytes() * static_cast<size_t>(n_matrices), {&m}, n_matrices,
                      stack ? stack->step() : m.bytes(), rows_only, stack});
  };
  ModelWeights& w = weights_;
  // A tied output (the embedding table read as the output matrix: Granite, ERNIE-4.5)
  // is a product like the others: where the backend interleaves such rows, it gets its
  // copy in that layout, and the embedding lookup (a row per token) reads the file
  // mapping instead of a second copy. Otherwise the two share one copy in GGUF's layout.
  const bool own_output = w.output.data && w.output.data == w.tok_embd.data && placer &&
                          placer->layout_for(w.output.dtype, w.output.rows, w.output.cols) != RowLayout::gguf;
  if (!own_output) add(w.tok_embd, 1, true);
  add(w.output, 1, false);
  for (LayerWeights& L : w.layers) {
    for (MatrixRef* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate_inp}) add(*m, 1, false);
    if (L.shexp.gate.data)
      for (MatrixRef* m : {&L.shexp.gate, &L.shexp.up, &L.shexp.down}) add(*m, 1, false);
    for (MatrixRef* m : {&L.mla.wq_a, &L.mla.wq_b, &L.mla.wkv_a, &L.ffn.gate, &L.ffn.up, &L.ffn.down}) add(*m, 1, false);
    for (std::vector<MatrixRef>* heads : {&L.mla.k_b, &L.mla.v_b})
      for (MatrixRef& m : *heads) add(m, 1, false);
    if (include_experts)
      for (StackedExperts* e : {&L.gate_exps, &L.up_exps, &L.down_exps}) add(e->first, e->n_expert, false, e);
  }
  constexpr size_t kAlign = 64;
  size_t total = 0;
  for (const Range& r : ranges) total += (r.bytes + kAlign - 1) / kAlign * kAlign;
  if (total == 0) return;
  std::unique_ptr<DeviceBuffer> region = placer ? placer->allocate(total) : allocate_host_buffer(total);
  if (!region)
    throw InputError(file_->path() + ": cannot allocate " + std::to_string(total >> 20) +
                     " MiB to hold the weights in memory (use --mmap to read them from the file mapping)");
  // Every matrix goes in pieces of whole rows, in fours (each layout keeps four rows'
  // bytes where GGUF has them), spread over the threads: most of a copy's time is the
  // kernel zeroing its fresh pages as they are first written, which one thread does at
  // a fraction of what the memory takes.
  struct Piece {
    size_t range;
    int64_t matrix, row0, rows;
  };
  std::vector<Piece> pieces;
  uint8_t* at = region->data();
  for (size_t k = 0; k < ranges.size(); ++k) {
    Range& r = ranges[k];
    const MatrixRef& m = *r.refs.front();
    r.dst = at;
    at += (r.bytes + kAlign - 1) / kAlign * kAlign;
    // The backend's layout (e.g. rows interleaved in fours for the CPU's VNNI
    // kernels, tensor/rows_x4.h says why).
    r.layout = placer && !r.rows_only ? placer->layout_for(m.dtype, m.rows, m.cols) : RowLayout::gguf;
    if (r.stack)  // not checked at load (see Model::load)
      for (const gguf::TensorInfo& t : file_->tensors())
        if (r.src >= t.data && r.src < t.data + t.nbytes) r.checked = &t;
    const int64_t rows_a_piece = std::max<int64_t>(4, static_cast<int64_t>(piece_bytes / row_bytes(m.dtype, m.cols)) / 4 * 4);
    for (int64_t i = 0; i < r.n_matrices; ++i)
      for (int64_t row0 = 0; row0 < m.rows; row0 += rows_a_piece)
        pieces.push_back({k, i, row0, std::min(rows_a_piece, m.rows - row0)});
  }
  // Drops the mapping's pages inside [p, p + n) (whole pages only): they would
  // otherwise stay in this process's resident set next to the copy.
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  auto drop_pages = [page](const uint8_t* p, size_t n) {
    const uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
    const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
    if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
  };
  parallel_for(static_cast<int64_t>(pieces.size()), threads, [&](int64_t p) {
    const Piece& c = pieces[static_cast<size_t>(p)];
    const Range& r = ranges[c.range];
    const MatrixRef& m = *r.refs.front();
    const size_t row = row_bytes(m.dtype, m.cols), n = row * static_cast<size_t>(c.rows);
    const uint8_t* from = r.src + static_cast<size_t>(c.matrix) * r.src_step + row * static_cast<size_t>(c.row0);
    uint8_t* to = r.dst + static_cast<size_t>(c.matrix) * m.bytes() + row * static_cast<size_t>(c.row0);
    if (const gguf::TensorInfo* t = r.checked) {
      const DTypeInfo& d = dtype_info(t->dtype);
      check_finite_weights(*file_, *t, (from - t->data) / d.type_size * d.block_size, c.rows * m.cols);
    }
    if (r.layout != RowLayout::gguf)
      placer->place(r.layout, m.dtype, from, c.rows, m.cols, to);
    else
      std::memcpy(to, from, n);
    drop_pages(from, n);
  });
  for (Range& r : ranges) {
    // A page that two pieces shared is dropped here. (A fused stack's up half faults
    // back in what its gate half dropped, from the page cache.)
    drop_pages(r.src, r.src_step * static_cast<size_t>(r.n_matrices - 1) + r.refs.front()->bytes());
    for (MatrixRef* ref : r.refs) {
      ref->data = r.dst;
      ref->layout = r.layout;
    }
    if (r.stack) r.stack->stride = 0;  // packed in the copy
  }
  resident_bytes_ = total;
  resident_ = std::move(region);
}

}  // namespace moeflow

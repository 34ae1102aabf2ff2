// Model::make_resident: the copied weights give bit-identical logits to the file
// mapping, for every dtype, with and without the experts. Rows interleaved in fours
// (RowLayout::rows_x4, on VNNI CPUs) take the integer kernels for every token, the
// prompt's too, where GGUF's rows prefill with f32 activations; their activations are
// int16 here, so within 1e-4 (RMS, relative) there; without VNNI the rows stay as
// GGUF has them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "engine/transformer.h"
#include "moeflow/engine.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/q4_vnni.h"
#include "model/model_weights.h"
#include "model/synthetic_model.h"
#include "tensor/rows_x4.h"
#include "cpu_placer.h"
#include "float_vectors.h"
#include "gguf_rewrite.h"
#include "test_paths.h"

namespace moeflow {
namespace {

std::vector<float> logits_of(const Model& m, ThreadPool& pool) {
  Transformer tf(m, &pool, 32, DType::F32);  // the weights compared, not the cache's rounding
  const std::vector<int32_t> prompt = {1, 5, 9, 3, 7, 2, 8, 4};
  std::vector<float> all, step;
  tf.eval(prompt.data(), static_cast<int64_t>(prompt.size()), true, all);  // prefill
  int32_t tok = 6;
  for (int i = 0; i < 3; ++i) {  // decode (batched mat-vecs)
    tf.eval(&tok, 1, false, step);
    all.insert(all.end(), step.begin(), step.end());
  }
  return all;
}

TEST(ResidentWeights, CopiedWeightsGiveTheLogitsOfTheMapping) {
  ThreadPool pool(2);
  for (const char* name : {"mixtral-f32.gguf", "mixtral-bf16.gguf", "qwen3moe-q8_0.gguf", "olmoe-q4_0.gguf"}) {
    const std::string path = testing::fixture_path(name);
    auto mapped = Model::load(path);
    const std::vector<float> want = logits_of(*mapped, pool);
    for (const auto& [experts, repack] : {std::pair{true, false}, {false, false}, {true, true}, {false, true}}) {
      auto resident = Model::load(path);
      resident->make_resident(experts, repack ? testing::cpu_placer() : nullptr);
      const ModelWeights& w = resident->weights();
      // Everything the forward pass reads moved: the dense matrices always, the experts
      // when asked (norm vectors are f32 copies from the start).
      const gguf::GgufFile& f = resident->file();
      EXPECT_NE(w.layers[0].wq.data, f.tensor("blk.0.attn_q.weight").data) << name;
      EXPECT_EQ(w.layers[0].gate_exps.first.data != f.tensor("blk.0.ffn_gate_exps.weight").data, experts) << name;
      EXPECT_GE(resident->resident_bytes(), experts ? w.expert_bytes : 0) << name;
      const DType ft = f.tensor("blk.0.attn_q.weight").dtype;
      const bool interleaves = rows_x4_supports(ft) && cpu::q4_vnni_enabled();
      EXPECT_EQ(w.layers[0].wq.dtype, ft) << name;
      EXPECT_EQ(w.layers[0].wq.layout == RowLayout::rows_x4, interleaves && repack)
          << name << ": every fixture is 128 wide or float";
      EXPECT_EQ(w.layers[0].gate_exps.first.layout == RowLayout::rows_x4, interleaves && repack && experts) << name;
      EXPECT_EQ(w.tok_embd.layout, RowLayout::gguf) << name;
      EXPECT_EQ(w.tok_embd.dtype, f.tensor("token_embd.weight").dtype) << name << ": the embedding table is read by rows";
      const std::vector<float> got = logits_of(*resident, pool);
      const std::string what = std::string(name) + (experts ? " (all weights" : " (dense only") + (repack ? ", repacked)" : ")");
      if (repack && interleaves) {
        ASSERT_EQ(got.size(), want.size());
        const double rms = testing::rel_err(got, want);
        EXPECT_LT(rms, 1e-4) << what;
        std::printf("%s: relative RMS difference %.2e\n", what.c_str(), rms);
      } else {
        EXPECT_EQ(got, want) << what;
      }
    }
  }
}

// Every matrix the forward pass reads, with how many matrices lie end to end from it
// (stacked experts, packed in the copy).
std::vector<std::pair<const MatrixRef*, int64_t>> matrices_of(const ModelWeights& w) {
  std::vector<std::pair<const MatrixRef*, int64_t>> out = {{&w.tok_embd, 1}, {&w.output, 1}};
  for (const LayerWeights& L : w.layers) {
    for (const MatrixRef* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate_inp, &L.shexp.gate, &L.shexp.up, &L.shexp.down,
                               &L.mla.wq_a, &L.mla.wq_b, &L.mla.wkv_a, &L.ffn.gate, &L.ffn.up, &L.ffn.down})
      out.push_back({m, 1});
    for (const std::vector<MatrixRef>* heads : {&L.mla.k_b, &L.mla.v_b})
      for (const MatrixRef& m : *heads) out.push_back({&m, 1});
    for (const StackedExperts* e : {&L.gate_exps, &L.up_exps, &L.down_exps}) out.push_back({&e->first, e->n_expert});
  }
  return out;
}

// The copy is made in pieces of whole rows on several threads: any number of threads
// and any piece size give the bytes and layouts one thread gives in whole matrices.
// Pieces of 64 bytes make every piece four rows, so pieces of one matrix interleave
// across the threads; fused gate/up stacks copy their up halves from inside the fused
// tensor.
TEST(ResidentWeights, PiecesOnManyThreadsCopyTheBytesOfOneThread) {
  std::vector<std::string> paths;
  for (const char* name : {"mixtral-f32.gguf", "mixtral-bf16.gguf", "qwen3moe-q8_0.gguf", "olmoe-q4_0.gguf",
                           "deepseek2-q4_0.gguf", "gpt-oss-mxfp4.gguf", "granitemoe-shared-q8_0.gguf"})
    paths.push_back(testing::fixture_path(name));
  paths.push_back(testing::fuse_gate_up(testing::fixture_path("olmoe-q4_0.gguf"), "pieces-fused"));
  // The other interleaved row types (k-quants, legacy quants, iq4), 256 wide.
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::Q5_1, DType::IQ4_NL, DType::IQ4_XS}) {
    SyntheticModelSpec spec;
    spec.dtype = t;
    spec.n_embd = 256;
    spec.n_ff_expert = 256;
    spec.head_dim = 64;
    paths.push_back(testing::scratch_path(std::string("pieces-") + dtype_name(t)) + ".gguf");
    write_synthetic_model(spec, paths.back());
  }
  // Int8 activations: the k-quants' rows interleave only for them (rows_x4_int8_only).
  static CpuBackend placer(static_cast<ThreadPool*>(nullptr), true, ActivationPrecision::Auto);
  for (const std::string& path : paths) {
    for (bool repack : {false, true}) {
      auto one = Model::load(path);
      one->make_resident(true, repack ? &placer : nullptr, 1, size_t{1} << 30);
      const MatrixRef& gate = one->weights().layers.back().gate_exps.first;
      if (repack && cpu::q4_vnni_enabled() && rows_x4_supports(gate.dtype)) {
        EXPECT_EQ(gate.layout, RowLayout::rows_x4) << path;
      }
      for (const auto& [threads, piece] : {std::pair{4, size_t{64}}, {3, size_t{4096}}, {2, Model::kResidentPieceBytes}}) {
        auto many = Model::load(path);
        many->make_resident(true, repack ? &placer : nullptr, threads, piece);
        const std::string what = path + (repack ? " repacked" : "") + ", " + std::to_string(threads) + " threads, pieces of " +
                                 std::to_string(piece) + " bytes";
        ASSERT_EQ(many->resident_bytes(), one->resident_bytes()) << what;
        const auto a = matrices_of(one->weights()), b = matrices_of(many->weights());
        ASSERT_EQ(a.size(), b.size()) << what;
        size_t compared = 0;
        for (size_t i = 0; i < a.size(); ++i) {
          const MatrixRef &x = *a[i].first, &y = *b[i].first;
          ASSERT_EQ(x.data == nullptr, y.data == nullptr) << what << ", matrix " << i;
          if (!x.data) continue;
          EXPECT_EQ(x.layout, y.layout) << what << ", matrix " << i;
          EXPECT_NE(x.data, y.data) << what;
          const size_t bytes = x.bytes() * static_cast<size_t>(a[i].second);
          EXPECT_EQ(std::memcmp(x.data, y.data, bytes), 0) << what << ", matrix " << i;
          compared += bytes;
        }
        EXPECT_GT(compared, one->weights().expert_bytes) << what;
      }
    }
  }
}

// A tied output (no output.weight: the embedding table is the output matrix, as in
// Granite and ERNIE-4.5 files) gets a copy of its own in the backend's layout where
// that interleaves its rows, and the embedding lookup reads the file mapping: one copy
// as before, and the output product runs token by token as the other interleaved
// matrices do, so the engine is split-invariant as with an output.weight of its own.
TEST(ResidentWeights, ATiedOutputIsInterleavedAndTheLookupReadsTheMapping) {
  ThreadPool pool(2);
  for (DType t : {DType::Q4_0, DType::Q8_0}) {
    SyntheticModelSpec spec;
    spec.dtype = t;
    spec.n_embd = 128;
    spec.head_dim = 32;
    spec.n_ff_expert = 128;
    spec.tied_output = true;
    const std::string path = testing::scratch_path(std::string("tied-") + dtype_name(t)) + ".gguf";
    write_synthetic_model(spec, path);
    auto mapped = Model::load(path);
    ASSERT_EQ(mapped->file().find_tensor("output.weight"), nullptr);
    ASSERT_EQ(mapped->weights().output.data, mapped->weights().tok_embd.data);
    const std::vector<float> want = logits_of(*mapped, pool);
    auto resident = Model::load(path);
    resident->make_resident(true, testing::cpu_placer(), 2);
    const ModelWeights& w = resident->weights();
    const bool vnni = cpu::q4_vnni_enabled();
    EXPECT_EQ(w.output.layout, vnni ? RowLayout::rows_x4 : RowLayout::gguf) << path;
    EXPECT_EQ(w.tok_embd.layout, RowLayout::gguf) << path;
    EXPECT_EQ(w.tok_embd.data == resident->file().tensor("token_embd.weight").data, vnni) << path;
    EXPECT_EQ(w.output.data != w.tok_embd.data, vnni) << path;
    const std::vector<float> got = logits_of(*resident, pool);
    ASSERT_EQ(got.size(), want.size());
    const double rms = testing::rel_err(got, want);
    EXPECT_LT(rms, 1e-4) << path;
    std::printf("%s: relative RMS difference %.2e against the mapping\n", path.c_str(), rms);
    EngineOptions o;
    o.model_path = path;
    o.threads = 2;
    EXPECT_EQ(Engine::open(o)->split_invariant(), vnni) << path;
  }
}

}  // namespace
}  // namespace moeflow

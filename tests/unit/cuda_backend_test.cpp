// The CUDA backend against the CPU. Wherever CUDA is built: the kernels' decoder
// against dequantize_row. On a GPU (skipped without one; run through the device
// machine): products and attention against float64 references, every fixture's logits
// against the CPU backend's, sequences in company bit-equal to alone, offloading
// lossless at every budget, and the expert budget holding in device memory.
#ifdef MOEFLOW_HAVE_CUDA
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "base/error.h"
#include "engine/expert_offload.h"
#include "kernels/cpu/attention.h"
#include "kernels/cuda/kernels.h"
#include "model/synthetic_model.h"
#include "moeflow/engine.h"
#include "policy/policy_factory.h"
#include "engine_scripts.h"
#include "test_paths.h"

namespace moeflow {
namespace {

using namespace moeflow::testing;

const DType kTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0, DType::Q4_0,   DType::Q4_1,   DType::Q5_0,
                        DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL,
                        DType::IQ4_XS, DType::MXFP4};

#define REQUIRE_GPU() \
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device (run on a GPU machine)"

std::vector<float> normal_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

TEST(CudaDecode, GroupsMatchDequantizeRow) {
  const int64_t n = 1024;
  const std::vector<float> src = normal_floats(n, 1);
  for (DType t : kTypes) {
    std::vector<uint8_t> q(row_bytes(t, n));
    quantize_row(t, src.data(), q.data(), n);
    std::vector<float> ref(n), got(n);
    dequantize_row(t, q.data(), ref.data(), n);
    cuda::decode_row_on_host(t, q.data(), got.data(), n);
    double err = 0, mag = 0;
    for (int64_t i = 0; i < n; ++i) {
      err = std::max(err, std::fabs(static_cast<double>(got[i]) - ref[i]));
      mag = std::max(mag, std::fabs(static_cast<double>(ref[i])));
    }
    std::printf("%-5s decoder vs dequantize_row: max error %.2e of %.2f\n", dtype_name(t), err, mag);
    EXPECT_LE(err, 1e-6 * mag) << dtype_name(t);
  }
}

// MXFP4's scale is made from its exponent's bits: every exponent, the subnormal scales
// of e = 0 and 1 among them, against the reference's ldexp.
TEST(CudaDecode, Mxfp4ScalesAtEveryExponent) {
  std::vector<uint8_t> blocks(256 * 17);
  for (int e = 0; e < 256; ++e) {
    blocks[e * 17] = static_cast<uint8_t>(e);
    for (int j = 0; j < 16; ++j) blocks[e * 17 + 1 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  }
  std::vector<float> ref(256 * 32), got(256 * 32);
  dequantize_row(DType::MXFP4, blocks.data(), ref.data(), 256 * 32);
  cuda::decode_row_on_host(DType::MXFP4, blocks.data(), got.data(), 256 * 32);
  EXPECT_EQ(0, std::memcmp(ref.data(), got.data(), ref.size() * 4));
}

TEST(CudaKernels, ProductsMatchFloat64AndEachTokenAlone) {
  REQUIRE_GPU();
  CudaBackend b(0, 2);
  const int64_t rows = 67, cols = 512, n_tok = 11;
  const std::vector<float> w = normal_floats(static_cast<size_t>(rows * cols), 2);
  const std::vector<float> x = normal_floats(static_cast<size_t>(n_tok * cols), 3);
  for (DType t : kTypes) {
    const size_t rb = row_bytes(t, cols);
    auto buf = b.allocate(rb * rows);
    for (int64_t r = 0; r < rows; ++r) quantize_row(t, w.data() + r * cols, buf->data() + r * rb, cols);
    std::vector<float> y(static_cast<size_t>(n_tok * rows)), one(static_cast<size_t>(rows));
    Product all{t, RowLayout::gguf, buf->data(), rows, cols, x.data(), n_tok, y.data()};
    b.products(&all, 1);
    double err = 0, mag = 0;
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      dequantize_row(t, buf->data() + r * rb, row.data(), cols);
      for (int64_t k = 0; k < n_tok; ++k) {
        double ref = 0;
        for (int64_t c = 0; c < cols; ++c) ref += static_cast<double>(row[c]) * x[k * cols + c];
        err = std::max(err, std::fabs(y[k * rows + r] - ref));
        mag = std::max(mag, std::fabs(ref));
      }
    }
    std::printf("%-5s %lld x %lld, %lld tokens: max error %.2e of %.2f (relative %.2e)\n", dtype_name(t),
                static_cast<long long>(rows), static_cast<long long>(cols), static_cast<long long>(n_tok), err, mag,
                err / mag);
    EXPECT_LE(err, 2e-5 * mag) << dtype_name(t);
    for (int64_t k : {0, 5, 10}) {
      Product alone{t, RowLayout::gguf, buf->data(), rows, cols, x.data() + k * cols, 1, one.data()};
      b.products(&alone, 1);
      EXPECT_EQ(0, std::memcmp(one.data(), y.data() + k * rows, one.size() * 4))
          << dtype_name(t) << ": token " << k << " alone differs from its result in company";
    }
  }
}

// The kernel's rows per warp (1, 2, 4 or its own choice) and the token count change
// its speed only: every setting gives the bits of one row per warp. 67 rows leave a
// part-filled warp at every setting; 11 tokens a part-filled pass of eight.
TEST(CudaKernels, RowsPerWarpChangeNoBit) {
  REQUIRE_GPU();
  const int64_t rows = 67, cols = 512, n_tok = 11;
  const std::vector<float> w = normal_floats(static_cast<size_t>(rows * cols), 4);
  const std::vector<float> x = normal_floats(static_cast<size_t>(n_tok * cols), 5);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  float *dx = nullptr, *dy = nullptr;
  uint8_t* dw = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dx), x.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dy), static_cast<size_t>(rows * n_tok) * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dw), static_cast<size_t>(rows * cols) * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  auto run = [&](DType t, int64_t tokens, int rows_per_warp) {
    std::vector<float> y(static_cast<size_t>(rows * tokens));
    cuda::matvec(t, dw, rows, cols, dx, cols, tokens, dy, rows, nullptr, rows_per_warp);
    EXPECT_EQ(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    return y;
  };
  for (DType t : kTypes) {
    const size_t rb = row_bytes(t, cols);
    std::vector<uint8_t> q(rb * rows);
    for (int64_t r = 0; r < rows; ++r) quantize_row(t, w.data() + r * cols, q.data() + r * rb, cols);
    ASSERT_EQ(cudaMemcpy(dw, q.data(), q.size(), cudaMemcpyHostToDevice), cudaSuccess);
    for (int64_t tokens : {int64_t{1}, int64_t{3}, n_tok}) {
      const std::vector<float> ref = run(t, tokens, 1);
      for (int r : {0, 2, 4}) {
        const std::vector<float> got = run(t, tokens, r);
        EXPECT_EQ(0, std::memcmp(got.data(), ref.data(), ref.size() * 4))
            << dtype_name(t) << ", " << tokens << " tokens, " << r << " rows per warp";
      }
    }
  }
  cudaFree(dx), cudaFree(dy), cudaFree(dw);
}

// The paged cache filled through each backend's kv_store, then attention of three
// tokens of two sequences (positions up to 40 over blocks of 16, a table with its
// blocks out of order), with and without a window and sinks, f32 and f16.
TEST(CudaKernels, AttentionAndKvStoresMatchTheReference) {
  REQUIRE_GPU();
  CudaBackend b(0, 2);
  CpuBackend cpu(1);
  const int64_t n_head = 8, n_kv = 2, hd = 64, bl = 16, n_blocks = 8;
  const std::vector<int32_t> table0 = {5, 1, 6}, table1 = {2, 7, 0};
  const std::vector<float> sinks = normal_floats(static_cast<size_t>(n_head), 9);
  for (DType kv : {DType::F32, DType::F16}) {
    const size_t elem = kv == DType::F16 ? 2 : 4;
    const int64_t stride = n_kv * bl * hd;
    const size_t bytes = static_cast<size_t>(n_blocks * stride) * elem;
    auto dk = b.allocate_cache(bytes), dv = b.allocate_cache(bytes);
    std::vector<uint8_t> hk(bytes), hv(bytes);
    for (int s = 0; s < 2; ++s) {
      const std::vector<int32_t>& table = s == 0 ? table0 : table1;
      for (int64_t p = 0; p < 41; ++p) {
        const std::vector<float> k = normal_floats(static_cast<size_t>(n_kv * hd), 100 + 97 * s + static_cast<uint32_t>(p));
        const std::vector<float> v = normal_floats(static_cast<size_t>(n_kv * hd), 5000 + 97 * s + static_cast<uint32_t>(p));
        const size_t off = static_cast<size_t>(table[p / bl] * stride) * elem;
        const int64_t row = p % bl;
        b.kv_store(kv, k.data(), n_kv, hd, {dk->data() + off, bl * hd, bl, row, true});
        b.kv_store(kv, v.data(), n_kv, hd, {dv->data() + off, bl * hd, bl, row, false});
        cpu.kv_store(kv, k.data(), n_kv, hd, {hk.data() + off, bl * hd, bl, row, true});
        cpu.kv_store(kv, v.data(), n_kv, hd, {hv.data() + off, bl * hd, bl, row, false});
      }
    }
    const std::vector<AttentionQuery> tok = {{40, table0.data()}, {17, table1.data()}, {3, table0.data()}};
    const std::vector<float> q = normal_floats(static_cast<size_t>(3 * n_head * hd), 11);
    for (int64_t window : {0, 24}) {
      AttentionShape shape{n_head, n_kv, hd, bl, stride, kv};
      shape.window = window;
      if (window) shape.sinks = sinks.data();
      std::vector<float> ref(q.size()), got(q.size());
      cpu::attention_reference(shape, q.data(), 3, tok.data(), hk.data(), hv.data(), ref.data());
      b.attention(shape, q.data(), 3, tok.data(), dk->data(), dv->data(), got.data());
      double err = 0, mag = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        err = std::max(err, std::fabs(static_cast<double>(got[i]) - ref[i]));
        mag = std::max(mag, std::fabs(static_cast<double>(ref[i])));
      }
      std::printf("attention, %s cache, window %lld: max error %.2e of %.2f\n", dtype_name(kv),
                  static_cast<long long>(window), err, mag);
      EXPECT_LE(err, 1e-5 * mag) << dtype_name(kv) << ", window " << window;
    }
  }
}

const char* const kFixtures[] = {"mixtral-f32.gguf",   "mixtral-f16.gguf",   "mixtral-bf16.gguf", "olmoe-f32.gguf",
                                 "olmoe-q4_0.gguf",    "qwen2moe-f32.gguf",  "qwen2moe-q4_0.gguf",
                                 "qwen3moe-f32.gguf",  "qwen3moe-q8_0.gguf", "deepseek2-f32.gguf",
                                 "deepseek2-q4_0.gguf", "deepseek-v3-f32.gguf", "glm4moe-f32.gguf", "granitemoe-f32.gguf",
                                 "granitemoe-shared-q8_0.gguf", "ernie4_5-moe-f32.gguf", "hunyuan-moe-f32.gguf",
                                 "gpt-oss-f32.gguf",
                                 "gpt-oss-mxfp4.gguf"};

EngineOptions cuda_options(const std::string& fixture, const std::string& policy = "all",
                           const std::string& budget = "") {
  EngineOptions o = options_for(fixture, policy, budget);
  o.backend = "cuda";
  return o;
}

// The CPU reference with int16 activations (within ~2e-5 of f32), as the GPU's are f32.
EngineOptions cpu_reference(const std::string& fixture) {
  EngineOptions o = options_for(fixture);
  o.activations = "int16";
  return o;
}

TEST(CudaEngine, LogitsMatchTheCpuBackendOnEveryFixture) {
  REQUIRE_GPU();
  for (const char* fixture : kFixtures) {
    auto cpu = Engine::open(cpu_reference(fixture));
    auto gpu = Engine::open(cuda_options(fixture));
    Script one = prompt_token_by_token(cpu->n_vocab());
    Script chunked = one;
    chunked.chunk = 5;
    for (const Script& s : {one, chunked}) {
      const double d = max_relative_difference(run_alone(*gpu, s), run_alone(*cpu, s));
      std::printf("%-20s chunks of %lld: logits relative to the CPU backend's %.2e\n", fixture,
                  static_cast<long long>(s.chunk), d);
      EXPECT_LE(d, 1e-3) << fixture << ", chunks of " << s.chunk;
    }
  }
}

// The k-quant mix users download most (Q4_K with Q6_K experts' rows, as Q4_K_M gives
// some) and the 4-bit non-linear types, in models of 256-wide rows written here.
TEST(CudaEngine, KQuantAndIQuantModelsMatchTheCpuBackend) {
  REQUIRE_GPU();
  struct Case {
    DType dense, experts;
  };
  for (const Case c : {Case{DType::Q4_K, DType::Q6_K}, Case{DType::Q5_K, DType::Q3_K}, Case{DType::Q2_K, DType::Q4_K},
                       Case{DType::IQ4_XS, DType::IQ4_XS}, Case{DType::IQ4_NL, DType::MXFP4}}) {
    SyntheticModelSpec spec;
    spec.dtype = c.dense;
    spec.expert_dtype = c.experts;
    spec.n_embd = 256;
    spec.n_ff_expert = 256;
    spec.n_head = 4;
    spec.n_head_kv = 2;
    spec.head_dim = 64;
    const std::string name = std::string(dtype_name(c.dense)) + "-" + dtype_name(c.experts);
    const std::string path = scratch_path("cuda-" + name) + ".gguf";
    write_synthetic_model(spec, path);
    EngineOptions gpu_o = cuda_options("mixtral-f32.gguf"), cpu_o = cpu_reference("mixtral-f32.gguf");
    gpu_o.model_path = cpu_o.model_path = path;
    auto cpu = Engine::open(cpu_o);
    auto gpu = Engine::open(gpu_o);
    Script s = prompt_token_by_token(cpu->n_vocab());
    s.chunk = 3;
    const double d = max_relative_difference(run_alone(*gpu, s), run_alone(*cpu, s));
    std::printf("%-14s logits relative to the CPU backend's %.2e\n", name.c_str(), d);
    EXPECT_LE(d, 1e-3) << name;
  }
}

TEST(CudaEngine, EachSequenceGetsTheLogitsItGetsAlone) {
  REQUIRE_GPU();
  for (const char* fixture : {"mixtral-f32.gguf", "qwen2moe-q4_0.gguf", "deepseek2-q4_0.gguf", "gpt-oss-mxfp4.gguf"}) {
    auto e = Engine::open(cuda_options(fixture));
    const std::vector<Script> scripts = make_scripts(8, e->n_vocab(), 21);
    expect_same(run_together(*e, scripts, 5), *e, scripts, std::string(fixture) + " on the GPU");
  }
}

// Experts from pinned host memory into a device budget: under every policy at 25%, and
// at 50% and 100% under LRU, the logits of the all-resident GPU run, bit for bit; with
// --on-miss host-compute the misses run on the CPU (within 1e-3).
TEST(CudaEngine, OffloadingIsLosslessAtEveryBudget) {
  REQUIRE_GPU();
  for (const char* fixture : {"mixtral-f32.gguf", "qwen3moe-q8_0.gguf", "qwen2moe-q4_0.gguf", "deepseek2-q4_0.gguf"}) {
    auto resident = Engine::open(cuda_options(fixture));
    const std::vector<Script> scripts = make_scripts(6, resident->n_vocab(), 5);
    std::vector<Transcript> ref;
    for (const Script& s : scripts) ref.push_back(run_alone(*resident, s));
    std::vector<std::pair<std::string, std::string>> runs;
    for (const std::string& p : policy_names()) runs.push_back({p, "25%"});
    runs.push_back({"lru", "50%"});
    runs.push_back({"lru", "100%"});
    for (const auto& [policy, budget] : runs) {
      auto e = Engine::open(cuda_options(fixture, policy, budget));
      ASSERT_TRUE(e->offloaded());
      ASSERT_NO_FATAL_FAILURE(expect_same_logits(run_together(*e, scripts, 3), ref,
                                                 std::string(fixture) + ", " + policy + " at " + budget));
      const ExpertCacheStats st = e->cache_stats();
      if (budget == "25%") {
        EXPECT_GT(st.misses, 0u) << policy;
      }
      std::printf("%-20s %-14s %4s: hit rate %.1f%%, %.1f MiB moved\n", fixture, policy.c_str(), budget.c_str(),
                  100.0 * static_cast<double>(st.hits) / static_cast<double>(std::max<uint64_t>(1, st.hits + st.misses)),
                  static_cast<double>(st.bytes_read) / 1048576.0);
    }
    // The host's experts on int16 activations (within ~2e-5 of f32 per product), and on
    // auto's (int8 for q4_0: as the CPU backend rounds them, a near-tie routing may flip
    // at one position).
    for (const char* act : {"int16", "auto"}) {
      EngineOptions o = cuda_options(fixture, "lru", "25%");
      o.on_miss = "host-compute";
      o.activations = act;
      auto e = Engine::open(o);
      double worst = 0;
      int64_t beyond = 0;
      for (size_t i = 0; i < scripts.size(); ++i) {
        Script s = scripts[i];
        s.n_gen = 0;  // the same tokens in: logits compare position by position
        const std::vector<double> d = relative_differences(run_alone(*e, s), run_alone(*resident, s));
        worst = std::max(worst, *std::max_element(d.begin(), d.end()));
        beyond += std::count_if(d.begin(), d.end(), [](double x) { return x >= 5e-2; });
      }
      const uint64_t host = e->offload().source->host_computed();
      std::printf("%-20s host-compute at 25%%, %-5s activations: %llu experts on the CPU, logits within %.2e\n",
                  fixture, act, static_cast<unsigned long long>(host), worst);
      EXPECT_GT(host, 0u);
      if (std::string(act) == "int16") {
        EXPECT_LE(worst, 1e-3) << fixture;
      } else {
        EXPECT_LE(beyond, 1) << fixture;
      }
    }
  }
}

TEST(CudaEngine, TheExpertBudgetHoldsInDeviceMemory) {
  REQUIRE_GPU();
  SyntheticModelSpec spec;
  spec.dtype = DType::Q8_0;
  spec.n_embd = 512;
  spec.n_ff_expert = 1024;
  spec.n_layer = 4;
  spec.n_head = 8;
  spec.n_head_kv = 2;
  spec.head_dim = 64;
  const std::string path = scratch_path("cuda-budget") + ".gguf";
  write_synthetic_model(spec, path);
  const uint64_t before = cuda_device_memory_used(0);
  EngineOptions o = cuda_options("mixtral-f32.gguf", "lru", "25%");
  o.model_path = path;
  auto e = Engine::open(o);
  const std::vector<Script> scripts = make_scripts(4, e->n_vocab(), 3);
  run_together(*e, scripts, 1);
  const uint64_t after = cuda_device_memory_used(0);
  const auto* b = dynamic_cast<CudaBackend*>(&e->backend());
  ASSERT_NE(b, nullptr);
  const CudaBackend::DeviceMemory m = b->device_memory();
  const ExpertCacheStats st = e->cache_stats();
  std::printf("budget %.1f MiB of %.1f MiB: expert buffers %.1f MiB; weights %.1f, KV %.1f, scratch %.1f MiB; "
              "device memory in use grew %.1f MiB; hit rate %.1f%%\n",
              st.budget_bytes / 1048576.0, st.expert_bytes_total / 1048576.0, m.experts / 1048576.0,
              m.weights / 1048576.0, m.cache / 1048576.0, m.scratch / 1048576.0, (after - before) / 1048576.0,
              100.0 * static_cast<double>(st.hits) / static_cast<double>(std::max<uint64_t>(1, st.hits + st.misses)));
  EXPECT_LE(m.experts, st.budget_bytes);
  EXPECT_GT(st.misses, 0u);
  // What the device says, against what the backend accounts plus the runtime's own
  // (kernel images, allocation granularity): 64 MiB.
  EXPECT_LE(after - before, m.weights + m.cache + m.scratch + st.budget_bytes + (64ull << 20));
}

}  // namespace
}  // namespace moeflow
#endif  // MOEFLOW_HAVE_CUDA

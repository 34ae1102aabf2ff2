// `moeflow bench-kernels`: the mat-vec kernels alone, per weight type, from cache and
// streaming from memory, beside the STREAM triad measured just before. A decode step
// is a chain of mat-vecs; this separates how fast the kernel computes (a matrix that
// stays in cache) from how well it keeps up with memory (many matrices, far more bytes
// than the caches), without a model. Where a CPU has a second kernel for a type (q4_0:
// AVX-512 VNNI and the f32 Highway kernel) both are measured in the same run, and the
// interleaved layout's kernel also as decode runs an expert's gate and up: two
// matrices on one activation in one batch. The k-quants (when --cols is a multiple of
// 256): their VNNI kernels and the f32 ones (Highway for Q4_K..Q6_K, generic for Q2_K, Q3_K);
// IQ4_NL, IQ4_XS and MXFP4 on Highway's f32 kernel, Q4_1, Q5_0, Q5_1 on the generic one
// (and all six on VNNI on int8), the lattice i-quants on the AVX2 int8 kernel and the
// generic one. Without VNNI,
// every quantised type on int8 activations also takes its AVX2 int8 kernel. With --tokens N each product is a
// batched decode step's: N tokens' mat-vecs on one matrix read once (per-token jobs,
// the multi-token kernels), and --activations int8 takes the int8 kernels.
// --backend cuda runs the GPU's mat-vec kernel instead, for every type it reads and
// each rows-per-warp setting, beside the device's copy bandwidth.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/commands.h"
#include "kernels/cpu/int8_avx2.h"
#include "kernels/cpu/kquant_matvec.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/q4_vnni.h"
#include "kernels/cpu/roofline.h"
#include "kernels/cpu/rows_x4_vnni.h"
#include "base/error.h"
#include "backend/backend_factory.h"
#ifdef MOEFLOW_HAVE_CUDA
#include "kernels/cuda/dequant_groups.cuh"
#include "kernels/cuda/kernels.h"
#endif
#include "tensor/anon_memory.h"
#include "tensor/dtype.h"
#include "tensor/iq_lattice.h"
#include "tensor/rows_x4.h"

namespace moeflow::cli {

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct KernelRun {
  DType dtype;
  std::string kernel;
  double cache_gbs = 0, stream_gbs = 0, triad_gbs = 0;
};

// How the products are asked for: tokens per matrix (1: a mat-vec; more: a batched
// decode step's per-token jobs), on int8 or int16 activations where the kernel takes
// either.
struct Products {
  int64_t tokens = 1;
  bool x_int8 = false;
};

// GB/s of products over the n_mat matrices at W (each mat_bytes), cycled: the best of
// 3 passes of at least min_seconds each. Paired: matrices m and m + 1 as one batch on
// the same activations, as a decode step runs an expert's gate and up. x: tokens * cols
// floats; y: 2 * tokens * rows.
double matvec_gbs(DType t, RowLayout layout, const uint8_t* W, size_t mat_bytes, int64_t n_mat, int64_t rows, int64_t cols,
                  const float* x, float* y, ThreadPool* pool, double min_seconds, bool paired, const Products& pr) {
  auto mat = [&](int64_t m) { return W + mat_bytes * static_cast<size_t>(m); };
  auto job = [&](int64_t m, float* out) {
    return cpu::MatmulJob{t, layout, mat(m), rows, cols, x, pr.tokens, out, true, pr.x_int8};
  };
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    int64_t calls = 0;
    const double t0 = now();
    double dt = 0;
    do {
      for (int64_t m = 0; m < n_mat; ++m, ++calls) {
        if (paired && m + 1 < n_mat) {
          const cpu::MatmulJob jobs[2] = {job(m, y), job(m + 1, y + pr.tokens * rows)};
          cpu::matmul_batch(jobs, 2, pool);
          ++m, ++calls;
          continue;
        }
        const cpu::MatmulJob one = job(m, y);
        cpu::matmul_batch(&one, 1, pool);
      }
      dt = now() - t0;
    } while (dt < min_seconds);
    best = std::max(best, static_cast<double>(calls) * static_cast<double>(mat_bytes) / dt / 1e9);
  }
  return best;
}

// One matrix of random weights of type t: 512 rows quantised, repeated (values do not
// matter for speed, and a GPU-sized matrix of k-quants takes seconds to quantise).
std::vector<uint8_t> random_matrix(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  const size_t rb = row_bytes(t, cols);
  std::vector<uint8_t> w(rb * static_cast<size_t>(rows));
  std::vector<float> row(static_cast<size_t>(cols));
  const int64_t distinct = std::min<int64_t>(rows, 512);
  if (dtype_is_lattice_iquant(t)) {  // no quantiser: valid blocks from random bytes
    random_lattice_blocks(static_cast<int>(t), static_cast<int>(cols / 256 * distinct), rng(), -9, w.data());
  } else {
    for (int64_t r = 0; r < distinct; ++r) {
      for (float& v : row) v = uni(rng);
      quantize_row(t, row.data(), w.data() + rb * static_cast<size_t>(r), cols);
    }
  }
  for (int64_t r = distinct; r < rows; ++r)
    std::memcpy(w.data() + rb * static_cast<size_t>(r), w.data() + rb * static_cast<size_t>(r % distinct), rb);
  return w;
}

// The GPU's mat-vec kernel: streaming GB/s per type and rows per warp, against the
// device's own copy bandwidth.
int bench_kernels_cuda(const std::string& backend, int64_t rows, int64_t cols, int64_t tokens, uint64_t stream_bytes,
                       double min_seconds, bool json) {
  // The factory reads the name (cuda, cuda:N), selects the device, and says why when
  // the build has no CUDA backend or the GPU is not there.
  const std::unique_ptr<Backend> gpu = make_backend({backend, 1});
#ifndef MOEFLOW_HAVE_CUDA
  (void)gpu, (void)rows, (void)cols, (void)tokens, (void)stream_bytes, (void)min_seconds, (void)json;
  throw std::logic_error("bench-kernels: a GPU backend in a build without CUDA");
#else
  const double copy_gbs = gpu->measure_memory_bandwidth_gbs(1ull << 30);
  std::vector<int> settings = {0, 1, 2};  // 0: the kernel's own choice
  if (tokens == 1) settings.push_back(4);
  std::mt19937 rng(1);
  nlohmann::json runs = nlohmann::json::array();
  std::vector<DType> types = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,   DType::Q4_0,
                              DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL, DType::MXFP4};
  if (cols % 256 == 0)
    types.insert(types.end(), {DType::Q4_K, DType::Q6_K, DType::Q5_K, DType::Q3_K, DType::Q2_K, DType::IQ4_XS});
  if (!json)
    std::printf("CUDA mat-vec kernel on %s, %lld x %lld matrices, %lld token%s a matrix, %.0f MiB streamed per type; "
                "device copy bandwidth %.0f GB/s\n| type   | rows per warp | GB/s   | of copy bandwidth | G mult-add/s |\n"
                "|--------|---------------|--------|-------------------|--------------|\n",
                gpu->kernel_target().c_str(), static_cast<long long>(rows), static_cast<long long>(cols),
                static_cast<long long>(tokens), tokens == 1 ? "" : "s", static_cast<double>(stream_bytes) / 1048576.0,
                copy_gbs);
  for (DType t : types) {
    if (!cuda::cuda_supports(t)) continue;
    const std::vector<uint8_t> w = random_matrix(t, rows, cols, rng);
    const std::vector<double> gbs = cuda::matvec_stream_gbs(t, w.data(), rows, cols, tokens, settings, stream_bytes,
                                                            min_seconds);
    const double macs_per_byte = static_cast<double>(cols * tokens) / static_cast<double>(row_bytes(t, cols));
    for (size_t i = 0; i < settings.size(); ++i) {
      const std::string setting = settings[i] ? std::to_string(settings[i]) : "auto";
      if (json)
        runs.push_back({{"dtype", dtype_name(t)}, {"rows_per_warp", setting}, {"stream_gbs", gbs[i]},
                        {"fraction_of_copy", gbs[i] / copy_gbs}, {"gmacs", gbs[i] * macs_per_byte}});
      else
        std::printf("| %-6s | %-13s | %6.0f | %16.1f%% | %12.0f |\n", dtype_name(t), setting.c_str(), gbs[i],
                    100.0 * gbs[i] / copy_gbs, gbs[i] * macs_per_byte);
    }
  }
  if (json)
    std::printf("%s\n", nlohmann::json({{"backend", gpu->name()}, {"rows", rows}, {"cols", cols}, {"tokens", tokens},
                                        {"stream_bytes", stream_bytes}, {"copy_gbs", copy_gbs}, {"kernels", runs}})
                            .dump()
                            .c_str());
  return 0;
#endif
}

}  // namespace

int cmd_bench_kernels(int argc, char** argv) {
  Args a("bench-kernels");
  a.flag("-t,--threads", "worker threads", true, "2");
  a.flag("--rows", "rows of each matrix", true, "2048");
  a.flag("--cols", "columns of each matrix (a multiple of 32)", true, "768");
  a.flag("--stream-mib", "bytes of matrices cycled through for the streaming test, per type", true, "256");
  a.flag("--min-seconds", "shortest timed pass (each figure is the best of 3)", true, "0.3");
  a.flag("--triad-mib", "bytes of each of the triad's three arrays", true, "64");
  a.flag("--tokens", "tokens per matrix: 1 a mat-vec, more a batched decode step's (the matrix read once for all)",
         true, "1");
  a.flag("--activations", "int16 or int8: the activations the integer kernels multiply (VNNI; AVX2 on int8)", true, "int16");
  a.flag("--backend", "cpu, or cuda[:N]: the GPU's kernel (use matrices of GPU size, e.g. --rows 14336 --cols 4096)",
         true, "cpu");
  a.flag("--json", "print one JSON object", false);
  a.parse(argc, argv, 2);
  const double min_seconds = a.number("--min-seconds", 0.0, 60.0);
  const uint64_t triad_bytes = static_cast<uint64_t>(a.integer("--triad-mib", 1, 1 << 14)) << 20;
  const double ram = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  if (ram > 0 && 3.0 * static_cast<double>(triad_bytes) > 0.8 * ram)
    throw UsageError("moeflow bench-kernels: --triad-mib " + a.str("--triad-mib") + ": three arrays of it take more than "
                     "this machine's memory allows (" + std::to_string(static_cast<int64_t>(ram / 1048576.0)) + " MiB)");
  const int threads = static_cast<int>(a.integer("--threads", 1, 256));
  const int64_t rows = a.integer("--rows", 1, 1 << 20);
  const int64_t cols = a.integer("--cols", 32, 1 << 20);
  if (cols % 32 != 0)
    throw UsageError("moeflow bench-kernels: --cols " + std::to_string(cols) +
                     " is not a multiple of 32 (the quantised types' block)");
  const uint64_t stream_bytes = static_cast<uint64_t>(a.integer("--stream-mib", 1, 1 << 16)) << 20;
  Products pr;
  pr.tokens = a.integer("--tokens", 1, 256);
  const std::string act = a.str("--activations");
  if (act != "int16" && act != "int8") throw UsageError("moeflow bench-kernels: --activations " + act + ": int16 or int8");
  pr.x_int8 = act == "int8";
  const std::string backend = a.str("--backend");
  if (backend != "cpu")
    return bench_kernels_cuda(backend, rows, cols, pr.tokens, stream_bytes, min_seconds, a.has("--json"));
  ThreadPool pool(threads);
  ThreadPool* const p = threads > 1 ? &pool : nullptr;

  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(pr.tokens * cols)), y(2 * static_cast<size_t>(pr.tokens * rows));
  for (float& v : x) v = uni(rng);

  const bool vnni = cpu::q4_vnni_enabled();
  std::vector<KernelRun> runs;
  std::vector<DType> types = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0};
  if (cols % 256 == 0)
    types.insert(types.end(), {DType::Q4_K, DType::Q6_K, DType::Q5_K, DType::Q3_K, DType::Q2_K, DType::IQ4_XS});
  types.insert(types.end(), {DType::IQ4_NL, DType::MXFP4, DType::Q4_1, DType::Q5_0, DType::Q5_1});
  if (cols % 256 == 0)
    types.insert(types.end(), {DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS, DType::IQ3_S, DType::IQ1_S,
                               DType::IQ1_M});
  if (cols % 256 != 0)
    std::fprintf(stderr, "note: --cols %lld is not a multiple of 256: no k-quant rows\n", static_cast<long long>(cols));
  for (DType t : types) {
    // One matrix of random weights, copied as often as the streaming test needs (its
    // values do not matter for speed).
    const size_t rb = row_bytes(t, cols);
    const size_t mat_bytes = rb * static_cast<size_t>(rows);
    const int64_t n_mat = std::max<int64_t>(1, static_cast<int64_t>(stream_bytes / mat_bytes));
    // In memory like the resident model's (huge pages where granted).
    const size_t total = mat_bytes * static_cast<size_t>(n_mat);
    const auto mem = AnonMemory::allocate(total);
    if (!mem)
      throw InputError("bench-kernels: cannot allocate " + std::to_string(total >> 20) + " MiB of " + dtype_name(t) +
                       " matrices (lower --stream-mib, or --rows/--cols)");
    uint8_t* const w = mem->data();
    const std::vector<uint8_t> w0 = random_matrix(t, rows, cols, rng);
    for (int64_t m = 0; m < n_mat; ++m) std::memcpy(w + mat_bytes * static_cast<size_t>(m), w0.data(), mat_bytes);
    // The kernels of this type: on VNNI CPUs q4_0, q8_0 (and Q4_K, Q5_K on int8 activations)
    // first run on rows interleaved in fours (what the resident model uses), then in
    // GGUF's layout; q4_0, the k-quants (and IQ4_NL, IQ4_XS, MXFP4 on int8 activations) have a
    // VNNI kernel for that too, then the f32 one.
    struct Kernel {
      std::string name;
      bool vnni, interleaved, paired = false;
      bool avx2_int8 = false;  // int8_avx2.h's kernels (else switched off)
    };
    const std::string target = cpu::simd_target_name();
    std::vector<Kernel> kernels;
    // (Interleaved Q4_K / Q5_K rows have int8 kernels only, as the engine interleaves them.)
    if (vnni && rows_x4_supports(t) && rows_x4_fits(rows, cols) && (!rows_x4_int8_only(t) || pr.x_int8)) {
      kernels.push_back({"avx512-vnni rows x4", true, true});
      // Two matrices on one activation read together (rows_x4_quads_multi).
      kernels.push_back({"rows x4, pairs on one x", true, true, true});
    }
    // k-quants without VNNI: Q4_K..Q6_K an f32 Highway kernel, Q2_K, Q3_K the generic path.
    const std::string kquant_f32 = t == DType::Q2_K || t == DType::Q3_K ? "generic f32" : "f32 (" + target + ")";
    if ((t == DType::Q4_0 || cpu::kquant_vnni_type(t)) && vnni) {
      kernels.push_back({"avx512-vnni", true, false});
      kernels.push_back({dtype_is_kquant(t) ? kquant_f32 : "f32 (" + target + ")", false, false});
    } else if (dtype_is_kquant(t)) {
      kernels.push_back({kquant_f32, false, false});
    } else if (dtype_is_lattice_iquant(t)) {
      // The AVX2 int8 kernel on every AVX2 CPU (int8_avx2.h), else the generic path.
      if (pr.x_int8 && cpu::int8_avx2_enabled()) kernels.push_back({"int8 (AVX2)", vnni, false, false, true});
      kernels.push_back({"generic f32", false, false});
    } else if (t == DType::IQ4_NL || t == DType::IQ4_XS || t == DType::MXFP4 || dtype_is_legacy_quant(t)) {
      // They have a VNNI kernel on int8 activations (nl4_vnni.h); Q4_1, Q5_0, Q5_1 else
      // the generic path.
      if (vnni && pr.x_int8) kernels.push_back({"avx512-vnni", true, false});
      kernels.push_back({dtype_is_legacy_quant(t) ? "generic f32" : "f32 (" + target + ")", false, false});
    } else {
      kernels.push_back({(t == DType::Q8_0 ? "int16 (" : "f32 (") + target + ")", vnni, false});
    }
    // Without VNNI, every quantised type on int8 activations has an AVX2 integer kernel
    // (int8_avx2.h), measured before the kernel it replaces.
    if (!vnni && pr.x_int8 && cpu::int8_avx2_type(t, RowLayout::gguf) && !dtype_is_lattice_iquant(t))
      kernels.insert(kernels.begin(), {"int8 (AVX2)", false, false, false, true});
    // From cache: the first rows of the matrix, ~256 KiB per thread, so that every
    // type's matrix stays in the cores' L2 (whole quads for the interleaved layout).
    // Paired, the same rows as two matrices of half as many.
    const int64_t cache_rows =
        std::clamp<int64_t>(static_cast<int64_t>((256u << 10) * static_cast<size_t>(threads) / rb) / 8 * 8,
                            std::min<int64_t>(8, rows), rows);
    for (const Kernel& k : kernels) {
      cpu::set_q4_vnni_enabled(k.vnni);
      cpu::set_int8_avx2_enabled(k.avx2_int8);
      if (k.interleaved)  // every copy from the one GGUF-layout matrix, as the resident copy is made
        for (int64_t m = 0; m < n_mat; ++m) cpu::rows_x4_repack(t, w0.data(), rows, cols, w + mat_bytes * static_cast<size_t>(m));
      const RowLayout kl = k.interleaved ? RowLayout::rows_x4 : RowLayout::gguf;
      KernelRun run{t, k.name};
      const bool pair_cache = k.paired && cache_rows % 8 == 0;
      const int64_t cache_mats = pair_cache ? 2 : 1;
      run.cache_gbs = matvec_gbs(t, kl, w, rb * static_cast<size_t>(cache_rows / cache_mats), cache_mats,
                                 cache_rows / cache_mats, cols, x.data(), y.data(), p, min_seconds, pair_cache, pr);
      run.triad_gbs = cpu::measure_triad_bandwidth_gbs(p, triad_bytes);
      run.stream_gbs = matvec_gbs(t, kl, w, mat_bytes, n_mat, rows, cols, x.data(), y.data(), p, min_seconds, k.paired, pr);
      runs.push_back(run);
      if (k.interleaved)  // back to GGUF's rows for the next kernels
        for (int64_t m = 0; m < n_mat; ++m) std::memcpy(w + mat_bytes * static_cast<size_t>(m), w0.data(), mat_bytes);
    }
    cpu::set_q4_vnni_enabled(true);
    cpu::set_int8_avx2_enabled(true);
  }
  // The ceiling beside them: plain reads with one and with two streams per thread (a
  // paired mat-vec batch walks two), next to a triad taken just before.
  const double read_triad = cpu::measure_triad_bandwidth_gbs(p, triad_bytes);
  const double read1 = cpu::measure_read_bandwidth_gbs(p, stream_bytes, 1);
  const double read2 = cpu::measure_read_bandwidth_gbs(p, stream_bytes, 2);

  // Multiply-adds per weight byte: a row's cols per token, over its bytes.
  auto macs_per_byte = [&](DType t) {
    return static_cast<double>(cols * pr.tokens) / static_cast<double>(row_bytes(t, cols));
  };
  if (a.has("--json")) {
    nlohmann::json j = {{"threads", threads}, {"rows", rows}, {"cols", cols}, {"stream_bytes", stream_bytes},
                        {"simd_target", cpu::simd_target_name()}, {"kernels", nlohmann::json::array()},
                        {"reads", {{"one_stream_gbs", read1}, {"two_streams_gbs", read2}, {"triad_gbs", read_triad}}}};
    j["tokens"] = pr.tokens;
    j["activations"] = act;
    for (const KernelRun& r : runs)
      j["kernels"].push_back({{"dtype", dtype_name(r.dtype)},
                              {"kernel", r.kernel},
                              {"cache_gbs", r.cache_gbs},
                              {"stream_gbs", r.stream_gbs},
                              {"cache_gmacs", r.cache_gbs * macs_per_byte(r.dtype)},
                              {"stream_gmacs", r.stream_gbs * macs_per_byte(r.dtype)},
                              {"triad_gbs", r.triad_gbs},
                              {"stream_fraction_of_triad", r.stream_gbs / r.triad_gbs}});
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("mat-vec kernels, %lld x %lld matrices, %d threads, %lld token%s a matrix, %s activations; from cache: "
              "~256 KiB of rows per thread; streaming: %.0f MiB of matrices per type\n",
              static_cast<long long>(rows), static_cast<long long>(cols), threads, static_cast<long long>(pr.tokens),
              pr.tokens == 1 ? "" : "s", act.c_str(), static_cast<double>(stream_bytes) / 1048576.0);
  std::printf("| type   | kernel                  | from cache GB/s (G mult-add/s) | streaming GB/s (G mult-add/s) "
              "| triad GB/s | of triad |\n");
  std::printf("|--------|-------------------------|--------------------------------|-------------------------------"
              "|------------|----------|\n");
  for (const KernelRun& r : runs)
    std::printf("| %-6s | %-23s | %15.1f (%12.0f) | %14.1f (%12.0f) | %10.1f | %7.1f%% |\n", dtype_name(r.dtype),
                r.kernel.c_str(), r.cache_gbs, r.cache_gbs * macs_per_byte(r.dtype), r.stream_gbs,
                r.stream_gbs * macs_per_byte(r.dtype), r.triad_gbs, 100.0 * r.stream_gbs / r.triad_gbs);
  std::printf("plain reads of %.0f MiB, no arithmetic: one stream per thread %.1f GB/s, two streams per thread "
              "%.1f GB/s (triad just before: %.1f GB/s)\n",
              static_cast<double>(stream_bytes) / 1048576.0, read1, read2, read_triad);
  return 0;
}

}  // namespace moeflow::cli

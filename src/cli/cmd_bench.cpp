#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>

#include "backend/activation_precision.h"
#include "backend/cpu/cpu_backend.h"
#include "cli/bench_parallel.h"
#include "cli/commands.h"
#include "cli/kv_read_bytes.h"
#include "cli/model_flags.h"
#include "cli/offload_flags.h"
#include "cli/op_times_text.h"
#include "experts/file_transport.h"
#include "engine/expert_offload.h"
#include "engine/generator.h"
#include "moeflow/engine.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/q4_vnni.h"

namespace moeflow::cli {

namespace {

// Calls fn(matrix, uses) for every matrix one token is multiplied with: the dense ones
// once, the routed experts' top-k times (their first expert stands for all).
template <class Fn>
void for_each_token_matrix(const Model& m, Fn&& fn) {
  const ModelConfig& c = m.config();
  const ModelWeights& w = m.weights();
  fn(w.output, 1.0);
  for (const auto& L : w.layers) {
    for (const MatrixRef* d : {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate_inp, &L.mla.wq_a, &L.mla.wq_b, &L.mla.wkv_a,
                               &L.ffn.gate, &L.ffn.up, &L.ffn.down, &L.shexp.gate, &L.shexp.up, &L.shexp.down})
      fn(*d, 1.0);
    for (const std::vector<MatrixRef>* heads : {&L.mla.k_b, &L.mla.v_b})
      for (const MatrixRef& d : *heads) fn(d, 1.0);
    if (L.gate_exps.n_expert > 0)  // not deepseek2's leading dense layers
      for (const MatrixRef* e : {&L.gate_exps.first, &L.up_exps.first, &L.down_exps.first})
        fn(*e, static_cast<double>(c.n_expert_used));
  }
}

// Bytes of weights one decode token must read: all dense matrices (attention,
// router, output; the embedding contributes one row) plus top-k experts per layer.
uint64_t weight_bytes_per_token(const Model& m) {
  double b = static_cast<double>(m.weights().tok_embd.row_bytes());
  for_each_token_matrix(m, [&](const MatrixRef& d, double uses) { b += uses * static_cast<double>(d.bytes()); });
  return static_cast<uint64_t>(b);
}

// Multiply-add FLOPs of the matrices for one token (2 per weight); attention's
// O(context) part is added separately.
double matrix_flops_per_token(const Model& m) {
  double f = 0;
  for_each_token_matrix(m, [&](const MatrixRef& d, double uses) {
    f += 2.0 * uses * static_cast<double>(d.rows * d.cols);
  });
  return f;
}

// The least time one prompt token's products can take: those on the integer kernels
// (integer_kernels_for, the VNNI kernels) at the int8 peak of their activations (int8:
// one vpdpbusd per four multiply-adds a lane; int16 two), every other matrix at the FMA peak.
double matrix_seconds_per_token(const Model& m, ActivationPrecision act, double fma_gflops, double int8_gmacs) {
  double s = 0;
  for_each_token_matrix(m, [&](const MatrixRef& d, double uses) {
    const double macs = uses * static_cast<double>(d.rows * d.cols);
    const bool int8 = int8_activations_for(act, d.dtype);
    if (integer_kernels_for(d.dtype, d.layout, int8))
      s += macs / (int8_gmacs * 1e9 / (int8 ? 1.0 : 2.0));
    else
      s += 2.0 * macs / (fma_gflops * 1e9);
  });
  return s;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// One policy's run: the best repetition of prefill and of generation, and the cache
// counters of that generation (deltas, so prefill does not blur them).
struct PolicyRun {
  std::string policy;
  double pp_seconds = 1e30, tg_seconds = 1e30;
  CacheCounters tg;  // during the best generation repetition
  double tg_link_busy = 0;  // seconds the transport had a copy in flight then
  ThreadPool::Stats tg_sections;  // the pool's parallel sections in that repetition
  bool offloaded = false;
  double disk_bw = 0;  // offloaded: the larger storage probe (bytes/s) just before and after its repetitions
};

}  // namespace

int cmd_bench(int argc, char** argv) {
  Args a("bench");
  add_model_flags(a);
  a.flag("-p,--n-prompt", "prompt tokens for the prefill test", true, "128");
  a.flag("-n,--n-gen", "tokens for the generation test", true, "32");
  a.flag("-r,--repetitions",
         "repetitions (the best is reported; generation runs up to as many more while the memory bandwidth moved "
         "around every one)",
         true, "3");
  a.flag("--json", "print one JSON object", false);
  a.flag("--parallel", "N sequences decoding together (a list runs each: 1,2,4,8,16), tokens/s summed over them "
                       "against the bytes a step reads (dense weights plus the experts its tokens select)");
  a.flag("--shared-prompt", "with --parallel: the first V prompt tokens are the same for every sequence (a system "
                            "prompt the requests share), rounded down to whole KV blocks; the sequences continue one "
                            "parked copy of them, as the server's prompt reuse does, and each prefills the rest of "
                            "its own prompt",
         true, "0");
  add_offload_flags(a);
  a.parse(argc, argv, 2);
  check_policy_state_out(a, "bench", false);
  if (a.has("--parallel")) return bench_parallel(a);
  if (a.has("--shared-prompt")) throw UsageError("moeflow bench: --shared-prompt needs --parallel");
  const int64_t n_prompt = a.integer("--n-prompt", 1, 1 << 16);
  const int64_t n_gen = a.integer("--n-gen", 1, 1 << 16);
  const int64_t reps = a.integer("--repetitions", 1, 100);
  // --policy may name several (comma-separated): each runs in this same process, so
  // their speeds compare as ratios; "all" (no offloading) always runs first, with every
  // weight resident.
  const std::vector<std::string> policies = bench_policies(a);
  auto open_engine = [&](const std::string& pol) { return open_bench_engine(a, pol, n_prompt + n_gen + 1, 1); };
  std::unique_ptr<Engine> resident = open_engine("all");
  const Model& m = resident->model();
  const ModelConfig& c = m.config();
  ThreadPool& pool = resident->thread_pool();
  // Deterministic pseudo-random prompt: routing then spreads over many experts, as
  // real text does.
  std::vector<int32_t> prompt(static_cast<size_t>(n_prompt));
  uint64_t s = 12345;
  for (auto& t : prompt) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(c.n_vocab));
  }
  Backend& backend = resident->backend();
  auto measure_triad = [&] { return backend.measure_memory_bandwidth_gbs(64ull << 20); };
  std::vector<double> triads;  // before each generation repetition of `all`, and after the last
  // A repetition of `all` is steady when the triads just before and just after it agree
  // within this ratio. This VM's bandwidth jumps between ~50 and ~100 GB/s from one
  // second to the next; a repetition with a jump beside it ran at a bandwidth nobody
  // measured (one decoded at 48 GB/s, 91% of the 52.5 GB/s triad before it, and was
  // scored against the 96 GB/s measured after it). Steady phases move by up to ~10%.
  constexpr double kSteadyTriadRatio = 1.2;
  auto steady = [&](size_t r) {
    return std::max(triads[r], triads[r + 1]) <= kSteadyTriadRatio * std::min(triads[r], triads[r + 1]);
  };
  std::vector<double> all_tg_seconds;           // each generation repetition of `all`
  std::vector<ThreadPool::Stats> all_sections;  // and where its time went
  std::vector<std::vector<Backend::OpTime>> all_ops;  // in the backend's operations (where it keeps them)
  int64_t best_rep = -1, n_steady = 0;
  std::vector<PolicyRun> runs;
  std::vector<float> logits;
  uint64_t budget = 0;
  bool direct_io = false;
  double link_bw = 0;  // a GPU backend's host-to-device link, as its transport measured it
  for (const std::string& pol : policies) {
    std::unique_ptr<Engine> owned = pol == "all" ? nullptr : open_engine(pol);
    Engine& e = pol == "all" ? *resident : *owned;
    const bool offloaded = e.offloaded();
    PolicyRun run;
    run.policy = pol;
    run.offloaded = offloaded;
    if (offloaded) {
      budget = e.offload().cache->budget_bytes();
      direct_io = reads_direct(*e.offload().transport);
      link_bw = std::max(link_bw, e.offload().transport->bandwidth());
    }
    // The memory bound is measured next to each generation run of `all`, not once: a
    // shared VM's bandwidth moves by 2x within a minute, so a bound taken at another
    // moment says little about this run (see bw_gbs below). `all` runs up to `reps`
    // more repetitions while none was steady.
    if (!offloaded) triads.push_back(measure_triad());
    // The storage probe around an offloaded policy's repetitions, as the triad is around
    // the resident ones: this VM's disk reads anywhere from ~0.5 to ~7.5 GB/s, from one
    // minute to the next. (A GPU backend's experts cross its link, measured by its
    // transport, not storage.)
    const bool probe_disk = offloaded && e.offload().transport->bandwidth() <= 0;
    const double disk_before = probe_disk ? bench_disk_bandwidth(a, m) : 0;
    for (int64_t r = 0; r < reps || (!offloaded && n_steady == 0 && r < 2 * reps); ++r) {
      const SeqId seq = e.add_sequence({prompt, ""});
      EngineSequenceSink sink(e, seq);
      double t0 = now();
      sink.eval(prompt.data(), n_prompt, false, logits);
      run.pp_seconds = std::min(run.pp_seconds, now() - t0);
      const CacheCounters before = offloaded ? e.offload().cache->counters() : CacheCounters{};
      const double busy_before = offloaded ? e.offload().transport->busy_seconds() : 0.0;
      const std::vector<Backend::OpTime> ops_before = e.backend().op_times();
      e.thread_pool().set_timing(true);
      e.backend().set_op_timing(true);
      t0 = now();
      int32_t tok = prompt.back();
      for (int64_t i = 0; i < n_gen; ++i) {
        sink.eval(&tok, 1, false, logits);
        tok = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      }
      const double dt = now() - t0;
      e.thread_pool().set_timing(false);
      e.backend().set_op_timing(false);
      if (!offloaded) {
        triads.push_back(measure_triad());
        all_tg_seconds.push_back(dt);
        all_sections.push_back(pool.stats());
        all_ops.push_back(Backend::op_times_between(ops_before, e.backend().op_times()));
        if (steady(static_cast<size_t>(r))) ++n_steady;
      } else if (dt < run.tg_seconds) {
        run.tg_seconds = dt;
        run.tg_sections = e.thread_pool().stats();
        run.tg = e.offload().cache->counters() - before;
        run.tg_link_busy = e.offload().transport->busy_seconds() - busy_before;
      }
      e.remove_sequence(seq);
    }
    if (!offloaded) {
      // The fastest steady repetition; with none steady, the fastest.
      for (size_t r = 0; r < all_tg_seconds.size(); ++r)
        if ((n_steady == 0 || steady(r)) && (best_rep < 0 || all_tg_seconds[r] < all_tg_seconds[static_cast<size_t>(best_rep)]))
          best_rep = static_cast<int64_t>(r);
      run.tg_seconds = all_tg_seconds[static_cast<size_t>(best_rep)];
      run.tg_sections = all_sections[static_cast<size_t>(best_rep)];
    }
    if (probe_disk) run.disk_bw = std::max(disk_before, bench_disk_bandwidth(a, m));
    runs.push_back(run);
  }
  const double best_pp = runs[0].pp_seconds, best_tg = runs[0].tg_seconds;
  const double pp_tps = static_cast<double>(n_prompt) / best_pp;
  const double tg_tps = static_cast<double>(n_gen) / best_tg;

  // The bound for the reported repetition: the larger of the triads measured just
  // before and just after it (the larger bound is the conservative choice).
  const double bw_gbs = std::max(triads[static_cast<size_t>(best_rep)], triads[static_cast<size_t>(best_rep) + 1]);
  const double peak_gflops = backend.measure_peak_gflops();
  const double bytes_tok = static_cast<double>(weight_bytes_per_token(m));
  // And the KV cache a decode token reads, on average over the generated positions.
  double kv_tok = 0;
  for (int64_t g = 0; g < n_gen; ++g) kv_tok += static_cast<double>(kv_bytes_read(c, resident->kv_type(), n_prompt + g));
  kv_tok /= static_cast<double>(std::max<int64_t>(1, n_gen));
  const double tg_bound = bw_gbs * 1e9 / (bytes_tok + kv_tok);
  // Prefill FLOPs: every prompt token goes through the matrices (top-k experts each)
  // plus causal attention (QK^T and AV: 4 * head_dim * n_head per key).
  const double attn = 4.0 * static_cast<double>(c.n_head * c.head_dim * c.n_layer) *
                      (static_cast<double>(n_prompt) * static_cast<double>(n_prompt + 1) / 2.0);
  const double pp_flops = matrix_flops_per_token(m) * static_cast<double>(n_prompt) + attn;
  const double pp_gflops = pp_flops / best_pp / 1e9;
  // Prefill's bound: each matrix at the peak of the kernel it takes, attention at FMA's.
  const double int8_gmacs = backend.measure_peak_int8().gmacs;
  const double pp_bound_seconds =
      matrix_seconds_per_token(m, parse_activation_precision(a.str("--activations")), peak_gflops, int8_gmacs) *
          static_cast<double>(n_prompt) +
      attn / (peak_gflops * 1e9);
  // A backend that measures no FLOP peak (the GPU's) gives prefill no bound: NaN, null
  // in the JSON.
  const double pp_bound = peak_gflops > 0 ? static_cast<double>(n_prompt) / pp_bound_seconds : NAN;
  const double tg_gbs = (bytes_tok + kv_tok) * tg_tps / 1e9;
  // Where the fastest generation's time went: inside the pool's parallel sections or
  // between them (the calling thread alone: norms, quantising activations, routing),
  // and inside them, how long the last part started after the job was published and
  // how long the first finished part's thread then sat idle until the last finished.
  const ThreadPool::Stats& sec = runs[0].tg_sections;
  const nlohmann::json tg_sections = {
      {"per_token", static_cast<double>(sec.sections) / static_cast<double>(n_gen)},
      {"parallel_fraction", sec.section_seconds / best_tg},
      {"start_delay_fraction", sec.start_seconds / best_tg},
      {"uneven_finish_fraction", sec.uneven_seconds / best_tg}};

  // The bound for a budget: the storage's O_DIRECT read bandwidth against the bytes
  // each generated token actually missed (perfect overlap with compute: the smaller
  // of this and the memory-bandwidth bound).
  // Experts cross a GPU backend's link (pinned host memory to the device), not storage.
  auto read_bw = [&](const PolicyRun& r) { return link_bw > 0 ? link_bw : r.disk_bw; };
  double disk_bw = 0;  // the largest, for the summary
  for (const PolicyRun& r : runs) disk_bw = std::max(disk_bw, read_bw(r));
  auto policy_json = [&](const PolicyRun& r) {
    const double tps = static_cast<double>(n_gen) / r.tg_seconds;
    nlohmann::json j = {{"policy", r.policy},
                        {"pp_tokens_per_second", static_cast<double>(n_prompt) / r.pp_seconds},
                        {"tg_tokens_per_second", tps},
                        {"tg_ratio_to_all", tps / tg_tps}};
    if (r.offloaded) {
      const double bpt = static_cast<double>(r.tg.bytes_read) / static_cast<double>(n_gen);
      const double io_bound = bpt > 0 ? read_bw(r) / bpt : INFINITY;
      j["hit_rate"] = r.tg.hit_rate();
      j["prefetch_hit_rate"] = r.tg.prefetch_hit_rate();
      j["bytes_read_per_token"] = bpt;
      j["stall_fraction"] = r.tg.stall_seconds / r.tg_seconds;
      j["link_busy_fraction"] = r.tg_link_busy / r.tg_seconds;
      j["io_bound_tokens_per_second"] = bpt > 0 ? io_bound : -1.0;
      j["bound_tokens_per_second"] = std::min(io_bound, tg_bound);
      j["fraction_of_bound"] = tps / std::min(io_bound, tg_bound);
      j["read_gbs"] = read_bw(r) / 1e9;
      j["read_gbs_during_run"] = static_cast<double>(r.tg.bytes_read) / r.tg_seconds / 1e9;
    }
    return j;
  };

  // How the experts' weights sit in memory, which picks the decode kernel: GGUF's
  // layout, or rows interleaved in fours ("q4_0 rows_x4", the backend's choice).
  const MatrixRef& gate0 = m.weights().layers[static_cast<size_t>(m.config().n_dense_lead)].gate_exps.first;  // the first MoE layer
  const std::string expert_layout = std::string(dtype_name(gate0.dtype)) + " " + row_layout_name(gate0.layout);
  // Loading copies the weights out of the file: each byte is read from the page cache,
  // and its fresh page is zeroed by the kernel and then written, three passes over
  // memory at the triad at best (a file not yet in the page cache reads at the storage's
  // rate instead).
  const double load_bytes = static_cast<double>(m.resident_bytes());
  const double load_bound_s = 3.0 * load_bytes / (triads.front() * 1e9);
  if (a.has("--json")) {
    nlohmann::json j = {{"model", m.file().path()},
                        {"backend", resident->backend().name()},
                        {"expert_weight_layout", expert_layout},
                        {"simd_target", backend.kernel_target()},
                        {"kv_type", resident->kv_type()},
                        {"threads", pool.size()},
                        {"n_prompt", n_prompt},
                        {"n_gen", n_gen},
                        {"pp_tokens_per_second", pp_tps},
                        {"tg_tokens_per_second", tg_tps},
                        {"weight_bytes_per_token", bytes_tok},
                        {"kv_bytes_per_token", kv_tok},
                        {"tg_effective_gbs", tg_gbs},
                        {"tg_sections", tg_sections},
                        {"triad_bandwidth_gbs", bw_gbs},
                        {"triad_bandwidth_gbs_all_measurements", triads},
                        {"tg_repetitions", all_tg_seconds.size()},
                        {"tg_steady_repetitions", n_steady},
                        {"tg_reported_repetition", best_rep},
                        {"tg_bound_tokens_per_second", tg_bound},
                        {"tg_fraction_of_bound", tg_tps / tg_bound},
                        {"pp_gflops", pp_gflops},
                        {"peak_gflops", peak_gflops},
                        {"peak_int8_gmacs", int8_gmacs},
                        {"pp_bound_tokens_per_second", pp_bound},
                        {"pp_fraction_of_bound", pp_tps / pp_bound},
                        {"load_seconds", resident->load_seconds()},
                        {"load_bytes", load_bytes},
                        {"load_bound_seconds", load_bound_s}};
    const std::vector<Backend::OpTime>& ops = all_ops[static_cast<size_t>(best_rep)];
    j["tg_backend_ops"] = op_times_json(ops, static_cast<double>(n_gen), "token");
    if (!ops.empty())
      j["tg_outside_backend_ops_ms_per_token"] = 1000.0 * outside_op_seconds(ops, best_tg) / static_cast<double>(n_gen);
    if (runs.size() > 1) {
      j["expert_budget_bytes"] = budget;
      j["expert_bytes_total"] = m.weights().expert_bytes;
      j["disk_read_gbs"] = disk_bw / 1e9;  // the largest of the policies' reads (or the GPU link's, link_gbs)
      j["link_gbs"] = link_bw / 1e9;
      j["direct_io"] = direct_io;
      j["policies"] = nlohmann::json::array();
      for (const PolicyRun& r : runs) j["policies"].push_back(policy_json(r));
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("model %s (%s, %lld layers, %lld experts top-%lld), %d threads, experts in memory as %s, %s kernels, "
              "%s KV cache\n",
              m.file().path().c_str(), c.arch_name.c_str(), static_cast<long long>(c.n_layer),
              static_cast<long long>(c.n_expert), static_cast<long long>(c.n_expert_used), pool.size(),
              expert_layout.c_str(), backend.kernel_target().c_str(), resident->kv_type().c_str());
  std::printf("| test     | tokens/s | achieved          | bound                          | of bound |\n");
  std::printf("|----------|----------|-------------------|--------------------------------|----------|\n");
  std::printf("| pp%-6lld | %8.1f | %7.1f GFLOP/s   | %7.1f tok/s (peaks below)      | %6.1f%% |\n", static_cast<long long>(n_prompt),
              pp_tps, pp_gflops, pp_bound, 100.0 * pp_tps / pp_bound);
  std::printf("| tg%-6lld | %8.1f | %7.2f GB/s      | %7.1f tok/s (%.2f GB/s triad) | %6.1f%% |\n", static_cast<long long>(n_gen),
              tg_tps, tg_gbs, tg_bound, bw_gbs, 100.0 * tg_tps / tg_bound);
  if (load_bytes > 0)
    std::printf("| load     | %6.2f s | %7.2f GB/s      | %6.2f s (3 passes at %.1f GB/s) | %6.1f%% |\n",
                resident->load_seconds(), load_bytes / resident->load_seconds() / 1e9, load_bound_s, triads.front(),
                100.0 * load_bound_s / resident->load_seconds());
  else  // --mmap: the weights stay in the file mapping
    std::printf("| load     | %6.2f s | no copy (--mmap)  |                                |          |\n",
                resident->load_seconds());
  // (A GPU backend's "triad" is its device-to-device copy; its prefill has no bound.)
  std::printf("read per generated token: %.2f MiB of weights, %.2f MiB of KV cache (the mean over its positions)\n",
              bytes_tok / (1 << 20), kv_tok / (1 << 20));
  std::printf("prefill's bound: products on the integer kernels (interleaved rows; k-quant, iq4, mxfp4 rows on int8) at the "
              "integer kernels' peak for their activations (int8 %.0f G multiply-adds/s, int16 half), other matrices "
              "and attention at the FMA peak (%.1f GFLOP/s)\n",
              int8_gmacs, peak_gflops);
  if (sec.sections > 0)
    std::printf("generation: %.1f parallel sections per token, %.1f%% of the time inside them (%.1f%% waiting for the "
                "last part to start, %.1f%% with a thread done and waiting for the last to finish), %.1f%% between "
                "them on one thread\n",
                static_cast<double>(sec.sections) / static_cast<double>(n_gen), 100.0 * sec.section_seconds / best_tg,
                100.0 * sec.start_seconds / best_tg, 100.0 * sec.uneven_seconds / best_tg,
                100.0 * (1.0 - sec.section_seconds / best_tg));
  if (const std::string ops = op_times_text(all_ops[static_cast<size_t>(best_rep)], best_tg, static_cast<double>(n_gen));
      !ops.empty())
    std::printf("generation, per token in the backend's operations: %s\n", ops.c_str());
  std::printf("triad GB/s before each generation repetition and after the last:");
  for (double t : triads) std::printf(" %.1f", t);
  if (n_steady > 0)
    std::printf(" (the bound uses the two around the fastest repetition, %lld, of the %lld of %zu whose two agree "
                "within %.0f%%)\n",
                static_cast<long long>(best_rep + 1), static_cast<long long>(n_steady), all_tg_seconds.size(),
                100.0 * (kSteadyTriadRatio - 1.0));
  else
    std::printf(" (the bandwidth moved by more than %.0f%% around every repetition: the bound uses the two around "
                "the fastest)\n",
                100.0 * (kSteadyTriadRatio - 1.0));
  if (runs.size() > 1) {
    std::printf("\nexpert budget %.1f MiB of %.1f MiB; experts read %s; a policy's bound reads at the larger of two "
                "probes just before and after it (GB/s, probe / what the run read):",
                static_cast<double>(budget) / 1048576.0, static_cast<double>(m.weights().expert_bytes) / 1048576.0,
                link_bw > 0 ? "over the GPU's link" : direct_io ? "with O_DIRECT" : "buffered (page cache dropped after reads)");
    const char* sep = " ";
    for (const PolicyRun& r : runs)
      if (r.offloaded) {
        std::printf("%s%s %.2f / %.2f", sep, r.policy.c_str(), read_bw(r) / 1e9,
                    static_cast<double>(r.tg.bytes_read) / r.tg_seconds / 1e9);
        sep = ", ";
      }
    std::printf("\n");
    std::printf("| policy       | tg tok/s | vs all | hit rate | prefetch hit | MiB read/tok | stalled | bound tok/s | of bound |\n");
    std::printf("|--------------|----------|--------|----------|--------------|--------------|---------|-------------|----------|\n");
    for (const PolicyRun& r : runs) {
      const nlohmann::json j = policy_json(r);
      if (!r.offloaded) {
        std::printf("| %-12s | %8.1f | %5.2fx | %7s  | %12s | %12s | %7s | %11.1f | %7.1f%% |\n", r.policy.c_str(),
                    j["tg_tokens_per_second"].get<double>(), 1.0, "100%", "-", "0", "0%", tg_bound,
                    100.0 * tg_tps / tg_bound);
        continue;
      }
      std::printf("| %-12s | %8.1f | %5.2fx | %7.1f%% | %11.1f%% | %12.2f | %6.1f%% | %11.1f | %7.1f%% |\n",
                  r.policy.c_str(), j["tg_tokens_per_second"].get<double>(), j["tg_ratio_to_all"].get<double>(),
                  100.0 * j["hit_rate"].get<double>(), 100.0 * j["prefetch_hit_rate"].get<double>(),
                  j["bytes_read_per_token"].get<double>() / 1048576.0, 100.0 * j["stall_fraction"].get<double>(),
                  j["bound_tokens_per_second"].get<double>(), 100.0 * j["fraction_of_bound"].get<double>());
    }
  }
  return 0;
}

}  // namespace moeflow::cli

#include "cli/bench_parallel.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "backend/activation_precision.h"
#include "backend/backend.h"
#include "cli/kv_read_bytes.h"
#include "cli/model_flags.h"
#include "cli/op_times_text.h"
#include "engine/expert_offload.h"
#include "engine/expert_source.h"
#include "experts/expert_store.h"
#include "experts/file_transport.h"
#include "kernels/cpu/matmul.h"
#include "moeflow/engine.h"
#include "moeflow/sampler.h"

namespace moeflow::cli {

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The bytes the counted steps read: every dense matrix once per step, one embedding
// row per token, and each expert the step's tokens selected in a layer once (the step
// groups tokens by expert), counted from the routing; and each token's keys and values
// at the positions it attends to (kv_read_bytes.h).
class StepBytes final : public ForwardListener {
 public:
  StepBytes(const Model& m, std::string kv_type) : m_(m), kv_type_(std::move(kv_type)) {
    const ModelWeights& w = m.weights();
    add_dense(w.output);
    for (const LayerWeights& L : w.layers) {
      for (const MatrixRef* d : {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate_inp}) add_dense(*d);
      // deepseek2's latent attention, leading dense FFN; shared experts (read by every token)
      for (const MatrixRef* d : {&L.mla.wq_a, &L.mla.wq_b, &L.mla.wkv_a, &L.ffn.gate, &L.ffn.up, &L.ffn.down,
                                 &L.shexp.gate, &L.shexp.up, &L.shexp.down})
        add_dense(*d);
      for (const std::vector<MatrixRef>* heads : {&L.mla.k_b, &L.mla.v_b})
        for (const MatrixRef& d : *heads) add_dense(d);
      // Routing names MoE layers only (deepseek2's leading dense layers have no experts).
      if (L.gate_exps.n_expert > 0) {
        const MatrixRef* e[3] = {&L.gate_exps.first, &L.up_exps.first, &L.down_exps.first};
        expert_.push_back(e[0]->bytes() + e[1]->bytes() + e[2]->bytes());
        expert_macs_.push_back(macs_of(*e[0]) + macs_of(*e[1]) + macs_of(*e[2]));
      }
    }
  }
  void begin_step(const StepTokens& s) override {
    if (!on) return;
    bytes += dense_ + static_cast<uint64_t>(s.size()) * m_.weights().tok_embd.row_bytes();
    macs += dense_macs_ * static_cast<uint64_t>(s.size());
    for (size_t i = 0; i < s.pos.size(); ++i)
      kv_bytes += kv_bytes_read(m_.config(), kv_type_, s.pos[i]) -
                  (i > 0 ? kv_bytes_shared(m_.config(), kv_type_, s.pos[i], shared_positions) : 0);
  }
  void routed(const LayerRouting& r) override {
    if (!on) return;
    const std::set<int32_t> distinct(r.experts.begin(), r.experts.end());
    bytes += distinct.size() * expert_[static_cast<size_t>(r.layer)];
    macs += r.experts.size() * expert_macs_[static_cast<size_t>(r.layer)];
    selected += r.experts.size();
    unique += distinct.size();
  }
  bool on = false;
  // Positions every sequence of the counted steps reads from the same blocks (a shared
  // prompt): read once per step, not once per token.
  int64_t shared_positions = 0;
  uint64_t bytes = 0, macs = 0, selected = 0, unique = 0;  // macs: the matrices' multiply-adds
  uint64_t kv_bytes = 0;                                     // the KV cache's, beside the weights' `bytes`

 private:
  static uint64_t macs_of(const MatrixRef& d) { return static_cast<uint64_t>(d.rows) * static_cast<uint64_t>(d.cols); }
  void add_dense(const MatrixRef& d) {
    dense_ += d.bytes();
    dense_macs_ += macs_of(d);
  }
  const Model& m_;
  std::string kv_type_;
  uint64_t dense_ = 0, dense_macs_ = 0;
  std::vector<uint64_t> expert_, expert_macs_;
};

struct ParallelRun {
  std::string policy;
  int64_t n = 0;
  double seconds = 1e30;       // the fastest repetition's decode steps
  uint64_t bytes = 0;          // weight bytes those steps read
  uint64_t kv_bytes = 0;       // and KV cache bytes
  uint64_t macs = 0;           // their matrices' multiply-adds
  double triad = 0;            // the larger triad around it (all resident)
  double unique_share = 0;     // distinct experts per layer over selections
  double hit_rate = -1;        // offloaded: during the decode steps
  uint64_t bytes_read = 0;     // offloaded: expert bytes read from storage in those steps
  double disk_bw = 0;          // offloaded: the larger storage probe (bytes/s) just before and after its repetitions
  ThreadPool::Stats sections;  // the pool's parallel sections in those steps
  std::vector<Backend::OpTime> ops;  // the backend's operations in those steps (where it keeps them)
};

}  // namespace

std::vector<std::string> bench_policies(const Args& a) {
  std::vector<std::string> policies = split_list(a.str("--policy"));
  policies.erase(std::remove(policies.begin(), policies.end(), "all"), policies.end());
  policies.insert(policies.begin(), "all");
  if (policies.size() == 1 && a.has("--expert-budget"))
    throw UsageError("moeflow bench: --expert-budget needs --policy with at least one policy other than all");
  return policies;
}

std::unique_ptr<Engine> open_bench_engine(const Args& a, const std::string& policy, int64_t ctx, int n_parallel) {
  EngineOptions o = engine_options_from_flags(a, policy);
  if (policy == "all") {  // the resident reference: no budget, nothing to miss
    o.expert_budget.clear();
    o.on_miss = "load";
  }
  o.ctx_size = ctx;
  o.n_parallel = n_parallel;
  return Engine::open(o);
}

double bench_disk_bandwidth(const Args& a, const Model& m) {
  const ExpertStore store(m);
  const uint64_t chunk = store.geometry().bytes.empty() ? (1u << 20) : store.geometry().bytes[0];
  return measure_file_read_bandwidth(m.file().path(), static_cast<int>(a.integer("--io-threads", 1, 64)), chunk,
                                     256ull << 20);
}

int bench_parallel(const Args& a) {
  std::vector<int64_t> ns;
  for (int32_t v : parse_int_list("--parallel", a.str("--parallel"))) {
    if (v < 1 || v > 256) throw UsageError("--parallel " + std::to_string(v) + ": expected 1 to 256 sequences");
    ns.push_back(v);
  }
  const int64_t n_prompt = a.integer("--n-prompt", 1, 1 << 16);
  const int64_t n_gen = a.integer("--n-gen", 1, 1 << 16);
  const int64_t reps = a.integer("--repetitions", 1, 100);
  const int64_t shared_asked = a.integer("--shared-prompt", 0, n_prompt - 1);
  int64_t shared_kept = 0;  // the shared prompt in whole KV blocks, where N > 1
  const std::vector<std::string> policies = bench_policies(a);
  const int64_t n_max = *std::max_element(ns.begin(), ns.end());
  std::vector<ParallelRun> runs;
  std::string model_path, layout, target;
  int threads = 0;
  double peak = 0, mac_peak = 0;
  std::string mac_instructions;
  bool integer_experts = false;  // the experts' products run on the integer kernels the int8 peak measures
  bool int8 = false;  // the experts' activations (--activations, resolved for their weights)
  for (const std::string& pol : policies) {
    auto e = open_bench_engine(a, pol, n_prompt + n_gen + 1, static_cast<int>(n_max));
    const Model& m = e->model();
    model_path = m.file().path();
    target = e->backend().kernel_target();
    const MatrixRef& gate0 = m.weights().layers[static_cast<size_t>(m.config().n_dense_lead)].gate_exps.first;  // the first MoE layer
    layout = std::string(dtype_name(gate0.dtype)) + " " + row_layout_name(gate0.layout);
    int8 = int8_activations_for(parse_activation_precision(a.str("--activations")), gate0.dtype);
    // Elsewhere the column shows no share.
    integer_experts = e->backend().int8_peak_applies(gate0.dtype, gate0.layout, int8);
    threads = e->thread_pool().size();
    StepBytes counter(m, e->kv_type());
    e->add_listener(&counter);
    for (int64_t n : ns) {
      ParallelRun run;
      run.policy = pol;
      run.n = n;
      // The storage probe around the run, as the triad is around the resident ones: this
      // VM's disk reads anywhere from ~0.5 to ~7.5 GB/s, from one minute to the next.
      const double disk_before = pol == "all" ? 0 : bench_disk_bandwidth(a, m);
      for (int64_t r = 0; r < reps; ++r) {
        // Each sequence its own deterministic pseudo-random prompt, prefilled in one step;
        // with --shared-prompt the first sequence's first `shared` tokens are prefilled
        // and parked first (where sliding-window layers keep only their window, a prefix
        // parked later than that could not be continued), and every sequence, the first
        // too, prefills the rest of its prompt in a second step.
        std::vector<SeqId> seqs;
        std::vector<BatchToken> batch;
        std::vector<int32_t> next;
        uint64_t s = 12345 + static_cast<uint64_t>(r);
        const auto prefill = [&](SeqId id, int64_t from, int64_t to) {
          for (int64_t t = from; t < to; ++t) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            batch.push_back({id, static_cast<int32_t>((s >> 33) % static_cast<uint64_t>(e->n_vocab())), t,
                             t == n_prompt - 1});
          }
        };
        const auto run_prefill = [&] {
          e->step(batch);
          for (size_t k = 0; k < batch.size(); ++k)
            if (batch[k].logits) next.push_back(argmax(e->logits(k), e->n_vocab()));
          batch.clear();
        };
        const int64_t shared = n > 1 ? shared_asked / e->kv_block_len() * e->kv_block_len() : 0;
        std::optional<SeqId> parked;
        for (int64_t i = 0; i < n; ++i) {
          if (i == 1 && shared > 0) {
            run_prefill();
            parked = e->park_prefix(seqs[0], shared);
            shared_kept = shared;
            prefill(seqs[0], shared, n_prompt);
          }
          seqs.push_back(i > 0 && shared > 0 ? e->add_sequence({}, *parked, shared) : e->add_sequence());
          prefill(seqs.back(), i > 0 ? shared : 0, i == 0 && shared > 0 ? shared : n_prompt);
        }
        run_prefill();
        counter.shared_positions = shared;
        const double triad_before = pol == "all" ? e->backend().measure_memory_bandwidth_gbs(64ull << 20) : 0;
        const ExpertCacheStats before = e->cache_stats();
        counter.on = true;
        counter.bytes = counter.kv_bytes = counter.macs = counter.selected = counter.unique = 0;
        const std::vector<Backend::OpTime> ops_before = e->backend().op_times();
        e->thread_pool().set_timing(true);
        e->backend().set_op_timing(true);
        const double t0 = now();
        for (int64_t g = 0; g < n_gen; ++g) {
          batch.clear();
          for (int64_t i = 0; i < n; ++i) batch.push_back({seqs[i], next[i], n_prompt + g, true});
          e->step(batch);
          for (int64_t i = 0; i < n; ++i) next[i] = argmax(e->logits(static_cast<size_t>(i)), e->n_vocab());
        }
        const double dt = now() - t0;
        e->thread_pool().set_timing(false);
        e->backend().set_op_timing(false);
        counter.on = false;
        const double triad_after = pol == "all" ? e->backend().measure_memory_bandwidth_gbs(64ull << 20) : 0;
        if (dt < run.seconds) {
          run.seconds = dt;
          run.bytes = counter.bytes;
          run.kv_bytes = counter.kv_bytes;
          run.macs = counter.macs;
          run.triad = std::max(triad_before, triad_after);
          run.sections = e->thread_pool().stats();
          run.ops = Backend::op_times_between(ops_before, e->backend().op_times());
          run.unique_share = static_cast<double>(counter.unique) / static_cast<double>(counter.selected);
          const ExpertCacheStats after = e->cache_stats();
          const uint64_t h = after.hits - before.hits, mi = after.misses - before.misses;
          if (e->offloaded()) {
            run.hit_rate = h + mi ? static_cast<double>(h) / static_cast<double>(h + mi) : 0;
            run.bytes_read = after.bytes_read - before.bytes_read;
          }
        }
        for (SeqId id : seqs) e->remove_sequence(id);
        if (parked) e->remove_sequence(*parked);
      }
      if (pol != "all") run.disk_bw = std::max(disk_before, bench_disk_bandwidth(a, m));
      runs.push_back(run);
    }
    if (pol == "all") {
      peak = e->backend().measure_peak_gflops();
      // The integer kernels' arithmetic: one byte product per multiply-add with int8
      // activations, two with int16 ones.
      if (integer_experts) {
        const Backend::Int8Peak p = e->backend().measure_peak_int8();
        mac_peak = p.gmacs / (int8 ? 1.0 : 2.0);
        mac_instructions = p.instructions;
      }
    }
  }
  // Offloaded runs are set against the all-resident run's bound at the same N.
  auto tps = [&](const ParallelRun& r) { return static_cast<double>(r.n * n_gen) / r.seconds; };
  auto resident = [&](int64_t n) -> const ParallelRun& {
    return *std::find_if(runs.begin(), runs.end(), [&](const ParallelRun& r) { return r.policy == "all" && r.n == n; });
  };
  // The memory bound: the all-resident run's step bytes at its triad; an offloaded run
  // is also bound by its storage reads (the smaller of the two, perfect overlap).
  auto bound = [&](const ParallelRun& r) {
    const ParallelRun& a0 = resident(r.n);
    const double mem = static_cast<double>(a0.n * n_gen) / (static_cast<double>(a0.bytes + a0.kv_bytes) / (a0.triad * 1e9));
    if (r.policy == "all" || r.bytes_read == 0 || r.disk_bw <= 0) return mem;
    return std::min(mem, static_cast<double>(r.n * n_gen) / (static_cast<double>(r.bytes_read) / r.disk_bw));
  };
  const double tps1 = std::count(ns.begin(), ns.end(), 1) ? tps(resident(1)) : 0;
  auto gmacs = [&](const ParallelRun& r) { return static_cast<double>(r.macs) / r.seconds / 1e9; };
  if (a.has("--json")) {
    nlohmann::json j = {{"model", model_path}, {"threads", threads}, {"n_prompt", n_prompt}, {"n_gen", n_gen},
                        {"shared_prompt", shared_kept},
                        {"expert_weight_layout", layout}, {"simd_target", target},
                        {"peak_gflops", peak}, {"activations", int8 ? "int8" : "int16"},
                        {"mac_peak_gmacs", mac_peak}, {"runs", nlohmann::json::array()}};
    for (const ParallelRun& r : runs) {
      nlohmann::json k = {{"policy", r.policy},
                          {"parallel", r.n},
                          {"tg_tokens_per_second", tps(r)},
                          {"tg_bound_tokens_per_second", bound(r)},
                          {"tg_fraction_of_bound", tps(r) / bound(r)},
                          {"weight_bytes_per_step", static_cast<double>(r.bytes) / static_cast<double>(n_gen)},
                          {"kv_bytes_per_step", static_cast<double>(r.kv_bytes) / static_cast<double>(n_gen)},
                          {"distinct_expert_share", r.unique_share},
                          {"triad_bandwidth_gbs", resident(r.n).triad},
                          {"gmacs_per_second", gmacs(r)},
                          {"sections_per_step", static_cast<double>(r.sections.sections) / static_cast<double>(n_gen)},
                          {"parallel_fraction", r.sections.section_seconds / r.seconds},
                          {"start_delay_fraction", r.sections.start_seconds / r.seconds},
                          {"uneven_finish_fraction", r.sections.uneven_seconds / r.seconds}};
      if (mac_peak > 0) k["fraction_of_mac_peak"] = gmacs(r) / mac_peak;
      k["backend_ops"] = op_times_json(r.ops, static_cast<double>(n_gen), "step");
      if (!r.ops.empty())
        k["outside_backend_ops_ms_per_step"] = 1000.0 * outside_op_seconds(r.ops, r.seconds) / static_cast<double>(n_gen);
      if (tps1 > 0) k["tg_ratio_to_parallel_1"] = tps(r) / tps1;
      if (r.hit_rate >= 0) {
        k["hit_rate"] = r.hit_rate;
        k["bytes_read_per_step"] = static_cast<double>(r.bytes_read) / static_cast<double>(n_gen);
        k["disk_read_gbs"] = r.disk_bw / 1e9;
        k["disk_read_gbs_during_run"] = static_cast<double>(r.bytes_read) / r.seconds / 1e9;
      }
      j["runs"].push_back(k);
    }
    if (runs.size() == 1)
      for (const char* f : {"parallel", "tg_tokens_per_second", "tg_bound_tokens_per_second", "tg_fraction_of_bound"})
        j[f] = j["runs"][0][f];
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("model %s, %d threads, experts in memory as %s, %s kernels; %lld-token prompts%s, %lld decode steps\n",
              model_path.c_str(), threads, layout.c_str(), target.c_str(), static_cast<long long>(n_prompt),
              shared_kept > 0 ? (", the first " + std::to_string(shared_kept) + " shared").c_str() : "",
              static_cast<long long>(n_gen));
  if (std::any_of(runs.begin(), runs.end(), [](const ParallelRun& r) { return r.disk_bw > 0; })) {
    std::printf("an offloaded row's bound is the smaller of its memory bound and its storage reads at the larger of two "
                "O_DIRECT probes, just before and after it (GB/s, probe / what the run read):");
    const char* sep = " ";
    for (const ParallelRun& r : runs)
      if (r.disk_bw > 0) {
        std::printf("%s%s N=%lld %.2f / %.2f", sep, r.policy.c_str(), static_cast<long long>(r.n), r.disk_bw / 1e9,
                    static_cast<double>(r.bytes_read) / r.seconds / 1e9);
        sep = ", ";
      }
    std::printf("\n");
  }
  if (mac_peak > 0)
    std::printf("%s activations: the integer kernels' arithmetic peak is %.0f G multiply-adds/s (%s on every "
                "thread%s)\n",
                int8 ? "int8" : "int16", mac_peak,
                mac_instructions.c_str(),
                int8 ? "" : ", two byte products each");
  std::printf("MiB read/step: the weights and the KV cache the step's tokens attend to (of it the cache's, all resident:");
  const char* sep = " ";
  for (const ParallelRun& r : runs)
    if (r.policy == "all") {
      std::printf("%s%.1f at N=%lld", sep, static_cast<double>(r.kv_bytes) / static_cast<double>(n_gen) / 1048576.0,
                  static_cast<long long>(r.n));
      sep = ", ";
    }
  std::printf(")\n");
  std::printf("| policy       | parallel | tg tok/s | per seq | vs N=1 | MiB read/step | distinct/selected | bound tok/s "
              "(triad GB/s) | of bound | GMAC/s (of peak) | hit rate |\n");
  std::printf("|--------------|---------:|---------:|--------:|-------:|--------------:|------------------:|----------"
              "------------:|---------:|-----------------:|---------:|\n");
  for (const ParallelRun& r : runs) {
    char hit[16] = "-", mac[32] = "-";
    if (r.hit_rate >= 0) std::snprintf(hit, sizeof hit, "%.1f%%", 100.0 * r.hit_rate);
    if (mac_peak > 0) {
      std::snprintf(mac, sizeof mac, "%.0f (%4.1f%%)", gmacs(r), 100.0 * gmacs(r) / mac_peak);
    } else {
      std::snprintf(mac, sizeof mac, "%.0f", gmacs(r));
    }
    std::printf("| %-12s | %8lld | %8.1f | %7.1f | %5.2fx | %13.1f | %16.0f%% | %9.1f (%5.1f) | %7.1f%% | %16s | %8s |\n",
                r.policy.c_str(), static_cast<long long>(r.n), tps(r), tps(r) / static_cast<double>(r.n),
                tps1 > 0 ? tps(r) / tps1 : 0.0, static_cast<double>(r.bytes + r.kv_bytes) / static_cast<double>(n_gen) / 1048576.0,
                100.0 * r.unique_share, bound(r), resident(r.n).triad, 100.0 * tps(r) / bound(r), mac, hit);
  }
  // Where the decode steps' time went, as `bench` prints it for one sequence.
  for (const ParallelRun& r : runs)
    std::printf("%s, %lld sequences: %.1f parallel sections per step, %.1f%% of the time inside them (%.1f%% waiting "
                "for the last part to start, %.1f%% with a thread done and waiting for the last to finish), %.1f%% "
                "between them on one thread\n",
                r.policy.c_str(), static_cast<long long>(r.n),
                static_cast<double>(r.sections.sections) / static_cast<double>(n_gen),
                100.0 * r.sections.section_seconds / r.seconds, 100.0 * r.sections.start_seconds / r.seconds,
                100.0 * r.sections.uneven_seconds / r.seconds, 100.0 * (1.0 - r.sections.section_seconds / r.seconds));
  for (const ParallelRun& r : runs)
    if (const std::string ops = op_times_text(r.ops, r.seconds, static_cast<double>(n_gen)); !ops.empty())
      std::printf("%s, %lld sequences, per step (%.3f ms) in the backend's operations: %s\n", r.policy.c_str(),
                  static_cast<long long>(r.n), 1000.0 * r.seconds / static_cast<double>(n_gen), ops.c_str());
  return 0;
}

}  // namespace moeflow::cli

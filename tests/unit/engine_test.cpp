// The public engine: sequences joining and leaving between steps, prefill chunks and
// decode tokens of many sequences in one step, each sequence's logits bit-equal to
// the same sequence run alone (all resident, and offloaded under every policy with
// --on-miss load); KV blocks accounted, refused when short, reused at once.
#include "moeflow/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>
#include <filesystem>
#include <atomic>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "engine/expert_source.h"
#include "kernels/cpu/q4_vnni.h"
#include "model/model_weights.h"
#include "moeflow/sampler.h"
#include "policy/policy_factory.h"
#include "model/synthetic_model.h"
#include "engine_scripts.h"
#include "test_paths.h"
#include "top4_model.h"

namespace moeflow {
namespace {

using namespace moeflow::testing;

class EngineBatch : public ::testing::TestWithParam<const char*> {};

TEST_P(EngineBatch, EachSequenceGetsTheLogitsItGetsAlone) {
  auto e = Engine::open(options_for(GetParam()));
  for (int n : {1, 2, 3, 5, 8, 16}) {
    const std::vector<Script> scripts = make_scripts(n, e->n_vocab(), 100 + n);
    const std::vector<Transcript> together = run_together(*e, scripts, 7 + n);
    EXPECT_EQ(e->n_sequences(), 0);
    EXPECT_EQ(e->kv_blocks_free(), e->kv_blocks_total()) << "every block returned";
    expect_same(together, *e, scripts, std::string(GetParam()) + ", " + std::to_string(n) + " sequences");
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EngineBatch,
                         ::testing::Values("mixtral-f32.gguf", "mixtral-bf16.gguf", "qwen3moe-q8_0.gguf",
                                           "olmoe-q4_0.gguf", "olmoe-f32.gguf", "qwen2moe-f32.gguf",
                                           "qwen2moe-q4_0.gguf", "deepseek2-f32.gguf", "deepseek2-q4_0.gguf",
                                           "deepseek-v3-f32.gguf", "glm4moe-f32.gguf", "granitemoe-f32.gguf",
                                           "granitemoe-shared-q8_0.gguf", "ernie4_5-moe-f32.gguf", "hunyuan-moe-f32.gguf",
                                           "gpt-oss-f32.gguf",
                                           "gpt-oss-mxfp4.gguf"));

// A q8_0 KV cache: each sequence's positions are rounded where they are stored, and
// read by the same kernel whatever shares the step, so batched sequences still get the
// bits they get alone (all resident and offloaded with --on-miss load); latent
// attention (deepseek2), sliding windows and sinks (gpt-oss) included. Where the
// engine is split-invariant, so is it with this cache. The pool's bytes are those of
// int8 elements and a float scale per 32 (kernels/cpu/attention.h).
TEST(EngineBatch, AQ8CacheKeepsEachSequenceItsOwnLogits) {
  for (const char* fixture : {"mixtral-f32.gguf", "olmoe-q4_0.gguf", "deepseek2-f32.gguf", "gpt-oss-mxfp4.gguf"}) {
    for (const char* policy : {"all", "lru"}) {
      if (std::string(policy) == "lru" && std::string(fixture) != "olmoe-q4_0.gguf") continue;
      EngineOptions o = options_for(fixture, policy, std::string(policy) == "all" ? "" : "25%");
      o.kv_type = "q8_0";
      auto e = Engine::open(o);
      ASSERT_EQ(e->kv_type(), "q8_0");
      for (int n : {1, 5, 16}) {
        const std::vector<Script> scripts = make_scripts(n, e->n_vocab(), 300 + n);
        const std::vector<Transcript> together = run_together(*e, scripts, 11 + n);
        expect_same(together, *e, scripts, std::string(fixture) + " q8_0 KV, " + policy + ", " + std::to_string(n) +
                                               " sequences");
      }
      std::printf("%-20s %-4s q8_0 KV cache, split_invariant %d\n", fixture, policy, e->split_invariant());
      if (!e->split_invariant()) continue;
      std::mt19937 rng(9);
      std::vector<int32_t> tokens(40);
      for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % e->n_vocab());
      auto run = [&](int64_t chunk) {
        const SeqId id = e->add_sequence({tokens, ""});
        std::vector<float> all;
        for (int64_t p = 0; p < 40; p += chunk) {
          std::vector<BatchToken> b;
          for (int64_t q = p; q < std::min<int64_t>(40, p + chunk); ++q) b.push_back({id, tokens[static_cast<size_t>(q)], q, true});
          e->step(b);
          for (size_t i = 0; i < b.size(); ++i) all.insert(all.end(), e->logits(i), e->logits(i) + e->n_vocab());
        }
        e->remove_sequence(id);
        return all;
      };
      EXPECT_TRUE(run(1) == run(7)) << fixture << " q8_0 KV: token by token against chunks of 7";
    }
  }
  EngineOptions o = options_for("olmoe-q4_0.gguf");
  o.kv_type = "f16";
  const uint64_t f16 = Engine::open(o)->kv_bytes();
  o.kv_type = "q8_0";
  const uint64_t q8 = Engine::open(o)->kv_bytes();
  // olmoe-q4_0's heads are 32 wide: 32 int8 and one float against 32 halves a row.
  EXPECT_EQ(q8 * 64, f16 * 36);
  o.kv_type = "q4_0";
  try {
    Engine::open(o);
    ADD_FAILURE() << "a q4_0 KV cache was accepted";
  } catch (const InputError& err) {
    EXPECT_NE(std::string(err.what()).find("'q4_0'"), std::string::npos) << err.what();
  }
}

// Offloaded under every policy (25% budget, --on-miss load): batched sequences get
// the floats of all-resident alone runs.
// Decode steps of many sequences run whole experts per thread, each expert on all the
// tokens that chose it, and threads take rows of others' down projections
// (experts_per_thread.h): on 1 to 4 threads every sequence's logits are the same bits.
// A top-4-of-8 model large enough for that path (128 x 128 experts): q4_0 and q8_0
// interleaved in fours, and gpt-oss's mxfp4 experts with their biases and clamped
// SwiGLU; 9 sequences, so experts get one to several tokens each.
TEST(EngineBatch, DecodeStepsGiveTheSameLogitsOnOneToFourThreads) {
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::MXFP4}) {
    const std::string path = moeflow::testing::write_top4_model(t, "batched_top4");
    EngineOptions o;
    o.model_path = path;
    o.ctx_size = 64;
    o.n_parallel = 16;
    std::vector<Transcript> one;
    std::vector<Script> scripts;
    for (int threads : {1, 2, 3, 4}) {
      o.threads = threads;
      auto e = Engine::open(o);
      if (scripts.empty()) scripts = make_scripts(9, e->n_vocab(), 31);
      const std::vector<Transcript> got = run_together(*e, scripts, 5);
      if (threads == 1) {
        one = got;
        continue;
      }
      ASSERT_NO_FATAL_FAILURE(
          expect_same_logits(got, one, std::string(dtype_name(t)) + ", " + std::to_string(threads) + " threads"));
    }
  }
}

TEST(EngineBatch, OffloadedUnderEveryPolicyIsLossless) {
  for (const char* fixture : {"mixtral-f32.gguf", "qwen3moe-q8_0.gguf", "qwen2moe-q4_0.gguf", "deepseek2-f32.gguf",
                              "deepseek2-q4_0.gguf", "deepseek-v3-f32.gguf", "glm4moe-f32.gguf",
                              "granitemoe-shared-q8_0.gguf", "ernie4_5-moe-f32.gguf", "hunyuan-moe-f32.gguf",
                              "gpt-oss-mxfp4.gguf"}) {
    auto resident = Engine::open(options_for(fixture));
    const std::vector<Script> scripts = make_scripts(9, resident->n_vocab(), 5);
    std::vector<Transcript> ref;
    for (const Script& s : scripts) ref.push_back(run_alone(*resident, s));
    for (const std::string& policy : policy_names()) {
      auto e = Engine::open(options_for(fixture, policy, "25%"));
      ASSERT_TRUE(e->offloaded());
      ASSERT_NO_FATAL_FAILURE(expect_same_logits(run_together(*e, scripts, 3), ref, std::string(fixture) + ", " + policy));
      const ExpertCacheStats st = e->cache_stats();
      EXPECT_GT(st.misses, 0u) << policy << ": a 25% budget must miss";
      std::printf("%s %-12s 9 sequences at 25%%: hit rate %.1f%%, %llu evictions\n", fixture, policy.c_str(),
                  100.0 * static_cast<double>(st.hits) / static_cast<double>(st.hits + st.misses),
                  static_cast<unsigned long long>(st.evictions));
    }
  }
}

// `adaptive` (and its ablations) with --on-miss load give the all-resident logits at
// every budget, down to the smallest that runs; on the 2-layer fixture and on a
// 4-layer model, where the lookahead routing `adaptive` asks for reaches two layers.
// The engine computes the lookahead only for a policy that reads it.
TEST(EngineBatch, AdaptiveIsLosslessAtEveryBudget) {
  struct LookaheadSeen final : public ForwardListener {
    int64_t deepest = 0;
    void routed(const LayerRouting& r) override { deepest = std::max(deepest, r.lookahead_depth); }
  };
  SyntheticModelSpec spec;
  spec.n_layer = 4;
  const std::string four = moeflow::testing::scratch_path("four-layers") + ".gguf";
  write_synthetic_model(spec, four);
  for (const std::string& model : {fixture_path("mixtral-f32.gguf"), four}) {
    EngineOptions ro = options_for("mixtral-f32.gguf");
    ro.model_path = model;
    auto resident = Engine::open(ro);
    const std::vector<Script> scripts = make_scripts(6, resident->n_vocab(), 7);
    std::vector<Transcript> ref;
    for (const Script& s : scripts) ref.push_back(run_alone(*resident, s));
    for (const char* policy : {"adaptive", "adaptive-nolookahead", "adaptive-noprefetch", "adaptive-nodistance-nolearned"})
      for (const char* budget : {"12.5%", "25%", "50%", "75%"}) {
        EngineOptions o = options_for("mixtral-f32.gguf", policy, budget);
        o.model_path = model;
        auto e = Engine::open(o);
        ASSERT_TRUE(e->offloaded());
        LookaheadSeen seen;
        e->add_listener(&seen);
        ASSERT_NO_FATAL_FAILURE(
            expect_same_logits(run_together(*e, scripts, 5), ref, model + ", " + policy + " at " + budget));
        const int64_t layers = model == four ? 4 : 2;
        EXPECT_EQ(seen.deepest, std::string(policy) == "adaptive-nolookahead" ? 0 : std::min<int64_t>(2, layers - 1))
            << model << ", " << policy;
        const ExpertCacheStats st = e->cache_stats();
        std::printf("%s layers, %s at %s: hit rate %.1f%%\n", layers == 4 ? "4" : "2", policy, budget,
                    100.0 * static_cast<double>(st.hits) / static_cast<double>(std::max<uint64_t>(st.hits + st.misses, 1)));
      }
  }
}

// "100%" is of what the experts take in memory: it holds every expert, so nothing is
// ever evicted.
TEST(EngineBatch, FullBudgetNeverEvicts) {
  auto e = Engine::open(options_for("mixtral-f32.gguf", "lru", "100%"));
  const std::vector<Script> scripts = make_scripts(4, e->n_vocab(), 9);
  run_together(*e, scripts, 2);
  EXPECT_EQ(e->cache_stats().evictions, 0u);
  EXPECT_EQ(e->cache_stats().budget_bytes, e->cache_stats().expert_bytes_total);
}

// The cache's statistics say how lossy a run was: --on-miss reroute counts the slots it
// served with another expert, load counts none.
TEST(EngineBatch, RerouteCountsTheSlotsItServedWithAnotherExpert) {
  for (const std::string mode : {"load", "reroute"}) {
    EngineOptions o = options_for("mixtral-f32.gguf", "lru", "25%");
    o.on_miss = mode;
    auto e = Engine::open(o);
    run_together(*e, make_scripts(2, e->n_vocab(), 5), 2);
    const ExpertCacheStats c = e->cache_stats();
    EXPECT_EQ(e->lossy(), mode == "reroute");
    if (mode == "load")
      EXPECT_EQ(c.rerouted_slots, 0u);
    else
      EXPECT_GT(c.rerouted_slots, 0u);
  }
}

// --activations int8: interleaved q4_0 / q8_0 rows multiply int8 activations in every
// step, so a sequence batched with others still gets its own floats; those floats stay
// near the int16 ones (int8's rounding, printed) and differ from them where the CPU has
// the kernels (elsewhere the option changes nothing).
TEST(EngineBatch, Int8ActivationsKeepEachSequenceItsOwnLogits) {
  for (const char* fixture : {"olmoe-q4_0.gguf", "qwen3moe-q8_0.gguf", "qwen2moe-q4_0.gguf", "deepseek2-q4_0.gguf",
                              "gpt-oss-mxfp4.gguf"}) {
    EngineOptions o8 = options_for(fixture);
    o8.activations = "int8";
    auto e8 = Engine::open(o8);
    EngineOptions o16 = options_for(fixture);
    o16.activations = "int16";
    auto e16 = Engine::open(o16);
    for (int n : {1, 4, 16}) {
      const std::vector<Script> scripts = make_scripts(n, e8->n_vocab(), 300 + n);
      const std::vector<Transcript> together = run_together(*e8, scripts, 11 + n);
      expect_same(together, *e8, scripts, std::string(fixture) + ", int8 activations, " + std::to_string(n) + " sequences");
    }
    // Offloaded experts (25%, lru, --on-miss load) take the same kernels: lossless.
    EngineOptions off = options_for(fixture, "lru", "25%");
    off.activations = "int8";
    auto e8_off = Engine::open(off);
    const std::vector<Script> scripts = make_scripts(6, e8->n_vocab(), 77);
    expect_same(run_together(*e8_off, scripts, 5), *e8, scripts, std::string(fixture) + ", int8, offloaded");
    EXPECT_GT(e8_off->cache_stats().misses, 0u);
    const Script s = prompt_token_by_token(e8->n_vocab());
    const Transcript a8 = run_alone(*e8, s), a16 = run_alone(*e16, s);
    ASSERT_EQ(a8.logits.size(), a16.logits.size());
    // Position by position; a position whose router picked other experts (a near tie
    // flipped by the rounding: on gpt-oss-mxfp4 int8 changes 3 of 256 token-layer
    // routings, `trace record`) may differ by more: at most one of them.
    const std::vector<double> diffs = relative_differences(a8, a16);
    const double worst = *std::max_element(diffs.begin(), diffs.end());
    const auto beyond = std::count_if(diffs.begin(), diffs.end(), [](double d) { return d >= 5e-2; });
    std::printf("  %-20s int8 against int16 activations: max relative difference of the logits %.3e (%d of %zu "
                "positions beyond 5e-2)\n", fixture, worst, static_cast<int>(beyond), diffs.size());
    EXPECT_LE(beyond, 1) << fixture;
    if (cpu::q4_vnni_enabled()) {
      EXPECT_GT(worst, 0.0) << fixture << ": the option changed nothing";
    }
    // auto (the default) is int8 for q4_0 / k-quant / MXFP4 weights and int16 for q8_0
    // ones, matrix by matrix: qwen3moe-q8_0's integer products all have q8_0 weights
    // (int16's floats), the q4_0 fixtures' q4_0 ones (int8's); gpt-oss-mxfp4 has q8_0
    // dense matrices and MXFP4 experts, so neither.
    EngineOptions oa = options_for(fixture);
    ASSERT_EQ(oa.activations, "auto");
    auto ea = Engine::open(oa);
    const Transcript aa = run_alone(*ea, s);
    ASSERT_EQ(aa.logits.size(), a16.logits.size());
    if (std::string(fixture) == "gpt-oss-mxfp4.gguf") {
      if (cpu::q4_vnni_enabled()) {
        EXPECT_FALSE(aa.logits == a16.logits) << "auto: gpt-oss's MXFP4 experts on int8 activations";
        EXPECT_FALSE(aa.logits == a8.logits) << "auto: gpt-oss's q8_0 matrices on int16 activations";
      }
      continue;
    }
    const bool q8 = std::string(fixture) == "qwen3moe-q8_0.gguf";
    const Transcript& expected = q8 ? a16 : a8;
    for (size_t k = 0; k < aa.logits.size(); ++k)
      ASSERT_TRUE(aa.logits[k] == expected.logits[k]) << fixture << ": auto activations are not " << (q8 ? "int16" : "int8");
  }
  EngineOptions bad = options_for("olmoe-q4_0.gguf");
  bad.activations = "int4";
  EXPECT_THROW(Engine::open(bad), InputError);
}

// Q4_K, Q5_K and Q6_K rows interleaved in fours (tensor/rows_x4.h), the layout the CPU backend
// gives them on int8 activations (the default, auto): each sequence its own logits batched
// (1 to 16 sequences) and with its experts streamed through a 25% cache, as for the
// other interleaved types; within rounding of GGUF's layout on the same activations.
TEST(EngineBatch, InterleavedKquantsKeepEachSequenceItsOwnLogits) {
  for (DType t : {DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    const std::string name = dtype_name(t);
    SyntheticModelSpec spec;
    spec.dtype = t;
    spec.n_embd = 256;
    spec.n_ff_expert = 256;
    spec.head_dim = 64;
    const std::string path = moeflow::testing::scratch_path(name + "-model") + ".gguf";
    write_synthetic_model(spec, path);
    EngineOptions o = options_for("mixtral-f32.gguf");
    o.model_path = path;
    auto e = Engine::open(o);
    const MatrixRef& gate = e->model().weights().layers[0].gate_exps.first;
    EXPECT_EQ(gate.dtype, t);
    EXPECT_EQ(gate.layout, cpu::q4_vnni_enabled() ? RowLayout::rows_x4 : RowLayout::gguf);
    for (int n : {1, 4, 16}) {
      const std::vector<Script> scripts = make_scripts(n, e->n_vocab(), 500 + n);
      const std::vector<Transcript> together = run_together(*e, scripts, 3 + n);
      expect_same(together, *e, scripts, "interleaved " + name + ", " + std::to_string(n) + " sequences");
    }
    EngineOptions off = o;
    off.policy = "lru";
    off.expert_budget = "25%";
    auto e_off = Engine::open(off);
    const std::vector<Script> scripts = make_scripts(6, e->n_vocab(), 91);
    expect_same(run_together(*e_off, scripts, 5), *e, scripts, "interleaved " + name + ", offloaded");
    EXPECT_GT(e_off->cache_stats().misses, 0u);
    // Against GGUF's layout on the same int8 activations (--no-repack: the one-row
    // k-quant kernels): the same products up to the order of the float steps.
    EngineOptions plain = o;
    plain.repack = false;
    auto e_plain = Engine::open(plain);
    EXPECT_EQ(e_plain->model().weights().layers[0].gate_exps.first.layout, RowLayout::gguf);
    const Script s = prompt_token_by_token(e->n_vocab());
    const Transcript a = run_alone(*e, s), b = run_alone(*e_plain, s);
    ASSERT_EQ(a.logits.size(), b.logits.size());
    const double worst = max_relative_difference(a, b);
    std::printf("  interleaved %s against GGUF's layout, int8 activations: max relative difference of the logits %.3e\n",
                name.c_str(), worst);
    EXPECT_LT(worst, 1e-5) << name;
    // int16 activations keep GGUF's layout (the interleaved kernels are int8's).
    EngineOptions o16 = o;
    o16.activations = "int16";
    EXPECT_EQ(Engine::open(o16)->model().weights().layers[0].gate_exps.first.layout, RowLayout::gguf);
    std::remove(path.c_str());
  }
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// KV blocks: counted out and back; a step needing more than remain is refused whole
// with a clear error and leaves every sequence as it was.
TEST(EngineKv, BlocksAreAccountedRefusedWhenShortAndReusedAtOnce) {
  EngineOptions o = options_for("mixtral-f32.gguf");
  o.n_parallel = 1;
  o.ctx_size = 64;  // two blocks of 32
  auto e = Engine::open(o);
  ASSERT_EQ(e->kv_block_len(), 32);
  ASSERT_EQ(e->kv_blocks_total(), 2);
  const SeqId a = e->add_sequence(), b = e->add_sequence();
  std::vector<BatchToken> pa;
  for (int64_t p = 0; p < 40; ++p) pa.push_back({a, static_cast<int32_t>(p % 50 + 1), p, p == 39});
  e->step(pa);
  const std::vector<float> a40(e->logits(39), e->logits(39) + e->n_vocab());
  EXPECT_EQ(e->kv_blocks_free(), 0);
  EXPECT_EQ(e->kv_blocks_needed({{b, 5, 0, true}, {a, 9, 40, true}}), 1) << "b's first block; a's 41st fits its second";
  const std::string err = error_of([&] { e->step({{b, 5, 0, true}, {a, 9, 40, true}}); });
  EXPECT_NE(err.find("KV blocks"), std::string::npos) << err;
  EXPECT_EQ(e->sequence_length(a), 40) << "a refused step changes nothing";
  EXPECT_EQ(e->sequence_length(b), 0);
  e->step({{a, 9, 40, true}});  // a continues in its own blocks
  const std::vector<float> a41(e->logits(0), e->logits(0) + e->n_vocab());
  e->remove_sequence(a);
  EXPECT_EQ(e->kv_blocks_free(), 2);
  e->step({{b, 5, 0, true}});
  EXPECT_EQ(e->kv_blocks_free(), 1);
  // a's run again, alone in the reused blocks: the same floats.
  const SeqId c = e->add_sequence();
  e->remove_sequence(b);
  std::vector<BatchToken> pc = pa;
  for (BatchToken& t : pc) t.seq = c;
  e->step(pc);
  EXPECT_TRUE(std::equal(a40.begin(), a40.end(), e->logits(39)));
  e->step({{c, 9, 40, true}});
  EXPECT_TRUE(std::equal(a41.begin(), a41.end(), e->logits(0)));
  // Errors name what is wrong.
  EXPECT_NE(error_of([&] { e->step({{c, 9, 7, true}}); }).find("expected 41"), std::string::npos);
  EXPECT_NE(error_of([&] { e->step({{99, 9, 0, true}}); }).find("no sequence 99"), std::string::npos);
  EXPECT_NE(error_of([&] { e->step({{c, -1, 41, true}}); }).find("outside the vocabulary"), std::string::npos);
  EXPECT_NE(error_of([&] { e->step({}); }).find("empty"), std::string::npos);
  EXPECT_NE(error_of([&] { e->logits(1); }).find("batch token 1 is outside the last step's batch of 1 tokens"),
            std::string::npos);
  std::vector<BatchToken> past;
  for (int64_t p = 41; p < 70; ++p) past.push_back({c, 3, p, false});
  EXPECT_NE(error_of([&] { e->step(past); }).find("context size is 64"), std::string::npos);
  const ModelConfig& mc = e->model().config();
  EXPECT_EQ(e->kv_bytes(), static_cast<uint64_t>(2 * 2 * mc.n_layer * mc.n_head_kv * 32 * mc.head_dim * 4))
      << "two blocks of f32 keys and values";
}

// Prompt reuse: sequences continued from a parked prefix, two at once, get the logits
// of fresh sequences fed the same tokens in the same chunks (all resident and
// offloaded with --on-miss load); the prefix's blocks are shared, accounted while
// parked and given back when the last holder lets go.
std::vector<std::vector<float>> feed(Engine& e, SeqId s, const std::vector<int32_t>& tokens, int64_t from,
                                     int64_t chunk) {
  std::vector<std::vector<float>> out;
  const auto n = static_cast<int64_t>(tokens.size());
  for (int64_t p = from; p < n;) {
    const int64_t end = std::min(n, (p / chunk + 1) * chunk);  // chunks end at multiples of `chunk`
    std::vector<BatchToken> b;
    for (int64_t q = p; q < end; ++q) b.push_back({s, tokens[static_cast<size_t>(q)], q, q == end - 1});
    e.step(b);
    out.emplace_back(e.logits(b.size() - 1), e.logits(b.size() - 1) + e.n_vocab());
    p = end;
  }
  return out;
}

// Three sequences of 128 positions over mixtral-f32, all resident or under `policy`
// at 25%.
std::unique_ptr<Engine> reuse_engine(const std::string& policy) {
  EngineOptions o = options_for("mixtral-f32.gguf", policy, policy == "all" ? "" : "25%");
  o.ctx_size = 128;
  o.n_parallel = 3;
  return Engine::open(o);
}

void append_random(std::vector<int32_t>& tokens, size_t n, std::mt19937& rng, int64_t n_vocab) {
  for (size_t i = 0; i < n; ++i) tokens.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(n_vocab)));
}

TEST(EnginePromptReuse, AContinuedPrefixGivesTheLogitsOfAFreshRun) {
  for (const std::string& policy : {std::string("all"), std::string("lru"), std::string("adaptive")}) {
    auto e = reuse_engine(policy);
    std::mt19937 rng(11);
    std::vector<int32_t> turn1;
    append_random(turn1, 70, rng, e->n_vocab());
    // Turn 1: 70 prompt tokens in chunks of 32, then 3 decode tokens.
    const SeqId a = e->add_sequence({turn1, ""});
    feed(*e, a, turn1, 0, 32);
    for (int64_t p = 70; p < 73; ++p) e->step({{a, 5, p, true}});
    const int64_t free_before = e->kv_blocks_free();
    // The positions fed in whole chunks (0..63) are kept; the rest go back at once.
    const SeqId parked = e->park_sequence(a, 64);
    EXPECT_EQ(e->n_sequences(), 0);
    EXPECT_EQ(e->n_parked(), 1);
    EXPECT_EQ(e->sequence_length(parked), 64);
    EXPECT_EQ(e->kv_blocks_free(), free_before + 1) << "73 positions took 3 blocks, 64 keep 2";
    EXPECT_EQ(e->kv_blocks_parked(), 2);
    EXPECT_NE(error_of([&] { e->step({{parked, 1, 64, true}}); }).find("is a parked prefix"), std::string::npos);
    EXPECT_NE(error_of([&] { e->step({{a, 1, 73, true}}); }).find("no sequence"), std::string::npos);
    // Two next turns share turn 1's first 64 tokens and go on differently, side by side.
    std::vector<std::vector<int32_t>> next(2, std::vector<int32_t>(turn1.begin(), turn1.begin() + 64));
    for (auto& t : next) append_random(t, 40, rng, e->n_vocab());
    const SeqId b = e->add_sequence({next[0], ""}, parked, 64), c = e->add_sequence({next[1], ""}, parked, 64);
    EXPECT_EQ(e->n_parked(), 1) << "the prefix stays parked";
    EXPECT_EQ(e->kv_blocks_parked(), 0) << "its blocks are held by running sequences too";
    EXPECT_EQ(e->sequence_length(b), 64);
    std::vector<std::vector<float>> reused[2];
    for (int64_t p = 64; p < 104; p += 32) {  // both sequences' chunks in one step
      const int64_t end = std::min<int64_t>(104, p + 32);
      std::vector<BatchToken> batch;
      for (int k = 0; k < 2; ++k)
        for (int64_t q = p; q < end; ++q)
          batch.push_back({k == 0 ? b : c, next[static_cast<size_t>(k)][static_cast<size_t>(q)], q, q == end - 1});
      e->step(batch);
      for (int k = 0; k < 2; ++k) {
        const size_t i = static_cast<size_t>((k + 1) * (end - p) - 1);
        reused[k].emplace_back(e->logits(i), e->logits(i) + e->n_vocab());
      }
    }
    e->remove_sequence(b);
    e->remove_sequence(c);
    EXPECT_EQ(e->kv_blocks_parked(), 2);
    for (int k = 0; k < 2; ++k) {
      const SeqId f = e->add_sequence({next[static_cast<size_t>(k)], ""});
      const std::vector<std::vector<float>> fresh = feed(*e, f, next[static_cast<size_t>(k)], 0, 32);
      e->remove_sequence(f);
      ASSERT_EQ(fresh.size(), 4u);
      for (size_t i = 0; i < 2; ++i)
        EXPECT_TRUE(reused[k][i] == fresh[i + 2]) << policy << ": turn " << k << ", chunk " << i << " differs";
    }
    e->remove_sequence(parked);
    EXPECT_EQ(e->kv_blocks_free(), e->kv_blocks_total());
  }
}

// A prompt offered while its sequence runs (park_prefix): a sequence that starts from
// it meanwhile gets the logits of a fresh run, and the one that offered it goes on
// undisturbed (its own logits are those of a run that offered nothing), its writes past
// the offer landing in blocks of its own.
TEST(EnginePromptReuse, ARunningSequenceOffersItsPromptAsItGoes) {
  for (const std::string& policy : {std::string("all"), std::string("lru")}) {
    auto e = reuse_engine(policy);
    std::mt19937 rng(5);
    std::vector<int32_t> shared;
    append_random(shared, 100, rng, e->n_vocab());
    std::vector<int32_t> other(shared.begin(), shared.begin() + 64);
    append_random(other, 30, rng, e->n_vocab());
    // Alone: what each of the two prompts gives, in chunks of 32.
    auto alone = [&](const std::vector<int32_t>& t) {
      const SeqId f = e->add_sequence({t, ""});
      auto out = feed(*e, f, t, 0, 32);
      e->remove_sequence(f);
      return out;
    };
    const auto shared_alone = alone(shared), other_alone = alone(other);
    // Together: `a` reads its first two chunks and offers them, `b` starts from the offer
    // and reads the rest of its own prompt in the same steps as `a` reads the rest of its.
    const SeqId a = e->add_sequence({shared, ""});
    std::vector<std::vector<float>> a_out = feed(*e, a, std::vector<int32_t>(shared.begin(), shared.begin() + 64), 0, 32);
    EXPECT_NE(error_of([&] { e->park_prefix(a, 40); }).find("not a multiple of the KV block"), std::string::npos);
    EXPECT_NE(error_of([&] { e->park_prefix(a, 96); }).find("keep 96 positions of sequence"), std::string::npos);
    const SeqId offer = e->park_prefix(a, 64);
    EXPECT_NE(error_of([&] { e->park_prefix(offer, 32); }).find("is a parked prefix"), std::string::npos);
    EXPECT_EQ(e->n_sequences(), 1);
    EXPECT_EQ(e->n_parked(), 1);
    EXPECT_EQ(e->kv_blocks_parked(), 0) << "a running sequence holds every block of its offer";
    EXPECT_EQ(e->kv_blocks_freed_by_removing(offer), 0);
    EXPECT_EQ(e->kv_blocks_freed_by_removing(a), 0);
    const SeqId b = e->add_sequence({other, ""}, offer, 64);
    std::vector<std::vector<float>> b_out;
    for (int64_t p = 64; p < 100; p += 32) {
      std::vector<BatchToken> batch;
      const int64_t a_end = std::min<int64_t>(100, p + 32), b_end = std::min<int64_t>(94, p + 32);
      for (int64_t q = p; q < a_end; ++q) batch.push_back({a, shared[static_cast<size_t>(q)], q, q == a_end - 1});
      for (int64_t q = p; q < b_end; ++q) batch.push_back({b, other[static_cast<size_t>(q)], q, q == b_end - 1});
      e->step(batch);
      const size_t ia = static_cast<size_t>(a_end - p - 1), ib = static_cast<size_t>(a_end - p + b_end - p - 1);
      a_out.emplace_back(e->logits(ia), e->logits(ia) + e->n_vocab());
      if (b_end > p) b_out.emplace_back(e->logits(ib), e->logits(ib) + e->n_vocab());
    }
    ASSERT_EQ(a_out.size(), shared_alone.size());
    for (size_t i = 0; i < a_out.size(); ++i) EXPECT_TRUE(a_out[i] == shared_alone[i]) << policy << ": a, chunk " << i;
    ASSERT_EQ(b_out.size(), 1u);
    ASSERT_EQ(other_alone.size(), 3u);
    for (size_t i = 0; i < b_out.size(); ++i) EXPECT_TRUE(b_out[i] == other_alone[i + 2]) << policy << ": b, chunk " << i;
    EXPECT_EQ(e->kv_blocks_freed_by_removing(a), 2) << "positions 64..99 are a's alone";
    e->remove_sequence(a);
    e->remove_sequence(b);
    EXPECT_EQ(e->kv_blocks_parked(), 2) << "the offer outlives both";
    EXPECT_EQ(e->kv_blocks_freed_by_removing(offer), 2);
    e->remove_sequence(offer);
    EXPECT_EQ(e->kv_blocks_free(), e->kv_blocks_total());
  }
}

// split_invariant(): where the engine says so, a sequence's logits at every position
// are the same bits fed token by token, in chunks of 7, or as 1 + 39 tokens; float
// weights (mixtral-f32) are not, and on a VNNI CPU the q4_0 and q8_0 fixtures are.
TEST(EnginePromptReuse, SplitInvariantEnginesGiveTheSameLogitsHoweverASequenceIsSplit) {
  for (const char* fixture : {"mixtral-f32.gguf", "olmoe-q4_0.gguf", "qwen3moe-q8_0.gguf", "qwen2moe-q4_0.gguf",
                              "deepseek2-q4_0.gguf", "gpt-oss-mxfp4.gguf", "granitemoe-shared-q8_0.gguf"}) {
    for (const char* policy : {"all", "lru"}) {
      auto e = Engine::open(options_for(fixture, policy, std::string(policy) == "all" ? "" : "25%"));
      const bool invariant = e->split_invariant();
      std::printf("%-28s %-4s split_invariant %d\n", fixture, policy, invariant);
      if (std::string(fixture) == "mixtral-f32.gguf") {
        EXPECT_FALSE(invariant);
      }
      if (cpu::q4_vnni_enabled() && (std::string(fixture) == "olmoe-q4_0.gguf" || std::string(fixture) == "qwen3moe-q8_0.gguf")) {
        EXPECT_TRUE(invariant) << fixture;
      }
      if (!invariant) continue;
      std::mt19937 rng(5);
      std::vector<int32_t> tokens(40);
      for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % e->n_vocab());
      auto run = [&](const std::vector<int64_t>& cuts) {  // chunk ends
        const SeqId s = e->add_sequence({tokens, ""});
        std::vector<float> all;
        int64_t p = 0;
        for (int64_t end : cuts) {
          std::vector<BatchToken> b;
          for (int64_t q = p; q < end; ++q) b.push_back({s, tokens[static_cast<size_t>(q)], q, true});
          e->step(b);
          for (size_t i = 0; i < b.size(); ++i) all.insert(all.end(), e->logits(i), e->logits(i) + e->n_vocab());
          p = end;
        }
        e->remove_sequence(s);
        return all;
      };
      std::vector<int64_t> ones, sevens;
      for (int64_t p = 1; p <= 40; ++p) ones.push_back(p);
      for (int64_t p = 7; p < 40; p += 7) sevens.push_back(p);
      sevens.push_back(40);
      const std::vector<float> a = run(ones), b = run(sevens), c = run({1, 40});
      EXPECT_TRUE(a == b) << fixture << " " << policy << ": token by token against chunks of 7";
      EXPECT_TRUE(a == c) << fixture << " " << policy << ": token by token against 1 + 39";
    }
  }
  EngineOptions o = options_for("olmoe-q4_0.gguf", "lru", "25%");
  o.on_miss = "reroute";  // a token's output depends on what the cache holds
  EXPECT_FALSE(Engine::open(o)->split_invariant());
}

TEST(EnginePromptReuse, ParkedPrefixesAreAccountedAndMisuseIsNamed) {
  EngineOptions o = options_for("mixtral-f32.gguf");
  o.n_parallel = 2;
  auto e = Engine::open(o);  // 64 positions each: four blocks of 32
  const SeqId a = e->add_sequence();
  std::vector<BatchToken> pa;
  for (int64_t p = 0; p < 40; ++p) pa.push_back({a, static_cast<int32_t>(p % 50 + 1), p, p == 39});
  e->step(pa);
  EXPECT_NE(error_of([&] { e->park_sequence(a, 41); }).find("keep 41 positions of sequence 0, which holds 40"),
            std::string::npos);
  EXPECT_NE(error_of([&] { e->add_sequence({}, a, 32); }).find("is not a parked prefix"), std::string::npos);
  const SeqId p = e->park_sequence(a, 40);
  EXPECT_EQ(e->kv_blocks_free(), 2) << "a parked prefix holds its blocks";
  EXPECT_EQ(e->kv_blocks_parked(), 2);
  EXPECT_NE(error_of([&] { e->add_sequence({}, p, 64); }).find("keep 64"), std::string::npos);
  EXPECT_NE(error_of([&] { e->add_sequence({}, p, 10); }).find("not a multiple of the KV block (32 positions)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { e->resize_context(32); }).find("parked"), std::string::npos);
  // Continuing from its first block: that one is shared, the partial second stays the
  // prefix's alone, and the new sequence writes from position 32 into a block of its own.
  const SeqId b = e->add_sequence({}, p, 32);
  EXPECT_EQ(e->kv_blocks_free(), 2);
  EXPECT_EQ(e->kv_blocks_parked(), 1);
  EXPECT_EQ(e->sequence_length(b), 32);
  e->step({{b, 7, 32, true}});
  EXPECT_EQ(e->kv_blocks_free(), 1);
  e->remove_sequence(p);  // the shared block stays with b
  EXPECT_EQ(e->kv_blocks_free(), 2);
  const SeqId q = e->park_sequence(b, 0);  // nothing kept: a parked prefix of no blocks
  EXPECT_EQ(e->kv_blocks_free(), 4);
  e->remove_sequence(q);
  EXPECT_EQ(e->n_parked(), 0);
  EXPECT_EQ(e->n_sequences(), 0);
}

// gpt-oss's sliding layers in a pool of their own that keeps only their window (the
// default; EngineOptions::swa_full keeps every position): six sequences of 312 to 412
// positions, prefill chunks of 1 to 16 and decode tokens mixed, get bit for bit the
// logits of an engine that keeps every position, at a window of 40 (wider than a block
// and starting inside one) and the fixture's 8. The sliding pool touches what windows
// and chunks hold at once, not what the sequences are long. A parked prefix continues
// from near its end (with the logits of the sequence it came from) and from further
// back is refused by name; kv_can_keep says which. After resize_context, and with a
// q8_0 cache, the same holds; a one-layer gpt-oss (its layer slides) keeps one pool.
TEST(EngineKv, SlidingLayersKeepOnlyTheirWindow) {
  SyntheticModelSpec spec;
  spec.arch = Arch::GptOss;
  spec.sliding_window = 40;
  spec.n_layer = 4;
  const std::string w40 = moeflow::testing::scratch_path("gpt-oss-window-40") + ".gguf";
  write_synthetic_model(spec, w40);
  for (const std::string& path : {w40, fixture_path("gpt-oss-mxfp4.gguf")}) {
    EngineOptions o;
    o.model_path = path;
    o.threads = 2;
    o.ctx_size = 448;
    o.n_parallel = 6;
    auto ring = Engine::open(o);
    o.swa_full = true;
    auto full = Engine::open(o);
    EXPECT_EQ(ring->kv_bytes(), full->kv_bytes()) << "both map a block per position of each sequence";
    std::mt19937 rng(5);
    std::vector<Script> scripts(6);
    for (int i = 0; i < 6; ++i) {
      append_random(scripts[i].prompt, static_cast<size_t>(300 + 20 * i), rng, ring->n_vocab());
      scripts[i].chunk = 1 + (i * 7) % 16;
      scripts[i].n_gen = 12;
      scripts[i].join = i;
    }
    const std::vector<Transcript> got = run_together(*ring, scripts, 3), want = run_together(*full, scripts, 3);
    ASSERT_NO_FATAL_FAILURE(expect_same_logits(got, want, path + ": the window's rows alone against every position"));
    EXPECT_EQ(ring->kv_blocks_free(), ring->kv_blocks_total());
    // The layers split evenly, so a block of either pool is half one of all layers:
    // the sliding pool's peak is what the ring touched beyond half the full engine's.
    const int64_t W = ring->model().config().sliding_window;
    const uint64_t half_block = full->kv_bytes() / static_cast<uint64_t>(full->kv_blocks_total()) / 2;
    const uint64_t full_peak = full->kv_bytes_touched() / (2 * half_block);
    const uint64_t sliding_peak = (ring->kv_bytes_touched() - full->kv_bytes_touched() / 2) / half_block;
    // A sequence holds from its last whole block's start less a window, to its step's end.
    const uint64_t per_sequence = static_cast<uint64_t>((32 + W - 1 + 16 + 31) / 32 + 1);
    std::printf("%s: blocks held at most, every position %llu, the sliding layers' window %llu (bound %llu)\n",
                path.c_str(), static_cast<unsigned long long>(full_peak),
                static_cast<unsigned long long>(sliding_peak), static_cast<unsigned long long>(6 * per_sequence));
    EXPECT_LE(sliding_peak, 6 * per_sequence) << path;
    EXPECT_LT(2 * sliding_peak, full_peak) << path;

    // Parking: 300 positions in chunks of 12; the sliding rows kept reach a window back
    // from 288, the last whole block's start.
    std::vector<int32_t> tokens;
    append_random(tokens, 300, rng, ring->n_vocab());
    const SeqId s = ring->add_sequence({tokens, ""});
    const std::vector<std::vector<float>> whole = feed(*ring, s, tokens, 0, 12);
    const int64_t first = (288 - W + 1) / 32 * 32;  // the first position its sliding table holds
    const int64_t shortest = first + W - 1;          // the fewest a continuation can keep
    EXPECT_TRUE(ring->kv_can_keep(s, 288));
    EXPECT_TRUE(ring->kv_can_keep(s, shortest));
    EXPECT_FALSE(ring->kv_can_keep(s, shortest - 1));
    EXPECT_TRUE(ring->kv_can_keep(s, 0));
    const std::string err = error_of([&] { ring->park_prefix(s, 256); });
    EXPECT_NE(err.find("keep 256"), std::string::npos) << err;
    EXPECT_NE(err.find("--swa-full"), std::string::npos) << err;
    const SeqId parked = ring->park_prefix(s, 288);
    EXPECT_NE(error_of([&] { ring->add_sequence({}, parked, 256); }).find("--swa-full"), std::string::npos);
    const SeqId c = ring->add_sequence({tokens, ""}, parked, 288);
    EXPECT_TRUE(feed(*ring, c, tokens, 288, 12).back() == whole.back()) << path << ": continued from 288";
    for (SeqId id : {s, parked, c}) ring->remove_sequence(id);
    EXPECT_EQ(ring->kv_blocks_free(), ring->kv_blocks_total());
    // Keeping every position, any whole block continues.
    const SeqId f = full->add_sequence({tokens, ""});
    const std::vector<std::vector<float>> every = feed(*full, f, tokens, 0, 12);
    EXPECT_TRUE(full->kv_can_keep(f, 32));
    full->remove_sequence(full->park_prefix(f, 32));
    full->remove_sequence(f);
    EXPECT_TRUE(every == whole) << path;
    // A resized context and a q8_0 cache keep the two pools and the same floats.
    ring->resize_context(320);
    const SeqId r = ring->add_sequence({tokens, ""});
    EXPECT_TRUE(feed(*ring, r, tokens, 0, 12) == whole) << path << ": after resize_context";
    ring->remove_sequence(r);
    o.kv_type = "q8_0";
    o.swa_full = false;
    auto q8_ring = Engine::open(o);
    o.swa_full = true;
    auto q8_full = Engine::open(o);
    ASSERT_NO_FATAL_FAILURE(expect_same_logits(run_together(*q8_ring, scripts, 3), run_together(*q8_full, scripts, 3),
                                               path + ": a q8_0 cache, the window's rows alone against every position"));
  }
  // One layer, which slides: nothing to keep apart, one pool as before.
  spec.n_layer = 1;
  const std::string one = moeflow::testing::scratch_path("gpt-oss-one-layer") + ".gguf";
  write_synthetic_model(spec, one);
  EngineOptions o = options_for("");
  o.model_path = one;
  auto e = Engine::open(o);
  const std::vector<Script> scripts = make_scripts(3, e->n_vocab(), 17);
  expect_same(run_together(*e, scripts, 5), *e, scripts, "a one-layer gpt-oss");
}

}  // namespace
}  // namespace moeflow

namespace moeflow {
namespace {

// The example client (examples/batched_generation.cpp) links only the public API and
// generates for three prompts together on the built-in model; the same prompt twice
// gives the same text (each sequence's floats do not depend on its neighbours).
TEST(EngineExample, GeneratesForSeveralPromptsTogether) {
  const std::string model = std::string(MOEFLOW_SOURCE_DIR_FOR_TESTS) + "/models/default.gguf";
  int status = 0;
  const std::string out = moeflow::testing::run_command(std::string(MOEFLOW_EXAMPLE) + " " + model +
                                                            " 'Once upon a time' 'The king' 'Once upon a time' 2>&1",
                                                        &status);
  ASSERT_EQ(status, 0) << out;
  const size_t a = out.find("[0] Once upon a time"), b = out.find("[1] The king"), c = out.find("[2] Once upon a time");
  ASSERT_NE(a, std::string::npos) << out;
  ASSERT_NE(b, std::string::npos) << out;
  ASSERT_NE(c, std::string::npos) << out;
  EXPECT_EQ(out.substr(a + 4, b - a - 4), out.substr(c + 4)) << out;
  EXPECT_NE(moeflow::testing::run_command(std::string(MOEFLOW_EXAMPLE) + " 2>&1", &status).find("usage"),
            std::string::npos);
  EXPECT_NE(status, 0);
}

// Found by probing the library as an integrator would (each was a crash, an
// out-of-bounds read or a silent wrong result).

// A refused resize_context kept nothing: the engine's pool was gone, and any later
// call dereferenced it.
TEST(EngineMisuse, ARefusedResizeKeepsTheOldContext) {
  auto e = Engine::open(options_for("mixtral-f32.gguf"));
  const int64_t ctx = e->ctx_size(), blocks = e->kv_blocks_total();
  EXPECT_THROW(e->resize_context(int64_t{1} << 40), InputError);
  EXPECT_THROW(e->resize_context(INT64_MAX), InputError);
  EXPECT_EQ(e->ctx_size(), ctx);
  EXPECT_EQ(e->kv_blocks_total(), blocks);
  const SeqId a = e->add_sequence();
  e->step({{a, 1, 0, true}});
  EXPECT_NE(e->logits(0), nullptr);
}

// A step that fails inside the forward pass changes nothing: lengths, blocks, and no
// logits offered (it handed out the previous step's rows, or read past them).
class ThrowingListener final : public ForwardListener {
 public:
  bool armed = false;
  void routed(const LayerRouting&) override {
    if (armed) throw InputError("listener failure");
  }
};

TEST(EngineMisuse, AStepThatFailsMidwayChangesNothing) {
  auto e = Engine::open(options_for("mixtral-f32.gguf"));
  auto fresh = Engine::open(options_for("mixtral-f32.gguf"));
  ThrowingListener listener;
  e->add_listener(&listener);
  const SeqId a = e->add_sequence(), fa = fresh->add_sequence();
  std::vector<BatchToken> prompt, fprompt;
  for (int64_t p = 0; p < 31; ++p) {
    prompt.push_back({a, static_cast<int32_t>(p + 1), p, p == 30});
    fprompt.push_back({fa, static_cast<int32_t>(p + 1), p, p == 30});
  }
  e->step(prompt);
  fresh->step(fprompt);
  const SeqId b = e->add_sequence(), fb = fresh->add_sequence();
  const int64_t free_before = e->kv_blocks_free();
  listener.armed = true;
  const std::vector<BatchToken> next = {{a, 7, 31, false}, {a, 8, 32, true}, {b, 3, 0, true}};
  EXPECT_THROW(e->step(next), InputError);
  EXPECT_EQ(e->kv_blocks_free(), free_before) << "the failed step's blocks went back";
  for (size_t i = 0; i < 3; ++i) EXPECT_THROW(e->logits(i), InputError) << i;
  listener.armed = false;
  e->step(next);  // the same step again: the state it started from was kept
  fresh->step({{fa, 7, 31, false}, {fa, 8, 32, true}, {fb, 3, 0, true}});
  for (size_t i : {size_t{1}, size_t{2}})
    for (int64_t v = 0; v < e->n_vocab(); ++v) ASSERT_EQ(e->logits(i)[v], fresh->logits(i)[v]) << i << " " << v;
}

// Offloaded experts read from a file cut during the run were zeros, silently.
TEST(EngineMisuse, AModelFileCutDuringARunIsAnErrorNotZeros) {
  const std::string copy = scratch_path("cut") + ".gguf";
  std::filesystem::copy_file(fixture_path("mixtral-f32.gguf"), copy, std::filesystem::copy_options::overwrite_existing);
  EngineOptions o = options_for("mixtral-f32.gguf", "lru", "25%");
  o.model_path = copy;
  auto e = Engine::open(o);
  const SeqId a = e->add_sequence();
  e->step({{a, 1, 0, true}});
  std::filesystem::resize_file(copy, std::filesystem::file_size(copy) / 3);
  try {
    for (int64_t p = 1; p < 6; ++p) e->step({{a, static_cast<int32_t>(p + 1), p, true}});
    FAIL() << "steps ran on a cut file";
  } catch (const InputError& err) {
    EXPECT_NE(std::string(err.what()).find("cut or replaced during the run"), std::string::npos) << err.what();
  }
  std::remove(copy.c_str());
}

TEST(EngineMisuse, OptionsAndArgumentsThatWouldWrapOrCrashAreRefused) {
  EngineOptions o = options_for("mixtral-f32.gguf");
  o.ctx_size = INT64_MAX;
  EXPECT_THROW(Engine::open(o), InputError);
  o = options_for("mixtral-f32.gguf");
  o.n_parallel = 4096;
  o.ctx_size = (int64_t{1} << 52) * 32 + 32;  // x 4096 wrapped into a small pool
  EXPECT_THROW(Engine::open(o), InputError);
  auto e = Engine::open(options_for("mixtral-f32.gguf"));
  EXPECT_THROW(e->add_listener(nullptr), InputError);
  const std::vector<float> logits(8, 0.0f);
  for (SamplerOptions bad : {SamplerOptions{.temperature = -1.0f}, SamplerOptions{.temperature = NAN},
                             SamplerOptions{.temperature = INFINITY}, SamplerOptions{.temperature = 1.0f, .top_k = -5},
                             SamplerOptions{.temperature = 1.0f, .top_p = 2.0f},
                             SamplerOptions{.temperature = 1.0f, .top_p = NAN}})
    EXPECT_THROW(Sampler{bad}, InputError);
  Sampler s(SamplerOptions{.temperature = 1.0f});
  EXPECT_THROW(s.sample(logits.data(), 0), InputError);
  EXPECT_THROW(s.sample(nullptr, 8), InputError);
}

// Two threads in step() at once raced through the pool (hangs, heap corruption); the
// second is now told.
TEST(EngineMisuse, ASecondThreadInStepIsRefused) {
  auto e = Engine::open(options_for("mixtral-f32.gguf"));
  const SeqId a = e->add_sequence(), b = e->add_sequence();
  std::atomic<int> refused{0};
  auto run = [&](SeqId s) {
    for (int64_t p = 0; p < 40; ++p) {
      try {
        e->step({{s, 1, p, false}});
      } catch (const InputError& err) {
        if (std::string(err.what()).find("another thread") == std::string::npos) throw;
        ++refused;
        --p;  // this position again
      }
    }
  };
  std::thread t1(run, a), t2(run, b);
  t1.join();
  t2.join();
  EXPECT_EQ(e->n_sequences(), 2);
  EXPECT_EQ(e->kv_blocks_total() - e->kv_blocks_free(), 4) << "40 positions each, in blocks of 32";
}

}  // namespace
}  // namespace moeflow

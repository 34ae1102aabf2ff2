// Expert offloading in the engine: every policy under every budget from 100% down to
// the minimum gives exactly the tokens of the all-resident run (--on-miss load), the
// budget is enforced, and rerouting is reported as lossy.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "engine/generator.h"
#include "engine/offloaded_experts.h"
#include "engine/transformer.h"
#include "experts/expert_cache.h"
#include "experts/expert_store.h"
#include "experts/file_transport.h"
#include "format/error.h"
#include "kernels/cpu/thread_pool.h"
#include "model/model_weights.h"
#include "policy/policy_factory.h"
#include "test_paths.h"

namespace moeflow {
namespace {

using moeflow::testing::fixture_path;

const std::vector<int32_t> kPrompt = {1, 17, 42, 5, 99, 7, 250, 3, 64, 128, 12, 77, 31, 200, 9, 150, 4, 88};

struct RunResult {
  std::vector<int32_t> tokens;
  CacheCounters counters;
  uint64_t rerouted = 0;
};

// budget_fraction < 0: the minimum budget. policy empty: all resident.
RunResult generate_with(const Model& model, const std::string& policy, double budget_fraction, OnMiss on_miss,
                        int64_t prefill_chunk = 512) {
  ThreadPool pool(2);
  Transformer tf(model, &pool, 64);
  GenerateOptions opt;
  opt.n_predict = 16;
  opt.stop_at_eog = false;
  opt.prefill_chunk = prefill_chunk;
  opt.sampler.temperature = 0;
  RunResult out;
  if (policy.empty()) {
    out.tokens = generate(tf, kPrompt, opt, nullptr, nullptr).generated;
    return out;
  }
  ExpertStore store(model);
  const ExpertGeometry& g = store.geometry();
  const uint64_t budget = budget_fraction < 0 ? g.min_budget()
                                              : static_cast<uint64_t>(budget_fraction * static_cast<double>(g.total_bytes()));
  auto pol = make_policy(policy, g);
  FileTransport transport(store, 3);
  ExpertCache cache(g, std::max(budget, g.min_budget()), transport, *pol);
  OffloadedExperts src(model.config(), store, cache, on_miss);
  tf.set_expert_source(&src);
  src.begin_request(RequestInfo{0, kPrompt, prompt_embedding(model, kPrompt), ""});
  out.tokens = generate(tf, kPrompt, opt, nullptr, nullptr).generated;
  src.end_request();
  out.counters = cache.counters();
  out.rerouted = src.rerouted_slots();
  EXPECT_LE(out.counters.peak_bytes, cache.budget_bytes()) << "the budget was exceeded";
  return out;
}

class Lossless : public ::testing::TestWithParam<const char*> {};

TEST_P(Lossless, EveryPolicyAndBudgetGivesTheTokensOfAllResident) {
  auto model = Model::load(fixture_path(GetParam()));
  const std::vector<int32_t> ref = generate_with(*model, "", 1.0, OnMiss::Load).tokens;
  for (const std::string& policy : policy_names()) {
    for (double f : {1.0, 0.5, 0.25, -1.0}) {
      for (int64_t chunk : {int64_t{512}, int64_t{5}}) {
        const RunResult r = generate_with(*model, policy, f, OnMiss::Load, chunk);
        EXPECT_EQ(r.tokens, ref) << policy << " at budget " << f << " prefill chunk " << chunk;
        EXPECT_GT(r.counters.hits + r.counters.misses, 0u);
        if (f == 1.0) {
          EXPECT_EQ(r.counters.evictions, 0u) << policy << ": nothing should leave a cache that holds all";
        }
        if (f < 0) {
          EXPECT_GT(r.counters.misses, 0u);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Lossless,
                         ::testing::Values("mixtral-f32.gguf", "qwen3moe-q8_0.gguf", "olmoe-q4_0.gguf"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (ch == '-' || ch == '.') ch = '_';
                           return s;
                         });

TEST(Offload, BudgetBelowTheMinimumIsRefused) {
  auto model = Model::load(fixture_path("mixtral-f32.gguf"));
  ExpertStore store(*model);
  auto pol = make_policy("lru", store.geometry());
  FileTransport transport(store, 1);
  try {
    ExpertCache cache(store.geometry(), store.geometry().min_budget() - 1, transport, *pol);
    FAIL() << "a budget below the minimum was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("minimum"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--expert-budget"), std::string::npos) << e.what();
  }
}

TEST(Offload, RerouteUsesOnlyResidentExpertsAndIsCounted) {
  auto model = Model::load(fixture_path("mixtral-f32.gguf"));
  // Half the experts fit: most layers hold at least top-k, so misses can be rerouted.
  const RunResult r = generate_with(*model, "lru", 0.5, OnMiss::Reroute);
  EXPECT_EQ(r.tokens.size(), 16u);
  EXPECT_GT(r.rerouted, 0u) << "at half the experts some tokens must have been rerouted";
  const RunResult load = generate_with(*model, "lru", 0.5, OnMiss::Load);
  EXPECT_LT(r.counters.misses, load.counters.misses) << "rerouting should avoid misses";
}

TEST(Offload, ExpertStoreMatricesMatchTheMapping) {
  auto model = Model::load(fixture_path("qwen3moe-q8_0.gguf"));
  ExpertStore store(*model);
  auto pol = make_policy("lru", store.geometry());
  FileTransport transport(store, 2);
  ExpertCache cache(store.geometry(), store.geometry().total_bytes(), transport, *pol);
  for (int32_t l = 0; l < store.geometry().n_layer; ++l)
    for (int32_t e = 0; e < store.geometry().n_expert; ++e) {
      const ExpertKey k{l, e};
      const uint8_t* buf = cache.acquire(k);
      const ExpertMatrices a = store.matrices(k, buf), b = store.mapped(k);
      ASSERT_EQ(a.gate.bytes(), b.gate.bytes());
      EXPECT_EQ(0, std::memcmp(a.gate.data, b.gate.data, a.gate.bytes()));
      EXPECT_EQ(0, std::memcmp(a.up.data, b.up.data, a.up.bytes()));
      EXPECT_EQ(0, std::memcmp(a.down.data, b.down.data, a.down.bytes()));
      cache.release(k);
    }
  EXPECT_EQ(cache.counters().misses, static_cast<uint64_t>(store.geometry().n_layer * store.geometry().n_expert));
  EXPECT_EQ(cache.counters().bytes_read, store.geometry().total_bytes());
}

TEST(Offload, ParseBudget) {
  EXPECT_EQ(parse_budget("512MiB", 0), 512ull << 20);
  EXPECT_EQ(parse_budget("2GiB", 0), 2ull << 30);
  EXPECT_EQ(parse_budget("1.5GB", 0), 1500000000ull);
  EXPECT_EQ(parse_budget("4096", 0), 4096ull);
  EXPECT_EQ(parse_budget("25%", 1000), 250ull);
  EXPECT_THROW(parse_budget("", 10), InputError);
  EXPECT_THROW(parse_budget("lots", 10), InputError);
  EXPECT_THROW(parse_budget("10parsecs", 10), InputError);
  EXPECT_THROW(parse_budget("150%", 10), InputError);
  EXPECT_THROW(parse_budget("-5MiB", 10), InputError);
}

}  // namespace
}  // namespace moeflow

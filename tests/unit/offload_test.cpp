// Expert offloading in the engine: every policy under every budget from 100% down to
// the minimum gives exactly the tokens of the all-resident run (--on-miss load), also
// over several requests with learned state, the budget is enforced, DuoServe's prefill
// streams through two slots, and rerouting is reported as lossy.
#include <filesystem>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/generator.h"
#include "engine/offloaded_experts.h"
#include "engine/transformer.h"
#include "experts/expert_cache.h"
#include "experts/expert_store.h"
#include "experts/file_transport.h"
#include "counting_transport.h"
#include "base/error.h"
#include "kernels/cpu/q4_vnni.h"
#include "kernels/cpu/thread_pool.h"
#include "model/model_weights.h"
#include "policy/emoe.h"
#include "policy/policy_factory.h"
#include "cpu_placer.h"
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

// n tokens, greedy, past any end of text.
GenerateOptions greedy(int n) {
  GenerateOptions opt;
  opt.n_predict = n;
  opt.stop_at_eog = false;
  opt.sampler.temperature = 0;
  return opt;
}

// budget_fraction < 0: the minimum budget. policy empty: all resident.
RunResult generate_with(const Model& model, const std::string& policy, double budget_fraction, OnMiss on_miss,
                        int64_t prefill_chunk = 512, bool repack = false) {
  ThreadPool pool(2);
  Transformer tf(model, &pool, 64);
  GenerateOptions opt = greedy(16);
  opt.prefill_chunk = prefill_chunk;
  RunResult out;
  if (policy.empty()) {
    out.tokens = generate(tf, kPrompt, opt, nullptr, nullptr).generated;
    return out;
  }
  ExpertStore store(model, repack ? testing::cpu_placer() : nullptr);
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

// As `moeflow run` loads a model: the resident weights repacked (rows interleaved in
// fours on VNNI CPUs), and the experts read from the file into the cache repacked the
// same way (ExpertStore::prepare), so offloaded runs give the all-resident tokens.
TEST(Offload, ExpertsReadIntoTheCacheTakeTheResidentLayout) {
  const bool vnni = cpu::q4_vnni_enabled();
  for (const char* name : {"qwen3moe-q8_0.gguf", "olmoe-q4_0.gguf"}) {
    auto resident = Model::load(fixture_path(name));
    resident->make_resident(true, testing::cpu_placer());
    const std::vector<int32_t> ref = generate_with(*resident, "", 1.0, OnMiss::Load).tokens;
    auto dense = Model::load(fixture_path(name));
    dense->make_resident(false, testing::cpu_placer());
    const ExpertStore store(*dense, testing::cpu_placer());
    EXPECT_EQ(store.parts({0, 0})[0].shape.layout == RowLayout::rows_x4, vnni)
        << name << ": every fixture expert is 128 wide";
    EXPECT_EQ(store.matrices({0, 0}, nullptr).down.layout, resident->weights().layers[0].down_exps.first.layout);
    for (const std::string policy : {"lru", "fmoe"})
      for (double f : {0.5, -1.0}) {
        const RunResult r = generate_with(*dense, policy, f, OnMiss::Load, 512, vnni);
        EXPECT_EQ(r.tokens, ref) << name << " " << policy << " at budget " << f;
        EXPECT_GT(r.counters.misses, 0u);
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Lossless,
                         ::testing::Values("mixtral-f32.gguf", "qwen3moe-q8_0.gguf", "olmoe-q4_0.gguf", "gpt-oss-mxfp4.gguf"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& ch : s)
                             if (ch == '-' || ch == '.') ch = '_';
                           return s;
                         });

// Learned policies only show their learned state from the second request on: several
// prompts go through one policy instance (as a server runs them), built as the engine
// builds it (make_offload: fMoE matching asynchronously), with DuoServe's ExpertMLP
// trained after the first two and eMoE's predictor called every other prompt. Each
// request must still give exactly the all-resident tokens.
TEST(Offload, LosslessOverSeveralRequestsWithLearnedState) {
  auto model = Model::load(fixture_path("mixtral-f32.gguf"));
  const std::vector<std::vector<int32_t>> prompts = {
      kPrompt, {5, 9, 200, 41, 7, 7, 12, 250}, {100, 2, 3, 64, 64, 8, 19, 250, 33, 4, 91, 17}, kPrompt, {42, 17, 1, 99, 5}};
  ThreadPool pool(2);
  Transformer tf(*model, &pool, 64);
  GenerateOptions opt;
  opt.n_predict = 8;
  opt.stop_at_eog = false;
  opt.prefill_chunk = 5;
  opt.sampler.temperature = 0;
  std::vector<std::vector<int32_t>> ref;
  for (const auto& p : prompts) {
    tf.reset();
    ref.push_back(generate(tf, p, opt, nullptr, nullptr).generated);
  }
  ExpertStore store(*model);
  const ExpertGeometry& g = store.geometry();
  PolicyOptions po;
  po.async_matching = true;  // as make_offload builds every policy for the engine
  std::vector<std::pair<std::string, std::function<std::unique_ptr<ExpertPolicy>()>>> makers;
  for (const std::string& name : policy_names()) makers.emplace_back(name, [&, name] { return make_policy(name, g, po); });
  for (EmoeVariant v : {EmoeVariant::AllLayer, EmoeVariant::LayerByLayer})
    makers.emplace_back(v == EmoeVariant::AllLayer ? "emoe-A p=2" : "emoe-L p=2", [&, v] {
      EmoeOptions o;
      o.variant = v;
      o.period = 2;
      return std::make_unique<EmoePolicy>(g, o);
    });
  for (const auto& [name, make] : makers)
    for (double f : {0.5, -1.0}) {
      const std::unique_ptr<ExpertPolicy> pol = make();  // fresh per budget: learns from these requests only
      ExpertPolicy& p = *pol;
      const uint64_t budget = f < 0 ? g.min_budget() : static_cast<uint64_t>(f * static_cast<double>(g.total_bytes()));
      FileTransport transport(store, 3);
      ExpertCache cache(g, std::max(budget, g.min_budget()), transport, p);
      OffloadedExperts src(model->config(), store, cache, OnMiss::Load);
      tf.set_expert_source(&src);
      for (size_t i = 0; i < prompts.size(); ++i) {
        if (i == 2) p.finish_learning();  // DuoServe: train the ExpertMLP on what it saw
        tf.reset();
        src.begin_request(RequestInfo{static_cast<int64_t>(i), prompts[i], prompt_embedding(*model, prompts[i]), ""});
        const std::vector<int32_t> got = generate(tf, prompts[i], opt, nullptr, nullptr).generated;
        src.end_request();
        EXPECT_EQ(got, ref[i]) << name << " at budget " << f << ", request " << i;
      }
      tf.set_expert_source(nullptr);
      EXPECT_LE(cache.counters().peak_bytes, cache.budget_bytes()) << name;
      if (f < 0) {
        EXPECT_GT(cache.counters().misses, 0u) << name;
      }
    }
}

// DuoServe's prefill in the engine, on the real file transport: every prefill layer
// runs through the two-slot pipeline, which never has more than two copies in flight
// (counted by the transport) and overlaps loading with computing; tokens unchanged.
TEST(Offload, DuoservePrefillStreamsThroughTwoSlots) {
  auto model = Model::load(fixture_path("mixtral-f32.gguf"));
  const int32_t n_layer = static_cast<int32_t>(model->config().n_layer);
  for (int64_t chunk : {int64_t{512}, int64_t{5}}) {
    ThreadPool pool(2);
    Transformer tf(*model, &pool, 64);
    GenerateOptions opt;
    opt.n_predict = 1;  // the prompt only: every layer run is prefill
    opt.stop_at_eog = false;
    opt.prefill_chunk = chunk;
    opt.sampler.temperature = 0;
    const std::vector<int32_t> ref = generate(tf, kPrompt, opt, nullptr, nullptr).generated;
    ExpertStore store(*model);
    const ExpertGeometry& g = store.geometry();
    for (double f : {0.25, -1.0}) {
      auto pol = make_policy("duoserve", g);
      FileTransport files(store, 3);
      moeflow::testing::CountingTransport transport(files);
      const uint64_t budget = f < 0 ? g.min_budget() : static_cast<uint64_t>(f * static_cast<double>(g.total_bytes()));
      ExpertCache cache(g, std::max(budget, g.min_budget()), transport, *pol);
      OffloadedExperts src(model->config(), store, cache, OnMiss::Load);
      tf.reset();
      tf.set_expert_source(&src);
      src.begin_request(RequestInfo{0, kPrompt, {}, ""});
      EXPECT_EQ(generate(tf, kPrompt, opt, nullptr, nullptr).generated, ref);
      src.end_request();
      tf.set_expert_source(nullptr);
      const PipelineCounters& pipe = src.pipeline();
      const int64_t chunks = (static_cast<int64_t>(kPrompt.size()) + chunk - 1) / chunk;
      SCOPED_TRACE("budget " + std::to_string(f) + ", prefill chunk " + std::to_string(chunk));
      EXPECT_EQ(pipe.layers, static_cast<uint64_t>(chunks * n_layer));
      EXPECT_LE(transport.peak, 2) << "copies in flight at once";
      EXPECT_EQ(pipe.peak_slots, 2);
      EXPECT_GT(pipe.overlapped, 0u);
      EXPECT_GT(pipe.heads, 0u);
      EXPECT_LE(cache.counters().peak_bytes, cache.budget_bytes());
    }
  }
}

// Evicted experts' buffers are reused for later copies instead of a fresh mapping per
// copy (whose pages would fault in and be zeroed on every copy): over a second request,
// once the buffers exist, far fewer page faults than copied pages; never more buffers
// than the budget holds; the tokens of the all-resident run.
TEST(Offload, CopiesReuseEvictedBuffers) {
  auto model = Model::load(fixture_path("mixtral-f32.gguf"));
  ThreadPool pool(2);
  Transformer tf(*model, &pool, 64);
  const GenerateOptions opt = greedy(12);
  const std::vector<int32_t> ref = generate(tf, kPrompt, opt, nullptr, nullptr).generated;
  ExpertStore store(*model);
  const ExpertGeometry& g = store.geometry();
  auto pol = make_policy("lru", g);
  FileTransport files(store, 2);
  moeflow::testing::CountingTransport transport(files);
  ExpertCache cache(g, g.min_budget(), transport, *pol);
  OffloadedExperts src(model->config(), store, cache, OnMiss::Load);
  tf.set_expert_source(&src);
  auto minor_faults = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<int64_t>(u.ru_minflt);
  };
  int64_t faults = 0, copies = 0;
  for (int request = 0; request < 2; ++request) {
    tf.reset();
    const int64_t f0 = minor_faults(), c0 = transport.submitted;
    src.begin_request(RequestInfo{request, kPrompt, {}, ""});
    EXPECT_EQ(generate(tf, kPrompt, opt, nullptr, nullptr).generated, ref);
    src.end_request();
    faults = minor_faults() - f0;
    copies = transport.submitted - c0;
  }
  tf.set_expert_source(nullptr);
  const uint64_t per_expert = g.bytes_of({0, 0});
  const int64_t pages = copies * static_cast<int64_t>((per_expert + 4095) / 4096);
  std::printf("second request: %lld copies (%lld pages) and %lld minor page faults; %zu buffers in all\n",
              static_cast<long long>(copies), static_cast<long long>(pages), static_cast<long long>(faults),
              transport.buffers.size());
  EXPECT_GT(copies, 8);
#if !defined(__SANITIZE_ADDRESS__)  // its allocator hands out fresh, faulting memory on purpose
  EXPECT_LT(faults, pages / 4) << "copies must land in buffers that are already mapped";
#endif
  EXPECT_LE(transport.buffers.size() * per_expert, cache.budget_bytes());
  EXPECT_LE(cache.counters().peak_bytes, cache.budget_bytes());
}

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

namespace {
using AlignedBuffer = std::unique_ptr<uint8_t, decltype(&std::free)>;
AlignedBuffer expert_buffer(const ExpertStore& store, const ExpertKey& k) {
  const uint64_t n = (store.geometry().bytes_of(k) + kDirectIoAlign - 1) & ~(kDirectIoAlign - 1);
  return AlignedBuffer(static_cast<uint8_t*>(std::aligned_alloc(kDirectIoAlign, n)), &std::free);
}
void expect_expert_bytes(const ExpertStore& store, const ExpertKey& k, const uint8_t* buf) {
  const ExpertMatrices got = store.matrices(k, buf), want = store.mapped(k);
  EXPECT_EQ(0, std::memcmp(got.gate.data, want.gate.data, want.gate.bytes())) << k.layer << "/" << k.expert;
  EXPECT_EQ(0, std::memcmp(got.up.data, want.up.data, want.up.bytes())) << k.layer << "/" << k.expert;
  EXPECT_EQ(0, std::memcmp(got.down.data, want.down.data, want.down.bytes())) << k.layer << "/" << k.expert;
}
}  // namespace

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
      ASSERT_EQ(store.matrices(k, buf).gate.bytes(), store.mapped(k).gate.bytes());
      expect_expert_bytes(store, k, buf);
      cache.release(k);
    }
  EXPECT_EQ(cache.counters().misses, static_cast<uint64_t>(store.geometry().n_layer * store.geometry().n_expert));
  EXPECT_EQ(cache.counters().bytes_read, store.geometry().total_bytes());
}

// The expert reader gives up a prefetch between chunks for a demand: one reader,
// 4 KiB chunks; after the prefetch's first chunk a demand arrives (from the chunk
// hook, so the timing is fixed): the demand lands first, the prefetch resumes where
// it stopped, and both buffers hold exactly the expert's bytes.
TEST(Offload, ReaderPreemptsAPrefetchForADemand) {
  auto model = Model::load(fixture_path("qwen3moe-q8_0.gguf"));
  ExpertStore store(*model);
  const ExpertKey a{0, 0}, b{1, 1};
  ASSERT_GT(store.geometry().bytes_of(a), 2 * kDirectIoAlign) << "the fixture's experts must span several chunks";
  AlignedBuffer buf_a = expert_buffer(store, a), buf_b = expert_buffer(store, b);
  for (bool preempt : {true, false}) {
    FileTransport t(store, 1, true, preempt ? kDirectIoAlign : 0);
    std::atomic<bool> fired{false};
    t.set_chunk_hook([&](const ExpertKey& k, uint64_t) {
      if (k == a && !fired.exchange(true)) t.submit(b, buf_b.get(), kDemandPriority);
    });
    t.submit(a, buf_a.get(), 1.0);
    std::vector<ExpertKey> order;
    while (order.size() < 2) t.collect(order, true);
    EXPECT_EQ(order, preempt ? (std::vector<ExpertKey>{b, a}) : (std::vector<ExpertKey>{a, b}));
    EXPECT_EQ(t.preemptions(), preempt ? 1u : 0u);
    expect_expert_bytes(store, a, buf_a.get());
    expect_expert_bytes(store, b, buf_b.get());
  }
}

// The readers share one expert's pieces: three readers, 4 KiB pieces, one expert. The
// reader of the first piece holds it until another reader has read a piece of the same
// expert (without sharing it would wait forever: the test gives up after 20 s). The
// bytes land whole and the copy is reported once.
TEST(Offload, ReadersShareOneExpertsPieces) {
  auto model = Model::load(fixture_path("qwen3moe-q8_0.gguf"));
  ExpertStore store(*model);
  const ExpertKey a{0, 1};
  ASSERT_GT(store.geometry().bytes_of(a), 4 * kDirectIoAlign) << "the fixture's experts must span several pieces";
  AlignedBuffer buf = expert_buffer(store, a);
  FileTransport t(store, 3, true, kDirectIoAlign);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::thread::id> readers;
  bool gave_up = false;
  t.set_chunk_hook([&](const ExpertKey&, uint64_t) {
    std::unique_lock<std::mutex> lock(mu);
    const std::thread::id me = std::this_thread::get_id();
    if (std::find(readers.begin(), readers.end(), me) == readers.end()) readers.push_back(me);
    cv.notify_all();
    if (readers.size() == 1 && readers[0] == me)
      gave_up = !cv.wait_for(lock, std::chrono::seconds(20), [&] { return readers.size() > 1; });
  });
  t.submit(a, buf.get(), kDemandPriority);
  std::vector<ExpertKey> done;
  while (done.empty()) t.collect(done, true);
  EXPECT_FALSE(gave_up) << "no second reader took a piece of the expert";
  EXPECT_GE(readers.size(), 2u);
  EXPECT_EQ(done, (std::vector<ExpertKey>{a}));
  expect_expert_bytes(store, a, buf.get());
}

// Many copies, prefetches and demands mixed, on three readers in 4 KiB pieces: each
// is reported once, with its own bytes, and the bytes moved are their sum.
TEST(Offload, SharedPiecesLandEveryExpertWhole) {
  auto model = Model::load(fixture_path("qwen3moe-q8_0.gguf"));
  ExpertStore store(*model);
  const ExpertGeometry& g = store.geometry();
  FileTransport t(store, 3, true, kDirectIoAlign);
  std::vector<ExpertKey> keys;
  std::vector<AlignedBuffer> bufs;
  uint64_t total = 0;
  for (int32_t l = 0; l < g.n_layer; ++l)
    for (int32_t e = 0; e < g.n_expert; ++e) {
      keys.push_back({l, e});
      bufs.push_back(expert_buffer(store, keys.back()));
      for (const ExpertPart& p : store.parts(keys.back())) total += p.span_end - p.span_begin;
      t.submit(keys.back(), bufs.back().get(), e % 3 == 0 ? kDemandPriority : 1.0 + e);
    }
  std::vector<ExpertKey> done;
  while (done.size() < keys.size()) t.collect(done, true);
  std::vector<ExpertKey> sorted = done;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end()) << "a copy was reported twice";
  EXPECT_EQ(done.size(), keys.size());
  EXPECT_EQ(t.bytes_moved(), total);
  for (size_t i = 0; i < keys.size(); ++i) expect_expert_bytes(store, keys[i], bufs[i].get());
}

// A read that fails (here the test's hook throws in one piece) reaches collect() as
// the exception; the other readers' pieces of the copy finish first, and the
// transport then shuts down cleanly.
TEST(Offload, AFailedPieceReachesCollect) {
  auto model = Model::load(fixture_path("qwen3moe-q8_0.gguf"));
  ExpertStore store(*model);
  const ExpertKey a{0, 2};
  AlignedBuffer buf = expert_buffer(store, a);
  FileTransport t(store, 3, true, kDirectIoAlign);
  std::atomic<int> reads{0};
  t.set_chunk_hook([&](const ExpertKey&, uint64_t) {
    if (reads.fetch_add(1) == 1) throw InputError("injected read failure");
  });
  t.submit(a, buf.get(), kDemandPriority);
  std::vector<ExpertKey> done;
  try {
    while (done.empty()) t.collect(done, true);
    ADD_FAILURE() << "the failure did not reach collect";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("injected"), std::string::npos);
  }
}

// What a GPU backend's transport keeps (backend/cuda/host_to_device_transport.h): every
// expert in host memory laid out as its cache buffer, read from the file once. Copies
// into the cache are memcpy's from there, done at once and reported at the next
// collect (a link faster than any compute: the tiny fixtures compute a whole
// generation within one file read).
class HostTierTransport final : public Transport {
 public:
  explicit HostTierTransport(const ExpertStore& store) : store_(store) {
    const ExpertGeometry& g = store.geometry();
    const int fd = ::open(store.path().c_str(), O_RDONLY);
    EXPECT_GE(fd, 0);
    for (int32_t l = 0; l < g.n_layer; ++l)
      for (int32_t e = 0; e < g.n_expert; ++e) {
        std::vector<uint8_t>& buf = host_.emplace_back(g.bytes_of({l, e}));
        for (const ExpertPart& p : store.parts({l, e}))
          read_file_range(fd, store.path(), buf.data() + p.buffer_offset, p.span_begin, p.span_end - p.span_begin,
                          std::filesystem::file_size(store.path()));
      }
    ::close(fd);
  }
  bool needs_buffers() const override { return true; }
  void submit(const ExpertKey& key, uint8_t* dst, double) override {
    std::memcpy(dst, host_copy(key), store_.buffer_bytes(key));
    done_.push_back(key);
    moved_ += store_.buffer_bytes(key);
  }
  void reprioritize(const ExpertKey&, double) override {}
  bool cancel(const ExpertKey&) override { return false; }  // every copy has started
  void collect(std::vector<ExpertKey>& done, bool) override {
    done.insert(done.end(), done_.begin(), done_.end());
    done_.clear();
  }
  double now() override { return 0; }
  uint64_t bytes_moved() const override { return moved_; }
  const uint8_t* host_copy(const ExpertKey& key) const override {
    return host_[static_cast<size_t>(store_.geometry().index(key))].data();
  }

 private:
  const ExpertStore& store_;
  std::vector<std::vector<uint8_t>> host_;
  std::vector<ExpertKey> done_;
  uint64_t moved_ = 0;
};

// --on-miss host-compute: a missing expert computes from the host copy while it loads
// behind, so the tokens are all-resident's, misses are counted as such, and the cache
// fills with what tokens use (later accesses hit).
TEST(Offload, HostComputeGivesTheTokensOfAllResident) {
  for (const char* fixture : {"mixtral-f32.gguf", "qwen2moe-q4_0.gguf"}) {
    auto model = Model::load(fixture_path(fixture));
    const std::vector<int32_t> ref = generate_with(*model, "", 1.0, OnMiss::Load).tokens;
    for (const std::string policy : {"lru", "moe-infinity"}) {
      ThreadPool pool(2);
      Transformer tf(*model, &pool, 64);
      const GenerateOptions opt = greedy(16);
      ExpertStore store(*model);
      const ExpertGeometry& g = store.geometry();
      auto pol = make_policy(policy, g);
      HostTierTransport transport(store);
      ExpertCache cache(g, std::max(g.total_bytes() / 4, g.min_budget()), transport, *pol);
      OffloadedExperts src(model->config(), store, cache, OnMiss::HostCompute, &transport);
      tf.set_expert_source(&src);
      src.begin_request(RequestInfo{0, kPrompt, prompt_embedding(*model, kPrompt), ""});
      EXPECT_EQ(generate(tf, kPrompt, opt, nullptr, nullptr).generated, ref) << fixture << ", " << policy;
      src.end_request();
      const CacheCounters& c = cache.counters();
      std::printf("%s %s host-compute at 25%%: %llu experts on the CPU, %llu hits, %llu misses\n", fixture,
                  policy.c_str(), static_cast<unsigned long long>(src.host_computed()),
                  static_cast<unsigned long long>(c.hits), static_cast<unsigned long long>(c.misses));
      EXPECT_GT(src.host_computed(), 0u) << fixture << ", " << policy;
      EXPECT_GE(c.misses, src.host_computed()) << "every host-computed expert is a miss";
      EXPECT_GT(c.hits, 0u) << fixture << ", " << policy << ": the loads behind host-compute never landed";
      EXPECT_LE(c.peak_bytes, cache.budget_bytes());
    }
  }
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

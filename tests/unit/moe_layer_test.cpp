// The MoE block's decode paths give the same floats: experts split by rows across the
// threads (or on one thread) and whole experts per thread (moe_forward, a decode step
// whose experts divide evenly among the threads).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/experts_per_thread.h"
#include "engine/generator.h"
#include "engine/transformer.h"
#include "kernels/cpu/q4_vnni.h"
#include "kernels/cpu/thread_pool.h"
#include "model/model_weights.h"
#include "model/synthetic_model.h"
#include "cpu_placer.h"
#include "test_paths.h"
#include "top4_model.h"

namespace moeflow {
namespace {

using moeflow::testing::fixture_path;

// Every position's logits of a 12-token prompt and 6 greedy decode steps.
GenerateResult decode(const Model& m, int threads) {
  ThreadPool pool(threads);
  Transformer tf(m, &pool, 32);
  GenerateOptions opt;
  opt.n_predict = 6;
  opt.stop_at_eog = false;
  opt.record_logits = true;
  opt.feed_last = true;
  opt.sampler.temperature = 0;
  const std::vector<int32_t> prompt = {1, 17, 42, 5, 99, 7, 250, 3, 64, 128, 12, 77};
  return generate(tf, prompt, opt, nullptr, nullptr);
}

// Top-2 fixtures: 2 threads run one expert each, 3 threads split every expert's rows,
// 1 thread runs everything; the q8_0 / q4_0 fixtures' experts (128 x 128) are large
// enough for the expert-per-thread path, also resident with rows interleaved in fours.
TEST(MoeLayer, DecodeGivesTheSameLogitsOnOneTwoAndThreeThreads) {
  for (const char* name : {"qwen3moe-q8_0", "olmoe-q4_0", "mixtral-f32", "gpt-oss-mxfp4"}) {
    for (bool resident : {false, true}) {
      auto m = Model::load(fixture_path(std::string(name) + ".gguf"));
      if (resident) m->make_resident(true, testing::cpu_placer());
      const GenerateResult one = decode(*m, 1);
      for (int threads : {2, 3}) {
        const GenerateResult r = decode(*m, threads);
        EXPECT_EQ(r.fed_tokens, one.fed_tokens) << name << " threads=" << threads << " resident=" << resident;
        ASSERT_EQ(r.logits.size(), one.logits.size());
        EXPECT_EQ(0, std::memcmp(r.logits.data(), one.logits.data(), one.logits.size() * sizeof(float)))
            << name << ": logits differ from one thread's with " << threads << " threads, resident=" << resident;
      }
    }
  }
}

// Top-4 over 8 experts: 2 threads run two experts each, 4 threads one each (and take
// rows of each other's down projections when one finishes first), 3 threads runs of
// one and two experts; q4_0 and q8_0, and gpt-oss with mxfp4 experts (biases added and the clamped
// SwiGLU applied by whichever thread owns the rows), from the file mapping and resident.
TEST(MoeLayer, TopFourGivesTheSameLogitsOnOneToFourThreads) {
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::MXFP4}) {
    const std::string path = moeflow::testing::write_top4_model(t, "top4");
    for (bool resident : {false, true}) {
      auto m = Model::load(path);
      if (resident) m->make_resident(true, testing::cpu_placer());
      const GenerateResult one = decode(*m, 1);
      for (int threads : {2, 3, 4}) {
        const GenerateResult r = decode(*m, threads);
        EXPECT_EQ(r.fed_tokens, one.fed_tokens) << dtype_name(t) << " threads=" << threads;
        ASSERT_EQ(r.logits.size(), one.logits.size());
        EXPECT_EQ(0, std::memcmp(r.logits.data(), one.logits.data(), one.logits.size() * sizeof(float)))
            << dtype_name(t) << ": logits differ from one thread's with " << threads << " threads, resident=" << resident;
      }
    }
  }
}

// The owners' runs of experts in a batched decode step, by hand: an expert costs its
// tokens plus 3 and goes to the owner in whose share of the total its middle falls.
TEST(MoeLayer, OwnerRunsSplitExpertsByTheirTokens) {
  auto runs = [](const std::vector<size_t>& tokens, int parts) {
    std::vector<std::vector<int64_t>> slots;
    for (size_t n : tokens) slots.emplace_back(n, 0);
    std::vector<const std::vector<int64_t>*> ptrs;
    for (const auto& s : slots) ptrs.push_back(&s);
    std::vector<size_t> first;
    ExpertsPerThread::owner_runs(ptrs.data(), ptrs.size(), parts, first);
    return first;
  };
  using V = std::vector<size_t>;
  EXPECT_EQ(runs({1, 1}, 2), (V{0, 1, 2}));                    // top-2, one sequence
  EXPECT_EQ(runs({1, 1, 1, 1, 1, 1, 1, 1}, 2), (V{0, 4, 8}));  // top-8: four each
  EXPECT_EQ(runs({1, 1, 1, 1, 1, 1, 1, 1}, 4), (V{0, 2, 4, 6, 8}));
  // Costs 8, 4, 4, 4 (total 20, half 10): the first expert's middle (4) is in the
  // first half, the second's (10) starts the second.
  EXPECT_EQ(runs({5, 1, 1, 1}, 2), (V{0, 1, 4}));
  // Costs 4, 4, 4: middles 2, 6, 10 against the half at 6.
  EXPECT_EQ(runs({1, 1, 1}, 2), (V{0, 1, 3}));
  // Costs 4, 4, 4, 4, 13, 4 (total 33): middles 2, 6, 10, 14, 22.5, 31 against 11 and 22.
  EXPECT_EQ(runs({1, 1, 1, 1, 10, 1}, 3), (V{0, 3, 4, 6}));
}

}  // namespace
}  // namespace moeflow

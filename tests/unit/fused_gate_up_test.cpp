// Files whose experts' gate and up projections are fused into one tensor
// (ffn_gate_up_exps, llama.cpp's convert_hf_to_gguf.py --fuse-gate-up-exps): the same
// floats as the separate form, resident (repacked or from the mapping) and offloaded,
// for the architectures' binders (generic, deepseek2) and gpt-oss's fused biases.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine_scripts.h"
#include "gguf_rewrite.h"
#include "input_error_of.h"
#include "model/model_weights.h"
#include "moeflow/engine.h"
#include "test_paths.h"

namespace moeflow {
namespace {

using testing::make_scripts;
using testing::options_for;
using testing::run_alone;
using testing::Script;
using testing::Transcript;

std::vector<Transcript> run_each(Engine& e, const std::vector<Script>& scripts) {
  std::vector<Transcript> out;
  for (const Script& s : scripts) out.push_back(run_alone(e, s));
  return out;
}

// Bit-equal: the same bytes reach the same kernels.
void expect_same(const std::vector<Transcript>& a, const std::vector<Transcript>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].logits.size(), b[i].logits.size()) << what;
    size_t differ = 0;
    for (size_t j = 0; j < a[i].logits.size(); ++j) differ += a[i].logits[j] != b[i].logits[j];
    EXPECT_EQ(differ, 0u) << what << ", sequence " << i << ": " << differ << " of " << a[i].logits.size()
                          << " logits vectors differ";
  }
}

TEST(FusedGateUp, GivesTheFloatsOfTheSeparateTensors) {
  for (const char* fixture : {"mixtral-f32.gguf", "qwen3moe-q8_0.gguf", "olmoe-q4_0.gguf", "deepseek2-q4_0.gguf",
                              "gpt-oss-mxfp4.gguf", "granitemoe-shared-q8_0.gguf", "ernie4_5-moe-f32.gguf"}) {
    const std::string fused = testing::fuse_gate_up(testing::fixture_path(fixture), "fused");
    {
      auto m = Model::load(fused);
      const StackedExperts& g = m->weights().layers.back().gate_exps;
      const StackedExperts& u = m->weights().layers.back().up_exps;
      EXPECT_EQ(g.step(), 2 * g.first.bytes()) << fixture;
      EXPECT_EQ(u.first.data, g.first.data + g.first.bytes()) << fixture << ": up rows after the gate's";
    }
    std::vector<Script> scripts;
    std::vector<Transcript> ref;
    // Resident (VNNI CPUs: rows repacked in fours, copied per expert out of the fused
    // stack), then computed from the file mapping in GGUF's layout (other kernels: the
    // reference is the separate file's mapping).
    for (bool mmap : {true, false}) {
      EngineOptions o = options_for(fixture);
      o.mmap = mmap;
      auto separate = Engine::open(o);
      if (scripts.empty()) scripts = make_scripts(3, separate->n_vocab(), 11);
      ref = run_each(*separate, scripts);
      o.model_path = fused;
      auto e = Engine::open(o);
      ASSERT_NO_FATAL_FAILURE(expect_same(run_each(*e, scripts), ref, std::string(fixture) + (mmap ? ", mmap" : "")));
    }
    EngineOptions off = options_for(fixture, "lru", "25%");
    off.model_path = fused;
    auto e = Engine::open(off);
    ASSERT_TRUE(e->offloaded());
    ASSERT_NO_FATAL_FAILURE(expect_same(run_each(*e, scripts), ref, std::string(fixture) + ", offloaded"));
  }
}

TEST(FusedGateUp, AMixedOrMisshapedLayerIsAnInputErrorNamingTheTensor) {
  const std::string separate = testing::fixture_path("mixtral-f32.gguf");
  const std::string fused = testing::fuse_gate_up(separate, "fused-bad");
  // Both forms in one layer: the fused file plus the separate gate of layer 0.
  {
    auto f = gguf::GgufFile::open(fused);
    auto s = gguf::GgufFile::open(separate);
    gguf::GgufWriter w(f->alignment());
    for (const std::string& k : f->metadata_order()) w.set(k, f->get(k));
    for (const auto& t : f->tensors()) w.add_tensor(t.name, t.dims, t.dtype, std::vector<uint8_t>(t.data, t.data + t.nbytes));
    const gguf::TensorInfo& g = s->tensor("blk.0.ffn_gate_exps.weight");
    w.add_tensor(g.name, g.dims, g.dtype, std::vector<uint8_t>(g.data, g.data + g.nbytes));
    const std::string both = testing::scratch_path("fused-both") + ".gguf";
    w.write(both);
    const std::string e = testing::input_error_of([&] { Model::load(both); });
    EXPECT_NE(e.find("blk.0.ffn_gate_up_exps.weight"), std::string::npos) << e;
  }
  // A fused tensor whose rows are not twice the experts' size.
  const std::string e = testing::input_error_of([&] {
    Model::load(testing::rewrite_gguf(fused, "fused-ff", {{"llama.expert_feed_forward_length", gguf::Value::make_u32(16)},
                                                           {"llama.feed_forward_length", gguf::Value::make_u32(16)}}));
  });
  EXPECT_NE(e.find("ffn_gate_up_exps.weight"), std::string::npos) << e;
}

}  // namespace
}  // namespace moeflow
